"""``spark.readStream.format("lakestream")``: real Structured Streaming queries on the shared ``local[2]``
session. Each micro-batch's rows, applied in order to the state before it, give the state at its end; the
lake serves what log retention removed; restarts from the checkpoint read nothing twice."""

from __future__ import annotations

import random
from datetime import timedelta

import pyarrow as pa
import pytest

from lakehouse import Lakehouse
from lakehouse.errors import InvalidArgument
from lakehouse.read.changes import apply_changes
from tests.support.keyed_tables import SCHEMA, batch

pytestmark = pytest.mark.slow  # Spark queries: make test runs them, the quick selection does not

NAME = "ods.s"
BUCKETS = 3
USER = ["k", "v", "n"]


def make(lh: Lakehouse, pk: bool) -> None:
    if pk:
        lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=BUCKETS)
    else:
        lh.create_table(NAME, SCHEMA, bucket_key="k", buckets=BUCKETS)


def write(lh: Lakehouse, pk: bool, rng: random.Random, tag: str, n: int = 40) -> None:
    log = lh.log(NAME)
    log.append(batch(rng.sample(range(200), n), tag), op="upsert" if pk else "insert")
    if pk:
        log.append(batch(rng.sample(range(200), n // 4), tag + "-d"), op="delete")


def run(spark, lh: Lakehouse, checkpoint, **options) -> list[pa.Table]:
    """One availableNow run of a stream of the table from ``checkpoint``: every micro-batch's rows, in order."""
    got: list[tuple[int, pa.Table]] = []
    reader = spark.readStream.format("lakestream").option("warehouse", lh.url)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load(NAME)
        .writeStream.foreachBatch(lambda df, batch_id: got.append((batch_id, df.toArrow())))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    assert [b for b, _ in got] == sorted(b for b, _ in got)
    return [t for _, t in got]


def replay(batches: list[pa.Table], pk: bool, state: pa.Table | None = None) -> pa.Table:
    state = pa.table({c: pa.array([], SCHEMA.field(c).type) for c in USER}) if state is None else state
    for changes in batches:
        if pk:
            state = apply_changes(state, changes, ["k"])
        else:
            assert set(changes.column("_op").to_pylist()) <= {"insert"}
            state = pa.concat_tables([state, changes.select(USER).cast(state.schema)])
    return state


def rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in USER), strict=True))


@pytest.mark.parametrize("pk", [True, False], ids=["pk", "log"])
def test_earliest_serves_the_lake_then_the_log_and_restarts_where_it_stopped(tmp_path, spark, pk: bool) -> None:
    """Lake holding part of the history (log retention removed it from the log), the log the rest: earliest
    gives the lake's snapshot as inserts in one micro-batch, then the log's changes; applied in order they give
    the union read. A restart from the checkpoint after more appends reads only those."""
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh, pk)
    rng = random.Random(7)
    write(lh, pk, rng, "r0")
    lh.tier(NAME)
    write(lh, pk, rng, "r1")
    lh.tier(NAME)
    lh.apply_log_retention(NAME, retention=timedelta(0))  # the tiered records leave the log
    assert any(lh.log(NAME).start_offsets().values())
    write(lh, pk, rng, "tail")
    checkpoint = tmp_path / "checkpoint"
    batches = run(spark, lh, checkpoint, startingOffsets="earliest")
    first = batches[0]
    assert set(first.column("_op").to_pylist()) == {"insert"}
    assert first.num_rows == lh.lake_read(NAME).num_rows  # the snapshot, whole, in the first micro-batch
    assert first.column_names == [*USER, "__bucket", "__offset", "__timestamp", "_op"]
    state = replay(batches, pk)
    assert rows(state) == rows(lh.union_read(NAME))

    write(lh, pk, rng, "after")
    more = run(spark, lh, checkpoint, startingOffsets="earliest")  # the checkpoint wins over the option
    assert more and all(t.num_rows < first.num_rows for t in more)
    assert rows(replay(more, pk, state)) == rows(lh.union_read(NAME))
    assert run(spark, lh, checkpoint, startingOffsets="earliest") == []  # nothing new: no micro-batch


