"""Tiering and union read on both backends: lake == log at every tiered offset, races, crashes, bad state."""

from __future__ import annotations

import datetime
import decimal
import json
import multiprocessing
import random
import sys
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import StringType

from lakehouse import Lakehouse
from lakehouse.errors import InvalidArgument, LakeStateError, LakestreamError, SchemaError, TieringConflict
from lakehouse.executor import LocalExecutor
from lakehouse.iceberg.offsets import COMMIT_USER_PROPERTY, OFFSETS_PROPERTY, tiering_snapshot
from lakehouse.log import Log
from lakehouse.tiering.round import TieringError, plan_splits
from tests.conftest import duckdb_connection
from tests.lakehouse._faults import ThenRun
from tests.lakehouse._tiering_workers import tier_once
from tests.support.crash import crash
from tests.support.orders_tables import (
    ORDERS,
    USER_COLS,
    data_files_in_store,
    lake_state,
    log_records,
    orders,
    referenced_files,
    replay,
    rows,
)
from tests.support.profiles import examples

# ---- layout and the log-table invariant ------------------------------------------------------------------


@pytest.mark.backends("local", "s3")
def test_log_table_lake_equals_log_at_every_tiered_offset(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.events", ORDERS, bucket_key="o_orderkey", buckets=4)
    log = lh.log("ods.events")
    assert lh.lake_offsets("ods.events") == {0: 0, 1: 0, 2: 0, 3: 0}
    assert lh.tier("ods.events").snapshot_id is None  # nothing to tier: no snapshot
    for round_ in range(3):
        for i in range(3):
            log.append(orders(range(round_ * 1000 + i * 300, round_ * 1000 + i * 300 + 300)))
        result = lh.tier("ods.events", max_split_rows=120)  # several splits per bucket
        assert result.splits > 4 and result.rows == 900
        offsets = lh.lake_offsets("ods.events")
        assert offsets == log.end_offsets() == result.offsets
        lake = lh.lake_read("ods.events")
        ours = rows(lake, [*USER_COLS, "__bucket", "__offset"])
        assert ours == log_records(lh, "ods.events", offsets)

    table = lh.lake_table("ods.events")
    spec = table.spec()
    assert [type(f.transform) for f in spec.fields] == [BucketTransform]
    assert spec.fields[0].transform.num_buckets == 4
    assert [f.name for f in table.schema().fields] == [*USER_COLS, "__bucket", "__offset", "__timestamp"]
    snap = table.current_snapshot()
    assert snap.summary[COMMIT_USER_PROPERTY] == "tiering"
    assert json.loads(snap.summary[OFFSETS_PROPERTY]) == {str(b): o for b, o in log.end_offsets().items()}
    for task in table.scan().plan_files():  # bucket partition == log bucket, rows ordered by offset
        f = lh.store.get(task.file.file_path.removeprefix(lh.store.url.rstrip("/") + "/")).data
        data = pq.read_table(pa.BufferReader(f))
        assert set(data.column("__bucket").to_pylist()) == {task.file.partition[0]}
        offs = data.column("__offset").to_pylist()
        assert offs == sorted(offs)


def test_keyless_table_partitions_by_bucket_column(lakehouse: Lakehouse) -> None:
    lakehouse.create_table("ods.clicks", ORDERS, buckets=3)
    log = lakehouse.log("ods.clicks")
    for i in range(6):
        log.append(orders(range(i * 10, i * 10 + 10)))
    lakehouse.tier("ods.clicks")
    table = lakehouse.lake_table("ods.clicks")
    assert [(f.name, type(f.transform)) for f in table.spec().fields] == [("__bucket", IdentityTransform)]
    assert rows(lakehouse.lake_read("ods.clicks"), [*USER_COLS, "__bucket", "__offset"]) == log_records(
        lakehouse, "ods.clicks", log.end_offsets()
    )


def test_user_partitions_come_before_the_bucket(tmp_path) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    lh.create_table("ods.o", ORDERS, primary_key=["o_orderkey"], buckets=2, partition_by=["month(o_orderdate)"])
    lh.log("ods.o").append(orders(range(500)), op="upsert")
    lh.tier("ods.o")
    lh.log("ods.o").append(orders(range(0, 500, 7), tag="w"), op="upsert")
    lh.log("ods.o").append(orders(range(1, 500, 11)), op="delete")
    lh.tier("ods.o")
    table = lh.lake_table("ods.o")
    assert [f.name for f in table.spec().fields] == ["o_orderdate_month", "o_orderkey_bucket"]
    assert lake_state(lh.lake_read("ods.o")) == replay(lh, "ods.o")
    # month partitions prune: a filter on one month reads only its files
    pruned = list(table.scan(row_filter="o_orderdate < '1970-02-01'").plan_files())
    assert {t.file.partition[0] for t in pruned} == {0}  # month 0 = 1970-01
    assert len(pruned) < len(list(table.scan().plan_files()))


def test_bad_partition_by_is_refused_before_anything_is_written(lakehouse: Lakehouse) -> None:
    from lakehouse.errors import SchemaError

    for bad, words in [
        ("week(o_orderdate)", "not understood"),
        ("day(o_comment)", "date or timestamp"),
        ("day(nope)", "no column"),
    ]:
        with pytest.raises(SchemaError, match=words):
            lakehouse.create_table("ods.bad", ORDERS, buckets=2, partition_by=[bad])
    assert lakehouse.list_tables() == [] and list(lakehouse.store.list("")) == []


# ---- primary-key tables --------------------------------------------------------------------------------


def test_primary_key_tiering_applies_upserts_and_deletes_copy_on_write(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4, write_mode="copy-on-write")
    log = lh.log("ods.orders")
    log.append(orders(range(2000)), op="upsert")
    lh.tier("ods.orders")
    before = {t.file.file_path: t.file.partition[0] for t in lh.lake_table("ods.orders").scan().plan_files()}

    # change only keys of bucket 1: the other buckets' files are neither read nor rewritten
    keys = pa.array(range(2000), pa.int64())
    in_b1 = [k for k, b in zip(range(2000), log.bucket_of(keys).to_pylist(), strict=True) if b == 1]
    log.append(orders(in_b1[:100], tag="new"), op="upsert")
    log.append(orders(in_b1[50:80]), op="delete")
    log.append(orders(range(5000, 5010), tag="ins"), op="upsert")  # inserts, all buckets
    log.append(orders(in_b1[60:70], tag="back"), op="upsert")  # deleted then re-inserted
    result = lh.tier("ods.orders")
    assert result.files_removed == 1
    after = {t.file.file_path: t.file.partition[0] for t in lh.lake_table("ods.orders").scan().plan_files()}
    assert {p for p, b in before.items() if b != 1} <= set(after)
    assert not ({p for p, b in before.items() if b == 1} & set(after))
    assert lake_state(lh.lake_read("ods.orders")) == replay(lh, "ods.orders")
    assert lh.lake_offsets("ods.orders") == log.end_offsets()
    snap = lh.lake_table("ods.orders").current_snapshot()
    assert snap.summary["operation"].value == "overwrite"


@pytest.mark.backends("local", "s3")
def test_primary_key_tiering_merge_on_read_writes_what_changed(lakehouse: Lakehouse) -> None:
    """The default for a primary-key table: a round adds the new versions and a position delete file per changed
    bucket marking the old ones; no data file is rewritten, and every reader applies the deletes."""
    from lakehouse.iceberg.datafiles import LakeContext
    from lakehouse.iceberg.position_deletes import deleted_positions

    lh = lakehouse
    assert lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4).write_mode == "merge-on-read"
    assert lh.lake_table("ods.orders").properties["write.update.mode"] == "merge-on-read"
    log = lh.log("ods.orders")
    log.append(orders(range(2000)), op="upsert")
    lh.tier("ods.orders")
    before = {t.file.file_path: t.file for t in lh.lake_table("ods.orders").scan().plan_files()}
    keys = pa.array(range(2000), pa.int64())
    in_b1 = [k for k, b in zip(range(2000), log.bucket_of(keys).to_pylist(), strict=True) if b == 1]
    log.append(orders(in_b1[:100], tag="new"), op="upsert")
    log.append(orders(in_b1[50:80]), op="delete")
    log.append(orders(in_b1[60:70], tag="back"), op="upsert")  # deleted then re-inserted
    result = lh.tier("ods.orders")
    assert result.files_removed == 0
    table = lh.lake_table("ods.orders")
    tasks = list(table.scan().plan_files())
    assert set(before) <= {t.file.file_path for t in tasks}  # every old file still there, unchanged
    [marks] = {d.file_path: d for t in tasks for d in t.delete_files}.values()
    assert marks.partition[0] == 1 and marks.record_count == 100  # the 100 old versions of bucket 1's keys
    ctx = LakeContext.of(lh.store, table)
    old_b1 = [t for t in tasks if t.file.file_path in before and t.file.partition[0] == 1]
    assert sum(len(deleted_positions(ctx, t.file, t.delete_files)) for t in old_b1) == 100
    state = replay(lh, "ods.orders")
    assert lake_state(lh.lake_read("ods.orders")) == state
    assert lake_state(table.scan().to_arrow()) == state
    if lh.url.startswith("file://"):  # DuckDB reads local files offline (no httpfs here)
        location = table.metadata_location.removeprefix("file://")
        duck = duckdb_connection().sql(f"SELECT * FROM iceberg_scan('{location}')").arrow()
        assert lake_state(duck if isinstance(duck, pa.Table) else duck.read_all()) == state
    assert table.current_snapshot().summary["operation"].value == "overwrite"


