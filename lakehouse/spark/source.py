"""``spark.read.format("lakestream")``: lakestream tables as a PySpark Python data source (no jars).

    df = (spark.read.format("lakestream")
          .option("warehouse", "s3://lake/warehouse")
          .option("as_of", "0:120,1:98")            # optional: every bucket's offset ("b:o,..." or JSON)
          .load("ods.orders"))

The driver plans once (`lakehouse.read.union.plan_read`: the lake snapshot(s), each bucket's files and log range,
the log ranges ending where the log ended at planning); every bucket is one input partition or more that a
Python worker executes (`ReadPlan.execute_bucket`: the bucket's lake files merged with its log range): a
bucket whose files pass ``maxPartitionBytes`` is split by file, each part merging its files with the bucket's
log range and one of them yielding the range's rows, so parallelism follows the data, not the bucket count. The
``filter`` option is always pushed into the lake scan and the tails. Spark's own filters are too, those that
translate to Iceberg expressions (the others stay with Spark), when ``spark.sql.python.filterPushdown.enabled``
was true when the format was registered: it is off by default because with it a later unfiltered action on
the same DataFrame can reuse the filtered read (docs/upstream.md), and PySpark refuses a reader with
``pushFilters`` while the setting is off. Pruning columns is not in PySpark
4.2's Python data source API, so ask for fewer columns with the ``columns`` option or a reader schema naming a
subset of the table's columns.

Options:
    warehouse       the warehouse URL (file:///abs/path or s3://bucket/prefix); default: the settings'
    path            the table (what ``load("ods.orders")`` sets); ``table`` is an alias
    columns         comma-separated output columns (default: all)
    filter          an Iceberg filter ("o_orderkey < 100 and o_orderstatus = 'F'")
    as_of           every bucket's offset: "0:120,1:98" (as the CLI's --as-of) or JSON {"0": 120, "1": 98}
    lake_only       "true": the lake snapshot only (with as_of: offsets a tiering round committed)
    ref             the lake at an Iceberg tag or branch, e.g. "published" (the newest snapshot whose checks all
                    passed, `quality.published_tag`): that snapshot's files only, no log tail; not with as_of or changes
    snapshot_id     the lake at the snapshot of that id: its files only, no log tail, whenever Spark plans the
                    read (a quality suite validates exactly the snapshot it names, `quality.expectations`); not
                    with as_of, ref or changes; an unknown id fails when the DataFrame is made (SnapshotNotFound)
    maxPartitionBytes  the lake bytes (data and delete files) one input partition reads at most (default 128 MiB,
                    as Spark's spark.sql.files.maxPartitionBytes); a bigger file is a partition of its own
    changes         "true": the net changelog between ``start`` and ``end`` (offset maps, as ``as_of``),
                    with ``before_images`` ("true"/"false"): `lakehouse.read.changes`, one partition per bucket
                    with changes

Credentials never travel as options (options are shown in the plan and the Spark UI): they come from
lakestream's settings (`lakehouse.settings`: environment / YAML) resolved on the driver when the source is
registered (`register`, done by `lakehouse.spark.spark_session`), or from the store of a `Lakehouse` given to
`register` (what `lakehouse.spark.read_table` does). They ride inside the pickled data source class and reader
(Spark shows neither), never in a ``repr``, the plan or a log line.

Writes (``df.write`` / ``df.writeStream`` with ``format("lakestream")``) are `lakehouse.spark.sink`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from lakehouse.errors import InvalidArgument, LakestreamError
from lakehouse.spark.options import flag as _flag
from lakehouse.spark.options import known_options, parse_offsets
from lakehouse.spark.stream import (
    STREAM_OPTIONS,
    FailedStreamReader,
    LakestreamStreamReader,
    StreamOptions,
    is_stream,
)
from lakehouse.table.definition import TableName

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from lakehouse.lakehouse import Lakehouse
    from lakehouse.read.union import BucketRead, ReadPlan
    from lakehouse.table.definition import TableDefinition

NAME = "lakestream"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
OPTIONS = (
    "path",
    "table",
    "warehouse",
    "columns",
    "filter",
    "as_of",
    "lake_only",
    "ref",
    "snapshot_id",
    "changes",
    "start",
    "end",
    "before_images",
    "maxpartitionbytes",
    "physical",  # the name is the physical table, not resolved through the table aliases (lakehouse.table.aliases)
    *STREAM_OPTIONS,  # spark.readStream's (lakehouse.spark.stream)
)
#: Spark's own default for file sources (spark.sql.files.maxPartitionBytes).
DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024


def _size(options: Mapping[str, str], key: str, default: int) -> int:
    raw = str(options.get(key, default)).strip()
    if not raw.isdigit() or int(raw) < 1:
        raise InvalidArgument(f"option {key} is a number of bytes >= 1, got {raw!r}")
    return int(raw)


def _snapshot_id(value: Any) -> int:
    raw = str(value).strip()
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgument(
            f"option snapshot_id is a snapshot's id (an integer, e.g. from lakestream table show), got {raw!r}"
        ) from None


@dataclass(frozen=True)
class ReadOptions:
    """The data source's options, checked (nothing secret among them)."""

    warehouse: str | None
    table: str
    columns: tuple[str, ...] | None
    filter: str | None
    as_of: dict[int, int] | None
    lake_only: bool
    changes: bool
    start: dict[int, int] | None
    end: dict[int, int] | None
    before_images: bool
    ref: str | None = None
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    snapshot_id: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        opts = known_options(options, OPTIONS, f"format {NAME!r}")
        table = opts.get("path") or opts.get("table")
        if not table:
            raise InvalidArgument(f'name the table: spark.read.format("{NAME}").load("ods.orders")')
        columns = None
        if opts.get("columns"):
            columns = tuple(c.strip() for c in opts["columns"].split(",") if c.strip())
        changes = _flag(opts, "changes")
        for key in ("start", "end", "before_images"):
            if key in opts and not changes:
                raise InvalidArgument(f"option {key} belongs to changes=true (the net changelog)")
        if changes and ("as_of" in opts or "lake_only" in opts or "filter" in opts):
            raise InvalidArgument(
                "changes=true reads between start and end: as_of, lake_only and filter do not apply (filter the "
                "DataFrame: a change row is kept or dropped as a whole)"
            )
        ref = str(opts["ref"]).strip() if "ref" in opts else None
        if ref is not None and not ref:
            raise InvalidArgument("option ref names a tag or branch of the lake table, e.g. ref=published")
        if ref is not None and (changes or "as_of" in opts):
            raise InvalidArgument(
                "option ref reads the lake at a tag or branch: as_of and changes do not go with it (read either as "
                "of offsets, the changes between offsets, or at a ref)"
            )
        snapshot_id = _snapshot_id(opts["snapshot_id"]) if "snapshot_id" in opts else None
        if snapshot_id is not None and (changes or "as_of" in opts or ref is not None):
            raise InvalidArgument(
                "option snapshot_id reads the lake at one snapshot: as_of, ref and changes do not go with it (read "
                "either at a snapshot, at a ref, as of offsets, or the changes between offsets)"
            )
        if changes and "end" not in opts:
            raise InvalidArgument("changes=true needs start and end offset maps (start defaults to the log's start)")
        return cls(
            warehouse=opts.get("warehouse") or None,
            table=str(table),
            columns=columns,
            filter=opts.get("filter") or None,
            as_of=parse_offsets(opts["as_of"]) if opts.get("as_of") else None,
            lake_only=_flag(opts, "lake_only"),
            changes=changes,
            start=parse_offsets(opts["start"], "start") if opts.get("start") else None,
            end=parse_offsets(opts["end"], "end") if opts.get("end") else None,
            before_images=_flag(opts, "before_images"),
            ref=ref,
            max_partition_bytes=_size(opts, "maxpartitionbytes", DEFAULT_MAX_PARTITION_BYTES),
            snapshot_id=snapshot_id,
        )