def test_latest_sees_only_new_appends_and_a_map_starts_there(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh, pk=True)
    rng = random.Random(8)
    write(lh, True, rng, "old")
    checkpoint = tmp_path / "latest"
    # a new query's first micro-batch runs even when it is empty (Spark's choice): no rows
    assert sum(t.num_rows for t in run(spark, lh, checkpoint, startingOffsets="latest")) == 0
    before = lh.union_read(NAME)
    at = lh.log(NAME).end_offsets()
    write(lh, True, rng, "new")
    [changes] = run(spark, lh, checkpoint, startingOffsets="latest")  # the checkpoint's start: no second empty one
    new = [
        (b, o)
        for b, o, op in zip(*(changes.column(c).to_pylist() for c in ("__bucket", "__offset", "_op")), strict=True)
        if op in ("insert", "update_after")
    ]
    assert new and all(o >= at[b] for b, o in new)  # after-images are the new appends (deletes carry the old row)
    assert rows(apply_changes(before.select(USER), changes, ["k"])) == rows(lh.union_read(NAME))
    # the same range from an offset map, with before-images: update_before rows carry the old values
    [again] = run(
        spark, lh, tmp_path / "map", startingOffsets=str({str(b): o for b, o in at.items()}).replace("'", '"')
    )
    with_before = run(
        spark, lh, tmp_path / "before", startingOffsets=",".join(f"{b}:{o}" for b, o in at.items()), beforeImages="true"
    )[0]
    assert rows(again) == rows(changes)
    ops = with_before.column("_op").to_pylist()
    assert ops.count("update_before") == ops.count("update_after") > 0


def test_admission_control_splits_the_log_into_bounded_micro_batches(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh, pk=False)
    rng = random.Random(9)
    for i in range(4):
        write(lh, False, rng, f"r{i}", n=30)
    batches = run(spark, lh, tmp_path / "c", startingOffsets="earliest", maxRecordsPerTrigger=25)
    assert len(batches) >= 120 // 25 and all(0 < t.num_rows <= 25 for t in batches)
    got = sorted(
        o for t in batches for o in zip(t.column("__bucket").to_pylist(), t.column("__offset").to_pylist(), strict=True)
    )
    assert got == sorted(set(got)) and len(got) == 120  # every record once


def test_a_subscription_is_where_the_stream_starts_and_advances(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh, pk=True)
    rng = random.Random(10)
    write(lh, True, rng, "r0")
    sub = lh.subscription(NAME, "stream_reader", start="latest")
    at = sub.position
    before = lh.union_read(NAME)
    write(lh, True, rng, "r1")
    batches = run(spark, lh, tmp_path / "c", subscription="stream_reader")
    state = replay(batches, True, before.select(USER))
    assert rows(state) == rows(lh.union_read(NAME))
    # Spark commits a micro-batch's source offsets when the next one begins (or the query restarts): the
    # subscription lags the checkpoint by that batch at most, and pins what a restart reads again
    read_to = lh.log(NAME).end_offsets()
    assert sub.refresh().position in (at, read_to)
    write(lh, True, rng, "r2")
    more = run(spark, lh, tmp_path / "c", subscription="stream_reader")
    assert rows(replay(more, True, state)) == rows(lh.union_read(NAME))
    position = sub.refresh().position
    assert all(position[b] >= read_to[b] for b in read_to) and position != at


def test_a_start_retention_removed_fails_naming_the_buckets(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh, pk=False)
    rng = random.Random(11)
    for tag in ("r0", "r1"):
        write(lh, False, rng, tag)
        lh.tier(NAME)
    lh.apply_log_retention(NAME, retention=timedelta(0))  # keeps each bucket's newest segment
    assert all(lh.log(NAME).start_offsets().values())
    write(lh, False, rng, "r2")
    with pytest.raises(Exception, match=r"AsOfUnavailable|log retention removed.*bucket \d from offset 0"):
        run(spark, lh, tmp_path / "c", startingOffsets="0:0,1:0,2:0")