def test_a_merge_on_read_round_splits_a_bucket_by_file_across_cores(lakehouse: Lakehouse) -> None:
    """One bucket, four cores: the round runs as several tasks, each finding old versions in its share of the
    bucket's files; the new rows are written once, each old file gets at most one delete file, readers agree."""
    from lakehouse.tiering.round import tier

    lh = lakehouse
    lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=1)
    log = lh.log("ods.orders")
    for i in range(4):  # four files, disjoint key ranges
        log.append(orders(range(i * 100, i * 100 + 100)), op="upsert")
        lh.tier("ods.orders")
    old = {t.file.file_path for t in lh.lake_table("ods.orders").scan().plan_files()}
    log.append(orders(range(50, 350, 3), tag="new"), op="upsert")  # keys in three of the four files
    log.append(orders([7, 399, 1000]), op="delete")  # in the first and last file, and absent
    result = tier(lh.store, lh.catalog, lh.log("ods.orders"), executor=LocalExecutor(workers=4))
    assert result.splits == 1 and result.tasks == 4 and result.rows == 103
    table = lh.lake_table("ods.orders")
    tasks = list(table.scan().plan_files())
    [new] = [t for t in tasks if t.file.file_path not in old]  # the new rows, written once
    assert len(old) == 4 and new.file.record_count == 100 and not new.delete_files
    assert all(len(t.delete_files) == 1 for t in tasks if t.file.file_path in old)
    marked = {d.file_path: d.record_count for t in tasks for d in t.delete_files}
    assert len(marked) == 4 and sum(marked.values()) == 100 + 2  # a delete file per old file, one per old row
    state = replay(lh, "ods.orders")
    assert lake_state(lh.lake_read("ods.orders")) == state == lake_state(table.scan().to_arrow())
    assert lake_state(lh.union_read("ods.orders")) == state


def test_union_read_merges_the_log_tail_by_key(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4)
    log = lh.log("ods.orders")
    assert lh.union_read("ods.orders").num_rows == 0
    log.append(orders(range(100)), op="upsert")
    assert lake_state(lh.union_read("ods.orders")) == replay(lh, "ods.orders")  # log only
    lh.tier("ods.orders")
    log.append(orders(range(50, 150), tag="u"), op="upsert")
    log.append(orders(range(0, 10)), op="delete")
    union = lh.union_read("ods.orders")
    assert lake_state(union) == replay(lh, "ods.orders") and union.num_rows == 140
    assert lh.lake_read("ods.orders").num_rows == 100  # the lake alone is behind
    # projection and filter: a key whose new version no longer matches still hides its old version
    log.append(orders([20], tag="zzz"), op="upsert")
    got = lh.union_read("ods.orders", columns=["o_orderkey", "o_comment"], row_filter="o_comment < 'v-3'")
    expected = {k: v for k, v in replay(lh, "ods.orders").items() if v[3] < "v-3"}
    assert got.column_names == ["o_orderkey", "o_comment"]
    assert sorted(got.column("o_orderkey").to_pylist()) == sorted(expected)
    batches = list(lh.union_batches("ods.orders"))
    assert sum(b.num_rows for b in batches) == len(replay(lh, "ods.orders"))