# ---- filters ---------------------------------------------------------------------------------------------


def to_iceberg(f: Filter, schema: Schema) -> BooleanExpression | None:
    """Spark's pushed filter as a pyiceberg expression bound-checked against ``schema``; None if it does not
    translate exactly (Spark then applies it). Timestamps are left to Spark (time zones)."""
    from pyiceberg import expressions as ex
    from pyiceberg.expressions.visitors import bind
    from pyiceberg.types import DateType, TimestampNanoType, TimestampType, TimestamptzNanoType, TimestamptzType

    temporal = (TimestampType, TimestamptzType, TimestampNanoType, TimestamptzNanoType, DateType)

    def column(attribute: tuple[str, ...]) -> str | None:
        if len(attribute) != 1:
            return None
        try:
            field = schema.find_field(attribute[0], case_sensitive=True)
        except ValueError:
            return None
        return None if isinstance(field.field_type, temporal) else attribute[0]

    def translate(f: Filter) -> BooleanExpression | None:
        if isinstance(f, Not):
            inner = f.child
            if isinstance(inner, EqualTo):
                name = column(inner.attribute)
                # mypy reads pyiceberg's pydantic fields as __init__ (the real __init__ takes these arguments)
                return None if name is None else ex.NotEqualTo(name, inner.value)  # type: ignore[arg-type,call-arg]
            if isinstance(inner, In):
                name = column(inner.attribute)
                return None if name is None or not inner.value else ex.NotIn(name, set(inner.value))  # type: ignore[arg-type,call-arg]
            if isinstance(inner, StringStartsWith):
                name = column(inner.attribute)
                return None if name is None else ex.NotStartsWith(name, inner.value)  # type: ignore[arg-type,call-arg]
            child = translate(inner)
            return None if child is None else ex.Not(child)
        name = column(getattr(f, "attribute", ()))
        if name is None:
            return None
        simple: dict[type, Callable[..., BooleanExpression]] = {
            EqualTo: ex.EqualTo,
            GreaterThan: ex.GreaterThan,
            GreaterThanOrEqual: ex.GreaterThanOrEqual,
            LessThan: ex.LessThan,
            LessThanOrEqual: ex.LessThanOrEqual,
            StringStartsWith: ex.StartsWith,
        }
        if type(f) in simple:
            value = f.value  # type: ignore[attr-defined]
            if value is None or isinstance(value, (list, tuple, dict)):
                return None
            return simple[type(f)](name, value)
        if isinstance(f, EqualNullSafe):
            return ex.IsNull(name) if f.value is None else ex.EqualTo(name, f.value)  # type: ignore[arg-type,call-arg]
        if isinstance(f, In):
            values = [v for v in f.value if v is not None]
            return ex.In(name, set(values)) if values and len(values) == len(f.value) else None  # type: ignore[arg-type,call-arg]
        if isinstance(f, IsNull):
            return ex.IsNull(name)  # type: ignore[arg-type,call-arg]
        if isinstance(f, IsNotNull):
            return ex.NotNull(name)  # type: ignore[arg-type,call-arg]
        return None

    expr = translate(f)
    if expr is None:
        return None
    try:
        bind(schema, expr, case_sensitive=True)
    except (ValueError, TypeError):  # a literal the column's type cannot hold exactly
        return None
    return expr