def test_bad_stream_options_are_clear_errors(tmp_path, spark) -> None:
    from lakehouse.spark.source import source_class

    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh, pk=True)
    cls = source_class({lh.url: {}})
    source = cls({"path": NAME, "warehouse": lh.url})
    with pytest.raises(InvalidArgument, match="needs option startingOffsets"):  # at Spark's first call
        source.streamReader(source.schema()).initialOffset()
    with pytest.raises(InvalidArgument, match="are readStream's"):
        source = cls({"path": NAME, "warehouse": lh.url, "startingOffsets": "earliest"})
        source.reader(source.schema())
    with pytest.raises(InvalidArgument, match="maxRecordsPerTrigger is a number"):
        cls({"path": NAME, "warehouse": lh.url, "startingOffsets": "latest", "maxRecordsPerTrigger": "0"}).schema()
    with pytest.raises(InvalidArgument, match="as_of is a batch read's"):
        cls({"path": NAME, "warehouse": lh.url, "startingOffsets": "latest", "as_of": "0:1"}).schema()
    with pytest.raises(InvalidArgument, match='startingOffsets takes "bucket:offset'):
        cls({"path": NAME, "warehouse": lh.url, "startingOffsets": "newest"}).schema()


def test_a_micro_batch_packs_small_buckets_into_one_task(tmp_path, monkeypatch) -> None:
    """Tasks follow the records, not the bucket count: a few records of every bucket are one task; past
    `TASK_RECORDS` a task holds fewer buckets; every changed bucket is in exactly one task."""
    import lakehouse.spark.stream as stream
    from lakehouse.spark.source import source_class

    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh, pk=True)
    write(lh, True, random.Random(12), "r0", n=60)
    ends = lh.log(NAME).end_offsets()
    source = source_class({lh.url: {}})({"path": NAME, "warehouse": lh.url, "startingOffsets": "latest"})
    reader = source.streamReader(source.schema())
    start = {"phase": "log", "offsets": {str(b): 0 for b in ends}}
    end = {"phase": "log", "offsets": {str(b): o for b, o in ends.items()}}
    [one] = reader.partitions(start, end)
    assert sorted(item.bucket for item in one.payload[1]) == sorted(ends)
    monkeypatch.setattr(stream, "TASK_RECORDS", max(ends.values()))
    parts = reader.partitions(start, end)
    assert 1 < len(parts) <= BUCKETS
    assert sorted(item.bucket for p in parts for item in p.payload[1]) == sorted(ends)
    assert reader.partitions(end, end) == []
    reader.stop()


def test_a_stream_from_one_table_into_another_copies_every_record_once(tmp_path, spark) -> None:
    """The README's pipe: a log table's stream, filtered and projected to the target's columns, written with the
    lakestream sink; two runs from one checkpoint (the second after more appends) copy every record once."""
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh, pk=False)
    lh.create_table("ods.copy", SCHEMA, bucket_key="k", buckets=2)
    rng = random.Random(13)

    def copy() -> None:
        query = (
            spark.readStream.format("lakestream")
            .option("warehouse", lh.url)
            .option("startingOffsets", "earliest")
            .load(NAME)
            .filter("n % 2 = 0")
            .select(*USER)
            .writeStream.format("lakestream")
            .option("warehouse", lh.url)
            .option("checkpointLocation", str(tmp_path / "copy"))
            .trigger(availableNow=True)
            .start("ods.copy")
        )
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()

    def even(table: pa.Table) -> list[tuple]:
        return [r for r in rows(table) if r[2] % 2 == 0]

    write(lh, False, rng, "r0")
    lh.tier(NAME)
    write(lh, False, rng, "r1")
    copy()
    assert rows(lh.union_read("ods.copy")) == even(lh.union_read(NAME))
    write(lh, False, rng, "r2")
    copy()
    assert rows(lh.union_read("ods.copy")) == even(lh.union_read(NAME)) != []


def test_admission_control_takes_exactly_the_limit_and_moves_every_bucket() -> None:
    from lakehouse.spark.stream import limited

    rng = random.Random(14)
    for _ in range(2000):
        n = rng.randrange(1, 9)
        start = {b: rng.randrange(0, 50) for b in range(n)}
        ends = {b: start[b] + rng.choice([0, rng.randrange(0, 1000)]) for b in range(n)}
        cap = rng.randrange(1, 3000)
        out = limited(start, ends, cap)
        available = sum(ends[b] - start[b] for b in start)
        assert all(start[b] <= out[b] <= ends[b] for b in start)
        assert sum(out[b] - start[b] for b in start) == min(cap, available)  # exactly the limit while there is more
        waiting = [b for b in start if ends[b] > start[b]]
        if cap >= len(waiting):
            assert all(out[b] > start[b] for b in waiting)  # no bucket starves