@pytest.mark.parametrize(
    ("row_filter", "error", "message"),
    [
        ("o_orderkey = 1 and", InvalidArgument, r"cannot parse row_filter 'o_orderkey = 1 and' \(at character"),
        (5, InvalidArgument, "row_filter must be a string or a pyiceberg expression, not int"),
        ("O_ORDERKEY = 1", SchemaError, "Could not find field with name O_ORDERKEY.*the table has columns"),
        ("o_orderkey = 'x'", SchemaError, "Could not convert x into a long"),
        ("o_comment > 3", SchemaError, "Cannot convert LongLiteral into string"),
    ],
)
def test_a_bad_row_filter_is_refused_before_anything_is_read(
    lakehouse: Lakehouse, monkeypatch, row_filter, error, message
) -> None:
    """These were pyparsing's page-long ParseException, ValueError, TypeError and NotImplementedError, raised
    after the whole log tail had been read."""
    lh = lakehouse
    lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=2)
    lh.log("ods.orders").append(orders(range(10)), op="upsert")
    lh.tier("ods.orders")

    def no_read(*args, **kwargs):
        raise AssertionError("the log was read before the filter was checked")

    monkeypatch.setattr(Log, "read", no_read)
    for read in (lh.union_read, lh.lake_read, lambda *a, **k: list(lh.union_batches(*a, **k))):
        with pytest.raises(error, match=message):
            read("ods.orders", row_filter=row_filter)


def test_key_only_deletes_tier_and_union_read_in_a_table_with_required_columns(lakehouse: Lakehouse) -> None:
    """A key-only delete holds nulls in the NOT NULL columns outside the key: tiering and union reads must
    read its segment next to full ones, and the lake keeps its required columns."""
    lh = lakehouse
    schema = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", pa.string(), False)])
    lh.create_table("ods.required", schema, primary_key=["k"], buckets=2)
    log = lh.log("ods.required")
    log.append(pa.table({"k": list(range(10)), "v": [f"a{k}" for k in range(10)]}), "upsert")
    log.append(pa.table({"k": [2, 3]}), "delete")
    lh.tier("ods.required")
    log.append(pa.table({"k": [4]}), "delete")  # in the tail, after a tiered key-only delete
    expected = [(k, f"a{k}") for k in range(10) if k not in (2, 3, 4)]
    union = lh.union_read("ods.required").sort_by("k")
    assert list(zip(union.column("k").to_pylist(), union.column("v").to_pylist(), strict=True)) == expected
    lh.tier("ods.required")
    lake = lh.lake_read("ods.required").sort_by("k")
    assert list(zip(lake.column("k").to_pylist(), lake.column("v").to_pylist(), strict=True)) == expected
    assert lh.lake_table("ods.required").schema().find_field("v").required


# a value and a null of every column type a table accepts
ALL_TYPES = {
    "i8": (pa.int8(), -5),
    "u8": (pa.uint8(), 255),
    "u16": (pa.uint16(), 65535),
    "i32": (pa.int32(), 2**31 - 1),
    "f16": (pa.float16(), None),
    "f32": (pa.float32(), 1.5),
    "b": (pa.bool_(), True),
    "s": (pa.string(), "x"),
    "ls": (pa.large_string(), "y"),
    "bin": (pa.binary(), b"\x00"),
    "lbin": (pa.large_binary(), b"\x01"),
    "fixed": (pa.binary(3), b"abc"),
    "d": (pa.date32(), datetime.date(2026, 1, 2)),
    "ts_s": (pa.timestamp("s"), datetime.datetime(2026, 1, 2, 3, 4, 5)),
    "ts_ms": (pa.timestamp("ms", tz="UTC"), datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)),
    "ts_us": (pa.timestamp("us"), datetime.datetime(2026, 1, 2, 3, 4, 5, 6)),
    "t": (pa.time64("us"), datetime.time(1, 2, 3, 4)),
    "dec": (pa.decimal128(38, 2), decimal.Decimal("123.45")),
    "dict": (pa.dictionary(pa.int32(), pa.string()), "a"),
    "lst": (pa.list_(pa.int64()), [1, 2]),
    "llst": (pa.large_list(pa.string()), ["a"]),
    "st": (pa.struct([("a", pa.int32()), ("b", pa.string())]), {"a": 1, "b": "z"}),
    "mp": (pa.map_(pa.string(), pa.int64()), [("k", 1)]),
    "uuid": (pa.uuid(), uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7").bytes),  # tiering failed on it
}


