"""PySpark without jars: a session builder and a distributed read of lakestream tables.

Spark never touches S3 or Iceberg through the JVM here (no iceberg-spark-runtime, no hadoop-aws): the
driver plans with pyiceberg and the Python workers do all IO with pyarrow inside ``mapInArrow``.

    spark = spark_session(master="local[2]")
    df = read_table(spark, lh, "ods.orders", union=True)     # one task per bucket
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.io import load_file_io

from lakehouse.errors import ConfigError
from lakehouse.union import RowFilter, merge_batches, output_columns, parse_filter, read_tail

#: Masters Spark accepts (its check: "yarn", or starting with "spark", "k8s" or "local").
MASTER = re.compile(r"local(\[(\d+|\*)(,\s*\d+)?\])?|local-cluster\[.+\]|spark://.+|yarn|k8s://.+")

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.lakehouse import Lakehouse


def spark_session(master: str | None = None, *, app_name: str = "lakestream", **conf: str) -> SparkSession:
    """A Spark session for lakestream jobs. Under spark-submit the master comes from spark-submit unless
    given. Sets the Python workers to this interpreter and Spark to loopback unless already set."""
    if master and not MASTER.fullmatch(master):
        raise ConfigError(
            f"Spark master {master!r} is not one Spark accepts: use local, local[N], local[*], spark://host:port, "
            "yarn or k8s://https://host:port (or tier with --local, without Spark)"
        )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        "spark.python.daemon.module": "lakehouse.executor.spark_daemon",  # workers fork with imports done
    }
    if (master or "").startswith("local"):
        # In local mode the driver JVM only schedules (tasks do their work in Python workers) and shares the
        # cores with them: serial GC and C1-only JIT halve its CPU (1.5 -> 0.6 CPU-s per 10 M-row round).
        defaults["spark.driver.extraJavaOptions"] = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
    for key, value in {**defaults, **conf}.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except PySparkException as exc:  # the JVM did not start: no Java, a master it refused, no memory
        raise ConfigError(
            f"could not start Spark (master {master or 'from spark-submit'}): {' '.join(str(exc).split())}. Check "
            "that Java 17 is installed (JAVA_HOME) and the master is reachable; Spark's own output above says more"
        ) from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass(frozen=True)
class _BucketRead:
    bucket: int
    tasks: tuple  # pyiceberg FileScanTasks of this bucket


def read_table(
    spark: SparkSession,
    lh: Lakehouse,
    name: str,
    *,
    union: bool = True,
    columns: Sequence[str] | None = None,
    row_filter: RowFilter = None,
) -> DataFrame:
    """A DataFrame over the table: the lake snapshot (plus the log tail, if ``union``), one Spark task per
    bucket. The snapshot and its offsets are fixed when this is called (the driver plans)."""
    from pyiceberg.expressions.visitors import bind
    from pyiceberg.io.pyarrow import ArrowScan, expression_to_pyarrow
    from pyspark.sql.pandas.types import from_arrow_schema

    from lakehouse.lake import check_lake_layout, lake_offsets

    definition = lh.table(name)
    table = lh.lake_table(name)
    if union:
        check_lake_layout(table.metadata, definition)
    pk = definition.primary_key
    out = output_columns(table, columns)
    scan_cols = out + [c for c in pk if c not in out]
    expr = parse_filter(row_filter, table.schema())
    scan = table.scan(row_filter=expr, selected_fields=tuple(scan_cols))
    projected = scan.projection()
    arrow_out = projected.as_arrow()
    target = pa.schema([arrow_out.field(c) for c in out])
    by_bucket: dict[int, list] = {b: [] for b in range(definition.buckets)}
    if table.current_snapshot() is not None:
        for task in scan.plan_files():
            partition = task.file.partition
            by_bucket[partition[len(partition) - 1]].append(task)
    offsets = lake_offsets(table.metadata, definition.buckets, name=str(definition.name))
    metadata = table.metadata
    io_props: dict[str, Any] = dict(lh.catalog.properties)
    store_url, store_options = lh.store.url, lh.store.connection_options()
    definition_json = definition.to_json()
    items = [_BucketRead(b, tuple(tasks)) for b, tasks in sorted(by_bucket.items())]

    def run(batches):  # on the Python workers
        from lakehouse.datafiles import shared_store
        from lakehouse.log import Log
        from lakehouse.tables import TableDefinition

        for batch in batches:
            for i in batch.column(0).to_pylist():
                item = items[i]
                io = load_file_io(io_props, metadata.location)
                scan_ = ArrowScan(metadata, io, projected, expr)
                lake = scan_.to_record_batches(item.tasks) if item.tasks else iter(())
                tail_filter = expression_to_pyarrow(bind(metadata.schema(), expr, case_sensitive=True))
                if union:
                    store = shared_store(store_url, store_options)
                    log_ = Log(store, TableDefinition.from_json(definition_json), max_workers=4)
                    try:
                        tail = read_tail(log_, {item.bucket: offsets[item.bucket]}, primary_key=pk)
                    finally:
                        log_.close()
                else:
                    tail = None
                if tail is None:
                    for b in lake:
                        yield b.select(out).cast(target)
                    continue
                yield from merge_batches(
                    lake, tail, primary_key=pk, columns=out, tail_filter=tail_filter, schema=arrow_out
                )

    n = len(items)
    return spark.range(0, n, 1, numPartitions=n).mapInArrow(run, from_arrow_schema(target))
