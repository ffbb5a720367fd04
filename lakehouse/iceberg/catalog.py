"""`ObjectStoreCatalog`: a pyiceberg catalog that lives on the object store itself. No metastore, no locks.

Any pyiceberg user can load it with configuration alone::

    load_catalog("lake", **{"py-catalog-impl": "lakehouse.iceberg.catalog.ObjectStoreCatalog",
                            "warehouse": "s3://bucket/wh", "s3.endpoint": "http://127.0.0.1:8333",
                            "s3.access-key-id": "...", "s3.secret-access-key": "..."})

It follows the Iceberg spec's *metastore tables*: each table has a **pointer** object naming its current
metadata file, and a commit is a check-and-put of that pointer. Here the check-and-put is an S3
``If-Match: <etag>`` PUT. Layout under the warehouse::

    _lakestream/catalog/namespaces/<ns>.json          namespace properties (created with If-None-Match)
    _lakestream/catalog/tables/<ns>/<table>.json      the table's pointer
    <ns>/<table>/metadata/<version>-<uuid>.metadata.json, manifests; <ns>/<table>/data/...

**Commit:** read the pointer and its ETag; stage the new metadata (pyiceberg checks the requirements);
write the metadata file create-only; CAS the pointer. A lost CAS raises `CommitFailedException`, so
pyiceberg's own retry rebuilds the snapshot on the new base; the metadata file that provably was not
committed is deleted. **Ambiguous outcome** (the store gave up after the CAS was sent): read the
pointer back; if it names our file, or our file is in the current metadata's log, the commit happened.
Otherwise `CommitStateUnknownException`, and nothing is deleted.

**Rename** is three steps, each atomic: (1) CAS the old pointer to carry ``renaming-to`` (this also
fences commits that started before it); (2) create the new pointer create-only, carrying
``renamed-from``; (3) delete the old pointer with If-Match. Whoever meets a half-done rename (a load,
a commit, ``lakestream catalog repair``) finishes it forward, or rolls it back if the new name was
taken by someone else.

**Aliases** (`lakehouse.table.aliases`, blue/green rebuilds): a name the warehouse's aliases serve by another table
(``dwd.m`` -> ``dwd__g2.m`` after ``lakestream layers cutover``) is that table here, as for lakestream's readers:
``load_table``, ``table_exists``, ``table_location`` of the name give the live table, named by its physical
identifier, so commits through it, and its ``refresh``, go to the live table's pointer. ``list_tables`` lists the
name too. What would change the table behind the name raises `AliasedTableError` naming the live table, nothing
changed: ``drop_table``/``purge_table`` and ``rename_table`` of it, creating, registering or renaming a table to it
(`AliasedTableExists`, a ``TableAlreadyExistsError``), and a commit of a table loaded by that name before the
switch (it would land on the old table). The aliases read are used for `DEFAULT_CACHE_SECONDS`, as a
`Lakehouse`'s. The `Lakehouse`'s own catalog is built with ``resolve_aliases=False``: lakestream resolves names
itself, once, at the entry of each call, and addresses physical tables here (``dwd.m`` of generation 0 too).
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.catalog import Catalog, MetastoreCatalog, PropertiesUpdateSummary
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.io import PY_IO_IMPL, FileIO, load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.serializers import FromByteStream
from pyiceberg.table import CommitTableResponse, StagedTable, Table, TableProperties
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from pyiceberg.utils.config import Config

from lakehouse.errors import CorruptCatalogError, InvalidArgument, LakestreamError
from lakehouse.iceberg.contention import (
    DEFAULT_QUIET_MAX_MS,
    DEFAULT_QUIET_MS,
    QUIET_MAX_MS,
    QUIET_MS,
    quiet_settings,
    wait_until_quiet,
)
from lakehouse.iceberg.fileio import STORE_OPTION_PROPERTIES
from lakehouse.iceberg.lake_table import LakeTable, apply_updates, metadata_json
from lakehouse.iceberg.offsets import check_tiering_fence
from lakehouse.iceberg.threads import carry_context
from lakehouse.table.aliases import (
    ALIASES_KEY,
    DEFAULT_CACHE_SECONDS,
    AliasCache,
    AliasedTableError,
    AliasedTableExists,
)
from lakehouse.table.definition import RESERVED_NAMESPACE, check_catalog_part, decode_catalog_part, encode_catalog_part
from object_store import NotFound, ObjectStore, PreconditionFailed, StoreError, StoreUnavailable, open_store

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.table.update import TableRequirement, TableUpdate
    from pyiceberg.view import View

log = logging.getLogger(__name__)

CATALOG_PREFIX = "_lakestream/catalog/"
#: What pyiceberg's SqlCatalog records for a namespace created without properties.
NAMESPACE_MINIMAL_PROPERTIES = {"exists": "true"}
NAMESPACES_PREFIX = CATALOG_PREFIX + "namespaces/"
TABLES_PREFIX = CATALOG_PREFIX + "tables/"

#: Defaults for tables this catalog creates. pyiceberg 0.12 retries a commit that lost its CAS
#: (``commit.retry.num-retries``, default 4) after min-wait * 2^attempt (capped at max-wait, jitter 10%).
#: One writer wins each round and pyiceberg's retries are not fair: a writer whose rebuild is slow keeps
#: losing: a few dozen retries still lost appends when 16 writers raced on 2 cores (BENCHMARKS.md, the catalog);
#: 100 retries lose none, and pyiceberg's total timeout (30 min) still bounds a commit. The pacing between rounds
#: is our tables' wait for a quiet pointer (`lakehouse.iceberg.contention`), so pyiceberg's own waits are short: with
#: its longer defaults waiters could still be asleep when the pointer went idle.
DEFAULT_TABLE_PROPERTIES = {
    "commit.retry.num-retries": "100",
    "commit.retry.min-wait-ms": "10",
    "commit.retry.max-wait-ms": "100",
    QUIET_MS: str(DEFAULT_QUIET_MS),
    QUIET_MAX_MS: str(DEFAULT_QUIET_MAX_MS),
}

#: A commit check: ``check(base, updates, name=...)`` with the metadata the commit will compare-and-swap (None
#: for a create) and the commit's updates; it raises to refuse the commit (nothing is written then).
CommitCheck = Callable[..., None]

#: The checks every `ObjectStoreCatalog` runs on every commit, by construction: the tiering fence (a tiering round
#: commits only on the tiering snapshot it was planned on, `lakehouse.iceberg.offsets`). Nothing registers them at
#: import, so a catalog built directly, or by pyiceberg's ``load_catalog`` from ``py-catalog-impl``, enforces the
#: fence whatever else the process imported. A catalog's own extra checks are added with `add_commit_check`.
DEFAULT_COMMIT_CHECKS: tuple[CommitCheck, ...] = (check_tiering_fence,)

#: Checks `register_commit_check` (deprecated) added for every catalog of the process; empty unless a caller uses it.
_REGISTERED_COMMIT_CHECKS: list[CommitCheck] = []


def register_commit_check(check: CommitCheck) -> None:
    """Deprecated: run ``check`` on every commit of every `ObjectStoreCatalog` of this process.

    Kept working for one release; add the check to the catalogs that need it with
    `ObjectStoreCatalog.add_commit_check` instead. The tiering fence needs no registering: every catalog runs it.
    """
    warnings.warn(
        "lakehouse.iceberg.catalog.register_commit_check is deprecated and will be removed in the next release: "
        "add the check to the catalog that needs it with ObjectStoreCatalog.add_commit_check "
        "(every ObjectStoreCatalog runs the tiering fence already)",
        DeprecationWarning,
        stacklevel=2,
    )
    if check not in DEFAULT_COMMIT_CHECKS and check not in _REGISTERED_COMMIT_CHECKS:
        _REGISTERED_COMMIT_CHECKS.append(check)


#: The FileIO of our tables unless the catalog's properties name another (``py-io-impl``).
DEFAULT_FILE_IO = "lakehouse.iceberg.fileio.LakeFileIO"


@dataclass(frozen=True)
class Pointer:
    """What a table's pointer object says, and the ETag it had when read."""

    metadata_location: str
    previous_metadata_location: str | None
    etag: str
    renaming_to: str | None = None
    renamed_from: str | None = None

    def to_json(self, **changes: Any) -> bytes:
        doc = {
            "metadata-location": self.metadata_location,
            "previous-metadata-location": self.previous_metadata_location,
            "renaming-to": self.renaming_to,
            "renamed-from": self.renamed_from,
        }
        doc.update({k.replace("_", "-"): v for k, v in changes.items()})
        return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


