"""Structured Streaming jobs on lakestream tables: an aggregate of a table's changes, kept in another table.

    query = aggregate_changes(spark, "ods.orders", "ads.orders_by_status", group_by=["o_orderstatus"],
                              sums=["o_totalprice"], checkpoint="/var/lib/lakestream/checkpoints/orders_by_status")
    query.awaitTermination()

The source is ``spark.readStream.format("lakestream")`` from ``earliest`` with before-images (the lake's
snapshot as inserts, then the log's net changes, `lakehouse.spark.stream`); each change counts +1
(``insert``, ``update_after``) or -1 (``update_before``, ``delete``: the old row), so a group's ``rows`` and
``sum_<column>`` follow every insert, update (also one that moves a row to another group) and delete. Spark
keeps the running aggregate in the checkpoint's state store and emits the groups a micro-batch changed
(output mode ``update``), which are upserted into the target, a primary-key table keyed by the group columns
(created on the first run), exactly once per micro-batch: a batch write named by the query's id and numbered
by the batch id (`lakehouse.spark.sink`'s ``writeId`` and ``batchId``), so a replayed micro-batch appends
nothing twice. ``available_now`` (the
default) reads what is there and stops: the idiom for a scheduled job (`dags/lake_streams.py`); without it the
query runs until stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakehouse.errors import InvalidArgument, SchemaError, TableNotFound

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

#: The changes that add a row to its group, and those that take one away (`lakehouse.read.changes`).
ADDS, REMOVES = ("insert", "update_after"), ("update_before", "delete")


def aggregate_schema(source: pa.Schema, group_by: Sequence[str], sums: Sequence[str]) -> pa.Schema:
    """The target's columns: the group columns, ``rows`` (int64), and ``sum_<c>`` per summed column (int64 for
    integers, float64 for floats, decimal with 10 more digits for decimals)."""
    fields = []
    for c in [*group_by, *sums]:
        if source.get_field_index(c) < 0:
            raise SchemaError(f"column {c!r} is not in the source; it has {source.names}")
    for c in group_by:
        fields.append(pa.field(c, source.field(c).type, nullable=False))
    fields.append(pa.field("rows", pa.int64(), nullable=False))
    for c in sums:
        t = source.field(c).type
        if pa.types.is_integer(t):
            out = pa.int64()
        elif pa.types.is_floating(t):
            out = pa.float64()
        elif pa.types.is_decimal(t):
            out = pa.decimal128(min(38, t.precision + 10), t.scale)
        else:
            raise SchemaError(f"column {c!r} is {t}: only numbers are summed")
        fields.append(pa.field(f"sum_{c}", out))
    return pa.schema(fields)


def aggregate_changes(
    spark: Any,
    source: str,
    target: str,
    *,
    group_by: Sequence[str],
    sums: Sequence[str] = (),
    checkpoint: str,
    warehouse: str | None = None,
    lakehouse: Lakehouse | None = None,
    available_now: bool = True,
) -> Any:
    """Start the streaming query that keeps ``target`` equal to ``SELECT group_by, count(*), sum(c)... FROM
    source GROUP BY group_by`` (see the module); returns it (``awaitTermination`` to wait). ``lakehouse``
    (default: the settings', on ``warehouse`` if given) creates the target if missing and checks an existing
    one's columns, before Spark reads anything."""
    from pyspark.sql import functions as F  # noqa: N812

    from lakehouse import Lakehouse

    if not group_by:
        raise InvalidArgument("aggregate_changes needs at least one group_by column")
    lh = lakehouse if lakehouse is not None else Lakehouse.from_env(**({"warehouse": warehouse} if warehouse else {}))
    try:
        url = lh.url
        wanted = target_table(lh, source, target, group_by, sums)
    finally:
        if lakehouse is None:
            lh.close()
    changes = (
        spark.readStream.format("lakestream")
        .option("warehouse", url)
        .option("startingOffsets", "earliest")
        .option("beforeImages", "true")
        .load(source)
    )
    sign = F.when(F.col("_op").isin(*ADDS), F.lit(1)).otherwise(F.lit(-1))
    columns = [F.sum(sign).cast("long").alias("rows")]
    for c in sums:
        columns.append(F.sum(sign * F.col(c)).cast(_spark_type(wanted.field(f"sum_{c}").type)).alias(f"sum_{c}"))

    def write(groups: Any, batch_id: int) -> None:
        # Spark's stream sinks in Python take appends only; a micro-batch's changed groups are upserted with a
        # batch write named by the query and numbered by the batch: a replayed batch (same state, same groups,
        # sorted within each partition) is recognised and appends nothing twice (`lakehouse.spark.sink`)
        query = groups.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        (
            groups.sortWithinPartitions(*group_by)
            .write.format("lakestream")
            .option("warehouse", url)
            .option("writeId", f"{target}/{query}")
            .option("batchId", batch_id)
            .mode("append")
            .save(target)
        )

    writer = (
        changes.groupBy(*group_by)
        .agg(*columns)
        .writeStream.outputMode("update")
        .foreachBatch(write)
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def target_table(lh: Lakehouse, source: str, target: str, group_by: Sequence[str], sums: Sequence[str]) -> pa.Schema:
    """The aggregate's columns; ``target`` created with them (keyed by ``group_by``) if missing.

    Raises:
        SchemaError: a column the source lacks or cannot sum, or a ``target`` with other columns or key.
    """
    wanted = aggregate_schema(lh.table(source).schema, group_by, sums)
    try:
        existing = lh.table(target)
    except TableNotFound:
        lh.create_table(target, wanted, primary_key=list(group_by), buckets=1)
        return wanted
    if existing.schema.names != wanted.names or list(existing.primary_key) != list(group_by):
        raise SchemaError(
            f"{target} exists with columns {existing.schema.names} (key {list(existing.primary_key)}); the "
            f"aggregate writes {wanted.names} (key {list(group_by)}): drop it or choose another target"
        )
    return wanted


def _spark_type(t: pa.DataType) -> str:
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    return "double" if pa.types.is_floating(t) else "long"