def test_every_accepted_column_type_tiers_and_union_reads_as_logged(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    schema = pa.schema([("k", pa.int64()), *[(n, t) for n, (t, _) in ALL_TYPES.items()]])
    lh.create_table("ods.types", schema, primary_key=["k"], buckets=2)
    log = lh.log("ods.types")
    log.append(pa.table({"k": [1, 2], **{n: pa.array([v, None], t) for n, (t, v) in ALL_TYPES.items()}}), "upsert")
    logged = sorted((r for b in range(2) for r in log.read(b).select(schema.names).to_pylist()), key=lambda r: r["k"])
    lh.tier("ods.types")
    assert lh.lake_read("ods.types").select(schema.names).sort_by("k").to_pylist() == logged
    log.append(pa.table({"k": [2]}), "delete")
    assert lh.union_read("ods.types").select(schema.names).to_pylist() == logged[:1]


@pytest.mark.parametrize(
    ("column_type", "advice"),
    [
        (pa.timestamp("ns"), "use timestamp\\('us'\\)"),
        (pa.timestamp("us", tz="Asia/Shanghai"), "use timestamp\\('us', tz='UTC'\\) \\(Iceberg stores instants in UTC"),
        (pa.uint32(), "use int64"),
        (pa.uint64(), "use int64 or decimal128\\(20, 0\\)"),
        (pa.list_(pa.time32("s")), "use time64\\('us'\\)"),
        (pa.decimal256(40, 2), "use a decimal of precision 38 or less"),
        # every tiering round failed to write these (issue 22)
        (pa.decimal128(5, 7), "use a decimal whose scale is from 0 to its precision \\(decimal128\\(7, 7\\) holds"),
        (pa.list_(pa.decimal128(5, 7)), "use a decimal whose scale is from 0 to its precision"),
        (pa.struct([]), "use a struct with at least one field"),
        (pa.binary(0), "use fixed_size_binary of at least 1 byte, or binary"),
        # pyiceberg wrote a lake table it could not load again, and the definition stayed behind (issue 22)
        (pa.decimal128(5, -2), "use a decimal whose scale is from 0 to its precision \\(decimal128\\(7, 0\\) holds"),
    ],
)
def test_a_type_the_lake_cannot_store_is_refused_at_create(lakehouse: Lakehouse, column_type, advice) -> None:
    """Refused before anything is written: no log definition without its lake table, no rows that tiering
    could never write (pyiceberg would map uint32 to int: values above 2**31 - 1 would fail every round)."""
    schema = pa.schema([("k", pa.int64()), ("c", column_type)])
    with pytest.raises(SchemaError, match=f"ods.bad: column 'c' of type .* cannot be stored in the lake; {advice}"):
        lakehouse.create_table("ods.bad", schema, primary_key=["k"], buckets=1)
    assert [str(t) for t in lakehouse.list_tables()] == []
    assert list(lakehouse.store.list("ods/")) == []


def test_union_read_of_a_log_table_is_lake_plus_tail(lakehouse: Lakehouse) -> None:
    lakehouse.create_table("ods.ev", ORDERS, bucket_key="o_orderkey", buckets=2)
    log = lakehouse.log("ods.ev")
    log.append(orders(range(10)))
    lakehouse.tier("ods.ev")
    log.append(orders(range(5)))  # duplicates are separate records in a log table
    union = lakehouse.union_read("ods.ev")
    assert union.num_rows == 15
    assert rows(union, [*USER_COLS, "__bucket", "__offset"]) == log_records(lakehouse, "ods.ev", log.end_offsets())


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("upsert"), st.lists(st.integers(0, 60), min_size=1, max_size=25)),
            st.tuples(st.just("delete"), st.lists(st.integers(0, 60), min_size=1, max_size=10)),
            st.tuples(st.just("tier"), st.integers(1, 40)),
        ),
        max_size=12,
    )
)
def test_union_read_equals_replaying_the_log(tmp_path_factory, ops) -> None:
    lh = Lakehouse.open(tmp_path_factory.mktemp("prop").as_uri())
    lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=3)
    log = lh.log("ods.orders")
    for i, (op, arg) in enumerate(ops):
        if op == "tier":
            lh.tier("ods.orders", max_split_rows=arg)
            assert lake_state(lh.lake_read("ods.orders")) == replay(lh, "ods.orders", lh.lake_offsets("ods.orders"))
        else:
            log.append(orders(arg, tag=f"r{i}"), op=op)
        assert lake_state(lh.union_read("ods.orders")) == replay(lh, "ods.orders")
    lh.close()


# ---- other engines -------------------------------------------------------------------------------------


def test_duckdb_reads_the_tiered_tables(tmp_path) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4)
    lh.create_table("ods.events", ORDERS, bucket_key="o_orderkey", buckets=4)
    for i in range(3):
        lh.log("ods.orders").append(orders(range(i * 100, i * 100 + 300), tag=f"r{i}"), op="upsert")
        lh.log("ods.orders").append(orders(range(i * 100, i * 100 + 20)), op="delete")
        lh.log("ods.events").append(orders(range(i * 100, i * 100 + 300)))
        lh.tier("ods.orders")
        lh.tier("ods.events")
    con = duckdb_connection()
    for name in ("ods.orders", "ods.events"):
        location = lh.catalog.table_location(name).removeprefix("file://")
        theirs = con.execute(
            f"SELECT o_orderkey, o_custkey, o_orderdate, o_comment, __bucket, __offset FROM iceberg_scan('{location}')"
        ).fetchall()
        ours = rows(lh.lake_read(name), [*USER_COLS, "__bucket", "__offset"])
        assert sorted(theirs) == ours and ours
    assert lake_state(lh.lake_read("ods.orders")) == replay(lh, "ods.orders")


def test_columns_named_in_any_language_tier_and_duckdb_reads_them(tmp_path) -> None:
    """Column names with CJK letters, spaces, '/' and '.' work as keys and partitions. Partition field names
    become valid Avro names: manifests are Avro, and DuckDB refuses (and aborted on) other names."""
    lh = Lakehouse.open(tmp_path.as_uri())
    schema = pa.schema(
        [("订单号", pa.int64()), ("下单 日期", pa.date32()), ("备注/comment", pa.string()), ("a.b", pa.int32())]
    )
    lh.create_table("ods.cn", schema, primary_key=["订单号"], buckets=2, partition_by=["month(下单 日期)"])
    days = pa.array([datetime.date(2026, m, 1) for m in (1, 2, 3)], pa.date32())
    log = lh.log("ods.cn")
    log.append(pa.table({"订单号": [1, 2, 3], "下单 日期": days, "备注/comment": ["甲", "乙", "丙"], "a.b": [1, 2, 3]}))
    log.append(pa.table({"订单号": [2]}), "delete")
    lh.tier("ods.cn")
    fields = [f.name for f in lh.lake_table("ods.cn").spec().fields]
    assert fields == ["_x4E0B_x5355_x20_x65E5_x671F_month", "_x8BA2_x5355_x53F7_bucket"]
    expected = [(1, datetime.date(2026, 1, 1), "甲", 1), (3, datetime.date(2026, 3, 1), "丙", 3)]
    assert sorted(tuple(r.values()) for r in lh.lake_read("ods.cn").select(schema.names).to_pylist()) == expected
    union = lh.union_read("ods.cn", row_filter='"订单号" = 3').select(schema.names).to_pylist()
    assert [tuple(r.values()) for r in union] == expected[1:]
    location = lh.catalog.table_location("ods.cn").removeprefix("file://")
    theirs = duckdb_connection().execute(
        f'SELECT "订单号", "下单 日期", "备注/comment", "a.b" FROM iceberg_scan(\'{location}\')'
    )
    assert sorted(theirs.fetchall()) == expected


# ---- races and crashes ---------------------------------------------------------------------------------


