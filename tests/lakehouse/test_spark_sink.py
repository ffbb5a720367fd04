"""``df.write`` / ``df.writeStream`` with ``format("lakestream")`` (issue 41, the sink): batch writes to primary-key
and log tables equal their rows; ``_op`` rows apply in input order; a task attempt that failed after appending is
retried without writing anything twice (in this process without Spark, and in Spark with task retries in a
process of its own); a stream writes every row once, a restart from its checkpoint nothing twice, a batch replayed
after its appends (the commit lost) nothing twice, and a driver killed with SIGKILL mid-batch then restarted every
row exactly once; bad input fails with a clear error and writes nothing."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakehouse import Lakehouse
from lakehouse.spark.sink import LakestreamBatchWriter, WriteOptions, make_writer
from lakehouse.spark.source import register
from tests.support.crash import crash, run_worker

PK = "ods.pk"
LOG = "ods.events"
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("n", pa.int32())])
EVENTS = pa.schema([("id", pa.int64()), ("v", pa.string())])
SINK_WORKER = "tests.lakehouse._sink_worker"  # its JVM in the process group run_worker kills after


@pytest.fixture
def lh(tmp_path: Path):
    root = tmp_path / "store"
    root.mkdir()
    lh = Lakehouse.open(root.as_uri())
    lh.create_table(PK, SCHEMA, primary_key=["k"], buckets=3)
    lh.create_table(LOG, EVENTS, bucket_key="id", buckets=3)
    try:
        yield lh
    finally:
        lh.close()


def log_rows(lh: Lakehouse, name: str) -> list[dict]:
    log_ = lh.log(name)
    out = []
    for bucket in range(lh.table(name).buckets):
        out.extend(log_.read(bucket).to_pylist())
    return out


def ids(lh: Lakehouse) -> Counter:
    return Counter(r["id"] for r in log_rows(lh, LOG))


def pk_rows(lh: Lakehouse) -> list[tuple]:
    table = lh.union_read(PK)
    return sorted(zip(table["k"].to_pylist(), table["v"].to_pylist(), table["n"].to_pylist(), strict=True))


def ended(lh: Lakehouse, name: str) -> dict[int, int]:
    return lh.log(name).end_offsets()


def writer(spark, lh: Lakehouse, df, **options):
    register(spark, lh)
    w = df.write.format("lakestream").option("warehouse", lh.url).mode("append")
    for key, value in options.items():
        w = w.option(key, value)
    return w


def frame(spark, rows: list[dict], ddl: str, partitions: int = 2):
    return (
        spark.createDataFrame(rows, ddl).repartition(partitions)
        if partitions > 1
        else spark.createDataFrame(rows, ddl).coalesce(1)
    )


# ---- batch writes ------------------------------------------------------------------------------------------


def test_batch_write_pk_and_log_tables(spark, lh):
    rows = [{"k": k, "v": f"v{k}", "n": k % 7} for k in range(60)]
    writer(spark, lh, frame(spark, rows, "k long, v string, n int")).save(PK)
    assert pk_rows(lh) == [(k, f"v{k}", k % 7) for k in range(60)]
    events = [{"id": i, "v": f"e{i}"} for i in range(80)]
    # columns in another order, 3 tasks, appends of at most 9 rows
    df = frame(spark, events, "id long, v string", partitions=3).select("v", "id")
    writer(spark, lh, df, rowsPerAppend="9").save(LOG)
    got = log_rows(lh, LOG)
    assert sorted((r["id"], r["v"]) for r in got) == [(i, f"e{i}") for i in range(80)]
    # a second write of the same rows is another write: a log table keeps both
    writer(spark, lh, frame(spark, events, "id long, v string")).save(LOG)
    assert ids(lh) == Counter({i: 2 for i in range(80)})


def test_batch_write_ops_in_input_order(spark, lh):
    lh.log(PK).append(pa.table({"k": [1, 2, 3, 4], "v": ["a", "b", "c", "d"], "n": [1, 2, 3, 4]}), op="upsert")
    ddl = "k long, v string, n int, _op string"
    rows = [
        {"k": 1, "v": "x", "n": 10, "_op": "upsert"},
        {"k": 1, "v": None, "n": None, "_op": "delete"},  # then deleted: gone
        {"k": 2, "v": None, "n": None, "_op": "delete"},
        {"k": 2, "v": "y", "n": 20, "_op": "insert"},  # deleted then inserted: there
        {"k": 5, "v": "z", "n": 50, "_op": "upsert"},
        {"k": 5, "v": "zz", "n": 51, "_op": "upsert"},  # the later upsert wins
        {"k": 3, "v": None, "n": None, "_op": "delete"},
    ]
    writer(spark, lh, frame(spark, rows, ddl, partitions=1)).save(PK)
    assert pk_rows(lh) == [(2, "y", 20), (4, "d", 4), (5, "zz", 51)]
    # key-only deletes: a DataFrame of the key and _op
    writer(spark, lh, frame(spark, [{"k": 4, "_op": "delete"}], "k long, _op string", partitions=1)).save(PK)
    assert pk_rows(lh) == [(2, "y", 20), (5, "zz", 51)]
    # without _op a primary-key table takes upserts
    writer(spark, lh, frame(spark, [{"k": 5, "v": "u", "n": 1}], "k long, v string, n int", partitions=1)).save(PK)
    assert pk_rows(lh) == [(2, "y", 20), (5, "u", 1)]
    # a long into the int column n: accepted while the values fit
    writer(spark, lh, frame(spark, [{"k": 6, "v": "w", "n": 7}], "k long, v string, n long", partitions=1)).save(PK)
    assert pk_rows(lh) == [(2, "y", 20), (5, "u", 1), (6, "w", 7)]


class _FailAfterFirst(LakestreamBatchWriter):
    calls = 0

    def _after_append(self, sequence, result):
        type(self).calls += 1
        if type(self).calls == 1:
            raise RuntimeError("the task died after its first append")


class _Source:
    """What `make_writer` needs of the data source, without Spark."""

    def __init__(self, lh: Lakehouse, **options: str) -> None:
        self.options = {"path": LOG, "warehouse": lh.url, **options}
        self.url = lh.url

    def _warehouse(self) -> str:
        return self.url

    def _store_options(self, url: str) -> dict[str, str]:
        return {}


def test_task_attempt_retried_in_process_writes_nothing_twice(lh):
    """A task's rows written by attempt 0 up to its first append, then by attempt 1 whole: each row once, the
    first append recognised. (No Spark: TaskContext is None, partition 0.)"""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    _FailAfterFirst.calls = 0
    w = make_writer(_Source(lh, rowsPerAppend="4"), schema, False, stream=False, writer_class=_FailAfterFirst)
    data = pa.table({"id": list(range(10)), "v": [f"e{i}" for i in range(10)]})
    with pytest.raises(RuntimeError, match="first append"):
        w.write(iter(data.to_batches(max_chunksize=3)))
    assert sum(ids(lh).values()) == 4  # the first append landed, the rest did not
    message = w.write(iter(data.to_batches(max_chunksize=5)))  # the retry: other Arrow batches, the same rows
    assert (message.rows, message.appends, message.recognised) == (10, 3, 1)
    assert ids(lh) == Counter(range(10))
    # another job (a fresh write id) is another write; the same writeId again is recognised
    again = make_writer(_Source(lh, writeId="job-7"), schema, False, stream=False)
    again.write(iter(data.to_batches()))
    again2 = make_writer(_Source(lh, writeId="job-7"), schema, False, stream=False)
    assert again2.write(iter(data.to_batches())).recognised == 1
    assert ids(lh) == Counter({i: 2 for i in range(10)})


def test_numbered_batches_of_one_writer_are_one_producer_and_a_replay_is_recognised(lh):
    """``writeId`` + ``batchId`` (foreachBatch): batch 1 after batch 0 appends under the same producer with higher
    sequences; batch 1 written again (a replayed micro-batch) appends nothing; other rows under batch 0 again are a
    SequenceConflict (nothing written), never a silent double."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from lakehouse.errors import SequenceConflict

    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])

    def rows(lo: int, hi: int) -> pa.Table:
        return pa.table({"id": list(range(lo, hi)), "v": [f"e{i}" for i in range(lo, hi)]})

    def write(batch: int, data: pa.Table):
        w = make_writer(_Source(lh, writeId="q-1", batchId=str(batch)), schema, False, stream=False)
        return w.write(iter(data.to_batches()))

    assert write(0, rows(0, 10)).recognised == 0
    first = write(1, rows(10, 20))
    assert first.producer_id == write(0, rows(0, 10)).producer_id  # one producer across the batches
    assert write(1, rows(10, 20)).recognised == first.appends  # the replay: recognised, nothing appended
    assert ids(lh) == Counter(range(20))
    with pytest.raises(SequenceConflict):
        write(0, rows(100, 110))
    assert ids(lh) == Counter(range(20))
    with pytest.raises(Exception, match="batchId numbers the writes of one writer"):  # noqa: PT011
        WriteOptions.parse({"path": "a.b", "batchId": "3"}, stream=False)
    with pytest.raises(Exception, match="batchId is a batch's number"):  # noqa: PT011
        WriteOptions.parse({"path": "a.b", "writeId": "w", "batchId": "-1"}, stream=False)


