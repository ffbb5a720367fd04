"""Log buckets are exactly Iceberg's bucket[N] partitions: compared with pyiceberg's own transform."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    UUIDType,
)

from lakehouse.errors import SchemaError
from lakehouse.table.bucketing import bucket_ids
from tests.support.profiles import examples

EPOCH = dt.datetime(1970, 1, 1)


def _pyiceberg(iceberg_type, n: int, values: list) -> list:
    f = BucketTransform(n).transform(iceberg_type)
    return [f(v) for v in values]


buckets = st.integers(min_value=1, max_value=1024)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.one_of(st.none(), st.just(0), st.integers(-(2**31), 2**31 - 1))), buckets)
def test_int(values, n) -> None:
    assert bucket_ids(pa.array(values, pa.int32()), n).to_pylist() == _pyiceberg(IntegerType(), n, values)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.one_of(st.none(), st.just(0), st.integers(-(2**63), 2**63 - 1))), buckets)
def test_long(values, n) -> None:
    assert bucket_ids(pa.array(values, pa.int64()), n).to_pylist() == _pyiceberg(LongType(), n, values)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.one_of(st.none(), st.just(""), st.text(max_size=40), st.text(min_size=200, max_size=300))), buckets)
def test_string(values, n) -> None:
    assert bucket_ids(pa.array(values, pa.string()), n).to_pylist() == _pyiceberg(StringType(), n, values)
    assert bucket_ids(pa.array(values, pa.large_string()), n).to_pylist() == _pyiceberg(StringType(), n, values)


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=33))), buckets)
def test_binary(values, n) -> None:
    assert bucket_ids(pa.array(values, pa.binary()), n).to_pylist() == _pyiceberg(BinaryType(), n, values)


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.one_of(st.none(), st.dates(min_value=dt.date(1, 1, 1)))), buckets)
def test_date(values, n) -> None:
    days = [None if v is None else (v - dt.date(1970, 1, 1)).days for v in values]
    assert bucket_ids(pa.array(values, pa.date32()), n).to_pylist() == _pyiceberg(DateType(), n, days)


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.one_of(st.none(), st.datetimes(min_value=dt.datetime(1000, 1, 1)))), buckets)
def test_timestamp(values, n) -> None:
    micros = [None if v is None else (v - EPOCH) // dt.timedelta(microseconds=1) for v in values]
    expected = _pyiceberg(TimestampType(), n, micros)
    assert bucket_ids(pa.array(values, pa.timestamp("us")), n).to_pylist() == expected
    assert bucket_ids(pa.array(values, pa.timestamp("us", tz="UTC")), n).to_pylist() == expected


@settings(max_examples=examples(40), deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.decimals(min_value=-(10**9), max_value=10**9, places=2, allow_nan=False))),
    buckets,
)
def test_decimal(values, n) -> None:
    values = [None if v is None else v.quantize(decimal.Decimal("0.01")) for v in values]
    arr = pa.array(values, pa.decimal128(18, 2))
    assert bucket_ids(arr, n).to_pylist() == _pyiceberg(DecimalType(18, 2), n, values)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.one_of(st.none(), st.uuids())), buckets)
def test_uuid(values, n) -> None:
    """A uuid column can bucket a keyless table (it was refused, although Iceberg buckets uuids)."""
    arr = pa.array([None if v is None else v.bytes for v in values], pa.binary(16)).cast(pa.uuid())
    assert bucket_ids(arr, n).to_pylist() == _pyiceberg(UUIDType(), n, values)


@pytest.mark.parametrize("unscaled", [-128, -129, -127, 127, 128, -32768, -32769, 32767, 0, -1])
def test_decimal_at_byte_boundaries(unscaled) -> None:
    """Negative powers of two take the fewest two's-complement bytes (Java's BigInteger.toByteArray): -1.28 hashed
    as 0xff80 went to the wrong bucket (found by the property above)."""
    value = decimal.Decimal(unscaled).scaleb(-2)
    arr = pa.array([value], pa.decimal128(18, 2))
    for n in (2, 7, 16):
        assert bucket_ids(arr, n).to_pylist() == _pyiceberg(DecimalType(18, 2), n, [value])


def test_spec_reference_values() -> None:
    """Hashes from the Iceberg spec's appendix (bucket hash of 34 and of 'iceberg')."""
    from lakehouse.table.bucketing import murmur3

    assert int(murmur3(pa.array([34], pa.int32()))[0]) == 2017239379
    assert int(murmur3(pa.array(["iceberg"]))[0]) == 1210000089
    assert int(murmur3(pa.array([dt.date(2017, 11, 16)]))[0]) == 2**32 - 653330422
    spec_uuid = uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7").bytes
    assert int(murmur3(pa.array([spec_uuid], pa.binary(16)).cast(pa.uuid()))[0]) == 1488055340


def test_chunked_and_sliced_arrays() -> None:
    arr = pa.chunked_array([["a", "bb"], [None, "dddd", "eeeee"]])
    assert bucket_ids(arr, 7).to_pylist() == _pyiceberg(StringType(), 7, ["a", "bb", None, "dddd", "eeeee"])
    sliced = pa.array(["x", "yy", "zzz", "wwww"]).slice(1, 2)
    assert bucket_ids(sliced, 5).to_pylist() == _pyiceberg(StringType(), 5, ["yy", "zzz"])


@pytest.mark.parametrize("t", [pa.float64(), pa.bool_(), pa.uint64(), pa.list_(pa.int32())])
def test_types_iceberg_cannot_bucket_are_refused(t) -> None:
    with pytest.raises(SchemaError, match="cannot be a bucket key"):
        bucket_ids(pa.array([], t), 4)
