"""Table aliases: a logical table name served by another physical table (blue/green rebuilds).

One object, ``_lakestream/aliases.json``, maps logical names (``dwd.orders``) to the physical tables that
serve them (``dwd__g2.orders``), and keeps the mapping it replaced (``previous``, the rollback target). It is
replaced whole, by one compare-and-swap (``If-Match`` its ETag, ``If-None-Match: *`` for the first), so a switch
of several tables at once is atomic: a reader sees the old mapping or the new one, never half of each.

`Lakehouse` resolves a ``str`` name through the aliases once at the entry of each read by name (`table`,
`lake_table`, `union_read`, `lake_read`, `changes`, `lookup`, `log`, `subscription`, the Spark source) and passes
the resolved `TableName` on; a `TableName` is taken as the physical table and never resolved. The record is
cached for `DEFAULT_CACHE_SECONDS` (``Lakehouse(..., alias_cache_seconds=...)``): a switch reaches a running
reader within that time. A name without an alias is its own physical table (no record: nothing changes).

The catalog other engines load (`lakehouse.iceberg.catalog.ObjectStoreCatalog`, as pyiceberg's ``load_catalog`` builds
it) resolves a name through the same record, so pyiceberg, ``lakestream table location`` and DuckDB on that location
see the table serving the name; what would change the table behind an aliased name through the catalog (drop,
rename, create, register, a commit of a table loaded before the switch) raises `AliasedTableError`. The
`Lakehouse`'s own catalog (``lh.catalog``) names physical tables: it sits below this resolution.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg.exceptions import TableAlreadyExistsError

from lakehouse.errors import LakestreamError
from lakehouse.table.definition import RESERVED_NAMESPACE, TableName
from object_store import NotFound, ObjectStore, PreconditionFailed

__all__ = [
    "ALIASES_KEY",
    "DEFAULT_CACHE_SECONDS",
    "AliasCache",
    "AliasConflict",
    "AliasedTableError",
    "AliasedTableExists",
    "Aliases",
    "read_aliases",
    "write_aliases",
]

ALIASES_KEY = f"{RESERVED_NAMESPACE}/aliases.json"
#: How long a `Lakehouse` uses the aliases it read before reading them again (seconds).
DEFAULT_CACHE_SECONDS = 1.0


class AliasConflict(LakestreamError):
    """The aliases were replaced by someone else between this writer's read and its write."""


class AliasedTableError(LakestreamError):
    """A catalog operation on a name an alias serves by another table (a blue/green cutover), which would act on
    another table than the one the name's readers see; nothing was changed. The message names the live table."""


class AliasedTableExists(AliasedTableError, TableAlreadyExistsError):
    """Creating or registering a table under a name an alias serves: the name exists (pyiceberg's
    ``create_table_if_not_exists`` then loads the live table)."""


@dataclass(frozen=True)
class Aliases:
    """The aliases record: ``current`` (logical -> physical), ``previous`` (the mapping ``current`` replaced),
    ``generation`` (switches so far) and the ETag it was read with (None: no record yet)."""

    current: Mapping[str, str] = field(default_factory=dict)
    previous: Mapping[str, str] = field(default_factory=dict)
    generation: int = 0
    etag: str | None = field(default=None, compare=False)

    def physical(self, name: str) -> str:
        """The physical table serving logical ``name`` (itself without an alias)."""
        return self.current.get(name, name)

    def to_json(self) -> bytes:
        doc = {"generation": self.generation, "current": dict(self.current), "previous": dict(self.previous)}
        return json.dumps(doc, indent=1, sort_keys=True).encode()


def read_aliases(store: ObjectStore) -> Aliases:
    """The aliases record (empty, generation 0, without one)."""
    try:
        obj = store.get(ALIASES_KEY)
    except NotFound:
        return Aliases()
    doc = json.loads(obj.data)
    return Aliases(dict(doc.get("current") or {}), dict(doc.get("previous") or {}), int(doc["generation"]), obj.etag)


def write_aliases(store: ObjectStore, read: Aliases, current: Mapping[str, str]) -> Aliases:
    """Replace the record ``read`` by ``current`` (``read.current`` becomes ``previous``) in one compare-and-swap.
    Aliases of a name to itself are left out (the name serves itself).

    Raises:
        AliasConflict: the record changed since ``read``; nothing was written.
    """
    current = {k: v for k, v in sorted(current.items()) if k != v}
    new = Aliases(current, dict(read.current), read.generation + 1)
    try:
        if read.etag is None:
            etag = store.put(ALIASES_KEY, new.to_json(), if_none_match=True)
        else:
            etag = store.put(ALIASES_KEY, new.to_json(), if_match=read.etag)
    except (PreconditionFailed, NotFound):
        raise AliasConflict(
            f"the table aliases ({ALIASES_KEY}) were switched by someone else meanwhile (generation "
            f"{read.generation} read); nothing was changed. Read them again and retry if the switch still applies"
        ) from None
    return Aliases(new.current, new.previous, new.generation, etag)


class AliasCache:
    """The aliases of one store, read again when older than ``seconds`` (0: read at every resolution)."""

    def __init__(self, store: ObjectStore, seconds: float = DEFAULT_CACHE_SECONDS) -> None:
        self.store = store
        self.seconds = seconds
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._aliases = Aliases()

    def aliases(self) -> Aliases:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= self.seconds:
                self._aliases = read_aliases(self.store)
                self._read_at = now
            return self._aliases

    def invalidate(self) -> None:
        with self._lock:
            self._read_at = float("-inf")

    def resolve(self, name: str | TableName) -> TableName:
        """The physical table of ``name``: a `TableName` is one already; a ``str`` goes through the aliases."""
        if isinstance(name, TableName):
            return name
        parsed = TableName.parse(name)
        physical = self.aliases().current.get(str(parsed))
        return parsed if physical is None else TableName.parse(physical)