def test_task_retry_with_keys_in_another_order_writes_nothing_twice(lh):
    """After a shuffle Spark does not hand a retried task its rows in the same order: a task sorts each run by
    the primary key (stably), so the retry's appends are the first attempt's."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    schema = StructType([StructField(n, t()) for n, t in (("k", LongType), ("v", StringType), ("n", IntegerType))])
    _FailAfterFirst.calls = 0
    source = _Source(lh, rowsPerAppend="4", path=PK)
    w = make_writer(source, schema, False, stream=False, writer_class=_FailAfterFirst)
    keys = list(range(10))
    data = pa.table({"k": keys, "v": [f"v{k}" for k in keys], "n": pa.array(keys, pa.int32())})
    with pytest.raises(RuntimeError, match="first append"):
        w.write(iter(data.to_batches()))
    landed = sum(ended(lh, PK).values())
    assert landed == 4
    reordered = data.take(pa.array([7, 2, 9, 0, 5, 3, 8, 1, 6, 4]))
    message = w.write(iter(reordered.to_batches(max_chunksize=3)))
    assert (message.rows, message.appends, message.recognised) == (10, 3, 1)
    assert sum(ended(lh, PK).values()) == 10  # 10 records in the log: none twice
    assert pk_rows(lh) == [(k, f"v{k}", k) for k in keys]


@pytest.mark.slow
def test_task_retry_in_spark_writes_nothing_twice(lh, tmp_path):
    """Spark retries every task whose first attempt failed after its first append (local[2,2]): each row once."""
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {"LAKESTREAM_TEST_MARKERS": str(markers)}
    done = run_worker(SINK_WORKER, "retry", json.dumps([lh.url, {}, LOG, 50]), env=env, timeout=240, own_group=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in markers.iterdir()) == ["failed-p0", "failed-p1"]  # both tasks failed once
    assert ids(lh) == Counter(range(50))


# ---- streams -----------------------------------------------------------------------------------------------


def write_files(source: Path, start: int, files: int, rows: int = 50) -> list[int]:
    source.mkdir(exist_ok=True)
    written = []
    for f in range(start, start + files):
        keys = list(range(f * 1000, f * 1000 + rows))
        pq.write_table(pa.table({"id": keys, "v": [f"f{f}" for _ in keys]}), source / f"part-{f:03d}.parquet")
        written.extend(keys)
    return written


def run_stream(spark, lh: Lakehouse, source: Path, checkpoint: Path, **options: str) -> None:
    register(spark, lh)
    schema = "id long, v string"
    w = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.format("lakestream")
        .option("warehouse", lh.url)
        .option("checkpointLocation", str(checkpoint))
    )
    for key, value in options.items():
        w = w.option(key, value)
    query = w.trigger(availableNow=True).start(LOG)
    query.awaitTermination()
    assert query.exception() is None


def test_stream_writes_once_and_restarts(spark, lh, tmp_path):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    expected = write_files(source, 0, 3)
    run_stream(spark, lh, source, checkpoint, rowsPerAppend="20")
    assert ids(lh) == Counter(expected)
    run_stream(spark, lh, source, checkpoint, rowsPerAppend="20")  # nothing new
    assert ids(lh) == Counter(expected)
    expected += write_files(source, 3, 2)
    run_stream(spark, lh, source, checkpoint, rowsPerAppend="20")
    assert ids(lh) == Counter(expected)
    # the driver died after batch 4's appends, before Spark recorded it done: the restart replays it
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    assert last == 4
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum of it
    ends = ended(lh, LOG)
    run_stream(spark, lh, source, checkpoint, rowsPerAppend="20")
    assert (commits / str(last)).exists()  # the batch did run again
    assert ended(lh, LOG) == ends and ids(lh) == Counter(expected)


@pytest.mark.slow
def test_stream_driver_killed_mid_batch_then_restarted(lh, tmp_path):
    """Batch 1's task kills the driver with SIGKILL after a random one of its 5 appends (the first to the last);
    the restart from the checkpoint replays batch 1 (the appends that landed recognised) and runs batch 2: every
    row exactly once."""
    import random

    seed = random.randrange(10**6)
    landed = random.Random(seed).randrange(1, 6)  # batch 1's appends that land before the kill
    print(f"seed {seed}: the driver is killed after append {landed} of 5 of batch 1")
    source, checkpoint, markers = tmp_path / "in", tmp_path / "checkpoint", tmp_path / "markers"
    markers.mkdir()
    expected = write_files(source, 0, 3)
    args = [lh.url, {}, LOG, str(source), str(checkpoint)]
    env = {"LAKESTREAM_TEST_MARKERS": str(markers), "LAKESTREAM_TEST_KILL_AT": str(1 * 2**20 + landed - 1)}
    crash(SINK_WORKER, "stream", json.dumps([*args, True]), env=env, timeout=240, own_group=True)
    assert (markers / "killed").exists()
    assert sum(ids(lh).values()) == 50 + 10 * landed  # batch 0 whole, batch 1's landed appends of 10 rows
    env = {"LAKESTREAM_TEST_MARKERS": str(markers)}
    restarted = run_worker(SINK_WORKER, "stream", json.dumps([*args, False]), env=env, timeout=240, own_group=True)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert ids(lh) == Counter(expected)


# ---- bad input ---------------------------------------------------------------------------------------------


def fails(action, *fragments: str) -> None:
    with pytest.raises(Exception) as info:  # noqa: PT011 (Spark wraps the Python error; its text says which)
        action()
    text = str(info.value)
    for fragment in fragments:
        assert fragment in text, text[-2000:]


def test_bad_input_fails_clearly_and_writes_nothing(spark, lh):
    from pyspark.sql.functions import lit

    ddl = "k long, v string, n int"
    good = [{"k": 1, "v": "a", "n": 1}]
    cases = [
        # (DataFrame, table, options, fragments of the error)
        (frame(spark, good, ddl, 1).drop("n"), PK, {}, ("SchemaError", "lacks columns ['n']")),
        (frame(spark, good, ddl, 1).withColumn("x", lit(1)), PK, {}, ("SchemaError", "['x']")),
        (
            frame(spark, good, ddl, 1).selectExpr("array(k) as k", "v", "n"),
            PK,
            {},
            ("SchemaError", "column 'k'", "cannot be cast"),
        ),
        (frame(spark, [{"k": 1, "v": "a", "n": 1, "_op": 3}], ddl + ", _op int", 1), PK, {}, ("SchemaError", "'_op'")),
        (frame(spark, [{"k": None, "v": "a", "n": 1}], ddl, 1), PK, {}, ("BatchError", "'k'", "null")),
        (frame(spark, good, ddl, 1), "ods.nope", {}, ("TableNotFound", "ods.nope")),
        (
            frame(spark, [{"id": 1, "v": "a", "_op": "upsert"}], "id long, v string, _op string", 1),
            LOG,
            {},
            ("BatchError", "'upsert'", "log table"),
        ),
        (
            frame(spark, [{**good[0], "_op": "merge"}, {**good[0], "_op": "upsert"}], ddl + ", _op string", 1),
            PK,
            {},
            ("BatchError", "'merge'", "not an operation"),
        ),
        (frame(spark, [{**good[0], "_op": None}], ddl + ", _op string", 1), PK, {}, ("BatchError", "null")),
        (frame(spark, good, ddl, 1), PK, {"password": "x"}, ("InvalidArgument", "['password']")),
        (
            frame(spark, [{"k": 1, "v": "a", "n": 9_000_000_000}], "k long, v string, n long", 1),
            PK,
            {},
            ("SchemaError", "'n'", "cast safely"),
        ),
    ]
    for df, table, options, fragments in cases:
        fails(lambda df=df, table=table, options=options: writer(spark, lh, df, **options).save(table), *fragments)
    fails(
        lambda: writer(spark, lh, frame(spark, good, ddl, 1)).mode("overwrite").save(PK),
        "InvalidArgument",
        'mode("append")',
    )
    assert ended(lh, PK) == {0: 0, 1: 0, 2: 0} and ended(lh, LOG) == {0: 0, 1: 0, 2: 0}


def test_bad_stream_input_fails_before_the_query_runs(spark, lh, tmp_path):
    source = tmp_path / "in"
    write_files(source, 0, 1)
    register(spark, lh)
    stream = spark.readStream.schema("id long, v string").parquet(str(source)).withColumnRenamed("v", "w")
    with pytest.raises(Exception) as info:  # noqa: PT011
        query = (
            stream.writeStream.format("lakestream")
            .option("warehouse", lh.url)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start(LOG)
        )
        query.awaitTermination()
    assert "SchemaError" in str(info.value) and "['w']" in str(info.value), str(info.value)[-2000:]
    assert ended(lh, LOG) == {0: 0, 1: 0, 2: 0}


def test_write_options_parse():
    assert WriteOptions.parse({"path": "a.b", "rowsPerAppend": "5"}, stream=False).rows_per_append == 5
    with pytest.raises(Exception, match="rowsPerAppend"):  # noqa: PT011
        WriteOptions.parse({"path": "a.b", "rowsPerAppend": "0"}, stream=False)
    with pytest.raises(Exception, match="checkpointlocation"):  # noqa: PT011
        WriteOptions.parse({"path": "a.b", "checkpointLocation": "/x"}, stream=False)
    assert WriteOptions.parse({"path": "a.b", "producerId": "p"}, stream=True).producer_id == "p"


def test_a_string_column_for_a_number_is_refused_on_the_driver(lh):
    """A DataFrame's string `k` went into the long key ('3' -> 3), its long `v` into the string column: refused
    before any task, naming the column and both types; widening (int -> long) still passes."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    from lakehouse.errors import SchemaError
    from lakehouse.spark.sink import check_schema

    definition = lh.log(PK).definition

    def schema(k, v, n) -> StructType:
        return StructType([StructField("k", k), StructField("v", v), StructField("n", n)])

    assert check_schema(definition, schema(IntegerType(), StringType(), IntegerType())) is False
    for given, column, types in (
        (schema(StringType(), StringType(), IntegerType()), "k", ("string", "int64")),
        (schema(LongType(), LongType(), IntegerType()), "v", ("int64", "string")),
    ):
        with pytest.raises(SchemaError, match=f"column {column!r} is given {types[0]} values.* is {types[1]}"):
            check_schema(definition, given)


