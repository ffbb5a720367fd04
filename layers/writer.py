"""Rounds written by Spark tasks: the model's rows never meet on the driver.

A full round (a model's first, a rebuild, a ``recompute`` model's every round) computes the whole SQL. Its rows
are tagged with their bucket of the model's table (lakestream's bucket function, on the workers), repartitioned
by it, and each Spark task diffs its buckets' new rows against the bucket's old rows (the model's table as of
the round's output offsets, read by the task with the read plan the driver made) and appends the difference
to those buckets itself, under the round's producer id and sequences: so a retried task, or a resumed round,
appends nothing twice. Every bucket gets a task (a marker row per bucket joins the rows): one with no new row
at all loses its old rows.

An incremental round on the executors (`layers.executor_rounds`) is written the same way (`write_keys`), restricted
to the keys the round covers: the task rows are its new rows and those keys, and each task looks the keys' old
rows up (`lakehouse.read.changes.read_bucket_rows`) instead of reading its buckets whole; a covered key without a new
row is deleted by its task.

Before any append the rows are checked for a key yielded twice or null (one Spark aggregation over the persisted
rows), so a model whose SQL is not keyed by its key writes nothing.

Credentials reach the tasks inside the pickled task context (as in tiering and the Spark source; see
docs/concepts/tiering-and-union-read.md): never in the plan's ``repr``, Spark's UI or logs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.log import append_until_complete
from layers.errors import ModelKeyError, ModelSchemaChanged

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakehouse.lakehouse import Lakehouse
    from lakehouse.read.changes import ChangesPlan
    from lakehouse.read.union import ReadPlan

__all__ = [
    "BucketWriter",
    "KeysWriter",
    "append_round",
    "check_frame_keys",
    "check_keys",
    "diff_rows",
    "round_sequence",
    "write_full",
    "write_keys",
]

BUCKET = "__lakestream_bucket"
#: In a round's task rows: 0 a new row, 1 a key the round covers (`KeysWriter`), 2 a bucket's marker (`write_full`).
KIND = "__lakestream_kind"
SUMMARY = "bucket int, upserts long, deletes long, rows long"


def diff_rows(
    model: str, new: pa.Table, old: pa.Table, schema: pa.Schema, key: Sequence[str]
) -> tuple[pa.Table, pa.Table]:
    """(upserts, key-only deletes) that turn ``old`` into ``new``, both keyed by ``key``, sorted by key. A key
    ``new`` holds twice is the model's error (its SQL does not yield one row per key)."""
    key = list(key)
    check_keys(model, new, key)
    try:
        new = new.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError) as exc:
        raise ModelSchemaChanged(
            f"model {model}: its SQL's rows ({_fields(new.schema)}) do not fit its table ({_fields(schema)}): "
            f"{str(exc).splitlines()[0]}. Make the SQL give the table's columns and types (a CAST), or drop the "
            f"model's table (lakestream table drop {model} --yes) and run lakestream layers deploy: its next round "
            "builds it in full. Nothing was written for this round",
            model=model,
        ) from None
    old = old.select(schema.names).cast(schema)
    others = [n for n in schema.names if n not in key]
    left = new.append_column("__in_new", pa.array([True] * new.num_rows, pa.bool_()))
    right = old.rename_columns([n if n in key else f"{n}__old" for n in old.column_names])
    right = right.append_column("__in_old", pa.array([True] * old.num_rows, pa.bool_()))
    joined = left.join(right, keys=key, join_type="full outer")
    in_new = pc.is_valid(joined["__in_new"])
    in_old = pc.is_valid(joined["__in_old"])
    differs = pc.invert(in_old)
    for name in others:
        a, b = joined[name], joined[f"{name}__old"]
        same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
        differs = pc.or_(differs, pc.invert(same))
    order = [(k, "ascending") for k in key]
    upserts = joined.filter(pc.and_(in_new, differs)).select(schema.names).cast(schema).sort_by(order)
    deletes = joined.filter(pc.and_(in_old, pc.invert(in_new))).select(key).sort_by(order)
    return upserts, deletes.cast(pa.schema([schema.field(k) for k in key]))