# ---- the data source -------------------------------------------------------------------------------------


class LakestreamDataSource(DataSource):
    """The ``lakestream`` format. Register it with `register` (which binds the stores it may open)."""

    #: warehouse URL -> store options (credentials): bound by `register`, pickled with the class, never shown
    stores: ClassVar[dict[str, dict[str, str]]] = {}
    #: the warehouse when the option is absent (the settings' on the driver)
    default_warehouse: ClassVar[str | None] = None
    #: spark.sql.python.filterPushdown.enabled when registered: take Spark's filters (`LakestreamPushdownReader`)
    pushdown: ClassVar[bool] = False

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._read_options: ReadOptions | None = None
        if is_stream(self.options):
            self._check_stream()

    def _check_stream(self) -> None:
        """A readStream's options, checked against the table. Spark builds the source at ``load()`` whether or not
        readStream was given a schema (``schema()`` is called only if not): checked here, a bad option fails
        ``load()``, not ``start()`` or the first micro-batch. (A batch read's are checked in ``schema()``: a
        source built for a write has other options.)"""
        from lakehouse.read.union import check_offset_buckets

        if self.read_options.columns is not None:
            raise InvalidArgument("option columns is a batch read's: select the streaming DataFrame's columns")
        stream = StreamOptions.parse(self.options)
        lh, definition, _ = self._open(lake=False)  # the table exists
        lh.close()
        if isinstance(stream.starting, dict):  # the log's end is checked when the stream starts
            check_offset_buckets(stream.starting, definition, what="startingOffsets")

    @property
    def read_options(self) -> ReadOptions:
        """The options of a read, checked when a read asks for them (a write's options are others)."""
        if self._read_options is None:
            self._read_options = ReadOptions.parse(self.options)
        return self._read_options

    @classmethod
    def name(cls) -> str:
        return NAME

    def __repr__(self) -> str:
        table = self.options.get("path") or self.options.get("table")
        return f"LakestreamDataSource({table} in {self._warehouse()})"

    def _warehouse(self) -> str:
        from lakehouse.settings import normalize_warehouse

        url = self.options.get("warehouse") or self.default_warehouse
        if not url:
            raise InvalidArgument(f'set the warehouse: spark.read.format("{NAME}").option("warehouse", "s3://...")')
        return normalize_warehouse(url)

    def _store_options(self, url: str) -> dict[str, Any]:
        if url in self.stores:
            return dict(self.stores[url])
        from lakehouse.settings import load_settings

        return load_settings(warehouse=url).store_options()  # this process' environment (an executor's own)

    def _open(self, *, lake: bool = True) -> tuple[Lakehouse, TableDefinition, Table | None]:
        """(Lakehouse, definition, lake table or None if not ``lake``), opened in the planning process."""
        from lakehouse.lakehouse import Lakehouse

        url = self._warehouse()
        lh = Lakehouse.open(url, **self._store_options(url))
        try:
            name = self.read_options.table
            physical = _flag({str(k).lower(): v for k, v in self.options.items()}, "physical")
            definition = lh.table(TableName.parse(name) if physical else name)
            return lh, definition, lh.lake_table(definition.name) if lake else None
        except BaseException:
            lh.close()
            raise

    def schema(self) -> StructType:
        self.read_options  # noqa: B018 (bad options fail before the store is opened)
        stream = StreamOptions.parse(self.options) if is_stream(self.options) else None
        lh, definition, table = self._open()
        try:
            if stream is not None:  # a readStream: the changes' columns
                from lakehouse.read.changes import changes_schema

                return _spark_schema(changes_schema(definition))
            _check_offset_maps(definition, self.read_options)  # at load(), not at the first action
            plan = _plan_columns(table, definition, self.read_options)
            if self.read_options.changes:
                from lakehouse.read.changes import changes_schema

                return _spark_schema(changes_schema(definition, self.read_options.columns))
            return _spark_schema(plan.arrow_schema)
        finally:
            lh.close()

    def streamReader(self, schema: StructType) -> LakestreamStreamReader | FailedStreamReader:
        """``spark.readStream``: the table's changes, micro-batch by micro-batch (`lakehouse.spark.stream`). The
        options were checked when the source was built; what only shows now (a schema given to readStream that is
        not the changes') fails the query's first call (`FailedStreamReader` says why not here)."""
        try:
            return LakestreamStreamReader(self, StreamOptions.parse(self.options), schema)
        except LakestreamError as exc:
            return FailedStreamReader(exc)

    def reader(self, schema: StructType) -> LakestreamReader:
        if is_stream(self.options):
            raise InvalidArgument(
                "options startingOffsets, subscription, beforeImages and maxRecordsPerTrigger are readStream's: "
                'use spark.readStream.format("lakestream"), or read a range as a batch with changes=true, start, end'
            )
        lh, definition, table = self._open()
        options = self.read_options
        try:
            columns = options.columns
            names = [f.name for f in schema.fields]
            full = _plan_columns(table, definition, options)
            if list(full.columns) != names and not options.changes:  # a reader schema naming fewer columns
                columns = tuple(names)
            plan = _plan_columns(table, definition, options, columns=columns)
            url = self._warehouse()
            reader_class = LakestreamPushdownReader if self.pushdown else LakestreamReader
            return reader_class(
                plan,
                options,
                definition.to_json(),
                store_url=url,
                store_options=self._store_options(url),
                io_properties=lh.catalog_properties(),
                table=table,
                log_=lh.log(definition.name),
                closing=lh,
                spark_schema=schema,
            )
        except BaseException:
            lh.close()
            raise

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        """``df.write.format("lakestream")``: appends by the tasks, exactly once per task (`lakehouse.spark.sink`)."""
        from lakehouse.spark.sink import make_writer

        return make_writer(self, schema, overwrite, stream=False)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:  # noqa: N802 (PySpark's name)
        """``df.writeStream.format("lakestream")``: each micro-batch appended exactly once (`lakehouse.spark.sink`)."""
        from lakehouse.spark.sink import make_writer

        return make_writer(self, schema, overwrite, stream=True)