def test_writer_repr_keeps_credentials_out(lh):
    """The writers carry the store's options to the tasks (pickled), never in a repr."""
    from lakehouse.spark.sink import LakestreamStreamWriter

    for cls, stream in ((LakestreamBatchWriter, False), (LakestreamStreamWriter, True)):
        options = WriteOptions.parse({"path": LOG}, stream=stream)
        w = cls(
            lh.table(LOG).to_json(),
            options,
            False,
            store_url=lh.url,
            store_options={"secret_access_key": "SECRET-123"},
            producer_base="w-x",
        )
        assert "SECRET-123" not in repr(w) and "SECRET-123" not in repr(options)
        assert w._store_options == {"secret_access_key": "SECRET-123"}  # it travels with the writer, unshown


def test_batch_and_stream_writes_on_s3_with_credentials_bound(seaweedfs, spark, request, tmp_path):
    """On SeaweedFS: the tasks open the store with the credentials the registered source class carries (no
    option names them); the write's query plan does not show the secret."""
    from tests.support.stores import new_store_spec

    url, options = new_store_spec("s3", tmp_path, request)
    secret = options["secret_access_key"]
    lh = Lakehouse.open(url, **options)
    try:
        lh.create_table(LOG, EVENTS, bucket_key="id", buckets=3)
        events = [{"id": i, "v": f"e{i}"} for i in range(30)]
        df = frame(spark, events, "id long, v string")
        writer(spark, lh, df).save(LOG)
        assert ids(lh) == Counter(range(30))
        source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
        expected = write_files(source, 0, 2, rows=10)
        run_stream(spark, lh, source, checkpoint)
        assert ids(lh) == Counter([*range(30), *expected])
        assert secret not in spark.sparkContext.getConf().toDebugString()
    finally:
        lh.close()
