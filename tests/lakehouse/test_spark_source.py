"""``spark.read.format("lakestream")`` (issue 24): Spark reads equal Python reads on both backends (log and
primary-key tables; lake + tail; as of offsets behind a lake that is ahead; lake only), one input partition per
bucket or, with maxPartitionBytes, per file, projection and filter pushdown, clear errors, credentials kept out
of plans and reprs, DuckDB agreeing on the lake part. Reader-level tests run the source's driver and worker code
in this process (no Spark)."""

from __future__ import annotations

import contextlib
import io
import pickle
import random
import re

import pyarrow as pa
import pytest
from pyiceberg import expressions as ex
from pyspark.sql.datasource import DataSourceReader, GreaterThan, In, IsNull, Not, StringEndsWith

from lakehouse import Lakehouse
from lakehouse.errors import InvalidArgument
from lakehouse.spark import filter_text, read_table
from lakehouse.spark.source import parse_offsets, register, source_class
from tests.conftest import duckdb_connection
from tests.support.keyed_tables import BUCKETS, NAME, SCHEMA, batch
from tests.support.spark_reads import lakestream

COMPARED = ["k", "v", "n", "__bucket", "__offset"]


def build(lh: Lakehouse, pk: bool) -> dict[int, int]:
    """Two tiered rounds and an untiered tail; returns the log's end offsets after round 1 (the lake is
    ahead of them: an as-of read there time-travels)."""
    if pk:
        lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=BUCKETS)
    else:
        lh.create_table(NAME, SCHEMA, bucket_key="k", buckets=BUCKETS)
    log, rng, op = lh.log(NAME), random.Random(5), "upsert" if pk else "insert"
    log.append(batch(rng.sample(range(200), 120), "r0"), op=op)
    lh.tier(NAME)
    log.append(batch(rng.sample(range(200), 60), "r1"), op=op)
    middle = log.end_offsets()
    log.append(batch(rng.sample(range(200), 30), "r1b"), op=op)
    if pk:
        log.append(batch(rng.sample(range(200), 20), "r1d"), op="delete")
    lh.tier(NAME)
    log.append(batch(rng.sample(range(200), 40), "tail"), op=op)
    if pk:
        log.append(batch(rng.sample(range(200), 10), "tail-d"), op="delete")
    return middle


def rows(table: pa.Table, columns=COMPARED) -> list[tuple]:
    data = table.select(columns).to_pylist()
    return sorted(tuple(r[c] for c in columns) for r in data)


def spark_rows(df, columns=COMPARED) -> list[tuple]:
    return rows(df.toArrow(), columns)


# ---- Spark == Python, both backends ----------------------------------------------------------------------