def _check_offset_maps(definition: Any, options: ReadOptions) -> None:
    """A batch read's offset maps (as_of; changes' start and end) name every bucket of the table and no other:
    checked when Spark asks for the schema, at ``load()``; the log's ends when it plans the read."""
    from lakehouse.read.union import check_offset_buckets

    for what, offsets in (("as_of", options.as_of), ("start", options.start), ("end", options.end)):
        if offsets is not None:
            check_offset_buckets(offsets, definition, what=what)


def _plan_columns(table: Any, definition: Any, options: ReadOptions, columns: Sequence[str] | None = None) -> ReadPlan:
    from lakehouse.read.union import known_snapshot, plan_columns, ref_snapshot

    # an unknown ref or snapshot fails when the DataFrame is made, not at its first action
    if options.ref is not None:
        ref_snapshot(table, options.ref)
    if options.snapshot_id is not None:
        known_snapshot(table, options.snapshot_id)
    return plan_columns(
        table,
        definition,
        columns=columns if columns is not None else options.columns,
        row_filter=options.filter,
        lake_only=options.lake_only or options.ref is not None or options.snapshot_id is not None,
    )


def _spark_schema(arrow: pa.Schema) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow)


@dataclass(frozen=True)
class LakestreamPartition(InputPartition):
    """One bucket: what to do (``mode``: "read", "changes", or "none": a read with nothing to read) and the
    bucket's located read."""

    mode: str
    bucket: int
    read: BucketRead | None  # "read": the bucket's files and log range
    payload: Any = None  # "changes": whatever the changes plan needs per bucket

    def __repr__(self) -> str:
        return f"LakestreamPartition({self.mode}, bucket {self.bucket}, {self.read!r})"


