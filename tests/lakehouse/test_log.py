"""The log on both backends: round trips, offsets, exactly-once retries, races, bad input, corruption."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import threading
import uuid
import zlib
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakehouse import Lakehouse
from lakehouse.errors import (
    BatchError,
    CorruptSegmentError,
    InvalidArgument,
    InvalidTableName,
    OffsetOutOfRange,
    SchemaError,
    TableNotFound,
)
from lakehouse.log import AppendIncomplete, Limits, Log, segment
from lakehouse.table.bucketing import bucket_ids
from object_store import ObjectStore, StoreUnavailable
from tests.lakehouse._faults import CountingPuts, FailingPuts
from tests.lakehouse._workers import append_batches
from tests.support.profiles import examples

ORDERS = pa.schema([("o_orderkey", pa.int64()), ("o_custkey", pa.int32()), ("o_comment", pa.string())])
EVENTS = pa.schema([("id", pa.int64()), ("worker", pa.int32()), ("batch", pa.int32())])


def orders(keys, cust=None, comment="c") -> pa.Table:
    keys = list(keys)
    return pa.table(
        {
            "o_orderkey": pa.array(keys, pa.int64()),
            "o_custkey": pa.array(cust if cust is not None else [k % 100 for k in keys], pa.int32()),
            "o_comment": pa.array([f"{comment}{k}" for k in keys]),
        }
    )


def segments(store: ObjectStore, table: str = "ods.orders") -> list[str]:
    ns, name = table.split(".")
    return [i.key for i in store.list(f"{ns}/{name}/log/")]


@pytest.fixture
def orders_log(lakehouse: Lakehouse) -> Log:
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4)
    return lakehouse.log("ods.orders")


def test_compressed_segments_read_back_through_any_log(orders_log: Log, store: ObjectStore) -> None:
    """Segment compression (an option of `Log`) had no test; a codec Arrow IPC lacks failed every append
    with Arrow's ValueError instead of being refused when the `Log` was made."""
    plain = orders_log
    for codec in ("lz4", "ZSTD"):
        log = Log(store, plain.definition, compression=codec)
        log.append(orders(range(200), comment=f"{codec}-"), "upsert")
        log.close()
    plain.append(orders(range(200), comment="none-"), "upsert")
    for b in range(plain.definition.buckets):
        written = [c.split("-")[0] for c in plain.read(b).column("o_comment").to_pylist()]  # by a plain Log
        assert written == sorted(written, key=["lz4", "ZSTD", "none"].index) and len(set(written)) == 3
    assert sum(plain.end_offsets().values()) == 600
    sizes = [store.head(key).size for key in segments(store)]  # per bucket: lz4, zstd, plain
    assert all(max(sizes[i : i + 2]) < sizes[i + 2] for i in range(0, len(sizes), 3)), sizes
    for codec in ("gzip", "snappy", "", 5):
        with pytest.raises(InvalidArgument, match="compression must be None, 'lz4' or 'zstd'"):
            Log(store, plain.definition, compression=codec)


@pytest.mark.backends("local", "s3")
def test_round_trip_bucket_alignment_and_offsets(orders_log: Log) -> None:
    data = orders(range(1000))
    result = orders_log.append(data, "upsert")
    assert result.rows == 1000 and sum(last - first + 1 for first, last in result.ranges.values()) == 1000
    assert all(first == 0 for first, _ in result.ranges.values())
    ends = orders_log.end_offsets()
    assert set(ends) == {0, 1, 2, 3} and sum(ends.values()) == 1000
    expected_bucket = bucket_ids(data.column("o_orderkey"), 4).to_numpy()
    for b in range(4):
        got = orders_log.read(b)
        keys = got.column("o_orderkey").to_numpy()
        # the rows of bucket b, in input order, at offsets 0..n-1
        assert keys.tolist() == data.column("o_orderkey").to_numpy()[expected_bucket == b].tolist()
        assert got.column("_offset").to_pylist() == list(range(ends[b]))
        assert set(got.column("_op").to_pylist()) == {"upsert"}
        assert got.schema.names == [*ORDERS.names, "_op", "_offset", "_timestamp"]
        assert orders_log.bucket_of(pa.array(keys)).to_pylist() == [b] * len(keys)


def test_bucket_of_casts_keys_as_an_append_does(orders_log: Log) -> None:
    """An append widens an int16 7 to the int64 key 7; bucket_of hashed the narrow value instead (another
    bucket). Strings are refused by both: an append no longer casts '7' to 7."""
    keys = list(range(20))
    as_ints = orders_log.bucket_of(pa.array(keys)).to_pylist()
    assert orders_log.bucket_of(pa.chunked_array([pa.array(keys, pa.int16())])).to_pylist() == as_ints
    result = orders_log.append(orders(keys).set_column(0, "o_orderkey", pa.array(keys, pa.int16())), "upsert")
    assert {b for b in result.ranges} == set(as_ints)
    with pytest.raises(SchemaError, match="'o_orderkey'.*string.*int64"):
        orders_log.append(orders(keys).set_column(0, "o_orderkey", pa.array([str(k) for k in keys])), "upsert")
    with pytest.raises(SchemaError, match="bucket key 'o_orderkey'.*string.*int64"):
        orders_log.bucket_of(pa.array([str(k) for k in keys]))
    with pytest.raises(SchemaError, match="bucket key 'o_orderkey'"):
        orders_log.bucket_of(pa.array(["seven"]))
    with pytest.raises(SchemaError, match="bucket key 'o_orderkey'"):
        orders_log.bucket_of(["seven"])