@pytest.mark.backends("local", "s3")
def test_a_tiering_run_overtaken_by_another_deletes_its_files_and_commits_nothing(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.events", ORDERS, bucket_key="o_orderkey", buckets=2)
    lh.log("ods.events").append(orders(range(100)))
    winner = {}
    racing = ThenRun(lambda: winner.setdefault("result", lh.tier("ods.events")))
    from lakehouse.tiering.round import tier

    with pytest.raises(TieringConflict, match="another tiering run .* planned on the table before its first tiering"):
        tier(lh.store, lh.catalog, lh.log("ods.events"), executor=racing)
    table = lh.lake_table("ods.events")
    assert len(table.metadata.snapshots) == 1 and table.current_snapshot().snapshot_id == winner["result"].snapshot_id
    assert lh.lake_read("ods.events").num_rows == 100
    assert data_files_in_store(lh, "ods.events") == referenced_files(table)  # the loser's files are gone


@pytest.mark.backends("local", "s3")
@pytest.mark.slow
def test_concurrent_tiering_processes_commit_every_offset_once(store_spec) -> None:
    url, options = store_spec
    lh = Lakehouse.open(url, **options)
    lh.create_table("ods.events", ORDERS, bucket_key="o_orderkey", buckets=3)
    log = lh.log("ods.events")
    ctx = multiprocessing.get_context("spawn")
    for round_ in range(2):
        for i in range(4):
            log.append(orders(range(round_ * 1000 + i * 100, round_ * 1000 + i * 100 + 100)))
        with ctx.Manager() as manager, ProcessPoolExecutor(4, mp_context=ctx) as pool:
            barrier = manager.Barrier(4)
            outcomes = list(pool.map(tier_once, *zip(*[(url, options, "ods.events", barrier)] * 4, strict=True)))
        winners = [o for o in outcomes if "result" in o and o["result"]["snapshot_id"]]
        assert winners, outcomes
        assert all(o.get("error") in (None, "TieringConflict") for o in outcomes), outcomes
        assert lh.lake_offsets("ods.events") == log.end_offsets()
        lake = lh.lake_read("ods.events")
        assert rows(lake, [*USER_COLS, "__bucket", "__offset"]) == log_records(lh, "ods.events", log.end_offsets())
        counts = Counter(zip(lake["__bucket"].to_pylist(), lake["__offset"].to_pylist(), strict=True))
        assert not [k for k, n in counts.items() if n > 1]
    lh.close()


@pytest.mark.backends("s3")
@pytest.mark.slow
def test_concurrent_tiering_of_a_primary_key_table_loses_with_a_tiering_conflict(store_spec) -> None:
    """On S3 the loser of two rounds that rewrite the same files lost the pointer CAS after the fence check;
    pyiceberg's retry then found its rewritten files deleted and raised its raw ValidationException ('Data
    files were concurrently deleted'), which the CLI did not catch."""
    url, options = store_spec
    lh = Lakehouse.open(url, **options)
    lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=2)
    log = lh.log("ods.orders")
    log.append(orders(range(200)), op="upsert")
    lh.tier("ods.orders")
    ctx = multiprocessing.get_context("spawn")
    errors = Counter()
    for round_ in range(3):
        log.append(orders(range(0, 200, 2), tag=f"u{round_}"), op="upsert")  # every file gets rewritten
        with ctx.Manager() as manager, ProcessPoolExecutor(4, mp_context=ctx) as pool:
            barrier = manager.Barrier(4)
            outcomes = list(pool.map(tier_once, *zip(*[(url, options, "ods.orders", barrier)] * 4, strict=True)))
        errors.update(o.get("error") for o in outcomes if "error" in o)
        assert all(o.get("error") in (None, "TieringConflict") for o in outcomes), outcomes
        assert all("planned on -1" not in o.get("message", "") for o in outcomes), outcomes
        assert lh.lake_offsets("ods.orders") == log.end_offsets()
        assert lake_state(lh.lake_read("ods.orders")) == replay(lh, "ods.orders")
    assert errors["TieringConflict"] > 0, errors  # the race happened
    lh.close()


@pytest.mark.backends("local", "s3")
@pytest.mark.slow
@pytest.mark.parametrize("point", ["mid-write", "tasks-done", "metadata-written", "pointer-swapped"])
@pytest.mark.parametrize("kind", ["log", "pk"])
def test_kill_9_then_rerun_loses_and_doubles_nothing(store_spec, point: str, kind: str) -> None:
    url, options = store_spec
    lh = Lakehouse.open(url, **options)
    name = "ods.t"
    pk = {"primary_key": ["o_orderkey"]} if kind == "pk" else {"bucket_key": "o_orderkey"}
    # pk: merge-on-read (the default), so the killed round writes position delete files too
    assert lh.create_table(name, ORDERS, buckets=3, **pk).merge_on_read == (kind == "pk")
    log = lh.log(name)
    log.append(orders(range(300)), op="upsert" if kind == "pk" else "insert")
    lh.tier(name)
    log.append(orders(range(200, 500), tag="u"), op="upsert" if kind == "pk" else "insert")
    if kind == "pk":
        log.append(orders(range(0, 300, 3)), op="delete")
    before = lh.lake_offsets(name)
    crash("tests.lakehouse._tiering_workers", url, json.dumps(options), name, point, timeout=120)
    committed = lh.lake_offsets(name) != before
    assert committed == (point == "pointer-swapped")
    result = lh.tier(name)  # the rerun
    assert result.tiered != committed
    assert lh.lake_offsets(name) == log.end_offsets()
    lake = lh.lake_read(name)
    if kind == "pk":
        assert lake_state(lake) == replay(lh, name)
    else:
        assert rows(lake, [*USER_COLS, "__bucket", "__offset"]) == log_records(lh, name, log.end_offsets())
    # files of the dead attempt are unreferenced: orphans for maintenance, never part of the table
    table = lh.lake_table(name)
    orphans = data_files_in_store(lh, name) - referenced_files(table)
    assert (len(orphans) > 0) == (point in ("mid-write", "tasks-done", "metadata-written"))
    lh.close()