def _fields(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def check_keys(model: str, table: pa.Table, key: Sequence[str]) -> None:
    """A round's rows ``table`` hold each key once and no null key (else `ModelKeyError`, before any append)."""
    if table.num_rows == 0:
        return
    missing = [k for k in key if k not in table.column_names]
    if missing:
        raise ModelKeyError(
            f"model {model}: its SQL's rows lack the key column(s) {missing} (they have {table.column_names}); "
            "fix the SQL or its primary_key. Nothing was written for this round",
            model=model,
        )
    null = None
    for k in key:
        column_null = pc.is_null(table[k])
        null = column_null if null is None else pc.or_(null, column_null)
    nulls = table.filter(null)
    if nulls.num_rows:
        null_key_error(model, nulls.num_rows, nulls.slice(0, 1).to_pylist()[0], key)
    check_unique(model, table, key)


def null_key_error(model: str, count: int, sample: dict, key: Sequence[str]) -> None:
    raise ModelKeyError(
        f"model {model}: its SQL yields {count} row(s) whose key {list(key)} is null, e.g. {sample}; a key column "
        "is never null (coalesce it to a value, or filter such rows out). Nothing was written for this round; fix "
        "the SQL and run again",
        model=model,
    )


def check_unique(model: str, table: pa.Table, key: Sequence[str]) -> None:
    if table.num_rows == 0:
        return
    counts = table.group_by(list(key)).aggregate([([], "count_all")])
    twice = counts.filter(pc.greater(counts["count_all"], 1))
    if twice.num_rows:
        _twice_error(model, twice.num_rows, twice.slice(0, 3).select(list(key)).to_pylist(), key)


def _twice_error(model: str, count: int, sample: list[dict], key: Sequence[str]) -> None:
    raise ModelKeyError(
        f"model {model}: its SQL yields key {sample[0]} ({count} key(s) in all, e.g. {sample}) more than once, so "
        f"it is not keyed by {list(key)}: a join that is not many-to-one, or a key that is not the GROUP BY's. "
        "Nothing was written for this round; fix the SQL or the primary_key",
        model=model,
    )


#: Sequences of one round: upserts from ``number * ROUND_SEQUENCES``, deletes from half-way (one per chunk).
ROUND_SEQUENCES = 2**20


def round_sequence(number: int, op: str, chunk: int) -> int:
    """The producer sequence of chunk ``chunk`` of round ``number``'s ``op`` rows: the same on every retry."""
    return number * ROUND_SEQUENCES + (ROUND_SEQUENCES // 2 if op == "delete" else 0) + chunk


def append_round(log_: Any, data: pa.Table, op: str, producer: str, number: int) -> list[tuple[int, int, int]]:
    """Append round ``number``'s ``op`` rows (sorted: the same chunks on every retry) in chunks within the
    log's per-append limits, each under its own sequence (`round_sequence`), retrying an incomplete append
    (the written buckets are recognised). Returns where they landed: (bucket, first offset, last offset)."""
    landed: list[tuple[int, int, int]] = []
    if data.num_rows == 0:
        return landed
    limits = log_.limits
    per_row = max(1, data.nbytes // data.num_rows)
    rows = max(1, min(limits.max_rows, (limits.max_bytes // 2) // per_row))
    for chunk, offset in enumerate(range(0, data.num_rows, rows)):
        part = data.slice(offset, rows)
        result = append_until_complete(log_, part, op, producer, round_sequence(number, op, chunk))
        landed.extend((bucket, first, last) for bucket, (first, last) in result.ranges.items())
    return landed


@dataclass(frozen=True)
class BucketWriter:
    """What a Spark task needs to write its buckets of a full round (pickled to the executors)."""

    model: str
    definition_json: bytes
    schema: pa.Schema
    key: tuple[str, ...]
    old: ReadPlan
    producer: str
    number: int
    store_url: str
    store_options: dict[str, str] = field(repr=False)

    def _definition(self) -> Any:
        from lakehouse.table.definition import TableDefinition

        return TableDefinition.from_json(self.definition_json)

    def tag(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Each row with its bucket of the model's table."""
        from lakehouse.table.bucketing import bucket_ids

        definition = self._definition()
        key_type = definition.schema.field(definition.bucket_key).type
        for batch in batches:
            ids = bucket_ids(batch.column(definition.bucket_key).cast(key_type), definition.buckets)
            yield batch.append_column(BUCKET, ids)

    def _log(self) -> Any:
        from lakehouse.iceberg.datafiles import shared_store
        from lakehouse.log import Log

        return Log(shared_store(self.store_url, self.store_options), self._definition(), max_workers=4)

    def _append(self, log_: Any, bucket: int, new: pa.Table, old: pa.Table, rows: int) -> pa.RecordBatch:
        """Diff ``new`` against ``old`` (one bucket's) and append the difference; the bucket's summary row."""
        upserts, deletes = diff_rows(self.model, new, old, self.schema, self.key)
        append_round(log_, upserts, "upsert", self.producer, self.number)
        append_round(log_, deletes, "delete", self.producer, self.number)
        return pa.RecordBatch.from_pydict(
            {"bucket": [bucket], "upserts": [upserts.num_rows], "deletes": [deletes.num_rows], "rows": [rows]},
            schema=pa.schema(
                [("bucket", pa.int32()), ("upserts", pa.int64()), ("deletes", pa.int64()), ("rows", pa.int64())]
            ),
        )

    def write(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Diff and append every bucket of this task's rows; one summary row per bucket."""
        received = [b for b in batches if b.num_rows]
        if not received:
            return
        rows = pa.Table.from_batches(received)
        log_ = self._log()
        try:
            for bucket in sorted(pc.unique(rows[BUCKET]).to_pylist()):
                part = rows.filter(pc.equal(rows[BUCKET], bucket))
                new = part.filter(pc.equal(part[KIND], 0)).select(self.schema.names)  # not the bucket's marker
                old = read_bucket(self.old, bucket, log_, self.schema)
                yield self._append(log_, bucket, new, old, new.num_rows)
        finally:
            log_.close()


@dataclass(frozen=True)
class KeysWriter(BucketWriter):
    """What a Spark task needs to write its buckets of an incremental round on the executors: ``old`` is a point
    lookup of the model's table as of the round's output offsets (`lakehouse.read.changes.plan_lookup`), ``lake``
    reaches its files. A task's rows are the round's new rows (``KIND`` 0) and the keys the round covers (``KIND``
    1, key columns only): their old rows are looked up, diffed against the new ones, the difference appended."""

    lake: Any = None  # lakehouse.iceberg.datafiles.LakeContext

    def write(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Diff and append every bucket of this task's rows; one summary row per bucket (``rows``: its keys)."""
        from lakehouse.read.changes import read_bucket_rows

        received = [b for b in batches if b.num_rows]
        if not received:
            return
        rows = pa.Table.from_batches(received)
        plan = cast("ChangesPlan", self.old)  # a keys writer's is a point lookup's
        items = {item.bucket: item for item in plan.buckets}
        key_schema = pa.schema([self.schema.field(k) for k in self.key])
        log_ = self._log()
        try:
            for bucket in sorted(pc.unique(rows[BUCKET]).to_pylist()):
                part = rows.filter(pc.equal(rows[BUCKET], bucket))
                is_key = pc.equal(part[KIND], 1)
                new = part.filter(pc.invert(is_key)).select(self.schema.names)
                keys = part.filter(is_key).select(list(self.key)).cast(key_schema)
                item = items.get(bucket)
                old = self.schema.empty_table()
                if item is not None and keys.num_rows:
                    old = read_bucket_rows(plan, item, log_, self.lake, keys).select(self.schema.names)
                yield self._append(log_, bucket, new, old, keys.num_rows)
        finally:
            log_.close()


def write_full(
    lh: Lakehouse,
    model: str,
    number: int,
    producer: str,
    output: dict[int, int],
    new: DataFrame,
    key: Sequence[str],
    *,
    before_append: Callable[[], None] = lambda: None,
) -> tuple[int, int, int]:
    """Write a full round's rows ``new`` (a DataFrame of the model's SQL) to ``model``'s log from Spark tasks
    (see the module; ``before_append`` is called once the rows are checked, before the first append); returns
    (upserts, deletes, rows).

    Raises:
        ModelSchemaChanged: the rows' columns are not the table's.
        ModelKeyError: a key is null or comes twice. Nothing was appended.
    """
    from pyspark.sql import functions as F

    from lakehouse.read.union import plan_read

    definition = lh.table(model)
    schema = definition.schema
    old = plan_read(
        lh.lake_table(model), definition, as_of=output, log_=lh.log(model), io_properties=lh.catalog_properties()
    )
    writer = BucketWriter(
        model,
        definition.to_json(),
        schema,
        tuple(key),
        old,
        producer,
        number,
        lh.store.url,
        dict(lh.store.connection_options()),
    )
    _check_columns(model, list(new.columns), schema)
    rows = new.persist()
    try:
        check_frame_keys(model, rows, key)
        before_append()
        tagged = rows.mapInArrow(writer.tag, f"{_ddl_of(rows)}, {BUCKET} int").withColumn(KIND, F.lit(0))
        # one marker row per bucket: a bucket that gets no new row still gets its task, which deletes its old rows
        markers = rows.sparkSession.range(definition.buckets).select(
            F.col("id").cast("int").alias(BUCKET), F.lit(2).alias(KIND)
        )
        both = tagged.unionByName(markers, allowMissingColumns=True)
        summary = both.repartition(definition.buckets, BUCKET).mapInArrow(writer.write, SUMMARY).collect()
    finally:
        rows.unpersist()
    return (
        sum(r["upserts"] for r in summary),
        sum(r["deletes"] for r in summary),
        sum(r["rows"] for r in summary),
    )


def write_keys(
    lh: Lakehouse,
    model: str,
    number: int,
    producer: str,
    output: dict[int, int],
    new: DataFrame,
    keys: DataFrame,
    key: Sequence[str],
    *,
    before_append: Callable[[], None] = lambda: None,
) -> tuple[int, int, int]:
    """Write an incremental round's rows from Spark tasks: ``new`` (a DataFrame of the model's SQL over the
    round's restricted inputs) diffed against the old rows of ``keys`` (the model keys the round covers, as a
    DataFrame: its new rows outside them are dropped, its keys without a new row deleted), both partitioned by
    the model's bucket; each task looks its keys' old rows up (as of ``output``), diffs and appends, under the
    round's producer id and sequences (see the module). ``before_append`` is called once the rows are checked.
    Returns (upserts, deletes, keys covered); nothing but those counts reaches the driver.

    Raises:
        ModelSchemaChanged: the rows' columns are not the table's.
        ModelKeyError: a key is null or comes twice. Nothing was appended.
    """
    from pyspark.sql import functions as F

    from lakehouse.iceberg.datafiles import LakeContext
    from lakehouse.read.changes import plan_lookup

    definition = lh.table(model)
    schema = definition.schema
    key = list(key)
    table = lh.lake_table(model)
    old = plan_lookup(table, lh.log(model), output, range(definition.buckets))
    writer = KeysWriter(
        model,
        definition.to_json(),
        schema,
        tuple(key),
        old,  # type: ignore[arg-type]
        producer,
        number,
        lh.store.url,
        dict(lh.store.connection_options()),
        lake=LakeContext.of(lh.store, table),
    )
    _check_columns(model, list(new.columns), schema)
    rows = new.select(*schema.names).persist()
    try:
        check_frame_keys(model, rows, key)  # before the semi join, which would drop null keys unseen
        wanted = keys.select(*(F.col(k).cast(rows.schema[k].dataType).alias(k) for k in key)).distinct()
        both = (
            rows.join(wanted, on=key, how="left_semi")
            .select(*schema.names)
            .withColumn(KIND, F.lit(0).cast("int"))
            .unionByName(wanted.withColumn(KIND, F.lit(1).cast("int")), allowMissingColumns=True)
        )
        before_append()
        tagged = both.mapInArrow(writer.tag, f"{_ddl_of(both)}, {BUCKET} int")
        summary = tagged.repartition(definition.buckets, BUCKET).mapInArrow(writer.write, SUMMARY).collect()
    finally:
        rows.unpersist()
    return sum(r["upserts"] for r in summary), sum(r["deletes"] for r in summary), sum(r["rows"] for r in summary)


def check_frame_keys(model: str, rows: DataFrame, key: Sequence[str]) -> None:
    """`check_keys` of a DataFrame: one Spark aggregation finds both a key yielded twice and a null key (a
    group of its own); only a sample of the bad keys reaches the driver."""
    null = " OR ".join(f"`{k}` IS NULL" for k in key)
    bad = rows.groupBy(*key).count().filter(f"count > 1 OR {null}")
    sample = [r.asDict() for r in bad.limit(3).collect()]
    if any(any(s[k] is None for k in key) for s in sample):
        nulls = rows.filter(null)
        null_key_error(model, nulls.count(), nulls.limit(1).collect()[0].asDict(), key)
    if sample:
        _twice_error(model, bad.count(), [{k: s[k] for k in key} for s in sample], key)


def _check_columns(model: str, columns: list[str], schema: pa.Schema) -> None:
    if sorted(columns) != sorted(schema.names):
        raise ModelSchemaChanged(
            f"model {model}: its SQL's columns {columns} are not its table's {schema.names}; make the SQL give the "
            f"table's columns, or drop the model's table (lakestream table drop {model} --yes) and run lakestream "
            "layers deploy: its next round builds it in full. Nothing was written for this round",
            model=model,
        )


def read_bucket(plan: ReadPlan, bucket: int, log_: Any, schema: pa.Schema) -> pa.Table:
    """One bucket of a located read plan, the model's columns only."""
    batches = [b for b in plan.execute(bucket, log_) if b.num_rows]
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches(batches).select(schema.names)


def _ddl_of(df: DataFrame) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema)
