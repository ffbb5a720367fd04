"""``df.write.format("lakestream")`` and ``df.writeStream.format("lakestream")``: Spark appends to a table's log,
exactly once across task retries and (streams) driver crashes and restarts.

    (df.write.format("lakestream").option("warehouse", "s3://lake/warehouse")
       .mode("append").save("ods.orders"))
    (df.writeStream.format("lakestream").option("warehouse", "s3://lake/warehouse")
       .option("checkpointLocation", "s3a://lake/checkpoints/orders").start("ods.orders"))

The DataFrame has the table's columns (any order; types Arrow casts safely, values checked) and, for a
primary-key table, optionally ``_op`` (a string per row: ``upsert``, ``insert`` or ``delete``; without it
every row is an upsert; a log table takes ``insert`` only). Delete rows need only the key: a DataFrame with
``_op`` may lack non-key columns if all its rows are deletes.

Each Spark task appends its own rows, the buckets they fall in, with `Log.append` under a producer id and
sequences that name them: the producer id is the write's (batch: a job id chosen on the driver, or the
``writeId`` option; stream: the query's id, which Spark keeps in the checkpoint, or the ``producerId`` option)
plus the task's partition id; the sequences number the task's appends (a stream's batch id times 2**20 plus
the append's number). A task first splits its rows into runs of consecutive rows of the same op, in input
order (so a key's upsert then delete in one task apply in that order: appends are ordered per bucket), each
run into appends of at most ``rowsPerAppend`` rows, and checks them all (`conform`: null keys, bad ops, values
that do not cast) before its first append. A retried task attempt, or a replayed stream batch, appends the same
rows under the same ids and sequences: the log recognises those that landed and writes the others once.

**The assumption:** a replay gives each task the same rows, in the same order among one key's rows and among
``_op`` changes (each run is sorted by key, stably, so the order of distinct keys does not matter). Spark
replays a stream batch from the same source offsets; the plan from the source to the sink must partition the
rows the same way (no nondeterministic repartitioning or UDF, no ``rand()``; one key's rows sorted within
partitions after a shuffle; ``rowsPerAppend`` unchanged). Otherwise an append whose (producer id, sequence)
landed with other rows raises `SequenceConflict` (nothing written by it), but rows that moved to another
append of the task can be written a second time. A replay is recognised while the bucket's newest
``dedup_window`` (256) segments still include the first attempt's. docs/guides/spark.md says more.

Driver-side checks (in ``writer``/``streamWriter``, before any task): the table exists, the DataFrame's
columns are the table's (plus ``_op``), each type has an Arrow cast to the table's, the save mode is append.
Credentials never travel as options: the source class carries them (`lakehouse.spark.source.register`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from lakehouse.errors import BatchError, InvalidArgument, SchemaError
from lakehouse.log import append_until_complete
from lakehouse.log.batch import check_cast
from lakehouse.table.definition import PARTIAL_UPDATE

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from lakehouse.log import Log
    from lakehouse.table.definition import TableDefinition

OP_COLUMN = "_op"
#: Options of a write (lower case: Spark's options are case-insensitive).
WRITE_OPTIONS = ("path", "table", "warehouse", "rowsperappend", "writeid", "batchid")
STREAM_OPTIONS = ("path", "table", "warehouse", "rowsperappend", "checkpointlocation", "producerid")
DEFAULT_ROWS_PER_APPEND = 100_000
#: Sequences of one stream batch (per task): batch ``b``'s appends are ``b * BATCH_SEQUENCES + n``.
BATCH_SEQUENCES = 2**20
#: Spark's local properties of a micro-batch's tasks (`MicroBatchExecution`, `StreamExecution`).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


# ---- options and the driver's checks ---------------------------------------------------------------------


@dataclass(frozen=True)
class WriteOptions:
    table: str
    rows_per_append: int
    write_id: str | None = None  # batch
    producer_id: str | None = None  # stream
    batch_id: int | None = None  # batch, with write_id: the writes of one writer numbered (foreachBatch)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, stream: bool) -> WriteOptions:
        from lakehouse.spark.options import known_options

        what = "df.writeStream" if stream else "df.write"
        opts = known_options(options, STREAM_OPTIONS if stream else WRITE_OPTIONS, f'{what}.format("lakestream")')
        table = opts.get("path") or opts.get("table")
        if not table:
            call = 'start("ods.orders")' if stream else 'mode("append").save("ods.orders")'
            raise InvalidArgument(f'name the table: {what}.format("lakestream").{call}')
        raw = str(opts.get("rowsperappend", DEFAULT_ROWS_PER_APPEND)).strip()
        if not raw.isdigit() or int(raw) < 1:
            raise InvalidArgument(f"option rowsPerAppend is a number of rows >= 1, got {raw!r}")
        ids = {}
        for key in ("writeid", "producerid"):
            if key in opts:
                value = str(opts[key]).strip()
                if not value:
                    raise InvalidArgument(f"option {key} names the write: give a non-empty string")
                ids[key] = value
        batch_id = None
        if "batchid" in opts:
            text = str(opts["batchid"]).strip()
            if not text.isdigit():
                raise InvalidArgument(f"option batchId is a batch's number (an integer >= 0), got {text!r}")
            if "writeid" not in ids:
                raise InvalidArgument(
                    "option batchId numbers the writes of one writer: give the writer's writeId with it (e.g. "
                    "foreachBatch: writeId = the query's id, batchId = the batch id)"
                )
            batch_id = int(text)
        return cls(str(table), int(raw), ids.get("writeid"), ids.get("producerid"), batch_id)


def check_schema(definition: TableDefinition, schema: StructType) -> bool:
    """Check a DataFrame's schema against the table (on the driver, before any task). Returns whether it has
    an ``_op`` column. Raises `SchemaError` naming the column and what to do."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StringType

    name = definition.name
    table_schema = definition.schema
    names = [f.name for f in schema.fields]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SchemaError(f"{name}: the DataFrame repeats columns {dupes}; select each column once")
    has_op = OP_COLUMN in names and OP_COLUMN not in table_schema.names
    if has_op and not isinstance(schema[OP_COLUMN].dataType, StringType):
        raise SchemaError(
            f"{name}: column {OP_COLUMN!r} is the row's operation, a string ('upsert', 'insert' or 'delete'), "
            f"not {schema[OP_COLUMN].dataType.simpleString()}"
        )
    extra = [n for n in names if n not in table_schema.names and not (has_op and n == OP_COLUMN)]
    if extra:
        raise SchemaError(
            f"{name}: the DataFrame has columns the table does not: {extra} (table: {table_schema.names}"
            f"{'; primary-key tables also take ' + repr(OP_COLUMN) if definition.has_primary_key else ''}); "
            "drop or rename them"
        )
    missing = [n for n in table_schema.names if n not in names]
    if missing:
        # delete rows may carry just the key; so may every row of a partial-update table (absent = kept)
        partial = has_op or definition.merge_engine == PARTIAL_UPDATE
        key_only = partial and definition.has_primary_key and not set(missing) & set(definition.primary_key)
        if not key_only:
            raise SchemaError(
                f"{name}: the DataFrame lacks columns {missing} (table: {table_schema.names}); add them "
                "(lit(None).cast(...) for nulls). Only delete rows, and rows of a partial-update table, may "
                "leave out columns other than the primary key"
            )
    arrow = to_arrow_schema(schema, timezone="UTC")
    for f in arrow:
        if f.name not in table_schema.names:
            continue
        target = table_schema.field(f.name).type
        if f.type == target:
            continue
        check_cast(name, f.name, f.type, target)  # as the task's `conform` would, but before any task runs
        try:
            pa.array([], f.type).cast(target)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            raise SchemaError(
                f"{name}: column {f.name!r} is {schema[f.name].dataType.simpleString()} ({f.type}) in the "
                f"DataFrame, which cannot be cast to the table's {target}; cast it in Spark first"
            ) from None
    return has_op