def test_stream_options_are_checked_when_the_source_is_built(tmp_path) -> None:
    """Spark builds the source at ``load()``, schema given or not; a bad ``startingOffsets`` or a batch option
    used to pass until ``start()`` / the first micro-batch, inside a long Java and Python trace."""
    from lakehouse.spark.source import source_class

    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh, pk=True)
    cls = source_class({lh.url: {}})
    base = {"path": NAME, "warehouse": lh.url}
    with pytest.raises(InvalidArgument, match=r"startingOffsets must name every bucket .*lacks bucket\(s\) \[1, 2\]"):
        cls({**base, "startingOffsets": "0:0"})
    with pytest.raises(InvalidArgument, match=r"startingOffsets names bucket\(s\) \[7\]"):
        cls({**base, "startingOffsets": "0:0,1:0,2:0,7:0"})
    with pytest.raises(InvalidArgument, match="as_of is a batch read's"):
        cls({**base, "startingOffsets": "latest", "as_of": "0:0"})
    with pytest.raises(InvalidArgument, match="columns is a batch read's"):
        cls({**base, "startingOffsets": "latest", "columns": "k"})
    with pytest.raises(Exception, match="no table ods.nope"):
        cls({**base, "path": "ods.nope", "startingOffsets": "latest"})
    cls({**base, "startingOffsets": "0:0,1:0,2:0"})  # every bucket: fine


def test_a_stream_reader_that_cannot_be_built_fails_its_first_call_with_our_error(tmp_path) -> None:
    """PySpark 4.2 answers an error raised by ``streamReader()`` with its own ``UnboundLocalError`` (its runner
    stops a reader it never got): the reader is built and raises ours when Spark first calls it."""
    from pyspark.sql.types import LongType, StructField, StructType

    from lakehouse.spark.source import source_class

    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh, pk=True)
    source = source_class({lh.url: {}})({"path": NAME, "warehouse": lh.url, "startingOffsets": "latest"})
    reader = source.streamReader(StructType([StructField("k", LongType())]))
    with pytest.raises(InvalidArgument, match="a stream's schema is the changes'"):
        reader.initialOffset()
    reader.stop()  # what PySpark's runner calls on its way out: no second error


def test_spark_reports_bad_stream_options_in_our_words_at_load_or_at_the_start(tmp_path, spark) -> None:
    """Without a schema, Spark builds the source at ``load()``: a bad option fails there. Given a schema, it builds
    it when the query starts: the query fails at once, our error its trace's last line (not PySpark's
    ``UnboundLocalError``, not after a first micro-batch)."""
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh, pk=True)
    changes_schema = spark.readStream.format("lakestream").option("warehouse", lh.url)
    changes_schema = changes_schema.option("startingOffsets", "latest").load(NAME).schema

    def load(schema=None, **options):
        reader = spark.readStream.format("lakestream").option("warehouse", lh.url)
        if schema is not None:
            reader = reader.schema(schema)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(NAME)

    def started(df, checkpoint: str) -> None:
        writer = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / checkpoint))
        writer.trigger(availableNow=True).start().awaitTermination(120)

    def ours(error: BaseException, message: str) -> None:
        text = str(error)
        assert "UnboundLocalError" not in text and "\tat org.apache" not in text, text
        trace = text.split(" SQLSTATE")[0]  # then a streaming query's own state
        assert trace.splitlines()[-1].startswith(f"object_store.errors.InvalidArgument: {message}"), text

    cases = [
        ({"startingOffsets": "0:0"}, "startingOffsets must name every bucket"),
        ({"startingOffsets": "latest", "as_of": "0:0"}, "option as_of is a batch read's"),
    ]
    for options, message in cases:
        with pytest.raises(Exception, match=message) as caught:  # load() alone: no query
            load(**options)
        ours(caught.value, message)
    for n, (options, message) in enumerate(cases):
        with pytest.raises(Exception, match=message) as caught:
            started(load(changes_schema, **options), f"c{n}")
        ours(caught.value, message)
    # a schema that is not the changes' shows only when the reader is built: the query's first call fails
    with pytest.raises(Exception, match="a stream's schema is the changes'") as caught:
        started(load(spark.range(1).schema, startingOffsets="latest"), "c-schema")
    ours(caught.value, "a stream's schema is the changes'")
