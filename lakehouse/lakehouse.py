"""`Lakehouse`: the facade over one warehouse: tables, their logs, their lake tables, tiering and reads."""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.table import Table

from lakehouse import maintenance
from lakehouse.cost import TableCost, table_cost
from lakehouse.errors import (
    AlterConflict,
    CorruptCatalogError,
    InvalidArgument,
    InvalidTableName,
    SubscriptionNotFound,
    TableAlreadyExists,
    TableNotFound,
)
from lakehouse.executor import TaskExecutor, task_executor
from lakehouse.iceberg.catalog import STORE_OPTION_PROPERTIES, ObjectStoreCatalog
from lakehouse.iceberg.layout import (
    LAKE_TABLE_PROPERTIES,
    TABLE_UUID_PROPERTY,
    check_lake_types,
    lake_partition_spec,
    lake_schema,
    lake_sort_order,
)
from lakehouse.iceberg.load import load_lake_table
from lakehouse.iceberg.offsets import lake_offsets
from lakehouse.log import Log
from lakehouse.log.producer import close_all
from lakehouse.read.replanning import lookup, read_again, stream_changes
from lakehouse.read.union import (
    AsOf,
    RowFilter,
    as_of_unavailable,
    check_as_of,
    lake_read,
    plan_as_of,
    union_batches,
    union_read,
)
from lakehouse.settings import Settings, load_settings
from lakehouse.subscriptions import (
    DEFAULT_IDLE_AGE,
    Pins,
    Subscription,
    SubscriptionRecord,
    check_consumer,
    delete_subscriptions,
    idle_message,
    list_subscriptions,
    pins,
    read_subscription,
)
from lakehouse.table.aliases import DEFAULT_CACHE_SECONDS, AliasCache
from lakehouse.table.definition import TABLES_PREFIX, TableDefinition, TableName
from lakehouse.table.evolution import alter_definition, lake_table_as_defined, sync_lake_schema
from lakehouse.table_runs import TableRun, for_each_table
from lakehouse.tiering.boundaries import delete_boundary, tiering_end
from lakehouse.tiering.round import TieringResult, tier
from object_store import NotFound, ObjectStore, PreconditionFailed, open_store
from object_store.pricing import PriceList

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DropResult:
    """What `Lakehouse.drop_table` removed."""

    table: str
    lake_table: bool  # the catalog's pointer was deleted
    objects_deleted: int  # under the table's folder: log segments, data and metadata files
    definition: bool  # the definition was deleted (False: it was gone already)
    lake_location: str | None = None  # a lake table location outside the table's folder, left as it was
    subscriptions: int = 0  # the table's subscriptions deleted


class TableNames(ABC):
    """How a `Lakehouse` takes the table names its by-name methods are given (`Lakehouse.resolve`, once at each
    method's entry)."""

    @abstractmethod
    def physical_table(self, name: str | TableName) -> TableName:
        """The physical table ``name`` reads and writes."""


class AliasedNames(TableNames):
    """Names through the table aliases (`lakehouse.table.aliases`): a ``str`` is the table its alias serves (or the
    table of that name), a `TableName` is the physical table already. A `Lakehouse`'s default."""

    def __init__(self, aliases: AliasCache) -> None:
        self.aliases = aliases

    def physical_table(self, name: str | TableName) -> TableName:
        return self.aliases.resolve(name)


class PhysicalNames(TableNames):
    """Every name is the physical table of that name, aliases or not (`Lakehouse.without_aliases`)."""

    def physical_table(self, name: str | TableName) -> TableName:
        return TableName.parse(name)