@pytest.mark.backends("local", "s3")
@pytest.mark.slow
@pytest.mark.parametrize("pk", [True, False], ids=["pk", "log"])
def test_spark_reads_equal_python_reads(lakehouse, spark, pk) -> None:
    lh = lakehouse
    middle = build(lh, pk)
    assert lh.lake_offsets(NAME) != lh.log(NAME).end_offsets()  # a tail to merge

    df = lakestream(spark, lh).load(NAME)
    assert df.rdd.getNumPartitions() == BUCKETS
    assert df.columns == [*SCHEMA.names, "__bucket", "__offset", "__timestamp"]
    got = df.toArrow()
    want = lh.union_read(NAME)
    assert rows(got) == rows(want) and got.num_rows == want.num_rows
    ts = ["k", "__timestamp"]
    assert rows(got.cast(pa.schema([got.schema.field(c) for c in got.column_names])), ts) == rows(want, ts)

    as_of = ",".join(f"{b}:{o}" for b, o in middle.items())  # the lake is ahead: time travel + log
    assert any(lh.lake_offsets(NAME)[b] > o for b, o in middle.items())
    assert spark_rows(lakestream(spark, lh, as_of=as_of).load(NAME)) == rows(lh.union_read(NAME, as_of=middle))
    assert spark_rows(read_table(spark, lh, NAME, as_of=middle)) == rows(lh.union_read(NAME, as_of=middle))

    assert spark_rows(lakestream(spark, lh, lake_only="true").load(NAME)) == rows(lh.lake_read(NAME))

    projected = lakestream(spark, lh, columns="k,v", filter="k < 100 and n != 3").load(NAME)
    assert projected.columns == ["k", "v"]
    assert spark_rows(projected, ["k", "v"]) == rows(lh.union_read(NAME, ["k", "v"], "k < 100 and n != 3"), ["k", "v"])

    # split by file: a partition per lake file (the first of each bucket also yields the tail), same rows
    files = lh.lake_table(NAME).scan().plan_files()
    per_bucket = {b: sum(1 for t in files if t.file.partition[0] == b) for b in range(BUCKETS)}
    assert max(per_bucket.values()) > 1  # several files a bucket (and, for pk, their position deletes)
    split = lakestream(spark, lh, maxPartitionBytes="1").load(NAME)
    assert split.rdd.getNumPartitions() == sum(max(1, n) for n in per_bucket.values())
    assert spark_rows(split) == rows(want) and split.count() == want.num_rows
    assert spark_rows(lakestream(spark, lh, maxPartitionBytes="1", as_of=as_of).load(NAME)) == rows(
        lh.union_read(NAME, as_of=middle)
    )
    with pytest.raises(Exception, match="option maxpartitionbytes is a number of bytes >= 1, got '0'"):
        lakestream(spark, lh, maxPartitionBytes="0").load(NAME).collect()

    # the wrapper: the same read path
    wrapped = read_table(spark, lh, NAME, union=True, columns=["k", "n"], row_filter=ex.GreaterThanOrEqual("k", 50))
    assert spark_rows(wrapped, ["k", "n"]) == rows(lh.union_read(NAME, ["k", "n"], "k >= 50"), ["k", "n"])


@pytest.mark.slow
def test_spark_pushes_filters_down_when_enabled(tmp_path, spark) -> None:
    """With spark.sql.python.filterPushdown.enabled, Spark's filters reach the lake scan and the tails; the
    ones that do not translate stay with Spark. (One DataFrame per query: PySpark 4.2.0 keeps a pushed-down
    read on the relation, so an unfiltered action on the same DataFrame would reuse it; see the module doc.)"""
    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = lakestream(spark, lh).load(NAME).filter("k < 60 and v like '%a%' and n in (1, 2, 3)")
        optimized = df._jdf.queryExecution().optimizedPlan().toString()
        # the translatable filters left the plan (matched as expressions: attribute ids like #600 vary)
        assert "Contains" in optimized and not re.search(r"<\s*60\b", optimized), optimized
        assert not re.search(r"IN \(1,\s*2,\s*3\)", optimized.upper()), optimized
        want = lh.union_read(NAME, row_filter="k < 60 and n in (1, 2, 3)")
        assert spark_rows(df) == rows(want.filter(pa.compute.match_substring(want["v"], "a"))) and want.num_rows
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
        register(spark)  # the source without pushdown again


# ---- credentials -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_credentials_stay_out_of_plans_reprs_and_logs(seaweedfs, spark, request, tmp_path, caplog) -> None:
    from tests.support.stores import new_store_spec

    url, options = new_store_spec("s3", tmp_path, request)
    secret = options["secret_access_key"]
    assert len(secret) >= 8
    lh = Lakehouse.open(url, **options)
    build(lh, pk=True)
    df = lakestream(spark, lh).load(NAME).filter("k > 10")
    shown = [df._jdf.queryExecution().toString()]
    for mode in ("extended", "formatted", "cost"):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            df.explain(mode=mode)
        shown.append(out.getvalue())
    assert "lakestream" in shown[-1]
    assert df.count() == lh.union_read(NAME, row_filter="k > 10").num_rows  # the executors got the secret
    cls = source_class({url: options})
    source = cls({"path": NAME, "warehouse": url})
    reader = source.reader(source.schema())
    parts = reader.partitions()
    shown += [repr(source), repr(reader), *map(repr, parts), repr(reader.plan), str(source.read_options)]
    shown += [r.getMessage() for r in caplog.records]
    assert not [s for s in shown if secret in s]
    assert "****" not in repr(reader) and lh.url in repr(source)