def test_order_within_a_bucket_across_appends_and_ranges(orders_log: Log) -> None:
    for i in range(5):
        orders_log.append(orders([7] * 3, comment=f"v{i}-"), "upsert")
    orders_log.append(orders([7]), "delete")
    b = orders_log.bucket_of([7]).to_pylist()[0]
    got = orders_log.read(b)
    assert got.column("_offset").to_pylist() == list(range(16))
    assert got.column("o_comment").to_pylist()[:15] == [f"v{i}-7" for i in range(5) for _ in range(3)]
    assert got.column("_op").to_pylist()[-1] == "delete"
    part = orders_log.read(b, start=4, end=11)  # spans three segments, cut inside two of them
    assert part.column("_offset").to_pylist() == list(range(4, 11))
    assert orders_log.read(b, start=16).num_rows == 0
    assert orders_log.read(b, start=3, end=3).num_rows == 0
    assert orders_log.read(b, start=10, end=1000).num_rows == 6


def test_keyless_log_table_rotates_whole_appends_over_buckets(lakehouse: Lakehouse) -> None:
    lakehouse.create_table("ods.events", EVENTS, buckets=3)
    log = lakehouse.log("ods.events")
    used = []
    for i in range(6):
        res = log.append(pa.table({"id": [i, i], "worker": [0, 0], "batch": [i, i]}))
        assert len(res.ranges) == 1  # one bucket (one segment) per append
        used.append(next(iter(res.ranges)))
    assert sorted(Counter(used).values()) == [2, 2, 2]  # round-robin
    assert sum(log.end_offsets().values()) == 12
    with pytest.raises(BatchError, match="no bucket key"):
        log.bucket_of([1])


@pytest.mark.segments
def test_a_table_of_many_small_chunks_is_stored_as_one_batch(lakehouse: Lakehouse, store: ObjectStore) -> None:
    """A keyless append of a 2,000-chunk table wrote 2,000 record batches (13x the bytes of one)."""
    lakehouse.create_table("ods.events", EVENTS, bucket_key=None, buckets=1)
    data = pa.Table.from_pydict({"id": list(range(2000)), "worker": [1] * 2000, "batch": [2] * 2000}, schema=EVENTS)
    lakehouse.log("ods.events").append(pa.Table.from_batches(data.to_batches(max_chunksize=1)))
    (key,) = segments(store, "ods.events")
    body = store.get(key).data
    assert len(list(pa.ipc.open_stream(pa.py_buffer(body)))) == 1
    assert len(body) == len(segment.encode(data))
    assert lakehouse.log("ods.events").read(0).column("id").to_pylist() == list(range(2000))


def test_deletes_may_carry_only_the_key(orders_log: Log) -> None:
    orders_log.append(orders([5]), "upsert")
    orders_log.append(pa.table({"o_orderkey": pa.array([5], pa.int64())}), "delete")
    b = orders_log.bucket_of([5]).to_pylist()[0]
    rows = orders_log.read(b).to_pylist()  # a full segment and a key-only one in one read
    assert [(r["o_orderkey"], r["o_custkey"], r["_op"]) for r in rows] == [(5, 5, "upsert"), (5, None, "delete")]


def test_key_only_deletes_read_back_in_a_table_with_required_columns(lakehouse: Lakehouse) -> None:
    """In a primary-key table whose other columns are NOT NULL, a key-only delete holds nulls there. A read
    across it and full segments has one schema, with the columns outside the key nullable."""
    schema = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", pa.string(), False)])
    lakehouse.create_table("ods.required", schema, primary_key=["k"], buckets=1)
    log = lakehouse.log("ods.required")
    log.append(pa.table({"k": [1, 2], "v": ["a", "b"]}), "upsert")
    log.append(pa.table({"k": [2]}), "delete")
    log.append(pa.table({"k": [3], "v": ["c"]}), "upsert")
    got = log.read(0)
    assert got.schema == log.read_schema
    assert [f.nullable for f in log.records_schema] == [False, True]
    assert [(r["k"], r["v"], r["_op"]) for r in got.to_pylist()] == [
        (1, "a", "upsert"),
        (2, "b", "upsert"),
        (2, None, "delete"),
        (3, "c", "upsert"),
    ]
    assert all(batch.schema == log.read_schema for batch in log.read_batches(0))


@pytest.mark.segments
def test_a_segment_with_other_columns_is_reported_not_read(orders_log: Log, store: ObjectStore) -> None:
    orders_log.append(orders([1]), "upsert")
    (key,) = segments(store)
    obj = store.get(key)
    foreign = segment.encode(pa.table({"o_orderkey": pa.array([1], pa.int64()), "other": ["x"]}))
    header = segment.SegmentHeader.from_metadata(obj.metadata, key=key)
    header = dataclasses.replace(header, checksum=segment.checksum(foreign), algorithm=segment.WRITE_ALGORITHM)
    store.put(key, foreign, metadata=header.to_metadata())  # a valid segment of another table's columns
    bucket = orders_log.bucket_of([1]).to_pylist()[0]
    with pytest.raises(CorruptSegmentError, match=rf"{key} .*has columns o_orderkey: int64, other: string"):
        orders_log.read(bucket)


def test_safe_casts_are_applied(orders_log: Log) -> None:
    data = pa.table(
        {"o_comment": ["x"], "o_orderkey": pa.array([1], pa.int32()), "o_custkey": pa.array([2], pa.int8())}
    )
    orders_log.append(data, "insert")  # reordered and widened
    b = orders_log.bucket_of([1]).to_pylist()[0]
    assert orders_log.read(b).select(ORDERS.names).to_pylist() == [{"o_orderkey": 1, "o_custkey": 2, "o_comment": "x"}]