class LakestreamReader(DataSourceReader):
    """Plans on the driver (`partitions`: one per bucket), reads on the workers (`read`). Holds the plan
    without its buckets (each partition carries its own) and the store's options, never shown."""

    def __init__(
        self,
        plan: ReadPlan,
        options: ReadOptions,
        definition_json: bytes,
        *,
        store_url: str,
        store_options: dict[str, str],
        io_properties: dict[str, str],
        table: Any,
        log_: Any,
        spark_schema: StructType,
        closing: Any = None,
    ) -> None:
        from dataclasses import replace

        from pyspark.sql.pandas.types import to_arrow_schema

        self.plan = replace(plan, io_properties=io_properties)
        self.options = options
        self.definition_json = definition_json
        self.store_url = store_url
        self._store_options = store_options
        self.pushed: list[Filter] = []  # the filters the lake scan and the tails apply (Spark does not)
        self.target = to_arrow_schema(spark_schema, timezone="UTC")
        self._table, self._log, self._closing = table, log_, closing  # planning only: not pickled

    def __repr__(self) -> str:
        return f"LakestreamReader({self.plan!r}, pushed={self.pushed})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_table"] = state["_log"] = state["_closing"] = None
        return state

    def partitions(self) -> list[InputPartition]:
        try:
            if self.options.changes:
                return self._changes_partitions()
            from lakehouse.table.definition import TableDefinition

            definition = TableDefinition.from_json(self.definition_json)
            snapshot_id = None
            if self.options.ref is not None:
                from lakehouse.read.union import ref_snapshot

                snapshot_id = ref_snapshot(self._table, self.options.ref)
            elif self.options.snapshot_id is not None:  # still there (maintenance may have expired it since)
                from lakehouse.read.union import known_snapshot

                snapshot_id = known_snapshot(self._table, self.options.snapshot_id)
            located = self.plan.located(
                self._table,
                definition,
                as_of=self.options.as_of,
                log_=self._log,
                fix_ends=True,
                snapshot_id=snapshot_id,
            )
            max_bytes = self.options.max_partition_bytes
            return [
                LakestreamPartition("read", b, part)
                for b, read in located.buckets.items()
                for part in read.split(max_bytes)
            ]
        finally:
            if self._closing is not None:  # the Lakehouse that opened the table and log: its store too
                self._closing.close()
            elif self._log is not None:
                self._log.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LakestreamPartition)
        if partition.mode == "none":
            return
        if partition.mode == "changes":
            batches = self._read_changes(partition)
        else:
            batches = self._read(partition)
        target = self.target
        for batch in batches:
            if batch.num_rows:
                yield batch if batch.schema.equals(target) else batch.cast(target)

    def _read(self, partition: LakestreamPartition) -> Iterator[pa.RecordBatch]:
        assert partition.read is not None
        if not self.plan.union:
            yield from self.plan.execute_bucket(partition.read, None)
            return
        log_ = self.open_log()
        try:
            yield from self.plan.execute_bucket(partition.read, log_)
        finally:
            log_.close()

    def _changes_partitions(self) -> list[InputPartition]:
        """changes=true, on the driver: the changes plan (offsets checked, the old rows' snapshot chosen),
        one partition per bucket with changes, each carrying its `BucketChanges` and the plan without the
        other buckets."""
        from dataclasses import replace

        from lakehouse.iceberg.datafiles import LakeContext, shared_store
        from lakehouse.read.changes import plan_changes

        start = self.options.start if self.options.start is not None else self._log.start_offsets()
        plan = plan_changes(
            self._table,
            self._log,
            start,
            self.options.end,  # type: ignore[arg-type]  # an empty end option: plan_changes refuses None
            before_images=self.options.before_images,
            columns=self.options.columns,
        )
        ctx = LakeContext.of(shared_store(self.store_url, self._store_options), self._table)
        bare = replace(plan, buckets=())
        parts: list[InputPartition] = [
            LakestreamPartition("changes", item.bucket, None, (bare, item, ctx)) for item in plan.buckets
        ]
        # no partition at all is not "no rows" to PySpark: it runs one task with a partition of its own making
        return parts or [LakestreamPartition("none", -1, None)]

    def _read_changes(self, partition: LakestreamPartition) -> Iterator[pa.RecordBatch]:
        from lakehouse.read.changes import read_bucket_changes

        plan, item, ctx = partition.payload
        log_ = self.open_log()
        try:
            yield from read_bucket_changes(plan, item, log_, ctx).to_batches()
        finally:
            log_.close()

    def open_log(self) -> Any:
        """The table's log on a worker (the process' shared store; close it after use)."""
        from lakehouse.iceberg.datafiles import shared_store
        from lakehouse.log import Log
        from lakehouse.table.definition import TableDefinition

        store = shared_store(self.store_url, self._store_options)
        return Log(store, TableDefinition.from_json(self.definition_json), max_workers=4)


