"""Spark programs the sink's tests run in a process of their own (run as a script): a batch write whose tasks fail
once after their first append (it needs task retries: ``local[2,2]``, which the shared ``local[2]`` session does
not allow), and a stream from parquet files whose task kills the driver (SIGKILL) mid-batch, then the same stream
restarted from its checkpoint.

Faults come from writer subclasses (`FaultyBatchWriter`, `KillingStreamWriter`) registered under the format
``lakestream_faults``; their switches are environment variables set before Spark starts (the Python workers
inherit them)."""

from __future__ import annotations

import json
import os
import sys
import time

from lakehouse.spark.sink import LakestreamBatchWriter, LakestreamStreamWriter, make_writer
from tests.support.crash import die, kill

MARKERS = "LAKESTREAM_TEST_MARKERS"  # a directory: a fault leaves a file there when it fires
DRIVER_PID = "LAKESTREAM_TEST_DRIVER_PID"
KILL_AT = "LAKESTREAM_TEST_KILL_AT"  # the sequence after whose append the stream's task kills the driver


def _mark(name: str) -> bool:
    """Leave marker ``name``; False if it was there already (the fault fired before)."""
    path = os.path.join(os.environ[MARKERS], name)
    try:
        with open(path, "x"):
            return True
    except FileExistsError:
        return False


class FaultyBatchWriter(LakestreamBatchWriter):
    """Every task's first attempt fails right after its first append landed."""

    def _after_append(self, sequence: int, result) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0:
            _mark(f"failed-p{ctx.partitionId()}")
            raise RuntimeError(f"injected fault after append {sequence} (attempt 0 of partition {ctx.partitionId()})")


class KillingStreamWriter(LakestreamStreamWriter):
    """Kills the driver with SIGKILL after the append of sequence ``KILL_AT`` landed (once), then itself."""

    def _after_append(self, sequence: int, result) -> None:
        kill_at = os.environ.get(KILL_AT)
        if kill_at is not None and sequence == int(kill_at) and _mark("killed"):
            kill(int(os.environ[DRIVER_PID]))
            die()


def faulty_source(base: type) -> type:
    """``base`` (a bound `LakestreamDataSource`) under the name ``lakestream_faults``, with the faulty writers."""

    class Faulty(base):  # type: ignore[misc, valid-type]
        @classmethod
        def name(cls) -> str:
            return "lakestream_faults"

        def writer(self, schema, overwrite):
            return make_writer(self, schema, overwrite, stream=False, writer_class=FaultyBatchWriter)

        def streamWriter(self, schema, overwrite):  # noqa: N802
            return make_writer(self, schema, overwrite, stream=True, writer_class=KillingStreamWriter)

    return Faulty


def session(url: str, options: dict, master: str):
    from lakehouse import Lakehouse
    from lakehouse.spark import spark_session
    from lakehouse.spark.source import register, source_class

    spark = spark_session(master=master, app_name="lakestream-sink-tests", scheduler_only=True)
    lh = Lakehouse.open(url, **options)
    register(spark, lh)
    spark.dataSource.register(faulty_source(source_class({lh.url: options})))
    return spark, lh


def batch_retry(url: str, options: dict, table: str, rows: int) -> dict:
    spark, lh = session(url, options, "local[2,2]")  # a task may fail once
    df = spark.range(rows, numPartitions=2).selectExpr("id", "concat('v', id) as v")
    df.write.format("lakestream_faults").option("warehouse", lh.url).option("rowsPerAppend", "7").mode("append").save(
        table
    )
    spark.stop()
    return {"ok": True}


def stream(url: str, options: dict, table: str, source: str, checkpoint: str, kill: bool) -> dict:
    spark, lh = session(url, options, "local[2]")
    schema = spark.read.parquet(source).schema
    query = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(source)
        .writeStream.format("lakestream_faults" if kill else "lakestream")
        .option("warehouse", lh.url)
        .option("checkpointLocation", checkpoint)
        .option("rowsPerAppend", "10")
        .trigger(availableNow=True)
        .start(table)
    )
    query.awaitTermination()
    time.sleep(0.1)
    spark.stop()
    return {"ok": True}


if __name__ == "__main__":
    os.environ[DRIVER_PID] = str(os.getpid())
    mode, args = sys.argv[1], json.loads(sys.argv[2])
    out = batch_retry(*args) if mode == "retry" else stream(*args)
    print(json.dumps(out), flush=True)