TYPED = pa.schema(
    [
        ("k", pa.int64()),
        ("s", pa.string()),
        ("f", pa.float64()),
        ("d", pa.decimal128(10, 2)),
        ("tags", pa.list_(pa.string())),
    ]
)


def typed(**columns: pa.Array) -> pa.Table:
    """Two rows of ``ods.typed``, each column as the table declares it unless given."""
    base = {
        "k": pa.array([3, 4], pa.int64()),
        "s": pa.array(["a", "b"]),
        "f": pa.array([1.5, 2.0]),
        "d": pa.array([Decimal("1.00"), Decimal("2.00")], pa.decimal128(10, 2)),
        "tags": pa.array([["x"], []], pa.list_(pa.string())),
    }
    return pa.table({**base, **columns})


@pytest.mark.parametrize(
    ("column", "values", "given"),
    [
        ("k", pa.array(["3", "4"]), "string"),  # the case: the strings '3' and '4' into the int64 key
        ("s", pa.array([42, 43]), "int64"),  # and 42 into a string column
        ("s", pa.array([1.5, 2.5]), "double"),
        ("f", pa.array(["1.5", "2"], pa.large_string()), "large_string"),
        ("d", pa.array(["1.50", "2.00"]), "string"),
        ("k", pa.array(["3", "4"]).dictionary_encode(), "dictionary<values=string"),
        ("tags", pa.array([[1], []], pa.list_(pa.int64())), "list<item: int64>"),
    ],
)
def test_strings_and_numbers_are_not_cast_into_each_other(lakehouse: Lakehouse, store, column, values, given):
    """'3' and '4' were accepted into an int64 key and 42 into a string column (Arrow casts both ways): a value
    whose meaning changes with its type is refused, naming the column, the batch's type and the table's."""
    lakehouse.create_table("ods.typed", TYPED, primary_key=["k"], buckets=2)
    log = lakehouse.log("ods.typed")
    with pytest.raises(SchemaError) as info:
        log.append(typed(**{column: values}), "upsert")
    message = str(info.value)
    assert f"column {column!r}" in message and given in message and str(TYPED.field(column).type) in message
    assert "nothing was written" in message
    with pytest.raises(SchemaError, match=f"column {column!r}"), log.producer() as producer:
        producer.send(typed(**{column: values}), "upsert")
    assert segments(store, "ods.typed") == []


def test_widening_and_arrow_typed_input_are_still_cast(lakehouse: Lakehouse) -> None:
    lakehouse.create_table("ods.typed", TYPED, primary_key=["k"], buckets=2)
    log = lakehouse.log("ods.typed")
    log.append(typed(), "upsert")  # every column already the table's type
    widened = typed(
        k=pa.array([3, 5], pa.int32()),
        s=pa.array(["c", "d"]).dictionary_encode(),
        f=pa.array([7, 8], pa.int64()),
        d=pa.array([9, 10], pa.int8()),  # an int8 fits decimal(10, 2); an int32 would not
        tags=pa.array([["y"], None], pa.list_(pa.large_string())),
    )
    log.append(widened, "upsert")
    rows = [r for b in range(2) for r in log.read(b).select(TYPED.names).to_pylist() if r["k"] == 5]
    assert rows == [{"k": 5, "s": "d", "f": 8.0, "d": Decimal("10.00"), "tags": None}]