# ---- the reader in this process --------------------------------------------------------------------------


def _reader(lh: Lakehouse, pushdown: bool = False, **options):
    cls = source_class({lh.url: lh.store.connection_options()}, pushdown=pushdown)
    source = cls({"path": NAME, "warehouse": lh.url, **options})
    return source, source.reader(source.schema())


def _read_all(reader, parts) -> pa.Table:
    back = pickle.loads(pickle.dumps(reader))  # what an executor gets
    batches = [b for p in parts for b in back.read(pickle.loads(pickle.dumps(p)))]
    return pa.Table.from_batches(batches, schema=reader.target)


def test_reader_pushes_translatable_filters_into_the_plan(tmp_path) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    _, plain = _reader(lh)
    all_files = sum(len(p.read.tasks) for p in plain.partitions())
    assert not hasattr(type(plain), "pushFilters") or type(plain).pushFilters is DataSourceReader.pushFilters
    _, reader = _reader(lh, pushdown=True)
    filters = [GreaterThan(("k",), 150), StringEndsWith(("v",), "7"), Not(In(("n",), (0,))), IsNull(("nope",))]
    unsupported = list(reader.pushFilters(filters))
    assert unsupported == [filters[1], filters[3]] and reader.pushed == [filters[0], filters[2]]
    parts = reader.partitions()
    assert len(parts) == BUCKETS and [p.bucket for p in parts] == list(range(BUCKETS))
    assert sum(len(p.read.tasks) for p in parts) <= all_files
    got = _read_all(reader, parts)
    assert rows(got) == rows(lh.union_read(NAME, row_filter="k > 150 and n != 0"))
    assert "k > 150" in repr(reader) or "GreaterThan" in repr(reader)


def test_a_reader_schema_naming_fewer_columns_reads_only_those(tmp_path) -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    cls = source_class({lh.url: {}})
    source = cls({"path": NAME, "warehouse": lh.url})
    reader = source.reader(StructType([StructField("k", LongType()), StructField("v", StringType())]))
    assert reader.plan.columns == ("k", "v")
    got = _read_all(reader, reader.partitions())
    assert rows(got, ["k", "v"]) == rows(lh.union_read(NAME, ["k", "v"]), ["k", "v"])


def test_a_plan_is_repeatable(tmp_path) -> None:
    """The log ranges end where the log ended at planning: a retried task reads what the first read."""
    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=False)
    _, reader = _reader(lh)
    parts = reader.partitions()
    before = _read_all(reader, parts)
    lh.log(NAME).append(batch(range(500, 520), "later"), op="insert")
    assert rows(_read_all(reader, parts)) == rows(before)
    assert before.num_rows + 20 == lh.union_read(NAME).num_rows


def test_bad_options_are_clear_errors(tmp_path) -> None:
    from lakehouse.errors import TableNotFound

    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    cls = source_class({})
    # a read's options are checked when Spark asks for its schema
    with pytest.raises(InvalidArgument, match=r"unknown option\(s\) \['secret_access_key'\].*never options"):
        cls({"path": NAME, "warehouse": lh.url, "secret_access_key": "x"}).schema()
    with pytest.raises(InvalidArgument, match='as_of takes "bucket:offset'):
        cls({"path": NAME, "warehouse": lh.url, "as_of": "0=1"}).schema()
    with pytest.raises(InvalidArgument, match="name the table"):
        cls({"warehouse": lh.url}).schema()
    with pytest.raises(InvalidArgument, match="lake_only is true or false"):
        cls({"path": NAME, "warehouse": lh.url, "lake_only": "maybe"}).schema()
    with pytest.raises(InvalidArgument, match="belongs to changes=true"):
        cls({"path": NAME, "warehouse": lh.url, "start": "0:1"}).schema()
    with pytest.raises(TableNotFound, match="no table ods.nope"):
        cls({"path": "ods.nope", "warehouse": lh.url}).schema()
    source = cls({"path": NAME, "warehouse": lh.url, "as_of": "0:1,1:1"})
    with pytest.raises(InvalidArgument, match="lacks bucket"):
        source.reader(source.schema()).partitions()
    source = cls({"path": NAME, "warehouse": lh.url, "as_of": '{"0": 1, "1": 1, "2": 99999}'})
    with pytest.raises(InvalidArgument, match="beyond the end"):
        source.reader(source.schema()).partitions()