def pointer_json(metadata_location: str, previous: str | None = None, **extra: str) -> bytes:
    return Pointer(metadata_location, previous, "").to_json(**extra)


class ObjectStoreCatalog(MetastoreCatalog):
    """A pyiceberg `MetastoreCatalog` whose commits are If-Match CAS writes of pointer objects; names an alias
    serves are its live table (see the module), unless ``resolve_aliases`` is False (every name is physical)."""

    def __init__(
        self, name: str, store: ObjectStore | None = None, *, resolve_aliases: bool = True, **properties: str
    ) -> None:
        # pyiceberg 0.12 hands a py-catalog-impl catalog only load_catalog's keyword arguments, not the
        # catalog's entry in .pyiceberg.yaml / PYICEBERG_CATALOG__<NAME>__* : merge those here ourselves.
        configured = Config().get_catalog_config(name) or {}
        properties = {**{k: str(v) for k, v in configured.items() if not isinstance(v, dict)}, **properties}
        properties.pop("py-catalog-impl", None)
        super().__init__(name, **properties)
        warehouse = properties.get("warehouse")
        if store is None:
            if not warehouse:
                raise LakestreamError(
                    f"catalog {name!r}: set the 'warehouse' property to file:///abs/path or s3://bucket/prefix"
                )
            options = {
                ours: properties[theirs] for ours, theirs in STORE_OPTION_PROPERTIES.items() if properties.get(theirs)
            }
            try:
                store = open_store(warehouse, **options)
            except (StoreError, InvalidArgument) as exc:
                raise LakestreamError(f"catalog {name!r}: cannot open warehouse {warehouse!r}: {exc}") from None
        self.store = store
        carry_context()  # pyiceberg's threads write a commit's manifests: they count in the caller's usage
        #: the warehouse's table aliases (None: names are physical tables, as in a `Lakehouse`'s own catalog)
        self._aliases = AliasCache(store, DEFAULT_CACHE_SECONDS) if resolve_aliases else None
        self._commit_checks: list[CommitCheck] = []
        self._io_cache: dict[tuple, FileIO] = {}
        self._io_lock = threading.Lock()
        self.warehouse = store.url.rstrip("/")
        self.properties.setdefault("warehouse", self.warehouse)
        for ours, value in store.connection_options().items():  # pyiceberg's FileIO reaches the same store
            self.properties.setdefault(STORE_OPTION_PROPERTIES[ours], value)

    def add_commit_check(self, check: CommitCheck) -> None:
        """Run ``check`` on this catalog's commits too, after its defaults (`DEFAULT_COMMIT_CHECKS`)."""
        if check not in self._commit_checks:
            self._commit_checks.append(check)

    @property
    def commit_checks(self) -> tuple[CommitCheck, ...]:
        """The checks a commit passes before it is staged: every catalog's (`DEFAULT_COMMIT_CHECKS`), then this
        catalog's own (`add_commit_check`)."""
        checks = (*DEFAULT_COMMIT_CHECKS, *_REGISTERED_COMMIT_CHECKS)
        return (*checks, *(c for c in self._commit_checks if c not in checks))

    # ---- keys and names -----------------------------------------------------------------------------

    # Identifiers follow pyiceberg's SqlCatalog: a namespace is its parts, stripped, joined by '.' (so ("a.b",)
    # is ("a", "b")); each part non-blank and printable (`lakehouse.table.definition.check_catalog_part`); a table
    # name is the identifier's last part as given (a '.' inside a tuple's last part included). Empty and blank parts
    # raise pyiceberg's own `namespace_to_string` errors, with the exception type SqlCatalog gives each method.
    # In object keys and default locations each part is encoded (`encode_catalog_part`).

    def _split(self, identifier: str | Identifier, err: type[Exception] = ValueError) -> tuple[str, str]:
        """(namespace, table): the namespace's parts joined by '.'."""
        ident = self.identifier_to_tuple(identifier)
        namespace = self._namespace_str(ident[:-1], err)
        table = ident[-1] if ident else ""
        check_catalog_part(table, identifier, table=True)
        return namespace, table

    @staticmethod
    def _namespace_str(namespace: str | Identifier, err: type[Exception] = NoSuchNamespaceError) -> str:
        ns = Catalog.namespace_to_string(namespace, err)  # type: ignore[arg-type]
        parts = ns.split(".")
        for part in parts:
            check_catalog_part(part, namespace)
        return ns

    @staticmethod
    def _marker(namespace: str, table: str) -> str:
        """A table's name in a rename marker: ``<encoded namespace>/<encoded table>`` (a table name may hold
        '.'). Markers written before were ``ns.table``, which `_from_marker` still reads."""
        return f"{ObjectStoreCatalog._encoded(namespace)}/{encode_catalog_part(table)}"

    def _from_marker(self, marker: str) -> tuple[str, str]:
        if "/" not in marker:
            return self._split(marker)
        encoded_ns, _, table = marker.rpartition("/")
        return ".".join(self._decoded(encoded_ns)), decode_catalog_part(table)

    @staticmethod
    def _encoded(namespace: str) -> str:
        """A namespace in keys and locations: its parts encoded, and a first part that reads as lakestream's
        own folder (``_lakestream``, in any case) with its '_' escaped, so the name stays the user's."""
        parts = [encode_catalog_part(p) for p in namespace.split(".")]
        if parts[0].lower() == RESERVED_NAMESPACE:
            parts[0] = "%5F" + parts[0][1:]
        return ".".join(parts)

    @staticmethod
    def _decoded(text: str) -> tuple[str, ...]:
        return tuple(decode_catalog_part(p) for p in text.split("."))

    @staticmethod
    def _pointer_key(namespace: str, table: str) -> str:
        return f"{TABLES_PREFIX}{ObjectStoreCatalog._encoded(namespace)}/{encode_catalog_part(table)}.json"

    @staticmethod
    def _namespace_key(namespace: str) -> str:
        return f"{NAMESPACES_PREFIX}{ObjectStoreCatalog._encoded(namespace)}.json"

    def _get_default_warehouse_location(self, database_name: str, table_name: str) -> str:
        """``<namespace location or warehouse/<namespace>>/<table>``, parts encoded; ``database_name`` is the
        namespace's parts joined by '.' (pyiceberg's own version would split encoded parts again)."""
        properties = self._read_namespace(database_name)[0]
        if location := properties.get("location"):
            return f"{location.rstrip('/')}/{encode_catalog_part(table_name)}"
        return f"{self.warehouse}/{self._encoded(database_name)}/{encode_catalog_part(table_name)}"

    def _create_staged_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> StagedTable:
        """pyiceberg's staging of a new table, for namespaces of any depth (pyiceberg's takes two parts only)."""
        namespace, table = self._split(identifier)
        self._refuse_aliased(
            namespace,
            table,
            "a table created under it would be hidden by the alias; nothing was created",
            "Load the name to use the live table, or create the table under another name",
            AliasedTableExists,
        )
        format_version = int(properties.get(TableProperties.FORMAT_VERSION, TableProperties.DEFAULT_FORMAT_VERSION))
        iceberg_schema = self._convert_schema_if_needed(schema, format_version)  # type: ignore[arg-type]
        location = self._resolve_table_location(location, namespace, table)
        metadata_location = load_location_provider(location, properties).new_table_metadata_file_location()
        metadata = new_table_metadata(
            location=location,
            schema=iceberg_schema,
            partition_spec=partition_spec,
            sort_order=sort_order,
            properties=properties,
        )
        return StagedTable(
            identifier=(*namespace.split("."), table),
            metadata=metadata,
            metadata_location=metadata_location,
            io=self._load_file_io(properties=properties, location=metadata_location),
            catalog=self,
        )

    def _key_of(self, location: str) -> str | None:
        """The store key of a location inside the warehouse, or None if it lies outside."""
        prefix = self.warehouse + "/"
        return location[len(prefix) :] if location.startswith(prefix) else None

    # ---- aliases -------------------------------------------------------------------------------------

    def _served_by(self, namespace: str, table: str) -> tuple[str, str] | None:
        """The (namespace, table) serving an aliased name, or None: the name is its own table (no alias, or this
        catalog names physical tables)."""
        if self._aliases is None:
            return None
        physical = self._aliases.aliases().current.get(f"{namespace}.{table}")
        if physical is None:
            return None
        live_ns, _, live_table = physical.rpartition(".")
        return live_ns, live_table

    def _live(self, identifier: str | Identifier) -> tuple[str, str]:
        """(namespace, table) of the table serving ``identifier``: itself unless an alias serves it."""
        namespace, table = self._split(identifier)
        return self._served_by(namespace, table) or (namespace, table)

    def physical_identifier(self, identifier: str | Identifier) -> Identifier:
        """The identifier of the table serving ``identifier`` (itself unless an alias serves it)."""
        namespace, table = self._live(identifier)
        return (*namespace.split("."), table)

    def _refuse_aliased(
        self, namespace: str, table: str, refused: str, advice: str, error: type[AliasedTableError] = AliasedTableError
    ) -> None:
        """Raise ``error`` if an alias serves ``namespace.table`` (``refused``: why, and that nothing was done)."""
        live = self._served_by(namespace, table)
        if live is not None:
            raise error(
                f"{namespace}.{table} is served by {'.'.join(live)} since a blue/green cutover (its alias in "
                f"{ALIASES_KEY}): {refused}. {advice}"
            )

    # ---- pointers ------------------------------------------------------------------------------------

    def _read_pointer(self, namespace: str, table: str) -> Pointer:
        key = self._pointer_key(namespace, table)
        try:
            obj = self.store.get(key)
        except NotFound:
            raise NoSuchTableError(f"Table does not exist: {namespace}.{table}") from None
        try:
            doc = json.loads(obj.data)
            return Pointer(
                metadata_location=doc["metadata-location"],
                previous_metadata_location=doc.get("previous-metadata-location"),
                etag=obj.etag,
                renaming_to=doc.get("renaming-to"),
                renamed_from=doc.get("renamed-from"),
            )
        except (ValueError, KeyError, TypeError):
            raise CorruptCatalogError(
                f"the pointer of table {namespace}.{table} ({self.warehouse}/{key}) is not a valid pointer "
                f"({len(obj.data)} bytes). Restore it, or re-register the table from its newest metadata file: "
                "lakestream table register NAME METADATA_LOCATION --overwrite"
            ) from None

    def _current_pointer(self, namespace: str, table: str) -> Pointer:
        """The pointer, with any half-done rename involving this table resolved first."""
        for _ in range(5):
            pointer = self._read_pointer(namespace, table)
            if pointer.renaming_to is None and pointer.renamed_from is None:
                return pointer
            if not self._resolve_rename(namespace, table, pointer):
                return pointer
        return self._read_pointer(namespace, table)

    def _resolve_rename(self, namespace: str, table: str, pointer: Pointer) -> bool:
        """Finish or roll back a rename that this pointer takes part in; True if anything changed."""
        if pointer.renaming_to is not None:  # we are the old name
            to_ns, to_table = self._from_marker(pointer.renaming_to)
            target = self._pointer_or_none(to_ns, to_table)
            if (
                target is not None
                and target.renamed_from is not None
                and (self._from_marker(target.renamed_from) == (namespace, table))
            ):
                # our rename's target exists (it may have moved on since): finish by dropping the old name
                self._delete_if_match(self._pointer_key(namespace, table), pointer.etag)
                return True
            if target is None:  # step 2 never happened: do it now
                try:
                    self.store.put(
                        self._pointer_key(to_ns, to_table),
                        pointer_json(
                            pointer.metadata_location,
                            pointer.previous_metadata_location,
                            renamed_from=self._marker(namespace, table),
                        ),
                        if_none_match=True,
                    )
                except PreconditionFailed:
                    return True  # someone else created it meanwhile; re-read and decide again
                self._delete_if_match(self._pointer_key(namespace, table), pointer.etag)
                return True
            # the new name belongs to another table: roll back by clearing our marker
            self._cas_quietly(self._pointer_key(namespace, table), pointer.to_json(renaming_to=None), pointer.etag)
            return True
        if pointer.renamed_from is not None:  # we are the new name
            from_ns, from_table = self._from_marker(pointer.renamed_from)
            source = self._pointer_or_none(from_ns, from_table)
            if (
                source is not None
                and source.renaming_to is not None
                and (self._from_marker(source.renaming_to) == (namespace, table))
            ):
                self._delete_if_match(self._pointer_key(from_ns, from_table), source.etag)  # finish step 3
            # drop the marker so later loads need no look-up
            self._cas_quietly(self._pointer_key(namespace, table), pointer.to_json(renamed_from=None), pointer.etag)
            return True
        return False

    def _pointer_or_none(self, namespace: str, table: str) -> Pointer | None:
        try:
            return self._read_pointer(namespace, table)
        except NoSuchTableError:
            return None

    def _cas_quietly(self, key: str, body: bytes, etag: str) -> None:
        """CAS ``key``; losing is fine (someone else changed it and the caller re-reads)."""
        try:
            self.store.put(key, body, if_match=etag)
        except PreconditionFailed:
            pass

    def _delete_if_match(self, key: str, etag: str) -> None:
        try:
            self.store.delete(key, if_match=etag)
        except PreconditionFailed:
            pass  # changed meanwhile: the caller re-reads

    # ---- metadata files ------------------------------------------------------------------------------

    def _load_file_io(self, properties: Properties = EMPTY_DICT, location: str | None = None) -> FileIO:
        """pyiceberg's FileIO, one per set of properties and scheme (each holds its own connections)."""
        merged = {PY_IO_IMPL: DEFAULT_FILE_IO, **self.properties, **properties}
        key = (tuple(sorted(merged.items())), location.split("://", 1)[0] if location and "://" in location else "")
        with self._io_lock:
            io = self._io_cache.get(key)
            if io is None:
                io = self._io_cache[key] = load_file_io(merged, location)
            return io

    def _read_metadata(self, location: str) -> TableMetadata:
        io = self._load_file_io(location=location)
        with io.new_input(location).open() as stream:
            return FromByteStream.table_metadata(stream)

    def _write_metadata_create_only(
        self, metadata: TableMetadata, location: str, committed: TableMetadata | None = None
    ) -> None:
        """Write ``metadata`` at ``location`` create-only; ``committed``: the metadata it updates (its
        snapshots' JSON is reused, `lakehouse.iceberg.lake_table.metadata_json`)."""
        key = self._key_of(location)
        if location.endswith(".gz.metadata.json") or key is None:
            # outside our warehouse (a registered table) or compressed: pyiceberg's FileIO writes it
            self._write_metadata(metadata, self._load_file_io(metadata.properties, location), location)
            return
        self.store.put(key, metadata_json(metadata, committed).encode(), if_none_match=True)

    def _delete_location(self, location: str) -> None:
        key = self._key_of(location)
        try:
            if key is not None:
                self.store.delete(key)
            else:
                self._load_file_io(location=location).delete(location)
        except Exception:  # noqa: BLE001 - an orphan is harmless; losing the original error is not
            log.warning("could not delete uncommitted metadata file %s", location, exc_info=True)

    def _table(self, namespace: str, table: str, pointer: Pointer) -> Table:
        metadata = self._read_metadata(pointer.metadata_location)
        return LakeTable(
            identifier=(*namespace.split("."), table),
            metadata=metadata,
            metadata_location=pointer.metadata_location,
            io=self._load_file_io(metadata.properties, pointer.metadata_location),
            catalog=self,
        )

    # ---- tables --------------------------------------------------------------------------------------

    def create_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> Table:
        """Create a table: metadata file create-only, then its pointer create-only.

        Raises:
            TableAlreadyExistsError: the name is taken (also when a concurrent creator won).
            NoSuchNamespaceError: the namespace does not exist.
        """
        namespace, table = self._split(identifier, NoSuchNamespaceError)
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        properties = {**DEFAULT_TABLE_PROPERTIES, **properties}
        staged = self._create_staged_table(identifier, schema, location, partition_spec, sort_order, properties)
        self._create(namespace, table, staged.metadata, staged.metadata_location)
        return self.load_table(identifier)

    def _create(self, namespace: str, table: str, metadata: TableMetadata, metadata_location: str) -> None:
        self._write_metadata_create_only(metadata, metadata_location)
        try:
            self.store.put(self._pointer_key(namespace, table), pointer_json(metadata_location), if_none_match=True)
        except PreconditionFailed:
            self._delete_location(metadata_location)  # provably not referenced by anyone
            raise TableAlreadyExistsError(f"Table {namespace}.{table} already exists") from None

    def load_table(self, identifier: str | Identifier) -> Table:
        """The table of ``identifier``: the live one, named by its physical identifier, if an alias serves it."""
        namespace, table = self._live(identifier)
        pointer = self._current_pointer(namespace, table)
        if pointer.renaming_to is not None:
            raise NoSuchTableError(f"Table {namespace}.{table} is being renamed to {pointer.renaming_to}")
        return self._table(namespace, table, pointer)

    def register_table(self, identifier: str | Identifier, metadata_location: str, overwrite: bool = False) -> Table:
        """Point a table name at an existing metadata file (create-only unless ``overwrite``)."""
        namespace, table = self._split(identifier)
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        self._refuse_aliased(
            namespace,
            table,
            "a table registered under it would be hidden by the alias; nothing was registered",
            "Register the metadata under another name (to repair a blue/green table's pointer, register its "
            "physical name)",
            AliasedTableExists,
        )
        self._read_metadata(metadata_location)  # fail early on a file that is not Iceberg metadata
        key = self._pointer_key(namespace, table)
        try:
            self.store.put(key, pointer_json(metadata_location), if_none_match=not overwrite)
        except PreconditionFailed:
            raise TableAlreadyExistsError(f"Table {namespace}.{table} already exists") from None
        return self.load_table(identifier)

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        if namespace and not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {self._namespace_str(namespace)}")
        ns = self._namespace_str(namespace, ValueError)
        prefix = f"{TABLES_PREFIX}{self._encoded(ns)}/"
        found = [
            (*ns.split("."), decode_catalog_part(info.key[len(prefix) : -len(".json")]))
            for info in self.store.list(prefix)
            if "/" not in info.key[len(prefix) :] and info.key.endswith(".json")
        ]
        if self._aliases is not None:  # an aliased name is a table of its namespace, with or without a pointer
            for name in sorted(self._aliases.aliases().current):
                alias_ns, _, alias_table = name.rpartition(".")
                if alias_ns == ns and (*ns.split("."), alias_table) not in found:
                    found.append((*ns.split("."), alias_table))
        return found

    def drop_table(self, identifier: str | Identifier) -> None:
        """Delete the pointer (with If-Match; a concurrent commit makes us re-read and try again)."""
        namespace, table = self._split(identifier)
        self._refuse_aliased(
            namespace,
            table,
            "the catalog does not drop a name an alias serves (its readers would go on reading the live table); "
            "nothing was dropped",
            "lakestream layers cleanup drops the blue/green tables that neither the aliases nor the rollback target "
            "name",
        )
        for _ in range(50):
            pointer = self._current_pointer(namespace, table)
            try:
                self.store.delete(self._pointer_key(namespace, table), if_match=pointer.etag)
                return
            except PreconditionFailed:
                time.sleep(0.01)
        raise CommitFailedException(f"could not drop {namespace}.{table}: it kept changing; retry")

    def rename_table(self, from_identifier: str | Identifier, to_identifier: str | Identifier) -> Table:
        from_ns, from_table = self._split(from_identifier)
        to_ns, to_table = self._split(to_identifier)
        self._refuse_aliased(
            from_ns,
            from_table,
            "the catalog does not rename a name an alias serves (its readers would go on reading the live table); "
            "nothing was renamed",
            "Rename the model in its project (a new model) instead",
        )
        self._refuse_aliased(
            to_ns,
            to_table,
            "a table renamed to it would be hidden by the alias; nothing was renamed",
            "Rename the table to another name",
            AliasedTableExists,
        )
        if not self.namespace_exists(to_ns):
            raise NoSuchNamespaceError(f"Namespace does not exist: {to_ns}")
        if not self.table_exists((*from_ns.split("."), from_table)):
            raise NoSuchTableError(f"Table does not exist: {from_table}")  # sic: SqlCatalog names the table only
        if self.table_exists((*to_ns.split("."), to_table)):
            raise TableAlreadyExistsError(f"Table {to_ns}.{to_table} already exists")
        target = self._marker(to_ns, to_table)
        old_key, new_key = self._pointer_key(from_ns, from_table), self._pointer_key(to_ns, to_table)
        for _ in range(50):  # step 1: mark the old pointer (fences commits that read it before)
            pointer = self._current_pointer(from_ns, from_table)
            if pointer.renaming_to is not None:
                raise CommitFailedException(f"{from_ns}.{from_table} is being renamed to {pointer.renaming_to}")
            try:
                marked_etag = self.store.put(old_key, pointer.to_json(renaming_to=target), if_match=pointer.etag)
                break
            except PreconditionFailed:  # a commit moved the pointer: nothing done yet, read it again
                time.sleep(0.01)
        else:
            raise CommitFailedException(f"could not rename {from_ns}.{from_table}: it kept changing; retry")
        marked = Pointer(pointer.metadata_location, pointer.previous_metadata_location, marked_etag, target)
        new_body = pointer_json(
            pointer.metadata_location,
            pointer.previous_metadata_location,
            renamed_from=self._marker(from_ns, from_table),
        )
        try:  # step 2: the new name, create-only
            self.store.put(new_key, new_body, if_none_match=True)
        except PreconditionFailed:
            if not self._finished_by_another(from_ns, from_table, to_ns, to_table):
                self._resolve_rename(from_ns, from_table, marked)  # roll back our marker
                raise TableAlreadyExistsError(f"Table {target} already exists") from None
        self._delete_if_match(old_key, marked_etag)  # step 3
        self._current_pointer(to_ns, to_table)  # clears the renamed-from marker
        return self.load_table(to_identifier)

    def _finished_by_another(self, from_ns: str, from_table: str, to_ns: str, to_table: str) -> bool:
        """After step 2 of our rename found the new name taken: did a reader that met our marker finish the
        rename for us (`_resolve_rename` rolls a marked rename forward)? Yes if the new name says it was
        renamed from ours, or if the old name is gone: only finishing a rename deletes a marked pointer (a
        drop resolves the rename first). Otherwise the name belongs to another table."""
        target = self._pointer_or_none(to_ns, to_table)
        if target is None:
            return False
        if target.renamed_from is not None and self._from_marker(target.renamed_from) == (from_ns, from_table):
            return True
        return self._pointer_or_none(from_ns, from_table) is None

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        """Stage, write the metadata file create-only, CAS the pointer. See the module docstring.

        Raises:
            CommitFailedException: the pointer moved (pyiceberg retries on a fresh base) or a requirement failed.
            CommitStateUnknownException: the store never answered the CAS and the outcome cannot be read back.
            TieringConflict: a tiering snapshot planned on an older tiering snapshot (not retried by pyiceberg),
                refused by the tiering fence every catalog runs (`DEFAULT_COMMIT_CHECKS`).
        """
        namespace, name = self._split(table.name())
        # A table loaded by name is named by the table serving it, so only one loaded before a cutover (or staged
        # under an aliased name) gets here with an aliased name: its commit would land on the old table.
        self._refuse_aliased(
            namespace,
            name,
            "this table was loaded by that name before the switch, so its commit would land on the old table; "
            "nothing was committed",
            f"Load the table again (load_table('{namespace}.{name}') gives the live one) and redo the change",
        )
        try:
            pointer: Pointer | None = self._current_pointer(namespace, name)
        except NoSuchTableError:
            pointer = None
        try:
            return self._commit_on(pointer, table, namespace, name, requirements, updates)
        except CommitFailedException:
            if pointer is not None and isinstance(table, LakeTable):
                table.lost_commit(pointer.etag)  # its retry waits for the pointer to go quiet first
            raise

    def _commit_on(
        self,
        pointer: Pointer | None,
        table: Table,
        namespace: str,
        name: str,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> CommitTableResponse:
        if pointer is not None and pointer.renaming_to is not None:
            raise CommitFailedException(f"{namespace}.{name} is being renamed to {pointer.renaming_to}")
        current: Table | None = None
        if pointer is not None:
            # Metadata files are create-only, so the file the transaction started from is still the
            # current metadata if the pointer names it: no need to read and parse it again.
            same = pointer.metadata_location == table.metadata_location
            current = table if same else self._table(namespace, name, pointer)
        if current is not None and not updates:
            # mypy reads pyiceberg's pydantic fields as __init__ (the real __init__ takes these arguments)
            return CommitTableResponse(metadata=current.metadata, metadata_location=current.metadata_location)  # type: ignore[call-arg]
        # The commit checks (the tiering fence: a tiering snapshot commits only on the tiering snapshot it was
        # planned on, lakehouse.iceberg.offsets; then this catalog's own), against the exact metadata the pointer's
        # CAS will replace.
        for check in self.commit_checks:
            check(current.metadata if current is not None else None, updates, name=f"{namespace}.{name}")
        staged = self._update_and_stage_table(current, table.name(), requirements, updates)
        if pointer is None:  # a create-table transaction
            self._create(namespace, name, staged.metadata, staged.metadata_location)
            return CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)  # type: ignore[call-arg]
        self._write_metadata_create_only(
            staged.metadata, staged.metadata_location, current.metadata if current is not None else None
        )
        new_pointer = pointer_json(staged.metadata_location, pointer.metadata_location)
        if self._pointer_moved(namespace, name, pointer.etag):
            # Someone committed while we staged: the CAS would lose. A HEAD is cheaper than a doomed
            # If-Match PUT, which some stores (SeaweedFS) hold for up to a second under contention.
            self._delete_location(staged.metadata_location)
            raise CommitFailedException(f"{namespace}.{name} was updated by another writer")
        try:
            self.store.put(self._pointer_key(namespace, name), new_pointer, if_match=pointer.etag)
        except (PreconditionFailed, StoreUnavailable) as exc:
            if self._committed(namespace, name, staged.metadata_location):
                return CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)  # type: ignore[call-arg]
            if isinstance(exc, PreconditionFailed) and not exc.after_retry:
                # a plain lost CAS: certainly not committed, nobody can ever reference the file
                self._delete_location(staged.metadata_location)
                raise CommitFailedException(f"{namespace}.{name} was updated by another writer") from None
            raise CommitStateUnknownException(  # a timeout or 5xx was involved: keep the file, let the caller look
                f"commit of {namespace}.{name} may or may not have happened ({exc}); {staged.metadata_location} "
                "was kept. Reload the table to see whether it is current before retrying."
            ) from exc
        return CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)  # type: ignore[call-arg]

    def _update_and_stage_table(
        self,
        current_table: Table | None,
        table_identifier: Identifier,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> StagedTable:
        """pyiceberg's staging, applying the updates with `apply_updates` (no deep copy of the history)."""
        if current_table is None:  # a create: pyiceberg's path, which also validates the whole result
            return super()._update_and_stage_table(current_table, table_identifier, requirements, updates)
        for requirement in requirements:
            requirement.validate(current_table.metadata)
        metadata = apply_updates(current_table.metadata, updates, current_table.metadata_location)
        version = self._parse_metadata_version(current_table.metadata_location) + 1
        provider = load_location_provider(metadata.location, metadata.properties)
        location = provider.new_table_metadata_file_location(version)
        return StagedTable(
            identifier=table_identifier,
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(properties=metadata.properties, location=location),
            catalog=self,
        )

    def wait_for_quiet_pointer(self, table: Table, etag: str, lost_at: float) -> None:
        """After a commit of ``table`` lost (the pointer had ``etag`` at ``lost_at``, monotonic), wait until
        the pointer stops changing (`lakehouse.iceberg.contention`); a note older than the longest wait is ignored."""
        quiet, limit = quiet_settings(table.metadata.properties)
        if quiet <= 0 or time.monotonic() - lost_at > limit:
            return
        key = self._pointer_key(*self._split(table.name()))

        def etag_now() -> str | None:
            try:
                return self.store.head(key).etag
            except StoreError:  # NotFound included: the reload that follows reports what happened
                return None

        wait_until_quiet(etag_now, etag, quiet, limit)

    def _pointer_moved(self, namespace: str, name: str, etag: str) -> bool:
        try:
            return self.store.head(self._pointer_key(namespace, name)).etag != etag
        except NotFound:
            return True

    def _committed(self, namespace: str, name: str, metadata_location: str) -> bool:
        """Did a commit of ``metadata_location`` land? (The pointer names it, or a later commit built on it.)"""
        try:
            pointer = self._read_pointer(namespace, name)
        except (NoSuchTableError, StoreError):
            return False
        if pointer.metadata_location == metadata_location:
            return True
        try:
            current = self._read_metadata(pointer.metadata_location)
        except Exception:  # noqa: BLE001 - cannot tell: treated as not (the caller keeps the file if unsure)
            return False
        return any(entry.metadata_file == metadata_location for entry in current.metadata_log)

    # ---- namespaces ----------------------------------------------------------------------------------

    # A namespace exists if its object does, or implicitly if a namespace below it does (as in pyiceberg's
    # SqlCatalog: creating ("a", "b", "c") makes ("a",) and ("a", "b") exist, with no properties of their own).
    # Messages and exception types are SqlCatalog's, word for word.

    def create_namespace(self, namespace: str | Identifier, properties: Properties = EMPTY_DICT) -> None:
        ns = self._namespace_str(namespace)
        if self.namespace_exists(ns):
            raise NamespaceAlreadyExistsError(f"Namespace {ns} already exists")
        # SqlCatalog records a namespace created without properties as {"exists": "true"}
        body = json.dumps({"namespace": ns, "properties": dict(properties or NAMESPACE_MINIMAL_PROPERTIES)}).encode()
        try:
            self.store.put(self._namespace_key(ns), body, if_none_match=True)
        except PreconditionFailed:
            raise NamespaceAlreadyExistsError(f"Namespace {ns} already exists") from None

    def _has_children(self, ns: str) -> bool:
        """Whether a namespace below ``ns`` exists (one LIST request, at most one key read past its own)."""
        own = self._namespace_key(ns)
        prefix = f"{NAMESPACES_PREFIX}{self._encoded(ns)}."
        return any(info.key != own for _, info in zip(range(2), self.store.list(prefix), strict=False))

    def _read_namespace(self, ns: str) -> tuple[dict[str, str], str | None]:
        """The namespace's properties and its object's ETag (None: it exists only through namespaces below it)."""
        try:
            obj = self.store.get(self._namespace_key(ns))
        except NotFound:
            if self._has_children(ns):
                return {}, None
            raise NoSuchNamespaceError(f"Namespace {ns} does not exists") from None  # sic: SqlCatalog's words
        try:
            return dict(json.loads(obj.data)["properties"]), obj.etag
        except (ValueError, KeyError, TypeError):
            raise CorruptCatalogError(
                f"namespace object {self.warehouse}/{self._namespace_key(ns)} is not valid JSON properties"
            ) from None

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        ns = self._namespace_str(namespace)
        return self.store.exists(self._namespace_key(ns)) or self._has_children(ns)

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        return self._read_namespace(self._namespace_str(namespace, ValueError))[0]

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        """The namespaces one level below ``namespace`` (top-level ones by default), explicit or implied."""
        if namespace and not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {self._namespace_str(namespace)}")
        if namespace == "":  # the namespace ("",), which nothing can be below
            return []
        parent = tuple(self._namespace_str(namespace).split(".")) if namespace else ()
        prefix = f"{NAMESPACES_PREFIX}{self._encoded('.'.join(parent))}." if parent else NAMESPACES_PREFIX
        out: dict[Identifier, None] = {}
        for info in self.store.list(prefix):
            ident = self._decoded(info.key[len(NAMESPACES_PREFIX) : -len(".json")])
            if len(ident) > len(parent) and ident[: len(parent)] == parent:
                out[ident[: len(parent) + 1]] = None
        return list(out)

    def drop_namespace(self, namespace: str | Identifier) -> None:
        """Drop a namespace without tables (as SqlCatalog: namespaces below it stay, and keep it implied)."""
        ns = self._namespace_str(namespace)
        if not self.namespace_exists(ns):
            raise NoSuchNamespaceError(f"Namespace does not exist: {ns}")
        if tables := self.list_tables(ns):
            raise NamespaceNotEmptyError(f"Namespace {ns} is not empty. {len(tables)} tables exist.")
        try:
            etag = self.store.head(self._namespace_key(ns)).etag
            self.store.delete(self._namespace_key(ns), if_match=etag)
        except NotFound:
            pass  # implied only: nothing of its own to delete
        except PreconditionFailed:
            raise CommitFailedException(f"namespace {ns} changed while being dropped; retry") from None

    def update_namespace_properties(
        self, namespace: str | Identifier, removals: set[str] | None = None, updates: Properties = EMPTY_DICT
    ) -> PropertiesUpdateSummary:
        ns = self._namespace_str(namespace, ValueError)
        for _ in range(50):
            current, etag = self._read_namespace(ns)
            summary, updated = self._get_updated_props_and_update_summary(current, removals, updates)
            body = json.dumps({"namespace": ns, "properties": updated}).encode()
            try:
                if etag is None:  # an implied namespace gets its own object
                    self.store.put(self._namespace_key(ns), body, if_none_match=True)
                else:
                    self.store.put(self._namespace_key(ns), body, if_match=etag)
                return summary
            except PreconditionFailed:
                time.sleep(0.01)
        raise CommitFailedException(f"namespace {ns} kept changing; retry")

    # ---- views (not supported) -----------------------------------------------------------------------

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        return []

    def view_exists(self, identifier: str | Identifier) -> bool:
        return False

    def load_view(self, identifier: str | Identifier) -> View:
        raise NotImplementedError("ObjectStoreCatalog does not support Iceberg views yet")

    def drop_view(self, identifier: str | Identifier) -> None:
        raise NotImplementedError("ObjectStoreCatalog does not support Iceberg views yet")

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        raise NotImplementedError("ObjectStoreCatalog does not support Iceberg views yet")

    # ---- maintenance ---------------------------------------------------------------------------------

    def repair(self) -> list[str]:
        """Resolve every half-done rename (after a crash); return what was done, one line per table."""
        done, seen = [], set()
        for info in list(self.store.list(TABLES_PREFIX)):
            encoded_ns, _, file = info.key[len(TABLES_PREFIX) :].rpartition("/")
            ns, table = ".".join(self._decoded(encoded_ns)), decode_catalog_part(file.removesuffix(".json"))
            try:
                pointer = self._read_pointer(ns, table)
            except NoSuchTableError:
                continue  # resolved as the other side of a rename already
            marker = pointer.renaming_to or pointer.renamed_from
            if marker is None:
                continue
            other = ".".join(self._from_marker(marker))
            try:
                self._current_pointer(ns, table)
            except NoSuchTableError:
                pass  # the old name is gone: the rename was finished
            pair = frozenset((f"{ns}.{table}", other))
            if pair not in seen:
                seen.add(pair)
                done.append(f"{ns}.{table}: resolved rename ({other})")
        return done

    def raw_metadata(self, identifier: str | Identifier) -> dict[str, Any] | None:
        """A table's current metadata file as plain JSON, not parsed by pyiceberg (which refuses metadata it
        cannot load, such as a type it wrote but cannot read back): None if the table does not exist, an empty
        dict if its metadata file is missing or not JSON. For dropping a table whatever state it is in."""
        namespace, table = self._live(identifier)
        pointer = self._pointer_or_none(namespace, table)
        if pointer is None:
            return None
        location = pointer.metadata_location
        try:
            key = self._key_of(location)
            if key is not None:
                data = self.store.get(key).data
            else:
                with self._load_file_io(location=location).new_input(location).open() as stream:
                    data = stream.read()
            if location.endswith(".gz.metadata.json"):
                data = gzip.decompress(data)
            doc = json.loads(data)
        except (NotFound, FileNotFoundError, OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def newest_metadata_file(self, identifier: str | Identifier) -> str | None:
        """The highest-versioned ``*.metadata.json`` under the table's default location, or None: what
        ``register_table`` can repoint a table to after its pointer was deleted (a drop keeps the files)."""
        namespace, table = self._split(identifier)
        key = self._key_of(self._get_default_warehouse_location(namespace, table))
        if key is None:
            return None
        newest: tuple[int, str] | None = None
        for info in self.store.list(key.rstrip("/") + "/metadata/"):
            name = info.key.rsplit("/", 1)[-1]
            version = name.split("-", 1)[0]
            if name.endswith(".metadata.json") and version.isdigit() and (newest is None or int(version) > newest[0]):
                newest = (int(version), info.key)
        return f"{self.warehouse}/{newest[1]}" if newest is not None else None

    def table_location(self, identifier: str | Identifier) -> str:
        """The current metadata file of a table (what other engines open): the live table's if an alias serves it."""
        namespace, table = self._live(identifier)
        return self._current_pointer(namespace, table).metadata_location

    def __repr__(self) -> str:
        return f"ObjectStoreCatalog({self.name!r}, warehouse={self.warehouse!r})"


__all__ = ["DEFAULT_TABLE_PROPERTIES", "STORE_OPTION_PROPERTIES", "ObjectStoreCatalog"]