@pytest.mark.parametrize(
    ("data", "op", "error", "message"),
    [
        (orders([1]).drop_columns(["o_comment"]), "upsert", SchemaError, r"lacks columns \['o_comment'\]"),
        (
            orders([1]).append_column("extra", pa.array([1])),
            "upsert",
            SchemaError,
            r"columns the table does not: \['extra'\]",
        ),
        (
            orders([1]).set_column(1, "o_custkey", pa.array([2**40])),
            "upsert",
            SchemaError,
            "'o_custkey'.*cannot be cast",
        ),
        (orders([1]).set_column(0, "o_orderkey", pa.array(["abc"])), "upsert", SchemaError, "'o_orderkey'"),
        (
            orders([1, 2]).set_column(0, "o_orderkey", pa.array([1, None], pa.int64())),
            "upsert",
            BatchError,
            "primary-key column 'o_orderkey' has 1 null.*row 1",
        ),
        (orders([]), "upsert", BatchError, "empty batch"),
        (orders([1]), "merge", BatchError, "unknown operation 'merge'"),
        (orders([1]).to_pylist(), "upsert", BatchError, "pyarrow Table"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(orders_log: Log, store, data, op, error, message) -> None:
    with pytest.raises(error, match=message):
        orders_log.append(data, op)
    assert segments(store) == []
    assert orders_log.end_offsets() == {0: 0, 1: 0, 2: 0, 3: 0}


def test_oversized_batch_names_the_limit(lakehouse: Lakehouse, store) -> None:
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4)
    log = Log(store, lakehouse.table("ods.orders"), limits=Limits(max_rows=10, max_bytes=10_000))
    with pytest.raises(BatchError, match="limit of 10 rows"):
        log.append(orders(range(11)), "upsert")
    with pytest.raises(BatchError, match="limit of 10000 bytes"):
        log.append(orders(range(5), comment="x" * 5000), "upsert")
    assert segments(store) == []
    log.close()


def test_log_tables_accept_inserts_only(lakehouse: Lakehouse, store) -> None:
    lakehouse.create_table("ods.events", EVENTS, bucket_key="id", buckets=2)
    log = lakehouse.log("ods.events")
    for op in ("upsert", "delete"):
        with pytest.raises(BatchError, match="accepts inserts only"):
            log.append(pa.table({"id": [1], "worker": [1], "batch": [1]}), op)
    with pytest.raises(BatchError, match="bucket-key column 'id' has 1 null"):
        log.append(pa.table({"id": pa.array([None], pa.int64()), "worker": [1], "batch": [1]}))
    assert segments(store, "ods.events") == []


def test_unknown_table_and_invalid_name(lakehouse: Lakehouse) -> None:
    with pytest.raises(TableNotFound):
        lakehouse.log("ods.nope")
    with pytest.raises(InvalidTableName):
        lakehouse.log("nope")


@pytest.mark.parametrize(
    ("producer_id", "sequence", "message"),
    [
        ("p", True, "must be an integer from 0 to 2\\*\\*63-1, got True"),  # once written as "True": unreadable
        ("p", 1.5, "got 1.5"),
        ("p", -1, "got -1"),
        ("p", 2**63, "got 9223372036854775808"),
        ("p", None, "give the append's sequence too"),
        (None, 3, "a sequence \\(3\\) without a producer_id"),
        ("", 0, "invalid producer id ''"),
        ("生产者", 0, "visible ASCII"),  # metadata is ASCII
        (" p", 0, "no spaces"),  # S3 trims header values: a retry would not recognise its first attempt
        ("p" * 129, 0, "1 to 128"),  # S3 allows 2 KB of metadata
        (7, 0, "invalid producer id 7"),
    ],
)
def test_a_bad_producer_id_or_sequence_is_refused_and_nothing_is_written(
    orders_log: Log, store, producer_id, sequence, message
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        orders_log.append(orders(range(20)), "upsert", producer_id=producer_id, sequence=sequence)
    assert segments(store) == []
    assert orders_log.end_offsets() == {0: 0, 1: 0, 2: 0, 3: 0}


def test_a_numpy_sequence_is_a_sequence(orders_log: Log) -> None:
    first = orders_log.append(orders(range(20)), "upsert", producer_id="job-1/task-2", sequence=np.int64(5))
    again = orders_log.append(orders(range(20)), "upsert", producer_id="job-1/task-2", sequence=5)
    assert (first.sequence, again.already_appended) == (5, frozenset(first.ranges))
    assert sum(orders_log.read(b).num_rows for b in range(4)) == 20


@pytest.mark.segments
def test_a_long_lived_log_keeps_a_bounded_index_and_still_reads_everything(orders_log: Log, monkeypatch) -> None:
    """Every segment's base offset stayed in memory: a process appending for weeks grew without bound."""
    monkeypatch.setattr("lakehouse.log.index.KEEP_SEGMENTS", 3, raising=False)
    key = [k for k in range(1000) if orders_log.bucket_of([k])[0].as_py() == 1][0]
    for i in range(10):
        orders_log.append(orders([key] * 2, comment=f"v{i}-"), "upsert", producer_id="p", sequence=i)
    index = orders_log._indexes[1]
    assert len(index.bases) <= 6 and not index.complete
    assert orders_log.read(1).column("_offset").to_pylist() == list(range(20))  # older segments listed again
    assert orders_log.read(1, 3, 6).column("_offset").to_pylist() == [3, 4, 5]
    assert orders_log.start_offsets()[1] == 0
    again = orders_log.append(orders([key] * 2, comment="v9-"), "upsert", producer_id="p", sequence=9)
    assert again.already_appended == {1} and orders_log.end_offsets()[1] == 20  # the look-back still works


def test_a_read_outside_the_table_says_what_exists(orders_log: Log) -> None:
    buckets = orders_log.definition.buckets
    with pytest.raises(InvalidArgument, match=rf"has buckets 0\.\.{buckets - 1}, not {buckets}"):
        orders_log.read(buckets)
    with pytest.raises(InvalidArgument, match="offsets must be >= 0, got start=-1, end=None"):
        list(orders_log.read_batches(0, start=-1))
    with pytest.raises(InvalidArgument, match="offsets must be >= 0, got start=0, end=-2"):
        orders_log.read(0, 0, -2)
    # a float, string or bool raised TypeError from deep inside, or (True) read bucket 1
    for bucket, start, end, what in [(1.0, 0, None, "bucket"), (True, 0, None, "bucket"), (0, "3", None, "start")]:
        with pytest.raises(
            InvalidArgument, match=f"{what} must be an integer, got {start if what == 'start' else bucket!r}"
        ):
            orders_log.read(bucket, start, end)
    with pytest.raises(InvalidArgument, match="end must be an integer, got 2.5"):
        list(orders_log.read_batches(0, 0, 2.5))
    orders_log.append(orders(range(50)), "upsert")
    assert orders_log.read(np.int64(0), np.int32(0)).num_rows == orders_log.end_offsets()[0]  # numpy ints are fine


@pytest.mark.segments
@pytest.mark.backends("local", "s3")
def test_corrupt_segment_is_reported_not_skipped(orders_log: Log, store: ObjectStore) -> None:
    orders_log.append(orders(range(50)), "upsert")
    orders_log.append(orders(range(50, 100)), "upsert")
    key = segments(store)[0]
    obj = store.get(key)
    store.put(key, obj.data[: len(obj.data) // 2], metadata=dict(obj.metadata))  # truncated in place
    with pytest.raises(CorruptSegmentError, match=rf"{key}.*offsets 0\.\.\d+.*checksum"):
        orders_log.read(0)
    garbage = b"not arrow at all"
    store.put(key, garbage, metadata={**obj.metadata, "lakestream-crc32c": segment.checksum(garbage, "crc32c")})
    with pytest.raises(CorruptSegmentError):
        orders_log.read(0)
    store.put(key, obj.data)  # a foreign tool's write: no header
    with pytest.raises(CorruptSegmentError, match="no valid lakestream header"):
        orders_log.read(0)


@pytest.mark.segments
def test_segments_of_earlier_versions_verify_with_zlib_crc32(orders_log: Log, store: ObjectStore) -> None:
    """Segments written before CRC-32C carry ``lakestream-crc32`` (zlib's CRC-32): still read and verified."""
    orders_log.append(orders(range(50)), "upsert")
    key = segments(store)[0]
    obj = store.get(key)
    legacy = {k: v for k, v in obj.metadata.items() if k != "lakestream-crc32c"}
    store.put(key, obj.data, metadata={**legacy, "lakestream-crc32": f"{zlib.crc32(obj.data):08x}"})
    before = orders_log.read(0)
    assert before.num_rows == sum(1 for k in range(50) if orders_log.bucket_of([k])[0].as_py() == 0)
    store.put(key, obj.data[:-10], metadata={**legacy, "lakestream-crc32": f"{zlib.crc32(obj.data):08x}"})
    with pytest.raises(CorruptSegmentError, match="checksum"):
        orders_log.read(0)


@pytest.mark.segments
def test_a_gap_or_overlap_between_segments_is_reported_not_skipped(orders_log: Log, store: ObjectStore) -> None:
    """Offsets are contiguous: a segment that does not start where the previous one ends (a foreign or
    damaged write) fails the read, naming the segment, instead of yielding repeated or missing offsets."""
    orders_log.append(orders([7] * 5), "upsert")
    b = orders_log.bucket_of([7]).to_pylist()[0]
    first = segments(store)[0]
    obj = store.get(first)
    stray = first.replace(f"{0:020d}", f"{3:020d}")  # a second segment starting inside the first (0..4)
    store.put(stray, obj.data, metadata=dict(obj.metadata))
    fresh = Log(store, orders_log.definition)
    for read in (lambda: fresh.read(b), lambda: list(fresh.read_batches(b))):
        with pytest.raises(CorruptSegmentError, match=rf"{first} holds offsets 0\.\.4.*next segment starts at 3"):
            read()
    fresh.close()


@pytest.mark.segments
@pytest.mark.backends("local", "s3")
def test_read_below_retained_offsets(orders_log: Log, store: ObjectStore, lakehouse: Lakehouse) -> None:
    for _ in range(3):
        orders_log.append(orders([1, 2, 3]), "upsert")
    b = orders_log.bucket_of([1]).to_pylist()[0]
    first_segment = [k for k in segments(store) if f"/{b:05d}/" in k][0]
    store.delete(first_segment)
    fresh = Log(store, lakehouse.table("ods.orders"))
    start = fresh.start_offsets()[b]
    assert start > 0
    with pytest.raises(OffsetOutOfRange, match=f"earliest available offset is {start}"):
        fresh.read(b, 0)
    assert fresh.read(b, start).column("_offset").to_pylist()[0] == start
    fresh.close()


# ---- exactly once across retries ----------------------------------------------------------------------


@pytest.mark.backends("local", "s3")
def test_retry_with_same_producer_sequence_from_a_new_process_is_recognised(
    orders_log: Log, store: ObjectStore, lakehouse: Lakehouse
) -> None:
    first = orders_log.append(orders(range(100)), "upsert", producer_id="job-7", sequence=41)
    orders_log.append(orders(range(100)), "upsert")  # another producer appends after it, in every bucket
    restarted = Log(store, lakehouse.table("ods.orders"))  # a new process: no memory of the first attempt
    assert sum(restarted.end_offsets().values()) == 200
    again = restarted.append(orders(range(100)), "upsert", producer_id="job-7", sequence=41)
    assert again.ranges == first.ranges and again.already_appended == frozenset(first.ranges)
    assert sum(restarted.end_offsets().values()) == 200
    nxt = restarted.append(orders(range(100)), "upsert", producer_id="job-7", sequence=42)
    assert nxt.already_appended == frozenset() and sum(restarted.end_offsets().values()) == 300
    restarted.close()


@pytest.mark.backends("local", "s3")
def test_a_restarted_process_recognises_every_replayed_sequence(
    orders_log: Log, store: ObjectStore, lakehouse: Lakehouse
) -> None:
    """Issue 22: a new process replaying sequences 0, 1, 2 of "job-7" recognised only 0 and wrote 1 and 2
    again (15 rows instead of 9): only the first append of an unknown producer id looked back."""
    batches = [orders(range(i * 3, i * 3 + 3)) for i in range(3)]
    first = [orders_log.append(b, "upsert", producer_id="job-7", sequence=i) for i, b in enumerate(batches)]
    restarted = Log(store, lakehouse.table("ods.orders"))
    again = [restarted.append(b, "upsert", producer_id="job-7", sequence=i) for i, b in enumerate(batches)]
    assert [a.already_appended for a in again] == [frozenset(f.ranges) for f in first]
    assert [a.ranges for a in again] == [f.ranges for f in first]
    assert sum(restarted.end_offsets().values()) == 9
    nxt = restarted.append(orders(range(9, 12)), "upsert", producer_id="job-7", sequence=3)
    assert nxt.already_appended == frozenset() and sum(restarted.end_offsets().values()) == 12
    restarted.close()


def test_replays_in_any_order_and_in_buckets_first_touched_later_are_recognised(
    orders_log: Log, store: ObjectStore, lakehouse: Lakehouse
) -> None:
    """A producer's history is known per bucket: a sequence that touched a bucket the restarted process
    reaches only later, or replays out of order, still land once."""
    by_bucket = {b: [k for k in range(2000) if orders_log.bucket_of([k])[0].as_py() == b][:30] for b in range(4)}
    plan = [by_bucket[0][:10], by_bucket[1][:10], by_bucket[0][10:20] + by_bucket[2][:10], by_bucket[3][:10]]
    for i, keys in enumerate(plan):
        orders_log.append(orders(keys), "upsert", producer_id="p", sequence=i)
    restarted = Log(store, lakehouse.table("ods.orders"))
    for i in (3, 0, 2, 1, 3):
        assert restarted.append(orders(plan[i]), "upsert", producer_id="p", sequence=i).already_appended
    assert sum(restarted.end_offsets().values()) == 50
    restarted.close()


@pytest.mark.segments
def test_a_sequence_reused_for_other_rows_is_refused_and_nothing_is_written(
    orders_log: Log, store: ObjectStore, lakehouse: Lakehouse
) -> None:
    """Issue 22: the same producer id and sequence with other rows was taken as already appended
    (``already_appended={0}`` with another count and checksum) and the rows silently dropped."""
    from lakehouse.errors import SequenceConflict

    key = [k for k in range(1000) if orders_log.bucket_of([k])[0].as_py() == 0]
    orders_log.append(orders(key[:5]), "upsert", producer_id="job-7", sequence=0)
    for log in (orders_log, Log(store, lakehouse.table("ods.orders"))):  # this process, and a restarted one
        for other in (orders(key[:5], comment="other-"), orders(key[:4]), orders(key[:5] + key[100:101])):
            with pytest.raises(SequenceConflict, match=r"producer 'job-7' .*sequence 0 in bucket 0") as info:
                log.append(other, "upsert", producer_id="job-7", sequence=0)
            assert (info.value.producer_id, info.value.sequence, info.value.bucket) == ("job-7", 0, 0)
        with pytest.raises(SequenceConflict, match="delete rows"):
            log.append(orders(key[:5]), "delete", producer_id="job-7", sequence=0)
        # the same rows, chunked otherwise (another record batch layout, another checksum): recognised
        rechunked = pa.concat_tables([orders(key[:2]), orders(key[2:5])])
        assert log.append(rechunked, "upsert", producer_id="job-7", sequence=0).already_appended == {0}
    # a later sequence in a bucket the first one did not touch is new; replayed with rows for bucket 0 too, it
    # is not what sequence 1 appended (bucket 0 has no segment of it)
    other_bucket = [k for k in range(1000) if orders_log.bucket_of([k])[0].as_py() == 1][:3]
    orders_log.append(orders(other_bucket), "upsert", producer_id="job-7", sequence=1)
    orders_log.append(orders(key[5:8]), "upsert", producer_id="job-7", sequence=2)
    with pytest.raises(SequenceConflict, match="sequence 1 has 2 rows for bucket 0") as info:
        Log(store, lakehouse.table("ods.orders")).append(
            orders(other_bucket + key[10:12]), "upsert", producer_id="job-7", sequence=1
        )
    assert orders_log.end_offsets() == {0: 8, 1: 3, 2: 0, 3: 0}  # nothing written by any refused append


def test_a_log_keeps_no_state_for_anonymous_appends_and_a_bounded_number_of_producer_ids(
    orders_log: Log, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends without a producer id are never retried, so they leave nothing behind (one state per append
    would grow without bound in a long-lived process). Producer ids are remembered up to a limit; a
    forgotten id's next append looks back, so a retry of it is still recognised."""
    import lakehouse.log.log as log_module

    for i in range(5):
        orders_log.append(orders(range(i * 10, i * 10 + 10)), "upsert")
    assert orders_log._producers == {}
    monkeypatch.setattr(log_module, "_MAX_PRODUCERS", 3)
    first = orders_log.append(orders(range(100, 140)), "upsert", producer_id="p0", sequence=0)
    for n in range(1, 6):
        orders_log.append(orders(range(n * 1000, n * 1000 + 4)), "upsert", producer_id=f"p{n}", sequence=0)
    assert len(orders_log._producers) == 3 and "p0" not in orders_log._producers
    again = orders_log.append(orders(range(100, 140)), "upsert", producer_id="p0", sequence=0)  # a retry
    assert again.already_appended == frozenset(first.ranges) and again.ranges == first.ranges
    assert sum(orders_log.end_offsets().values()) == 50 + 40 + 5 * 4


@pytest.mark.segments
@pytest.mark.backends("local", "s3")
@pytest.mark.parametrize("applied", [False, True], ids=["not-applied", "applied-then-lost"])
def test_partial_append_retried_completes_exactly_once(
    orders_log: Log, store: ObjectStore, lakehouse: Lakehouse, applied: bool
) -> None:
    FailingPuts(store, "/log/00002/", apply=applied)
    data = orders(range(400))
    with pytest.raises(AppendIncomplete) as info:
        orders_log.append(data, "upsert", producer_id="p", sequence=0)
    assert set(info.value.failed) == {2} and set(info.value.result.ranges) == {0, 1, 3}
    assert "producer_id='p', sequence=0" in str(info.value)
    retry = orders_log.append(data, "upsert", producer_id="p", sequence=0)
    assert retry.already_appended == (frozenset({0, 1, 2, 3}) if applied else frozenset({0, 1, 3}))
    fresh = Log(store, lakehouse.table("ods.orders"))
    keys = Counter(k for b in range(4) for k in fresh.read(b).column("o_orderkey").to_pylist())
    assert keys == Counter(range(400))  # every record exactly once
    fresh.close()


@pytest.mark.segments
@pytest.mark.backends("local", "s3")
@pytest.mark.parametrize("applied", [False, True], ids=["not-applied", "applied-then-lost"])
def test_one_bucket_append_fails_and_retries_like_any_other(
    orders_log: Log, store: ObjectStore, lakehouse: Lakehouse, applied: bool
) -> None:
    """An append to one bucket runs its PUT on the caller's thread, not the pool: its failure is reported
    and retried the same way."""
    keys = [k for k in range(1000) if orders_log.bucket_of([k])[0].as_py() == 2][:40]
    FailingPuts(store, "/log/00002/", apply=applied)
    with pytest.raises(AppendIncomplete) as info:
        orders_log.append(orders(keys), "upsert", producer_id="p", sequence=0)
    assert set(info.value.failed) == {2} and info.value.result.ranges == {}
    assert isinstance(info.value.__cause__, StoreUnavailable)
    retry = orders_log.append(orders(keys), "upsert", producer_id="p", sequence=0)
    assert retry.ranges == {2: (0, 39)} and retry.already_appended == (frozenset({2}) if applied else frozenset())
    fresh = Log(store, lakehouse.table("ods.orders"))
    assert Counter(fresh.read(2).column("o_orderkey").to_pylist()) == Counter(keys)  # exactly once
    fresh.close()


@pytest.mark.segments
def test_a_retried_keyless_append_goes_to_the_bucket_of_its_first_attempt(
    lakehouse: Lakehouse, store: ObjectStore
) -> None:
    """Keyless tables rotate appends over buckets; a retry (same producer id and sequence) must not rotate,
    or its look-back searches the wrong bucket and the rows land twice."""
    lakehouse.create_table("ods.events", EVENTS, buckets=3)
    log = lakehouse.log("ods.events")
    FailingPuts(store, "/log/", apply=True)  # the first attempt lands, its answer is lost
    data = pa.table({"id": [1, 2], "worker": [0, 0], "batch": [0, 0]})
    with pytest.raises(AppendIncomplete):
        log.append(data, producer_id="p", sequence=0)
    retry = log.append(data, producer_id="p", sequence=0)
    assert retry.already_appended == frozenset(retry.ranges)
    assert sum(log.end_offsets().values()) == 2  # once, not twice
    later = [next(iter(log.append(data, producer_id="p", sequence=n).ranges)) for n in range(1, 7)]
    assert sorted(Counter(later).values()) == [2, 2, 2]  # one producer's appends still rotate


def test_lost_response_on_segment_create_is_not_a_duplicate(seaweedfs) -> None:
    """The real botocore retry path: the create applies, its response is lost, botocore re-sends."""
    from botocore.exceptions import ReadTimeoutError

    lh = Lakehouse.open(f"s3://{seaweedfs.bucket}/lost-{uuid.uuid4().hex[:8]}", **seaweedfs.store_options())
    lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=1)
    log = lh.log("ods.orders")
    sent = []

    def lose_first_response(request, **_):
        if b"/log/" in request.url.encode() and not sent:
            sent.append(lh.store.client._endpoint.http_session.send(request))
            raise ReadTimeoutError(endpoint_url=request.url)

    lh.store.client.meta.events.register("before-send.s3.PutObject", lose_first_response)
    result = log.append(orders(range(10)), "upsert")
    assert sent and result.ranges == {0: (0, 9)}
    assert log.end_offsets() == {0: 10} and log.read(0).num_rows == 10
    lh.close()


@pytest.mark.segments
@pytest.mark.backends("local", "s3")
@pytest.mark.parametrize("ahead", [3, 12], ids=["walks-the-winners", "lists-a-long-chain"])
def test_a_stale_producer_lands_at_the_end_without_uploading_to_taken_offsets(
    lakehouse: Lakehouse, store: ObjectStore, ahead: int
) -> None:
    """A producer whose view of the bucket is ``ahead`` segments old loses one race, then finds the end from
    the winners' headers (or a listing when the chain is long) instead of trying each taken offset."""
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=1)
    stale, other = lakehouse.log("ods.orders"), Log(store, lakehouse.table("ods.orders"))
    stale.end_offsets()  # knows offset 0
    for i in range(ahead):
        other.append(orders(range(i * 10, i * 10 + 1 + i)), "upsert")  # segments of 1, 2, 3, ... records
    end = sum(range(1, ahead + 1))
    puts = CountingPuts(store)
    result = stale.append(orders([999, 998]), "upsert")
    assert result.ranges == {0: (end, end + 1)}
    assert len(puts.keys) == 2, puts.keys  # the lost race at offset 0, then the end
    got = Log(store, lakehouse.table("ods.orders")).read(0)
    assert got.column("_offset").to_pylist() == list(range(end + 2))
    assert got.column("o_orderkey").to_pylist()[-2:] == [999, 998]


@pytest.mark.segments
@pytest.mark.backends("local", "s3")
def test_threads_sharing_a_log_take_turns_per_bucket_instead_of_racing(lakehouse: Lakehouse, store) -> None:
    """Four threads append through one `Log` to every bucket at once: no segment key is PUT twice (no
    thread loses a race to another thread of the same Log), and every record lands exactly once."""
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4)
    log = lakehouse.log("ods.orders")
    log.end_offsets()
    puts = CountingPuts(store)
    barrier = threading.Barrier(4)

    def produce(t: int) -> None:
        barrier.wait()
        for i in range(8):
            log.append(orders(range(t * 10_000 + i * 100, t * 10_000 + i * 100 + 40)), "upsert")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(produce, range(4)))
    segment_puts = [k for k in puts.keys if "/log/" in k]
    assert len(segment_puts) == 4 * 8 * 4 and len(set(segment_puts)) == len(segment_puts), Counter(
        k for k in segment_puts if segment_puts.count(k) > 1
    )
    got = Log(store, lakehouse.table("ods.orders"))
    keys = [k for b in range(4) for k in got.read(b).column("o_orderkey").to_pylist()]
    assert sorted(keys) == sorted(t * 10_000 + i * 100 + j for t in range(4) for i in range(8) for j in range(40))
    for b in range(4):
        assert got.read(b).column("_offset").to_pylist() == list(range(got.end_offsets()[b]))


# ---- properties and races -----------------------------------------------------------------------------


@pytest.mark.backends("local", "s3")
def test_a_log_that_lands_after_others_still_reads_its_buckets(lakehouse: Lakehouse, store: ObjectStore) -> None:
    """A Log whose append lost the race and landed after other processes' segments recorded only its own:
    its next read saw a gap before it and raised CorruptSegmentError (and kept doing so)."""
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=2)
    logs = [Log(store, lakehouse.table("ods.orders")) for _ in range(3)]  # three processes' Logs
    rng = random.Random(7)
    appended: list[int] = []
    for _ in range(40):
        keys = [rng.randrange(1000) for _ in range(rng.randint(1, 6))]
        rng.choice(logs).append(orders(keys), "upsert")
        appended += keys
        reader = rng.choice(logs)
        got = [k for b in range(2) for k in reader.read(b).column("o_orderkey").to_pylist()]
        assert sorted(got) == sorted(appended)
    for log in logs:
        log.close()


@pytest.mark.backends("local", "s3")
@pytest.mark.subprocess
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_lakehouse_inherited_by_forked_workers_still_appends(lakehouse: Lakehouse, orders_log: Log) -> None:
    """multiprocessing forks on Linux: a child inherited the parent's Log without its pool's threads (its
    appends waited forever) and the S3 client's pooled connections (shared with the parent)."""
    from tests.lakehouse import _workers

    orders_log.append(orders(range(100)), "upsert")  # the pool's threads and connections exist now
    _workers.INHERITED.update(lakehouse=lakehouse, make_rows=orders, table="ods.orders")
    chunks = [range(i * 100, i * 100 + 100) for i in (1, 2, 3)]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map_async(_workers.append_with_inherited_log, chunks).get(timeout=120) == [100, 100, 100]
    orders_log.append(orders(range(400, 500)), "upsert")  # and the parent's Log still works
    keys = [k for b in range(4) for k in orders_log.read(b).column("o_orderkey").to_pylist()]
    assert sorted(keys) == list(range(500))


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 50), min_size=1, max_size=30), st.sampled_from(["upsert", "delete"])),
        min_size=1,
        max_size=8,
    )
)
def test_any_sequence_of_appends_reads_back_as_its_concatenation(tmp_path_factory, appends) -> None:
    lh = Lakehouse.open(tmp_path_factory.mktemp("prop").as_uri())
    lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=3)
    now = [0.0]
    log = Log(lh.store, lh.table("ods.orders"), clock=lambda: now[0])
    expected: dict[int, list[tuple[int, str, int]]] = {0: [], 1: [], 2: []}
    for i, (keys, op) in enumerate(appends):
        now[0] = 1000.0 + i  # append i is stamped 1000 + i seconds
        log.append(orders(keys), op)
        for k, b in zip(keys, bucket_ids(pa.array(keys, pa.int64()), 3).to_pylist(), strict=True):
            expected[b].append((k, op, (1000 + i) * 1_000_000))
    for b in range(3):
        got = log.read(b)
        columns = [got.column(c).to_pylist() for c in ("o_orderkey", "_op")]
        stamps = got.column("_timestamp").cast(pa.int64()).to_pylist()
        assert list(zip(*columns, stamps, strict=True)) == expected[b]
        assert got.column("_offset").to_pylist() == list(range(len(expected[b])))
        # any range, whole or streamed, is the same slice of it
        n = len(expected[b])
        for start, end in ((n // 3, 2 * n // 3 + 1), (1, n), (max(0, n - 1), n + 5)):
            part = log.read(b, start, end)
            assert part.equals(got.slice(start, max(0, min(end, n) - start)))
            streamed = pa.Table.from_batches(list(log.read_batches(b, start, end)), schema=log.read_schema)
            assert streamed.equals(part)
    log.close()
    lh.close()


@pytest.mark.backends("local", "s3")
@pytest.mark.slow
def test_8_producer_processes_race_then_restart_and_replay_contiguous_and_exactly_once(
    store_spec, lakehouse: Lakehouse
) -> None:
    """8 processes append 100 batches each to one table at once, as producers with ids and sequences, then each
    restarts and sends its last 10 again: every record once, every bucket's offsets contiguous, no offset claimed
    twice, each replay recognised where it first landed."""
    url, options = store_spec
    lakehouse.create_table("ods.events", EVENTS, bucket_key="id", buckets=4)
    workers, batches, rows, replay = 8, 100, 4, 10
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(workers)
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            futures = [
                pool.submit(append_batches, url, options, "ods.events", w, batches, rows, barrier, replay)
                for w in range(workers)
            ]
            results = [f.result(timeout=900) for f in futures]
    log = lakehouse.log("ods.events")
    ends = log.end_offsets()
    assert sum(ends.values()) == workers * batches * rows
    seen: list[int] = []
    for b in range(4):
        got = log.read(b)
        assert got.column("_offset").to_pylist() == list(range(ends[b])), f"bucket {b} offsets not contiguous"
        seen += got.column("id").to_pylist()
    expected = [w * 10_000_000 + bt * 1000 + r for w in range(workers) for bt in range(batches) for r in range(rows)]
    assert Counter(seen) == Counter(expected), "a record is missing or duplicated"
    claimed = [
        (b, o) for worker in results for ranges in worker for b, (lo, hi) in ranges.items() for o in range(lo, hi + 1)
    ]
    assert len(claimed) == len(set(claimed)) == len(expected), "two appends claim the same offset"