class Lakehouse:
    """One warehouse on one object store.

    >>> lh = Lakehouse.open("file:///tmp/wh")                 # or "s3://bucket/wh", endpoint_url=...
    >>> lh.create_table("ods.orders", schema, primary_key=["o_orderkey"], buckets=8)
    >>> lh.log("ods.orders").append(batch, op="upsert")
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        settings: Settings | None = None,
        alias_cache_seconds: float = DEFAULT_CACHE_SECONDS,
    ) -> None:
        self.store = store
        self.settings = settings
        #: the table aliases (`lakehouse.table.aliases`), read again when older than ``alias_cache_seconds``
        self.aliases = AliasCache(store, alias_cache_seconds)
        #: how the names given to this warehouse's methods map to physical tables (`with_names`)
        self.names: TableNames = AliasedNames(self.aliases)
        self._logs: dict[TableName, Log] = {}
        self._catalog: ObjectStoreCatalog | None = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, url: str, *, alias_cache_seconds: float = DEFAULT_CACHE_SECONDS, **store_options: Any) -> Lakehouse:
        """Open the warehouse at ``url`` (``file:///abs/path`` or ``s3://bucket/prefix``); ``alias_cache_seconds``:
        how long the table aliases read are used (`lakehouse.table.aliases`)."""
        return cls(open_store(url, **store_options), alias_cache_seconds=alias_cache_seconds)

    @classmethod
    def from_env(cls, config_file: str | os.PathLike[str] | None = None, **overrides: Any) -> Lakehouse:
        """Open the warehouse named by the environment / YAML settings (see `lakehouse.settings`)."""
        settings = load_settings(config_file, **overrides)
        return cls(settings.open_store(), settings=settings)

    @property
    def catalog(self) -> ObjectStoreCatalog:
        """The warehouse's Iceberg catalog (a pyiceberg catalog on the same store), naming physical tables: the
        aliases (`lakehouse.table.aliases`) are resolved by this `Lakehouse`'s methods, once at their entry, never here
        (``dwd.m`` is the table of that name even while an alias serves the name by ``dwd__g1.m``). The catalog
        other engines load from `catalog_properties` resolves them."""
        with self._lock:
            if self._catalog is None:
                self._catalog = ObjectStoreCatalog(
                    "lakestream", store=self.store, resolve_aliases=False, **self.catalog_properties()
                )
            return self._catalog

    def catalog_properties(self) -> dict[str, str]:
        """The pyiceberg properties that load this warehouse's catalog anywhere (secrets included)."""
        props = {"py-catalog-impl": "lakehouse.iceberg.catalog.ObjectStoreCatalog", "warehouse": self.store.url}
        options = self.store.connection_options()
        props.update({theirs: options[ours] for ours, theirs in STORE_OPTION_PROPERTIES.items() if options.get(ours)})
        return props

    @property
    def url(self) -> str:
        return self.store.url

    def resolve(self, name: str | TableName) -> TableName:
        """The physical table a name reads (`lakehouse.table.aliases`): a ``str`` through the table aliases (read at
        most every ``alias_cache_seconds``), a `TableName` as it is. Each read by name resolves once, at its
        entry, and passes the `TableName` on, so one call reads one table even while the aliases switch."""
        return self.names.physical_table(name)

    def with_names(self, names: TableNames) -> Lakehouse:
        """This warehouse with its methods' names taken by ``names``, sharing this one's store, settings,
        aliases, catalog (and the commit checks added to it), logs and lock: what one writes, the other reads."""
        self.catalog  # noqa: B018 - created now, so both share the one catalog
        view = copy.copy(self)  # shallow: the same state objects, one attribute of its own
        view.names = names
        return view

    def without_aliases(self) -> Lakehouse:
        """This warehouse with every name taken as the physical table (`PhysicalNames`: no aliases), sharing this
        one's store, catalog and logs (`with_names`): for writers of physical tables (warehouse-layers rounds,
        blue/green builds)."""
        if isinstance(self.names, PhysicalNames):
            return self
        return self.with_names(PhysicalNames())

    # ---- tables --------------------------------------------------------------------------------------

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        *,
        buckets: int,
        primary_key: Sequence[str] | None = None,
        bucket_key: str | None = None,
        partition_by: Sequence[str] | None = None,
        write_mode: str | None = None,
        merge_engine: str | None = None,
        version_column: str | None = None,
        aggregates: Mapping[str, str] | None = None,
        log_format: str | None = None,
    ) -> TableDefinition:
        """Create a table: its definition (written once, with ``If-None-Match: *``), its log retention record
        (floors 0, see `lakehouse.maintenance.retention`), then its lake table.

        All or nothing: everything is checked before anything is written (names, keys, partitions, that the
        lake can hold every column type and load the schema again); if creating the lake table fails anyway
        (the store gave up, another Iceberg table took the name meanwhile), what this call wrote is removed
        before the error is raised. After a crash in between, `drop_table` removes the rest (or
        `ensure_lake_table` completes it).

        ``log_format``: how the log lies on the store (`lakehouse.table.definition.LOG_FORMATS`; default
        `lakehouse.table.definition.DEFAULT_LOG_FORMAT`): ``"commits"`` writes one data object and one commit record
        per append whatever its buckets (`lakehouse.log.chain`), ``"segments"`` one object per bucket per append.

        Raises:
            TableAlreadyExists: the name is taken (also when a concurrent creator won).
            InvalidTableName, SchemaError: the definition is invalid; nothing was written.
        """
        definition = TableDefinition.build(
            name,
            schema,
            buckets=buckets,
            primary_key=primary_key,
            bucket_key=bucket_key,
            partition_by=partition_by,
            write_mode=write_mode,
            merge_engine=merge_engine,
            version_column=version_column,
            aggregates=aggregates,
            log_format=log_format,
        )
        check_lake_types(definition)  # every column has a lake type that loads again
        lake_partition_spec(definition, lake_schema(definition))  # partitions checked before anything is written
        ident = (definition.name.namespace, definition.name.table)
        if self.catalog.raw_metadata(ident) is not None:  # not table_exists: it fails on metadata it cannot load
            raise TableAlreadyExists(
                f"an Iceberg table {definition.name} already exists in {self.url}; drop it first (lakestream table "
                "drop, or pyiceberg's drop_table) or use another name (nothing was created)"
            )
        try:
            etag = self.store.put(definition.name.definition_key, definition.to_json(), if_none_match=True)
        except PreconditionFailed:
            raise TableAlreadyExists(f"table {definition.name} already exists in {self.url}") from None
        try:
            # floors 0: from its first segment on, a gap in the table's log that retention did not make is found
            maintenance.retention.record_retention_floors(self.store, definition, {})
            self.ensure_lake_table(definition)
        except BaseException as exc:
            self._undo_create(definition, etag, exc)
            raise
        return definition

    def _undo_create(self, definition: TableDefinition, etag: str, cause: BaseException) -> None:
        """Remove what a failed `create_table` wrote, and nothing of anyone else's: the lake table if its
        pointer names metadata of this definition (by table uuid), the create's metadata files of this
        definition (a pointer PUT that failed leaves one), then the definition (with ``If-Match``)."""
        ident = (definition.name.namespace, definition.name.table)

        def ours(doc: object) -> bool:
            return isinstance(doc, dict) and (doc.get("properties") or {}).get(TABLE_UUID_PROPERTY) == (
                definition.table_uuid
            )

        try:
            if ours(self.catalog.raw_metadata(ident)):
                self.catalog.drop_table(ident)
            for info in self.store.list(f"{definition.name.prefix}metadata/00000-"):
                try:
                    doc = json.loads(self.store.get(info.key).data)
                except ValueError:
                    continue
                if ours(doc):
                    self.store.delete(info.key)
            record = maintenance.retention.retention_key(definition.name)
            try:
                obj = self.store.get(record)
                if json.loads(obj.data).get("table_uuid") == definition.table_uuid:
                    self.store.delete(record, if_match=obj.etag)
            except (NotFound, ValueError, AttributeError):
                pass  # not written, or not this create's
            self.store.delete(definition.name.definition_key, if_match=etag)
        except Exception as undo:  # noqa: BLE001 - the create's own error is the one to raise
            cause.add_note(
                f"creating {definition.name} failed halfway and removing what it wrote failed too ({undo}); "
                f"drop it with `lakestream table drop {definition.name}` (Lakehouse.drop_table)"
            )

    def drop_table(self, name: str | TableName) -> DropResult:
        """Drop a table: its lake table (the catalog's pointer), every object under its folder ``<ns>/<table>/``
        (log segments, the lake's data and metadata files: a purge), its subscriptions, its log retention record,
        then its definition.
        Works on a table in any state: half-created, with metadata pyiceberg cannot load, with an unreadable
        definition, or half dropped. Stop its producers, tiering and maintenance first: a write that lands
        during the drop may be left under the folder (drop it again).

        Order: the definition goes last, so a drop interrupted at any point leaves the table listed and
        ``drop_table`` finishes it; the pointer goes first, so no commit lands on a lake table whose files
        are being deleted.

        Raises:
            TableNotFound: there was nothing of this name to drop.
        """
        table_name = TableName.parse(name)
        ident = (table_name.namespace, table_name.table)
        with self._lock:
            log = self._logs.pop(table_name, None)
        if log is not None:
            log.close()  # its producers append what they hold first
        lake_table, outside = False, None
        try:
            meta = self.catalog.raw_metadata(ident)
        except CorruptCatalogError:  # a pointer that is not one: nothing to read, nothing to fence
            self.store.delete(self.catalog._pointer_key(*ident))  # noqa: SLF001 - our own catalog's layout
            meta, lake_table = None, True
        if meta is not None:
            lake_table = True
            location = meta.get("location")
            if isinstance(location, str) and location.rstrip("/") != f"{self.url}/{table_name.prefix.rstrip('/')}":
                outside = location  # registered from elsewhere: not this table's folder to delete
            try:
                self.catalog.drop_table(ident)
            except NoSuchTableError:
                pass  # dropped meanwhile
        deleted = 0
        for info in self.store.list(table_name.prefix):
            self.store.delete(info.key)
            deleted += 1
        subscriptions = delete_subscriptions(self.store, table_name)
        delete_boundary(self.store, table_name)
        record = maintenance.retention.retention_key(table_name)
        if self.store.exists(record):  # not a blind delete: a drop finished again must not fail on it
            self.store.delete(record)
        had_definition = self.store.exists(table_name.definition_key)
        if had_definition:
            self.store.delete(table_name.definition_key)
        if not (lake_table or deleted or had_definition or subscriptions):
            raise TableNotFound(f"no table {table_name} in {self.url}: nothing to drop")
        return DropResult(str(table_name), lake_table, deleted, had_definition, outside, subscriptions)

    def ensure_lake_table(self, definition: TableDefinition) -> Table:
        """The Iceberg table of a lakestream table, created if missing (idempotent: safe after a crash
        between the log definition and the lake table). Layout: see `lakehouse.iceberg.layout`."""
        catalog = self.catalog
        ident = (definition.name.namespace, definition.name.table)
        try:
            catalog.create_namespace(definition.name.namespace)
        except NamespaceAlreadyExistsError:
            pass
        schema = lake_schema(definition)
        try:
            return catalog.create_table(
                ident,
                schema,
                partition_spec=lake_partition_spec(definition, schema),
                sort_order=lake_sort_order(schema),
                properties={
                    TABLE_UUID_PROPERTY: definition.table_uuid,
                    **LAKE_TABLE_PROPERTIES,
                    # Iceberg's own names for the write mode, so other engines writing the table follow it
                    "write.update.mode": definition.write_mode,
                    "write.delete.mode": definition.write_mode,
                },
            )
        except TableAlreadyExistsError:
            table = catalog.load_table(ident)
            if table.properties.get(TABLE_UUID_PROPERTY) != definition.table_uuid:
                raise TableAlreadyExists(
                    f"an Iceberg table {definition.name} already exists in {self.url} and does not belong to this "
                    "lakestream table; drop or rename it (pyiceberg / lakestream) and retry"
                ) from None
            return table

    def alter_table(
        self,
        name: str | TableName,
        *,
        add_columns: str | Sequence[str] | pa.Schema | None = None,
        widen: str | Sequence[str] | dict[str, Any] | None = None,
        rename: str | Sequence[str] | dict[str, str] | None = None,
        drop_columns: str | Sequence[str] | None = None,
    ) -> TableDefinition:
        """Evolve a table's schema (see `lakehouse.table.evolution`): ``add_columns`` (``"c:string, d:int64"`` or an
        Arrow schema; nullable only), ``widen`` (``"v:int64"``: int to a wider int, float32 to float64, a decimal's
        precision up), ``rename`` (``"old:new"``), ``drop_columns`` (names). One new schema version: the definition
        is replaced by compare-and-swap, then the lake table's Iceberg schema follows (old files and segments are
        read through field ids, never rewritten). Readers return the current schema, as-of reads included.

        Raises:
            SchemaEvolutionError: a change the schema cannot take (narrowing, a NOT NULL column, a key, bucket-key
                or partition column, a name taken or reserved). Nothing was changed.
            AlterConflict: another alter committed between this one's read and write. Nothing was changed.
            TableNotFound: no such table.
        """
        definition, obj = self._stored_definition(name)
        # an earlier alter that stopped before its lake step is completed first: new columns get ids after the lake's
        lake = sync_lake_schema(load_lake_table(self.catalog, definition), definition)
        altered = alter_definition(
            definition,
            add_columns=add_columns,
            widen=widen,
            rename=rename,
            drop_columns=drop_columns,
            last_column_id=lake.metadata.last_column_id,
        )
        try:
            self.store.put(definition.name.definition_key, altered.to_json(), if_match=obj.etag)
        except (PreconditionFailed, NotFound):
            raise AlterConflict(
                f"{definition.name} was altered (or dropped) by someone else while this alter ran; nothing was "
                "changed. Look at its schema again (lakestream table describe) and retry the alter if it still applies"
            ) from None
        self._adopt(altered)
        self._sync_lake(lake, altered)
        return altered

    def _sync_lake(self, lake: Table, definition: TableDefinition) -> Table:
        """The lake step of an alter (a hook: the crash test stops here)."""
        return sync_lake_schema(lake, definition)

    def _adopt(self, definition: TableDefinition) -> None:
        """Give this Lakehouse's log of the table a newer definition read or written here."""
        log = self._logs.get(definition.name)  # no lock: `log` holds it while it reads the definition
        if log is not None:
            log.set_definition(definition)

    def register_table(self, name: str, metadata_location: str, *, overwrite: bool = False) -> Table:
        """Point the Iceberg table ``name`` at an existing metadata file (``overwrite``: replace the pointer of
        an existing table, e.g. one deleted or damaged). The namespace is created if missing.

        Raises:
            InvalidArgument: no metadata file can be read at ``metadata_location``.
            TableAlreadyExists: ``name`` exists and ``overwrite`` is not set.
        """
        namespace = name.rsplit(".", 1)[0] if "." in name else ""
        try:
            if namespace:
                self.catalog.create_namespace(namespace)
        except NamespaceAlreadyExistsError:
            pass
        try:
            return self.catalog.register_table(name, metadata_location, overwrite=overwrite)
        except TableAlreadyExistsError:
            raise TableAlreadyExists(
                f"an Iceberg table {name} already exists in {self.url}; add --overwrite (overwrite=True) to point it "
                f"at {metadata_location}"
            ) from None
        except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            raise InvalidArgument(
                f"cannot register {name}: cannot read a metadata file at {metadata_location} ({exc.strerror or exc}); "
                "give the path or URL of an existing Iceberg metadata.json (the newest in the table's metadata/ "
                "folder, or what `lakestream table location` printed)"
            ) from None
        except (OSError, ValueError) as exc:  # unreachable store, not JSON, not Iceberg metadata
            message = " ".join(str(exc).split())[:300]
            raise InvalidArgument(
                f"cannot register {name}: {metadata_location} could not be read as Iceberg table metadata "
                f"({type(exc).__name__}: {message}); give the path or URL of an existing, readable metadata.json"
            ) from None

    def lake_table(self, name: str | TableName) -> Table:
        """The current Iceberg table of ``name``, freshly loaded: a pure read, it commits nothing. While the lake's
        schema is behind the definition's (an alter whose lake step has not run yet), the table returned carries
        the definition's schema staged in memory, so reads through it return the current columns
        (`lakehouse.table.evolution.lake_table_as_defined`); a commit through it rolls the lake forward first. The lake
        itself follows at its next write (`sync_lake_schema`, a tiering round, an alter, compaction).

        Raises:
            TableNotFound: no such table.
            LakeStateError: its lake table is missing, foreign or unloadable.
        """
        definition = self.table(name)
        return lake_table_as_defined(load_lake_table(self.catalog, definition), definition)

    def sync_lake_schema(self, name: str | TableName) -> Table:
        """Roll the lake table's Iceberg schema forward to the table's definition, committing the change if it is
        behind (an alter stopped before its lake step), and return the table as committed; idempotent. Tiering,
        alters and compaction run this step themselves before they write.

        Raises:
            TableNotFound: no such table.
            LakeStateError: the lake table is missing or foreign, or was changed outside lakestream.
        """
        definition = self.table(name)
        return sync_lake_schema(load_lake_table(self.catalog, definition), definition)

    def lake_offsets(self, name: str | TableName) -> dict[int, int]:
        """The log offsets the lake holds: {bucket: next offset} for every bucket (0 where nothing is tiered),
        comparable with ``log(name).end_offsets()``."""
        definition = self.table(name)
        table = load_lake_table(self.catalog, definition)
        return lake_offsets(table.metadata, definition.buckets, name=str(definition.name), io=table.io)

    def cost(self, name: str | TableName, *, since: datetime | None = None, until: datetime | None = None) -> TableCost:
        """What table ``name`` cost the store from ``since`` (default: a day before ``until``) to ``until``
        (default: now): its producers' writes read from the log, its lake commits' recorded usage, its storage,
        priced at the settings' price list (`lakehouse.cost`). Reads the table's metadata and lists its log once.

        Raises:
            TableNotFound: no such table.
            InvalidArgument: the period ends before it starts, or a time without a timezone.
        """
        until = until or datetime.now(UTC)
        since = since or until - timedelta(days=1)
        definition = self.table(name)
        prices = self.settings.prices if self.settings is not None else PriceList()
        lake = load_lake_table(self.catalog, definition)  # its snapshots' summaries and size: no schema staged
        return table_cost(self.store, definition, lake, since, until, prices)

    # ---- tiering and reads ---------------------------------------------------------------------------

    def tier(
        self,
        name: str | TableName,
        *,
        spark: Any = None,
        executor: TaskExecutor | None = None,
        workers: int | None = None,
        max_split_rows: int | None = None,
    ) -> TieringResult:
        """One tiering round of ``name`` (see `lakehouse.tiering.round`): on ``executor``, else on Spark if a session is
        given, else on the local in-process executor (``workers`` threads).

        A table whose writer holds its tiering boundary (`lakehouse.tiering.boundaries`: a warehouse-layers round does
        while it appends) is tiered up to the held ends, so every lake snapshot holds whole changes."""
        name = self.resolve(name)
        executor = task_executor(spark=spark, executor=executor, workers=workers)
        self.table(name)  # the newest definition (an alter elsewhere): tiering brings the lake schema up to it
        log_ = self.log(name)
        return tier(
            self.store,
            self.catalog,
            log_,
            executor=executor,
            max_split_rows=max_split_rows,
            end=tiering_end(self.store, log_.definition, log_.end_offsets),
        )

    def union_read(
        self,
        name: str | TableName,
        columns: Sequence[str] | None = None,
        row_filter: RowFilter = None,
        *,
        as_of: AsOf | None = None,
        ref: str | None = None,
        keep: Callable[[pa.Table], pa.Table] | None = None,
    ) -> pa.Table:
        """The lake snapshot plus the log tail after its offsets, merged by key (see `lakehouse.read.union`):
        every record whose append has returned is visible. With ``as_of={bucket: offset, ...}`` (every bucket),
        the table exactly as the log defines it below those offsets, whether the lake is ahead of them (time
        travel to a retained snapshot), behind them or both; `AsOfUnavailable` if snapshot expiry and log
        retention removed what that needs. With ``ref`` (a tag or branch of the lake table, e.g.
        ``"published"``): the table as published, i.e. the lake exactly at that ref's snapshot and no log tail
        (what `lake_read` at the ref returns); `RefNotFound` if there is no such ref, `InvalidArgument` with
        ``as_of``. With ``keep`` (a function narrowing a table of rows, e.g. to those of a set of keys): the read
        is streamed and only what ``keep`` returns of each batch is held (memory: the kept rows, not the rows
        the row filter lets through)."""
        name = self.resolve(name)
        return read_again(
            self,
            name,
            lambda table: union_read(
                table, self.log(name), columns=columns, row_filter=row_filter, as_of=as_of, ref=ref, keep=keep
            ),
            as_of=as_of,
        )

    def union_batches(
        self,
        name: str | TableName,
        columns: Sequence[str] | None = None,
        row_filter: RowFilter = None,
        *,
        as_of: AsOf | None = None,
        ref: str | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """`union_read` as a stream of record batches, for large results (``ref``: as in `union_read`)."""
        name = self.resolve(name)
        return read_again(
            self,
            name,
            lambda table: union_batches(
                table, self.log(name), columns=columns, row_filter=row_filter, as_of=as_of, ref=ref
            ),
            as_of=as_of,
        )

    def changes(
        self,
        name: str | TableName,
        start: AsOf,
        end: AsOf,
        *,
        before_images: bool = False,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """What changed between the offset maps ``start`` and ``end`` (every bucket, ``start`` <= ``end``): the
        log tables' records in the range; for primary-key tables one row per changed key, ``_op`` one of insert,
        update_after, delete (and update_before, the old row, with ``before_images``). See `lakehouse.read.changes`.

        Raises:
            InvalidArgument: a bad offset map, or ``start`` after ``end``; nothing is read.
            AsOfUnavailable: log retention (or snapshot expiry, for the old rows) removed what the range needs.
        """
        from lakehouse.read.changes import plan_changes

        name = self.resolve(name)
        plan = plan_changes(
            self.lake_table(name), self.log(name), start, end, before_images=before_images, columns=columns
        )
        return pa.Table.from_batches(list(stream_changes(self, name, plan, 3)), schema=plan.schema)

    def changes_batches(
        self,
        name: str | TableName,
        start: AsOf,
        end: AsOf,
        *,
        before_images: bool = False,
        columns: Sequence[str] | None = None,
        attempts: int = 3,
    ) -> Iterator[pa.RecordBatch]:
        """`changes` one bucket at a time (memory: one bucket's changes and their old rows). The offsets are
        checked before the first batch. If expiry or retention removed the old rows' snapshot or log meanwhile,
        that bucket is planned again (up to ``attempts`` times) and read from what is retained, or
        `AsOfUnavailable` is raised: never a wrong change."""
        from lakehouse.read.changes import plan_changes

        name = self.resolve(name)
        plan = plan_changes(
            self.lake_table(name), self.log(name), start, end, before_images=before_images, columns=columns
        )
        return stream_changes(self, name, plan, attempts)

    def lookup(
        self, name: str | TableName, keys: pa.Table, *, as_of: AsOf, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The rows of a primary-key table whose keys are rows of ``keys`` (its primary-key columns), as of the
        offset map ``as_of``, as `union_read` with ``as_of`` holds them (`lakehouse.read.replanning.lookup`: a point
        lookup that decodes only the row groups whose key statistics can hold a key).

        Raises:
            InvalidArgument: a table without a primary key, ``keys`` without its columns, a bad offset map.
            AsOfUnavailable: snapshot expiry and log retention removed what ``as_of`` needs.
        """
        return lookup(self, self.resolve(name), keys, as_of=as_of, columns=columns)

    def lake_read(
        self,
        name: str | TableName,
        columns: Sequence[str] | None = None,
        row_filter: RowFilter = None,
        *,
        as_of: AsOf | None = None,
        ref: str | None = None,
    ) -> pa.Table:
        """The lake only (what other engines see). With ``as_of``, the lake as it held exactly those offsets
        (offsets a tiering round committed, still retained), else `AsOfUnavailable`. With ``ref`` (an Iceberg
        tag or branch of the lake table, e.g. ``"published"``, which `quality.published_tag` moves only to snapshots
        whose checks all passed), the lake exactly at the snapshot it points at, whatever was committed since.

        Raises:
            InvalidArgument: ``as_of`` and ``ref`` together.
            RefNotFound: the lake table has no such tag or branch (the message lists those it has).
        """
        if as_of is not None and ref is not None:
            raise InvalidArgument("read either as_of offsets or at a ref, not both")
        name = self.resolve(name)
        log = None if as_of is None and ref is None else self.log(name)
        return lake_read(self.lake_table(name), columns=columns, row_filter=row_filter, as_of=as_of, log_=log, ref=ref)

    def _stored_definition(self, name: str | TableName) -> tuple[TableDefinition, Any]:
        """A table's definition and the object it was read from (its ETag: an alter swaps it). `TableNotFound`."""
        table_name = TableName.parse(name)
        try:
            obj = self.store.get(table_name.definition_key)
        except NotFound:
            raise TableNotFound(
                f"no table {table_name} in {self.url}; create it first (lakestream table create)"
            ) from None
        return TableDefinition.from_json(obj.data, source=f"{self.url}/{table_name.definition_key}"), obj

    def table(self, name: str | TableName) -> TableDefinition:
        """The definition of an existing table (``name`` resolved through the aliases). Raises `TableNotFound`."""
        definition, _ = self._stored_definition(self.resolve(name))
        if definition.schema_version:
            self._adopt(definition)  # altered elsewhere: this Lakehouse's log reads and appends its schema
        return definition

    def list_tables(self, namespace: str | None = None) -> list[TableName]:
        names = []
        for info in self.store.list(TABLES_PREFIX + (f"{namespace}." if namespace else "")):
            stem = info.key[len(TABLES_PREFIX) :]
            if "/" in stem or not stem.endswith(".json"):
                continue  # not a definition (a table in the reserved namespace, before it was reserved)
            try:
                names.append(TableName.parse(stem.removesuffix(".json")))
            except InvalidTableName:  # not written by lakestream: a listing must not fail on it
                _log.warning("skipping %s/%s: not a table definition (no valid table name)", self.url, info.key)
        return names

    def for_each_table(
        self, work: Callable[[str], Any], names: Sequence[str | TableName] | None = None
    ) -> Iterator[TableRun]:
        """``work(name)`` for each of ``names`` (default: every table), one `TableRun` per table as it ends; a
        table that fails does not stop the others (`lakehouse.table_runs.for_each_table`)."""
        return for_each_table(self, work, names)

    def log(self, name: str | TableName) -> Log:
        """The log of a table (one shared `Log` per table and `Lakehouse`)."""
        table_name = self.resolve(name)
        with self._lock:
            if table_name not in self._logs or self._logs[table_name].closed:
                self._logs[table_name] = Log(self.store, self.table(table_name))
            return self._logs[table_name]

    # ---- maintenance ---------------------------------------------------------------------------------

    def compact(
        self,
        name: str | TableName,
        *,
        target_file_size: int = maintenance.compaction.DEFAULT_TARGET_FILE_SIZE,
        min_input_files: int = maintenance.compaction.DEFAULT_MIN_INPUT_FILES,
        partitions: set[tuple] | None = None,
        delete_ratio: float = maintenance.compaction.DEFAULT_DELETE_RATIO,
        delete_files: int = maintenance.compaction.DEFAULT_DELETE_FILES,
        spark: Any = None,
        executor: TaskExecutor | None = None,
        workers: int | None = None,
    ) -> maintenance.CompactionResult:
        """Bin-pack small data files into files of ``target_file_size``, and rewrite files whose position deletes
        remove ``delete_ratio`` of their rows or that ``delete_files`` delete files name without them (see
        `lakehouse.maintenance.compaction`)."""
        definition = self.table(name)
        # a write: after an alter whose lake step did not run, the lake's schema is rolled forward first
        return maintenance.compact(
            self.store,
            sync_lake_schema(load_lake_table(self.catalog, definition), definition),
            definition,
            executor=task_executor(spark=spark, executor=executor, workers=workers),
            target_file_size=target_file_size,
            min_input_files=min_input_files,
            partitions=partitions,
            delete_ratio=delete_ratio,
            delete_files=delete_files,
        )

    def expire_snapshots(
        self,
        name: str | TableName,
        *,
        older_than: timedelta | datetime = maintenance.expiry.DEFAULT_SNAPSHOT_AGE,
        retain_last: int = maintenance.expiry.DEFAULT_RETAIN_LAST,
        pinned: Pins | None = None,
    ) -> maintenance.ExpiryResult:
        """Expire old snapshots (never the current or the newest tiering one, nor one an as-of read at a
        subscription's position needs) and delete files only they used. ``pinned``: the subscriptions' pins read
        earlier (`subscription_pins`; `maintain` reads them once for expiry and retention), else read now."""
        name = self.resolve(name)
        if pinned is None:
            pinned = self.subscription_pins(name)
        table = self.lake_table(name)
        return maintenance.expire_snapshots(
            self.store, table, older_than=older_than, retain_last=retain_last, keep=pinned.snapshots
        )

    def remove_orphans(
        self,
        name: str | TableName,
        *,
        older_than: timedelta = maintenance.orphans.DEFAULT_ORPHAN_AGE,
        dry_run: bool = False,
        unsafe_orphan_age: bool = False,
    ) -> maintenance.OrphanResult:
        """Delete unreferenced files older than ``older_than`` under the table's data/ and metadata/.
        ``older_than`` below one hour (`maintenance.orphans.MIN_ORPHAN_AGE`) is refused unless
        ``unsafe_orphan_age``: it would delete files of a tiering or compaction round still running."""
        name = self.resolve(name)
        maintenance.orphans.check_orphan_age(older_than, unsafe_orphan_age=unsafe_orphan_age, dry_run=dry_run)
        return maintenance.remove_orphans(
            self.store,
            self.lake_table(name),
            older_than=older_than,
            dry_run=dry_run,
            unsafe_orphan_age=unsafe_orphan_age,
        )

    def apply_log_retention(
        self,
        name: str | TableName,
        *,
        retention: timedelta = maintenance.retention.DEFAULT_RETENTION,
        pinned: Pins | None = None,
    ) -> maintenance.RetentionResult:
        """Delete log segments that are tiered and older than ``retention``; never an un-tiered one, nor one a
        subscription's as-of read needs (``pinned``: as in `expire_snapshots`)."""
        name = self.resolve(name)
        if pinned is None:
            pinned = self.subscription_pins(name)
        return maintenance.apply_log_retention(
            self.log(name), self.lake_offsets(name), retention=retention, pinned=pinned.log
        )

    def maintain(
        self,
        name: str | TableName,
        *,
        spark: Any = None,
        workers: int | None = None,
        target_file_size: int = maintenance.compaction.DEFAULT_TARGET_FILE_SIZE,
        min_input_files: int = maintenance.compaction.DEFAULT_MIN_INPUT_FILES,
        snapshot_age: timedelta = maintenance.expiry.DEFAULT_SNAPSHOT_AGE,
        retain_last: int = maintenance.expiry.DEFAULT_RETAIN_LAST,
        orphan_age: timedelta = maintenance.orphans.DEFAULT_ORPHAN_AGE,
        retention: timedelta = maintenance.retention.DEFAULT_RETENTION,
        unsafe_orphan_age: bool = False,
        subscription_idle: timedelta = DEFAULT_IDLE_AGE,
    ) -> maintenance.MaintenanceReport:
        """Compaction, snapshot expiry, orphan removal and log retention, in that order. An ``orphan_age``
        below one hour is refused before anything runs, unless ``unsafe_orphan_age`` (see `remove_orphans`).
        The table's subscriptions are read once, after compaction and before expiry: expiry and retention keep
        what their positions need (see `lakehouse.subscriptions`); those not advanced for longer than
        ``subscription_idle`` are reported (``idle_subscriptions``, and a warning each)."""
        name = self.resolve(name)
        maintenance.orphans.check_orphan_age(orphan_age, unsafe_orphan_age=unsafe_orphan_age)
        if not isinstance(subscription_idle, timedelta) or subscription_idle < timedelta(0):
            raise InvalidArgument(f"subscription_idle must be a timedelta >= 0, got {subscription_idle!r}")
        table_name = str(TableName.parse(name))
        compaction = self.compact(
            name, target_file_size=target_file_size, min_input_files=min_input_files, spark=spark, workers=workers
        )
        # offsets carried to the current snapshot first: a position at the lake's offsets then pins the snapshot
        # expiry keeps anyway (the current one), not the compaction snapshot the checkpoint would leave behind
        maintenance.expiry.checkpoint_offsets(self.lake_table(name), snapshot_age)
        pinned = self.subscription_pins(name)
        expiry = self.expire_snapshots(name, older_than=snapshot_age, retain_last=retain_last, pinned=pinned)
        orphans = self.remove_orphans(name, older_than=orphan_age, unsafe_orphan_age=unsafe_orphan_age)
        retention_result = self.apply_log_retention(name, retention=retention, pinned=pinned)
        idle = [idle_message(s.record) for s in self.idle_subscriptions(name, older_than=subscription_idle)]
        for message in idle:
            _log.warning(message)
        return maintenance.MaintenanceReport(
            table=table_name,
            compaction=compaction,
            expiry=expiry,
            orphans=orphans,
            retention=retention_result,
            idle_subscriptions=idle,
        )

    # ---- subscriptions -------------------------------------------------------------------------------

    def subscription(
        self,
        name: str | TableName,
        consumer: str,
        *,
        create: bool = True,
        start: str | AsOf = "latest",
    ) -> Subscription:
        """The durable position of ``consumer`` in table ``name`` (see `lakehouse.subscriptions`), created if
        missing (unless ``create`` is False) at ``start``: ``"latest"`` (the log's end: only what is appended
        from now on is new to it), ``"earliest"`` (per bucket the oldest offset from which the retained log and
        snapshots serve both the as-of read and every change after it), or an offset map of every bucket. An
        existing subscription is returned as stored (``start`` applies to a new one only).

        Raises:
            InvalidSubscriptionName: ``consumer`` is not an identifier. Nothing was read or written.
            TableNotFound: no such table.
            SubscriptionNotFound: ``create`` is False and there is none, or the stored one belongs to an earlier
                table of this name (drop it first).
            InvalidArgument: ``start`` is not "latest", "earliest" or a valid offset map (a bucket the table
                lacks, a negative offset, one past the log's end). Nothing was written.
            AsOfUnavailable: the retained snapshots and log cannot serve ``start``. Nothing was kept.
        """
        name = self.resolve(name)
        check_consumer(consumer)
        definition = self.table(name)
        found = read_subscription(self.store, definition.name, consumer)
        if found is None and not create:
            raise SubscriptionNotFound(
                f"no subscription {consumer} of {definition.name} in {self.url}; create it (Lakehouse.subscription)"
            )
        if found is None:
            log = self.log(definition.name)
            position = self._start_position(definition, log, start)
            record = SubscriptionRecord(definition.name, consumer, definition.table_uuid, position)
            try:
                etag = self.store.put(record.key, record.to_json(), if_none_match=True)
            except PreconditionFailed:  # another runner created it first: use theirs
                found = read_subscription(self.store, definition.name, consumer)
                if found is None:
                    raise SubscriptionNotFound(
                        f"subscription {consumer} of {definition.name} was created and dropped meanwhile; retry"
                    ) from None
            else:
                if start != "latest":
                    # Maintenance that read the subscriptions before this one existed may have deleted what its
                    # position needs since it was checked: check again now that it pins (module docstring).
                    ends = dict(position)
                    error = as_of_unavailable(self.lake_table(definition.name), definition, ends, log.start_offsets())
                    if error is not None:
                        self.store.delete(record.key, if_match=etag)
                        raise error
                return self._subscription(record, etag)
        record, etag = found
        if record.table_uuid != definition.table_uuid:
            raise SubscriptionNotFound(
                f"subscription {consumer} of {definition.name} belongs to an earlier table of this name (dropped "
                f"and created again; table uuid {record.table_uuid}, now {definition.table_uuid}): it does not apply. "
                f"Drop it (lakestream subscription drop {definition.name} {consumer}) and create it again"
            )
        return self._subscription(record, etag)

    def _start_position(self, definition: TableDefinition, log: Log, start: str | AsOf) -> dict[int, int]:
        if isinstance(start, str) and start == "latest":
            return log.end_offsets()
        if isinstance(start, str) and start == "earliest":
            ends = log.end_offsets()
            starts = log.start_offsets()
            held = plan_as_of(self.lake_table(definition.name), definition, ends).held
            # the log from the position on must be retained (for the changes after it), and the as-of read at it
            # must be servable: a snapshot at that offset, or the log's start when nothing was deleted yet
            return {
                b: 0 if starts[b] == 0 else min((o for o in held[b] if o >= starts[b]), default=ends[b])
                for b in range(definition.buckets)
            }
        if isinstance(start, str):
            raise InvalidArgument(
                f"start must be 'latest', 'earliest' or an offset map of every bucket ({{0: 120, 1: 98, ...}}), "
                f"got {start!r}"
            )
        position = check_as_of(start, definition, log)
        error = as_of_unavailable(self.lake_table(definition.name), definition, position, log.start_offsets())
        if error is not None:
            raise error
        return position

    def _subscription(self, record: SubscriptionRecord, etag: str, *, stale: bool = False) -> Subscription:
        return Subscription(self.store, record, etag, log=lambda: self.log(record.table), stale=stale)

    def subscriptions(self, name: str | TableName | None = None) -> list[Subscription]:
        """Every subscription (of table ``name``), by table and consumer. Those of an earlier table of the same
        name, or of a table that no longer exists, are listed with ``stale`` set: they pin nothing."""
        table_name = self.resolve(name) if name is not None else None
        uuids: dict[TableName, str | None] = {}
        out = []
        for record, etag in list_subscriptions(self.store, table_name):
            if record.table not in uuids:
                try:
                    uuids[record.table] = self.table(record.table).table_uuid
                except TableNotFound:
                    uuids[record.table] = None
            out.append(self._subscription(record, etag, stale=uuids[record.table] != record.table_uuid))
        return out

    def drop_subscription(self, name: str | TableName, consumer: str) -> None:
        """Delete a subscription (stale ones too). Raises `SubscriptionNotFound` if there is none."""
        check_consumer(consumer)
        table_name = self.resolve(name)
        found = read_subscription(self.store, table_name, consumer)
        if found is None:
            raise SubscriptionNotFound(f"no subscription {consumer} of {table_name} in {self.url}: nothing to drop")
        self.store.delete(found[0].key)

    def subscription_pins(self, name: str | TableName) -> Pins:
        """What the subscriptions of ``name`` need kept (`lakehouse.subscriptions.pins`): the lake snapshots
        their as-of reads scan, and per bucket the first log offset they read."""
        definition = self.table(name)
        records = [r for r, _ in list_subscriptions(self.store, definition.name)]
        if not records:
            return Pins()
        return pins(records, self.lake_table(definition.name), definition)

    def idle_subscriptions(
        self, name: str | TableName | None = None, *, older_than: timedelta = DEFAULT_IDLE_AGE
    ) -> list[Subscription]:
        """The subscriptions (of ``name``) not advanced for longer than ``older_than``."""
        if not isinstance(older_than, timedelta) or older_than < timedelta(0):
            raise InvalidArgument(f"an idle age must be a timedelta >= 0, got {older_than!r}")
        return [s for s in self.subscriptions(name) if s.idle_for() > older_than]

    def close(self) -> None:
        """Close every table's log (flushing the `Producer`s still open on them) and the store. Raises the
        first `ProducerError` once everything is closed."""
        with self._lock:
            logs = list(self._logs.values())
            self._logs.clear()  # in place: a `with_names` view shares the dict
        failed = close_all(logs)
        self.store.close()
        if failed:
            raise failed

    def __enter__(self) -> Lakehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        physical = ".without_aliases()" if isinstance(self.names, PhysicalNames) else ""
        return f"Lakehouse({self.url!r}){physical}"
