"""`SparkSql.frame` over Arrow rows: rows after an empty record batch (what a union read over buckets returns)
reach Spark (PySpark 4.2's createDataFrame dropped every batch after an empty one, so keyed rounds lost rows
whose driving row came after an empty bucket), and a view's partitions and relation kind."""

from __future__ import annotations

import pyarrow as pa


def test_rows_after_an_empty_batch_reach_spark(spark) -> None:
    from layers.spark_sql import SparkSql

    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    batches = [
        pa.record_batch([pa.array([1, 2]), pa.array(["a", "b"])], schema=schema),
        pa.record_batch([pa.array([], pa.int64()), pa.array([], pa.string())], schema=schema),
        pa.record_batch([pa.array([3]), pa.array(["c"])], schema=schema),
    ]
    table = pa.Table.from_batches(batches)
    frame = SparkSql(spark, lh=None).frame("rows", table)
    assert sorted(row.k for row in frame.collect()) == [1, 2, 3]


def test_arrow_views_are_one_partition_per_core_and_only_small_ones_stay_local(spark) -> None:
    """A round's Arrow views: above 1 MiB an RDD of the table's batches, one partition per core (Spark's
    defaults made a local relation of up to 48 MiB, serialized into every task of every query, and 10,000-row
    partitions); a small one stays a local relation (joins can broadcast it). The batch size conf is put back."""
    from layers.spark_sql import BATCH_CONF, SparkSql

    sql = SparkSql(spark, lh=None)
    before = spark.conf.get(BATCH_CONF, None)
    n = 300_000
    big = sql.frame("big", pa.table({"k": pa.array(range(n), pa.int64()), "v": pa.array(range(n), pa.int64())}))
    assert "LogicalRDD" in big._jdf.queryExecution().optimizedPlan().toString()
    assert big.rdd.getNumPartitions() == spark.sparkContext.defaultParallelism
    assert big.count() == n
    small = sql.frame("small", pa.table({"k": pa.array([1, 2], pa.int64())}))
    assert "LocalRelation" in small._jdf.queryExecution().optimizedPlan().toString()
    assert spark.conf.get(BATCH_CONF, None) == before