class LakestreamPushdownReader(LakestreamReader):
    """`LakestreamReader` taking Spark's filters (PySpark refuses a reader with ``pushFilters`` unless
    ``spark.sql.python.filterPushdown.enabled``; the source picks this one when it was on at `register`)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        if self.options.changes:  # change rows are filtered by Spark, after the changes are computed
            yield from filters
            return
        schema = self.plan.metadata.schema()
        for f in filters:
            expr = to_iceberg(f, schema)
            if expr is None:
                yield f
            else:
                self.plan = self.plan.filtered(expr)
                self.pushed.append(f)


# ---- registration ----------------------------------------------------------------------------------------


def register(spark: SparkSession, lakehouse: Lakehouse | None = None) -> None:
    """Register the ``lakestream`` format in ``spark``, binding the stores it may open: the warehouse of
    lakestream's settings (environment / YAML, resolved here, on the driver) and, if given, the store of
    ``lakehouse``. Registering again adds to the bound stores (the last registration replaces the source)."""
    from lakehouse.errors import ConfigError
    from lakehouse.settings import load_settings, normalize_warehouse

    bound: dict[str, Any] = getattr(spark, "_lakestream_stores", None) or {"stores": {}, "default": None}
    stores = dict(bound["stores"])
    default = bound["default"]
    pushdown = str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true"
    try:
        settings = load_settings()
    except ConfigError:
        settings = None  # a broken config file: reads that need it say so when they open the store
    if settings is not None:
        stores.setdefault(settings.warehouse, settings.store_options())
        default = default or settings.warehouse
    if lakehouse is not None:
        stores[normalize_warehouse(lakehouse.url)] = dict(lakehouse.store.connection_options())
    now = {"stores": stores, "default": default, "pushdown": pushdown}
    if bound.get("registered") and all(bound.get(k) == v for k, v in now.items()):
        return
    spark.dataSource.register(source_class(stores, default, pushdown=pushdown))
    spark._lakestream_stores = {**now, "registered": True}  # type: ignore[attr-defined]


def source_class(
    stores: Mapping[str, Mapping[str, str]], default: str | None = None, *, pushdown: bool = False
) -> type[LakestreamDataSource]:
    """A `LakestreamDataSource` bound to ``stores`` ({warehouse URL: store options}) and a default warehouse.
    Not importable by name, so cloudpickle sends it by value: the stores travel inside the pickled class."""
    from lakehouse.settings import normalize_warehouse

    return type(
        "LakestreamDataSource",
        (LakestreamDataSource,),
        {
            "stores": {normalize_warehouse(url): dict(options) for url, options in stores.items()},
            "default_warehouse": default,
            "pushdown": pushdown,
            "__module__": __name__,
            "__qualname__": "LakestreamDataSource.bound",
        },
    )