@pytest.mark.slow
def test_spark_reports_bad_options_and_tables(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    with pytest.raises(Exception, match="no table ods.nope"):
        lakestream(spark, lh).load("ods.nope")
    with pytest.raises(Exception, match=r"unknown option\(s\) \['colums'\]"):
        lakestream(spark, lh, colums="k").load(NAME)
    with pytest.raises(Exception, match="as_of must name every bucket"):
        lakestream(spark, lh, as_of="0:1").load(NAME).collect()


def test_offset_options_parse() -> None:
    assert parse_offsets("0:120, 1:98") == {0: 120, 1: 98}
    assert parse_offsets('{"0": 120, "1": 98}') == {0: 120, 1: 98}
    for bad, message in [("0:1,0:2", "twice"), ("", "empty"), ("{x", "not valid JSON"), ('{"a": 1}', "maps")]:
        with pytest.raises(InvalidArgument, match=message):
            parse_offsets(bad)


def test_filter_text_writes_pyiceberg_expressions_iceberg_parses_back() -> None:
    from pyiceberg.expressions import parser

    exprs = [
        ex.And(ex.EqualTo("k", 1), ex.Or(ex.LessThan("n", 3), ex.IsNull("v"))),
        ex.Not(ex.In("k", {1, 2})),
        ex.StartsWith("v", "it's"),
        ex.NotIn("v", {"a", "b"}),
        ex.GreaterThanOrEqual("k", 5),
    ]
    for e in exprs:
        assert parser.parse(filter_text(e)) == e, filter_text(e)
    assert filter_text("k = 1") == "k = 1"
    with pytest.raises(InvalidArgument, match="string or a pyiceberg expression"):
        filter_text(3)  # type: ignore[arg-type]


# ---- DuckDB ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_duckdb_agrees_with_spark_on_the_lake_part(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    location = lh.lake_table(NAME).metadata_location.removeprefix("file://")
    theirs = duckdb_connection().execute(f"SELECT k, v, n, __bucket, __offset FROM iceberg_scan('{location}')")
    ours = spark_rows(lakestream(spark, lh, lake_only="true").load(NAME))
    assert sorted(theirs.fetchall()) == ours and ours


@pytest.mark.parametrize("pk", [True, False], ids=["pk", "log"])
def test_changes_through_the_source_equal_lh_changes(lakehouse, pk) -> None:
    """changes=true (driver and worker code in this process, pickled as Spark would): one partition per bucket
    with changes, the same rows as lh.changes, with and without before-images, on both backends."""
    lh = lakehouse
    middle = build(lh, pk)
    ends = lh.log(NAME).end_offsets()
    text = ",".join(f"{b}:{o}" for b, o in middle.items())
    end = ",".join(f"{b}:{o}" for b, o in ends.items())
    for before in (True, False):
        source = source_class({lh.url: dict(lh.store.connection_options())})(
            {
                "path": NAME,
                "warehouse": lh.url,
                "changes": "true",
                "start": text,
                "end": end,
                "before_images": str(before).lower(),
            }
        )
        schema = source.schema()
        assert schema.names[-1] == "_op"
        reader = source.reader(schema)
        parts = reader.partitions()
        assert [p.mode for p in parts] == ["changes"] * len(parts) and 0 < len(parts) <= BUCKETS
        got = _read_all(reader, parts)
        want = lh.changes(NAME, middle, ends, before_images=before)
        assert rows(got, [*COMPARED, "_op"]) == rows(want, [*COMPARED, "_op"]) and want.num_rows
    with pytest.raises(InvalidArgument, match="filter do not apply"):
        source_class({lh.url: {}})({"path": NAME, "changes": "true", "end": end, "filter": "k < 3"}).schema()


@pytest.mark.slow
def test_spark_reads_changes(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    middle = build(lh, pk=True)
    ends = lh.log(NAME).end_offsets()
    df = lakestream(
        spark,
        lh,
        changes="true",
        start=",".join(f"{b}:{o}" for b, o in middle.items()),
        end=",".join(f"{b}:{o}" for b, o in ends.items()),
        before_images="true",
    ).load(NAME)
    assert df.columns[-1] == "_op"
    want = lh.changes(NAME, middle, ends, before_images=True)
    assert spark_rows(df, [*COMPARED, "_op"]) == rows(want, [*COMPARED, "_op"])
    assert {r["_op"] for r in want.to_pylist()} == {"insert", "update_before", "update_after", "delete"}
    # a range without changes: no rows, the changes' columns (PySpark makes a partition of its own when a
    # reader has none: the reader must know it)
    end = ",".join(f"{b}:{o}" for b, o in ends.items())
    empty = lakestream(spark, lh, changes="true", start=end, end=end).load(NAME)
    assert empty.columns == df.columns and empty.count() == 0


def _published(lh: Lakehouse) -> int:
    """Tag the current snapshot ``published`` (as a passing `lakestream check` does), then tier the tail: the
    lake moves on, the tag stays."""
    from quality.published_tag import publish
    from quality.results import CheckResult

    snapshot = lh.lake_table(NAME).metadata.current_snapshot_id
    publish(lh, NAME, snapshot, [CheckResult("reconcile", NAME, snapshot_id=snapshot)])
    lh.tier(NAME)
    assert lh.lake_table(NAME).metadata.current_snapshot_id != snapshot
    return snapshot


def test_reader_at_a_ref_reads_the_lake_at_its_snapshot(tmp_path) -> None:
    from lakehouse.errors import RefNotFound

    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    cls = source_class({lh.url: {}})
    with pytest.raises(RefNotFound, match="no tag or branch 'published'"):
        cls({"path": NAME, "warehouse": lh.url, "ref": "published"}).schema()
    snapshot = _published(lh)
    _, reader = _reader(lh, ref="published")
    parts = reader.partitions()
    assert len(parts) == BUCKETS and not reader.plan.union
    got = _read_all(reader, parts)
    want = lh.lake_read(NAME, ref="published")
    assert rows(got) == rows(want) != rows(lh.lake_read(NAME)) and got.num_rows == want.num_rows
    assert f"snapshot={snapshot}" in repr(
        reader.plan.located(reader._table, lh.table(NAME), as_of=None, log_=None, fix_ends=False, snapshot_id=snapshot)
    )
    # the warehouse publication's tag: the snapshot the checks passed on, after the lake moved on again
    from quality.results import CheckResult
    from quality.warehouse_publication import PUBLICATION, publish_warehouse

    lh.tier(NAME)
    passed = lh.lake_table(NAME).metadata.current_snapshot_id
    assert (
        publish_warehouse(lh, [CheckResult("reconcile", NAME, snapshot_id=passed)]).entries[NAME].snapshot_id == passed
    )
    lh.log(NAME).append(batch(range(300, 340), "after"), op="upsert")
    lh.tier(NAME)
    _, reader = _reader(lh, ref=PUBLICATION)
    assert rows(_read_all(reader, reader.partitions())) == rows(lh.lake_read(NAME, ref=PUBLICATION))
    assert rows(lh.lake_read(NAME, ref=PUBLICATION)) != rows(lh.lake_read(NAME))
    with pytest.raises(InvalidArgument, match="as_of and changes do not go with it"):
        cls({"path": NAME, "warehouse": lh.url, "ref": "published", "as_of": "0:1,1:1,2:1"}).schema()
    with pytest.raises(InvalidArgument, match="as_of and changes do not go with it"):
        cls({"path": NAME, "warehouse": lh.url, "ref": "published", "changes": "true", "end": "0:1,1:1,2:1"}).schema()


@pytest.mark.slow
def test_spark_reads_at_a_ref(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    _published(lh)
    want = lh.lake_read(NAME, ref="published")
    df = lakestream(spark, lh, ref="published").load(NAME)
    assert df.rdd.getNumPartitions() == BUCKETS
    assert spark_rows(df) == rows(want) != rows(lh.lake_read(NAME))
    assert spark_rows(read_table(spark, lh, NAME, ref="published")) == rows(want)
    with pytest.raises(Exception, match="no tag or branch 'nope'"):
        lakestream(spark, lh, ref="nope").load(NAME)


def _first_snapshot(lh: Lakehouse) -> tuple[int, pa.Table]:
    """The lake's first snapshot (round 1 of `build`: the lake has moved on since) and its rows, by pyiceberg."""
    lake = lh.lake_table(NAME)
    first = lake.metadata.snapshots[0].snapshot_id
    want = lake.scan(snapshot_id=first).to_arrow()
    assert first != lake.metadata.current_snapshot_id and want.num_rows
    assert rows(want) != rows(lh.lake_read(NAME))
    return first, want


def test_reader_at_a_snapshot_id_reads_the_lake_at_that_snapshot(tmp_path) -> None:
    from lakehouse.errors import SnapshotNotFound

    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    first, want = _first_snapshot(lh)
    _, reader = _reader(lh, snapshot_id=str(first))
    parts = reader.partitions()
    assert len(parts) == BUCKETS and not reader.plan.union
    assert rows(_read_all(reader, parts)) == rows(want)
    cls = source_class({lh.url: {}})
    with pytest.raises(SnapshotNotFound, match=r"has no snapshot 12345 .*its current snapshot is \d+"):
        cls({"path": NAME, "warehouse": lh.url, "snapshot_id": "12345"}).schema()
    with pytest.raises(InvalidArgument, match="snapshot_id is a snapshot's id .*got 'latest'"):
        cls({"path": NAME, "warehouse": lh.url, "snapshot_id": "latest"}).schema()
    for other in ({"as_of": "0:1,1:1,2:1"}, {"ref": "main"}, {"changes": "true", "end": "0:1,1:1,2:1"}):
        with pytest.raises(InvalidArgument, match="snapshot_id reads the lake at one snapshot: as_of, ref and changes"):
            cls({"path": NAME, "warehouse": lh.url, "snapshot_id": str(first), **other}).schema()


@pytest.mark.slow
def test_spark_reads_at_a_snapshot_id_whenever_it_plans(tmp_path, spark) -> None:
    """The DataFrame reads the snapshot it names even when the lake moved on between its making and its action
    (what a quality suite validating that snapshot on Spark relies on); an unknown id fails when it is made."""
    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    first, want = _first_snapshot(lh)
    df = lakestream(spark, lh, snapshot_id=str(first)).load(NAME)
    wrapped = read_table(spark, lh, NAME, snapshot_id=first, columns=["k", "v"])
    lh.tier(NAME)  # the tail: a new current snapshot
    assert df.rdd.getNumPartitions() == BUCKETS
    assert spark_rows(df) == rows(want) and df.count() == want.num_rows
    assert spark_rows(wrapped, ["k", "v"]) == rows(want, ["k", "v"])
    with pytest.raises(Exception, match="has no snapshot 12345"):
        lakestream(spark, lh, snapshot_id="12345").load(NAME)


def test_a_batch_reads_offsets_are_checked_when_spark_asks_for_its_schema(tmp_path) -> None:
    """``as_of`` naming too few buckets passed ``load()`` and failed at the first action."""
    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    cls = source_class({})
    with pytest.raises(InvalidArgument, match=r"as_of must name every bucket .*lacks bucket"):
        cls({"path": NAME, "warehouse": lh.url, "as_of": "0:1"}).schema()
    with pytest.raises(InvalidArgument, match=r"end names bucket\(s\) \[9\]"):
        cls(
            {"path": NAME, "warehouse": lh.url, "changes": "true", "start": "0:0,1:0,2:0", "end": "0:0,1:0,2:0,9:0"}
        ).schema()


@pytest.mark.slow
def test_spark_reports_a_bad_as_of_at_load(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    build(lh, pk=True)
    with pytest.raises(Exception, match="as_of must name every bucket"):
        lakestream(spark, lh, as_of="0:1").load(NAME)  # no action: load() alone fails