def _hash(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:24]


# ---- the task's side -------------------------------------------------------------------------------------


def open_log(store_url: str, store_options: Mapping[str, str], definition_json: bytes) -> Log:
    """The table's `Log` for one task (close it after), on the process' shared store.

    One per task, never one per worker process: a `Log` trusts what it remembers of a producer id (the newest
    sequence it saw it append), which holds for a producer that lives in one process only. A stream's producer
    id (query and partition) appends from whichever worker runs the partition's task in each batch: a `Log`
    kept in a worker from batch 2 would take batch 4's replayed appends for new ones once it recognised the
    first (its memory says the producer stopped at batch 2's). A fresh `Log` looks back in each bucket first."""
    from lakehouse.iceberg.datafiles import shared_store
    from lakehouse.log import Log
    from lakehouse.table.definition import TableDefinition

    store = shared_store(store_url, dict(store_options))
    return Log(store, TableDefinition.from_json(definition_json), max_workers=4)


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What a task appended: its partition and attempt, producer id, rows and appends (landed or recognised)."""

    partition: int
    attempt: int
    producer_id: str | None
    rows: int
    appends: int
    recognised: int = 0


@dataclass(frozen=True)
class Run:
    """Consecutive rows of one op, conformed to the table (key-only for deletes), cut into appends."""

    op: str
    parts: list[pa.Table]


@dataclass
class TaskWrite:
    """The rows of one task, split and checked before any append (`runs`), then appended (`append`)."""

    definition: TableDefinition
    has_op: bool
    rows_per_append: int
    limits: Any = None
    runs: list[Run] = field(default_factory=list)

    def split(self, table: pa.Table) -> list[Run]:
        from lakehouse.log.batch import Limits, conform

        definition = self.definition
        limits = self.limits or Limits()
        default_op = "upsert" if definition.has_primary_key else "insert"
        if not self.has_op:
            segments = [(default_op, table)]
        else:
            ops = table.column(OP_COLUMN).combine_chunks()
            table = table.drop_columns([OP_COLUMN])
            segments = [(op, table.slice(start, length)) for op, start, length in op_runs(definition, ops)]
        runs = []
        for op, rows in segments:
            if op == "delete":
                rows = rows.select(list(definition.primary_key))
            else:
                rows = rows.select([n for n in definition.schema.names if n in rows.column_names])
            conformed = in_key_order(definition, conform(definition, rows, op, Limits(max_rows=2**62, max_bytes=2**62)))
            runs.append(Run(op, list(chunks(conformed, min(self.rows_per_append, limits.max_rows), limits))))
        self.runs = runs
        return runs


def in_key_order(definition: TableDefinition, rows: pa.Table) -> pa.Table:
    """``rows`` (one run: one op) sorted by the primary key (a log table: its bucket key), stably: a key's rows
    keep their order, so the run does what it did unsorted, and the appends no longer depend on the order in
    which Spark handed distinct keys to the task (after a shuffle that order is not the same on a retry)."""
    keys = list(definition.primary_key) if definition.has_primary_key else [definition.bucket_key]
    if rows.num_rows < 2 or None in keys:
        return rows
    try:
        order = pc.sort_indices(rows, sort_keys=[(k, "ascending") for k in keys])
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # a key type Arrow does not sort: as received
        return rows
    return rows.take(order)


def op_runs(definition: TableDefinition, ops: pa.Array) -> list[tuple[str, int, int]]:
    """``(op, start, length)`` of each run of consecutive rows of one op; raises `BatchError` for a null op, an
    unknown one, or one the table does not take."""
    from lakehouse.log.segment import OPS

    allowed = OPS if definition.has_primary_key else ("insert",)
    name = definition.name
    if ops.null_count:
        first = int(np.flatnonzero(np.asarray(ops.is_null()))[0])
        raise BatchError(
            f"{name}: column {OP_COLUMN!r} has {ops.null_count} null(s), first at row {first} of the task; every "
            f"row needs its operation, one of {list(allowed)}. Nothing was written by this task"
        )
    values = ops.cast(pa.string())
    for bad in pc.unique(values).to_pylist():
        if bad not in allowed:
            what = (
                "a log table (no primary key): it takes inserts only"
                if bad in OPS
                else f"not an operation (use one of {list(allowed)})"
            )
            raise BatchError(
                f"{name}: column {OP_COLUMN!r} holds {bad!r}: {what}. Nothing was written by this task; fix the "
                f"{OP_COLUMN} values and write again"
            )
    codes = np.asarray(pc.index_in(values, pa.array(list(OPS))).to_numpy(zero_copy_only=False))
    starts = [0, *(np.flatnonzero(codes[1:] != codes[:-1]) + 1).tolist()]
    ends = [*starts[1:], len(codes)]
    return [(OPS[codes[s]], s, e - s) for s, e in zip(starts, ends, strict=True)]


def chunks(table: pa.Table, rows: int, limits: Any) -> Iterator[pa.Table]:
    """``table`` in slices of ``rows`` rows, a slice halved until it is under half the log's byte limit: the
    same slices for the same rows, whatever batches Spark cut them in."""
    for start in range(0, table.num_rows, rows):
        yield from _halved(table.slice(start, rows), limits.max_bytes // 2)


def _halved(part: pa.Table, max_bytes: int) -> Iterator[pa.Table]:
    if part.num_rows <= 1 or part.nbytes <= max_bytes:
        yield part
        return
    half = part.num_rows // 2
    yield from _halved(part.slice(0, half), max_bytes)
    yield from _halved(part.slice(half), max_bytes)


class _SinkWriter:
    """The part of both writers that runs in the tasks. Pickled to the workers with the store's options, which
    no ``repr`` shows."""

    stream = False

    def __init__(
        self,
        definition_json: bytes,
        options: WriteOptions,
        has_op: bool,
        *,
        store_url: str,
        store_options: dict[str, str],
        producer_base: str | None,
    ) -> None:
        self.definition_json = definition_json
        self.options = options
        self.has_op = has_op
        self.store_url = store_url
        self._store_options = store_options
        self.producer_base = producer_base

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.options.table} in {self.store_url})"

    # hooks (tests inject faults here)
    def _after_append(self, sequence: int, result: Any) -> None:
        """Called after each append landed (or was recognised)."""

    def _ids(self, context: Any) -> tuple[str, int]:
        """(producer id, first sequence) of this task."""
        partition = context.partitionId() if context is not None else 0
        assert self.producer_base is not None
        return f"{self.producer_base}-p{partition}", 0

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        from pyspark import TaskContext

        from lakehouse.table.definition import TableDefinition

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        attempt = context.attemptNumber() if context is not None else 0
        batches = [b for b in iterator if b.num_rows]
        if not batches:
            return SinkCommitMessage(partition, attempt, None, 0, 0)
        producer_id, first = self._ids(context)
        definition = TableDefinition.from_json(self.definition_json)
        task = TaskWrite(definition, self.has_op, self.options.rows_per_append)
        runs = task.split(pa.Table.from_batches(batches))  # every check before the first append
        appends = sum(len(r.parts) for r in runs)
        if (self.stream or self.options.batch_id is not None) and appends > BATCH_SEQUENCES:
            raise InvalidArgument(
                f"{definition.name}: a task of this stream batch would make {appends} appends, more than "
                f"{BATCH_SEQUENCES}; raise rowsPerAppend or give the stream more partitions. Nothing was written"
            )
        sequence, recognised, rows = first, 0, 0
        log_ = open_log(self.store_url, self._store_options, self.definition_json)
        try:
            for run in runs:
                for part in run.parts:
                    result = append_until_complete(log_, part, run.op, producer_id, sequence)
                    recognised += bool(result.already_appended)
                    rows += part.num_rows
                    self._after_append(sequence, result)
                    sequence += 1
        finally:
            log_.close()
        return SinkCommitMessage(partition, attempt, producer_id, rows, appends, recognised)


class LakestreamBatchWriter(_SinkWriter, DataSourceArrowWriter):
    """``df.write``: producer ids from the write's id (``writeId``, else a fresh one per job) and partition;
    with ``batchId``, sequences from it as a stream's (one producer per partition across a writer's batches: a
    replayed batch is found among its newest segments, where a fresh producer id per batch looks back through
    every bucket's newest ``dedup_window`` segments)."""

    def _ids(self, context: Any) -> tuple[str, int]:
        producer_id, first = super()._ids(context)
        batch = self.options.batch_id
        return producer_id, first if batch is None else batch * BATCH_SEQUENCES

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: every task's appends are in the log already."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing can be taken back: the tasks that finished appended their rows. Running the write again with
        the same ``writeId`` (and the same rows per task) appends only what is missing."""


class LakestreamStreamWriter(_SinkWriter, DataSourceStreamArrowWriter):
    """``df.writeStream``: producer ids from the query (its id, kept in the checkpoint, or ``producerId``) and
    partition; sequences from the batch id."""

    stream = True

    def _ids(self, context: Any) -> tuple[str, int]:
        partition = context.partitionId() if context is not None else 0
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if batch is None:
            raise InvalidArgument(
                f"{self.options.table}: this task runs no micro-batch (Spark gave no {BATCH_ID_PROPERTY}); the "
                "lakestream stream sink runs micro-batch queries only (no trigger(continuous=...))"
            )
        base = self.producer_base
        if base is None:
            query = context.getLocalProperty(QUERY_ID_PROPERTY)
            if not query:
                raise InvalidArgument(
                    f"{self.options.table}: Spark gave no query id ({QUERY_ID_PROPERTY}); give the stream a "
                    'stable option("producerId", ...)'
                )
            base = "s-" + _hash("query", query)
        return f"{base}-p{partition}", int(batch) * BATCH_SEQUENCES

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (PySpark's)
        """Nothing to do: the batch's appends are in the log already (Spark then records the batch done)."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing can be taken back: the batch's replay (same offsets) appends only what is missing."""


# ---- what the data source calls ------------------------------------------------------------------------------


def make_writer(
    source: Any, schema: StructType, overwrite: bool, *, stream: bool, writer_class: type[_SinkWriter] | None = None
) -> _SinkWriter:
    """The writer of ``source`` (a `LakestreamDataSource`), after the driver's checks (``writer_class``: a
    subclass of the default one, e.g. a test's with faults)."""
    from lakehouse.lakehouse import Lakehouse

    what = "df.writeStream" if stream else "df.write"
    options = WriteOptions.parse(source.options, stream=stream)
    if overwrite:
        raise InvalidArgument(
            f'{what}.format("lakestream") appends to a table\'s log: use mode("append") '
            f"{'(outputMode append)' if stream else ''}; to replace rows, write upserts and deletes "
            f"({OP_COLUMN} column) or drop and create the table"
        )
    url = source._warehouse()
    store_options = source._store_options(url)
    lh = Lakehouse.open(url, **store_options)
    try:
        definition = lh.table(options.table)
    finally:
        lh.close()
    has_op = check_schema(definition, schema)
    if stream:
        base = "s-" + _hash("producer", options.producer_id) if options.producer_id else None
        default: type[_SinkWriter] = LakestreamStreamWriter
    else:
        write_id = options.write_id if options.write_id else uuid.uuid4().hex
        base = "w-" + _hash("write", write_id)
        default = LakestreamBatchWriter
    return (writer_class or default)(
        definition.to_json(),
        options,
        has_op,
        store_url=url,
        store_options=store_options,
        producer_base=base,
    )