@pytest.mark.backends("local", "s3")
def test_a_failing_task_commits_nothing_and_leaves_no_files(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.events", ORDERS, bucket_key="o_orderkey", buckets=2, log_format="segments")
    log = lh.log("ods.events")
    log.append(orders(range(100)))
    lh.tier("ods.events")
    log.append(orders(range(100, 200)))
    key = [i.key for i in lh.store.list("ods/events/log/00001/")][-1]
    obj = lh.store.get(key)
    lh.store.put(key, obj.data[:-7], metadata=obj.metadata)  # truncated segment
    files = data_files_in_store(lh, "ods.events")
    with pytest.raises(TieringError, match="CorruptSegmentError"):
        lh.tier("ods.events", workers=2)
    assert data_files_in_store(lh, "ods.events") == files
    assert lh.lake_offsets("ods.events")[1] == lh.lake_offsets("ods.events")[1]
    assert len(lh.lake_table("ods.events").metadata.snapshots) == 1


# ---- bad state -----------------------------------------------------------------------------------------


def test_bad_lake_state_gets_a_clear_error(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.a", ORDERS, bucket_key="o_orderkey", buckets=2)
    lh.log("ods.a").append(orders(range(10)))
    # written by another tool: a snapshot without offsets
    table = lh.lake_table("ods.a")
    with table.transaction() as txn:
        with txn.update_snapshot(snapshot_properties={"written-by": "another tool"}).fast_append():
            pass
    with pytest.raises(LakeStateError, match="none records lakestream.offsets"):
        lh.tier("ods.a")
    with pytest.raises(LakeStateError, match="another tool"):
        lh.union_read("ods.a")

    # offsets ahead of the log
    lh.create_table("ods.b", ORDERS, bucket_key="o_orderkey", buckets=2)
    lh.log("ods.b").append(orders(range(10)))
    lh.tier("ods.b")
    table = lh.lake_table("ods.b")
    with table.transaction() as txn:
        with txn.update_snapshot(
            snapshot_properties={
                OFFSETS_PROPERTY: json.dumps({"0": 999, "1": 0}),
                COMMIT_USER_PROPERTY: "tiering",
            }
        ).fast_append():
            pass
    with pytest.raises(LakeStateError, match="bucket 0: lake 999 > log"):
        lh.tier("ods.b")

    # malformed offsets
    with table.transaction() as txn:
        with txn.update_snapshot(
            snapshot_properties={OFFSETS_PROPERTY: "{oops", COMMIT_USER_PROPERTY: "tiering"}
        ).fast_append():
            pass
    with pytest.raises(LakeStateError, match="no valid lakestream.offsets"):
        lh.lake_offsets("ods.b")

    # a log table without a lake table
    lh.create_table("ods.c", ORDERS, bucket_key="o_orderkey", buckets=2)
    lh.catalog.drop_table("ods.c")
    with pytest.raises(LakeStateError, match="no lake table"):
        lh.tier("ods.c")
    lh.ensure_lake_table(lh.table("ods.c"))  # the advice works
    assert lh.tier("ods.c").snapshot_id is None

    with pytest.raises(SchemaError, match="unknown column"):
        lh.union_read("ods.c", columns=["nope"])


def test_a_lake_schema_changed_outside_lakestream_stops_writes_with_a_clear_error(lakehouse: Lakehouse) -> None:
    """After another engine added a column to the lake table, every tiering round, union read and compaction
    failed with "Field 'extra' does not exist in schema"."""
    lh = lakehouse
    lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=2)
    log = lh.log("ods.orders")
    log.append(orders(range(10)), op="upsert")
    lh.tier("ods.orders")
    with lh.lake_table("ods.orders").update_schema() as update:
        update.add_column("extra", StringType())
    log.append(orders(range(5, 15), tag="u"), op="upsert")
    blocked = (
        lambda: lh.tier("ods.orders"),
        lambda: lh.union_read("ods.orders"),
        lambda: lh.compact("ods.orders", min_input_files=2),
    )
    for action in blocked:
        with pytest.raises(LakeStateError, match="changed outside lakestream: column 'extra' added.*as schema 0"):
            action()
    assert lh.lake_read("ods.orders").num_rows == 10  # the lake alone still reads
    with lh.lake_table("ods.orders").update_schema() as update:
        update.delete_column("extra")
    assert lh.tier("ods.orders").rows == 10
    assert lake_state(lh.union_read("ods.orders")) == replay(lh, "ods.orders")
    # a partition field added (tiering failed with "list index out of range", and union reads took the last
    # partition field for the bucket)
    with lh.lake_table("ods.orders").update_spec() as update:
        update.add_identity("o_orderdate")
    for action in blocked:
        with pytest.raises(
            LakeStateError, match=r"partition spec \[o_orderkey_bucket: bucket\[2\], o_orderdate: identity\]"
        ):
            action()


def test_other_commits_do_not_confuse_the_offset_lookup(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.a", ORDERS, bucket_key="o_orderkey", buckets=2)
    lh.log("ods.a").append(orders(range(10)))
    lh.tier("ods.a")
    offsets = lh.lake_offsets("ods.a")
    table = lh.lake_table("ods.a")
    table.manage_snapshots().create_tag(table.current_snapshot().snapshot_id, "t1").commit()
    with table.transaction() as txn:  # a non-tiering commit on top (as compaction will make)
        with txn.update_snapshot(snapshot_properties={"note": "maintenance"}).fast_append():
            pass
    assert (
        tiering_snapshot(lh.lake_table("ods.a").metadata).snapshot_id
        != lh.lake_table("ods.a").current_snapshot().snapshot_id
    )
    assert lh.lake_offsets("ods.a") == offsets
    lh.log("ods.a").append(orders(range(10, 20)))
    assert lh.tier("ods.a").rows == 10


def test_plan_splits_caps_and_evens_out() -> None:
    splits = plan_splits({0: 5, 1: 0}, {0: 5, 1: 1001}, max_split_rows=300)
    assert [s.rows for s in splits] == [251, 250, 250, 250]
    assert sorted((s.start, s.end) for s in splits) == [(0, 250), (250, 500), (500, 750), (750, 1001)]
    assert plan_splits({0: 0}, {0: 1001}, max_split_rows=10, whole_buckets=True)[0].rows == 1001
    with pytest.raises(InvalidArgument, match="max_split_rows"):
        plan_splits({}, {0: 1}, max_split_rows=0)


def test_a_split_cap_of_zero_is_refused_not_read_as_the_default(lakehouse: Lakehouse) -> None:
    """``max_split_rows=0`` (``--max-split-rows 0``) tiered with the default cap, where -5 was refused."""
    lakehouse.create_table("ods.ev", ORDERS, bucket_key="o_orderkey", buckets=2)
    lakehouse.log("ods.ev").append(orders(range(10)))
    with pytest.raises(InvalidArgument, match="max_split_rows must be >= 1, got 0"):
        lakehouse.tier("ods.ev", max_split_rows=0)
    assert lakehouse.lake_offsets("ods.ev") == {0: 0, 1: 0}


# ---- Spark ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_spark_and_local_executors_build_identical_tables(tmp_path, spark) -> None:
    from lakehouse.spark import read_table

    lh = Lakehouse.open(tmp_path.as_uri())
    rng = random.Random(7)
    for name in ("ods.local", "ods.spark"):
        lh.create_table(name, ORDERS, primary_key=["o_orderkey"], buckets=4)
    for i in range(4):
        keys = rng.sample(range(3000), 800)
        dels = rng.sample(range(3000), 100)
        for name in ("ods.local", "ods.spark"):
            lh.log(name).append(orders(keys, tag=f"r{i}"), op="upsert")
            lh.log(name).append(orders(dels), op="delete")
        a = lh.tier("ods.local", max_split_rows=500)
        b = lh.tier("ods.spark", spark=spark, max_split_rows=500)
        assert (a.rows, a.files_added, a.files_removed) == (b.rows, b.files_added, b.files_removed)
        assert b.executor == "spark"
    cols = [*USER_COLS, "__bucket", "__offset"]  # __timestamp differs: the two logs were appended apart
    assert rows(lh.lake_read("ods.local"), cols) == rows(lh.lake_read("ods.spark"), cols)
    assert lake_state(lh.lake_read("ods.spark")) == replay(lh, "ods.spark")

    # a distributed union read: lake + tail, one task per bucket
    lh.log("ods.spark").append(orders(range(100), tag="tail"), op="upsert")
    df = read_table(spark, lh, "ods.spark", union=True)
    assert df.rdd.getNumPartitions() == 4
    got = pa.Table.from_pandas(df.toPandas(), preserve_index=False)
    assert lake_state(got.cast(pa.schema([got.schema.field(c) for c in got.column_names]))) == replay(lh, "ods.spark")
    lake_only = read_table(spark, lh, "ods.spark", union=False, columns=["o_orderkey"], row_filter="o_orderkey < 50")
    assert sorted(r.o_orderkey for r in lake_only.collect()) == sorted(
        pc.filter(
            lh.lake_read("ods.spark")["o_orderkey"], pc.less(lh.lake_read("ods.spark")["o_orderkey"], 50)
        ).to_pylist()
    )


def _column_chunks(lh: Lakehouse, name: str) -> dict[str, set]:
    """Column name -> {(compression, encodings)} over the lake table's current data files."""
    out: dict[str, set] = {}
    for task in lh.lake_table(name).scan().plan_files():
        meta = pq.ParquetFile(task.file.file_path.removeprefix("file://")).metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                col = meta.row_group(g).column(c)
                out.setdefault(col.path_in_schema, set()).add((col.compression, col.encodings))
    return out


def test_data_files_encodings_and_the_codec_property(tmp_path) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    # copy-on-write: the second round rewrites every file, so every file's codec is the new property's
    lh.create_table("ods.o", ORDERS, primary_key=["o_orderkey"], buckets=2, write_mode="copy-on-write")
    lh.log("ods.o").append(orders(range(5000)), op="upsert")
    lh.tier("ods.o")
    chunks = _column_chunks(lh, "ods.o")
    # distinct integers: delta encoding, without the codec (bit-packed differences leave it little to take);
    # repeating values: a dictionary; zstd (Iceberg's default) for every other column
    delta = {name for name, col in chunks.items() if any("DELTA_BINARY_PACKED" in e for _, e in col)}
    assert {"o_orderkey", "__offset"} <= delta
    assert all("RLE_DICTIONARY" in encodings for _, encodings in chunks["o_custkey"])
    assert {codec for name in delta for codec, _ in chunks[name]} == {"UNCOMPRESSED"}
    assert {codec for name, col in chunks.items() if name not in delta for codec, _ in col} == {"ZSTD"}

    with lh.lake_table("ods.o").transaction() as tx:
        tx.set_properties({"write.parquet.compression-codec": "snappy"})
    lh.log("ods.o").append(orders(range(0, 5000, 2), tag="new"), op="upsert")  # every file holds a changed key
    lh.tier("ods.o")
    chunks = _column_chunks(lh, "ods.o")
    assert {codec for name, col in chunks.items() if name not in delta for codec, _ in col} == {"SNAPPY"}
    with lh.lake_table("ods.o").transaction() as tx:
        tx.set_properties({"write.parquet.compression-codec": "uncompressed"})
    lh.log("ods.o").append(orders(range(0, 5000, 3), tag="newer"), op="upsert")
    lh.tier("ods.o")
    assert {codec for col in _column_chunks(lh, "ods.o").values() for codec, _ in col} == {"UNCOMPRESSED"}
    assert lake_state(lh.lake_read("ods.o")) == replay(lh, "ods.o")
    location = lh.catalog.table_location("ods.o").removeprefix("file://")
    got = duckdb_connection().execute(f"SELECT sum(o_orderkey), count(*) FROM iceberg_scan('{location}')")
    assert got.fetchone() == (sum(range(5000)), 5000)  # another engine reads the delta-encoded columns


def test_decimals_stored_as_integers_are_delta_encoded_and_read_back(tmp_path) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    schema = pa.schema(
        [("k", pa.int64()), ("p9", pa.decimal128(9, 2)), ("p18", pa.decimal128(18, 4)), ("p38", pa.decimal128(38, 2))]
    )
    lh.create_table("ods.d", schema, primary_key=["k"], buckets=1)
    cents = [(k * 7919) % 1_000_003 - 500_000 for k in range(3000)]  # distinct, negative too: not a dictionary
    rows = pa.table(
        {
            "k": pa.array(range(3000), pa.int64()),
            **{
                name: pa.array([None if k % 10 == 0 else decimal.Decimal(c).scaleb(-2) for k, c in enumerate(cents)], t)
                for name, t in (("p9", schema.field("p9").type), ("p18", schema.field("p18").type))
            },
            "p38": pa.array([decimal.Decimal(c).scaleb(-2) for c in cents], pa.decimal128(38, 2)),
        }
    )
    lh.log("ods.d").append(rows, op="upsert")
    lh.tier("ods.d")
    chunks = _column_chunks(lh, "ods.d")
    # precision <= 18: an integer in the file, delta-encoded; wider: fixed-length bytes, which delta cannot take
    assert all("DELTA_BINARY_PACKED" in encodings for c in ("p9", "p18") for _, encodings in chunks[c])
    assert not any("DELTA_BINARY_PACKED" in encodings for _, encodings in chunks["p38"])
    assert lh.lake_read("ods.d").select(schema.names).sort_by("k").to_pylist() == rows.to_pylist()
    location = lh.catalog.table_location("ods.d").removeprefix("file://")
    got = duckdb_connection().execute(f"SELECT sum(p9), sum(p18), min(p18), count(p9) FROM iceberg_scan('{location}')")
    expected = (pc.sum(rows["p9"]).as_py(), pc.sum(rows["p18"]).as_py(), pc.min(rows["p18"]).as_py(), 2700)
    assert got.fetchone() == expected  # another engine reads the delta-encoded decimals


def _worker_origin(_: int) -> str | None:
    """The module the Spark Python worker's process started as (its daemon's, which it forked from)."""
    return getattr(getattr(sys.modules["__main__"], "__spec__", None), "name", None)


@pytest.mark.slow
def test_spark_workers_fork_from_the_preloading_daemon(spark) -> None:
    from lakehouse.executor import SparkExecutor

    origins = SparkExecutor(spark).map(_worker_origin, list(range(4)))
    assert origins == ["lakehouse.executor.spark_daemon"] * 4


def test_composite_primary_key(tmp_path) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    schema = pa.schema([("region", pa.string()), ("id", pa.int64()), ("v", pa.int64())])
    lh.create_table("ods.c", schema, primary_key=["region", "id"], bucket_key="id", buckets=2)
    log = lh.log("ods.c")

    def batch(region, ids, v):
        return pa.table({"region": [region] * len(ids), "id": pa.array(ids, pa.int64()), "v": [v] * len(ids)})

    log.append(batch("eu", range(20), 1), op="upsert")
    log.append(batch("us", range(20), 1), op="upsert")
    lh.tier("ods.c")
    log.append(batch("eu", range(5), 2), op="upsert")  # same ids, other region: untouched
    log.append(batch("us", range(3), 0), op="delete")
    expected = {("eu", i): (2 if i < 5 else 1) for i in range(20)} | {("us", i): 1 for i in range(3, 20)}
    for read in (lh.union_read, lambda n: (lh.tier(n), lh.lake_read(n))[1]):
        got = read("ods.c")
        assert {(r["region"], r["id"]): r["v"] for r in got.to_pylist()} == expected and got.num_rows == 37


@pytest.mark.parametrize(
    "keys, rows, expected",
    [
        (
            {"k": pa.array([5, -3, 9], pa.int64())},
            {"k": pa.array([9, 4, -3, 10, -9], pa.int64())},
            [True, False, True, False, False],
        ),
        ({"k": pa.array([], pa.int64())}, {"k": pa.array([1], pa.int64())}, [False]),
        ({"k": pa.array(["a", "b"])}, {"k": pa.array(["b", "c", None], pa.large_string())}, [True, False, False]),
        (
            {"k": pa.array(["a", "b"]), "j": pa.array([1, 2])},
            {"k": pa.array(["a", "a", "b"]), "j": pa.array([1, 2, 2])},
            [True, False, True],
        ),
    ],
)
def test_key_set_membership(keys, rows, expected) -> None:
    from lakehouse.merge.keyed_rows import KeySet

    pk = tuple(keys)
    assert KeySet(pa.table(keys), pk).hits(pa.table(rows)).to_pylist() == expected
    assert KeySet(pa.table(keys), pk).hits(pa.table(rows).to_batches()[0]).to_pylist() == expected


def test_large_data_files_go_up_in_multipart_parts_on_s3(seaweedfs) -> None:
    lh = Lakehouse.open(f"s3://{seaweedfs.bucket}/big-{random.randrange(1 << 30)}", **seaweedfs.store_options())
    lh.create_table("ods.big", pa.schema([("id", pa.int64()), ("blob", pa.binary())]), bucket_key="id", buckets=1)
    rng = random.Random(3)
    blobs = [rng.randbytes(2048) for _ in range(8000)]  # ~16 MiB, incompressible
    lh.log("ods.big").append(pa.table({"id": pa.array(range(8000), pa.int64()), "blob": blobs}))
    result = lh.tier("ods.big")
    assert result.files_added == 1 and result.bytes_written > 15 * 2**20
    data_file = next(iter(lh.lake_table("ods.big").scan().plan_files())).file
    etag = lh.store.head(data_file.file_path.removeprefix(lh.store.url.rstrip("/") + "/")).etag
    assert "-" in etag.strip('"'), f"{etag}: expected a multipart ETag (<md5>-<parts>)"
    assert lh.lake_read("ods.big").column("blob").to_pylist() == blobs
    lh.close()


@pytest.mark.parametrize("fault", ["corrupt", "missing", "foreign"])
def test_a_damaged_position_delete_file_fails_reads_naming_it(tmp_path, fault: str) -> None:
    """Reads never skip deletes they cannot read: a position delete file that is corrupt, gone, or deletes
    positions its data file does not have (written for another file) fails union and lake reads, lookups and
    the checks, each naming it."""
    from quality.reconcile import reconcile

    lh = Lakehouse.open(tmp_path.as_uri())
    lh.create_table("ods.o", ORDERS, primary_key=["o_orderkey"], buckets=1)
    log = lh.log("ods.o")
    log.append(orders(range(20)), op="upsert")
    lh.tier("ods.o")
    log.append(orders([3, 4], tag="new"), op="upsert")
    lh.tier("ods.o")
    [marks] = {d.file_path: d for t in lh.lake_table("ods.o").scan().plan_files() for d in t.delete_files}.values()
    local = marks.file_path.removeprefix("file://")
    if fault == "corrupt":
        with open(local, "r+b") as f:
            f.write(b"garbage!")  # same size, broken magic
    elif fault == "foreign":
        rows = pq.read_table(local)
        pq.write_table(rows.set_column(1, "pos", pa.array([5, 10**6], pa.int64())), local)
    else:
        Path(local).unlink()
    name = Path(local).name
    for read in (
        lambda: lh.union_read("ods.o"),
        lambda: lh.lake_read("ods.o"),
        lambda: lh.lookup("ods.o", pa.table({"o_orderkey": pa.array([3], pa.int64())}), as_of=log.end_offsets()),
    ):
        with pytest.raises((LakestreamError, OSError), match=name):
            read()
    result = reconcile(lh, "ods.o", full=True)
    assert not result.ok and name in " ".join(str(v) for v in result.violations) + (result.error or "")
