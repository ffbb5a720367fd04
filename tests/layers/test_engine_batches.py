"""`SparkSql.frame` over Arrow rows made of several record batches, one of them empty (what a union read over
buckets returns): PySpark 4.2's createDataFrame dropped every batch after the empty one, so keyed rounds lost
rows whose driving row came after an empty bucket."""

from __future__ import annotations

import pyarrow as pa


def test_rows_after_an_empty_batch_reach_spark(spark) -> None:
    from lakehouse.layers.engine import SparkSql

    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    batches = [
        pa.record_batch([pa.array([1, 2]), pa.array(["a", "b"])], schema=schema),
        pa.record_batch([pa.array([], pa.int64()), pa.array([], pa.string())], schema=schema),
        pa.record_batch([pa.array([3]), pa.array(["c"])], schema=schema),
    ]
    table = pa.Table.from_batches(batches)
    frame = SparkSql(spark, lh=None).frame("rows", table)
    assert sorted(row.k for row in frame.collect()) == [1, 2, 3]
