"""Orphan files: objects under a table's ``data/`` and ``metadata/`` that nothing references.

The log shares the table's folder (``<ns>/<table>/log/``) and is never looked at here.

They come from runs that died before committing (tiering, compaction) or lost a race and could not
clean up. Only files older than a grace period are candidates, so the fresh files of a running tiering
or compaction job are never touched: the default (3 days, as Iceberg's) is far longer than any job.
The listing happens before the references are read, so a commit landing in between is seen.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from pyiceberg.table import Table

from lakehouse.errors import InvalidArgument
from lakehouse.maintenance.expiry import cutoff_of
from lakehouse.maintenance.references import referenced_files
from object_store import ObjectStore

DEFAULT_ORPHAN_AGE = timedelta(days=3)


@dataclass
class OrphanResult:
    table: str
    files: list[tuple[str, int]] = field(default_factory=list)  # (location, size)
    deleted: bool = False
    seconds: float = 0.0

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bytes": self.bytes}


def remove_orphans(
    store: ObjectStore, table: Table, *, older_than: timedelta = DEFAULT_ORPHAN_AGE, dry_run: bool = False
) -> OrphanResult:
    """Delete (or with ``dry_run`` only list) unreferenced files older than ``older_than``."""
    cutoff = cutoff_of(older_than)
    started = time.perf_counter()
    prefix = store.url.rstrip("/") + "/"
    location = table.metadata.location.rstrip("/") + "/"
    if not location.startswith(prefix):
        raise InvalidArgument(f"table location {location} is outside the warehouse {store.url}: not cleaning it")
    # Only Iceberg's folders: the table's log lives under the same location (<ns>/<table>/log/).
    listed = [
        info
        for folder in ("data/", "metadata/")
        for info in store.list(location[len(prefix) :] + folder)
        if info.last_modified < cutoff
    ]
    table.refresh()
    referenced = referenced_files(table)
    result = OrphanResult(".".join(table.name()), deleted=not dry_run)
    for info in listed:
        path = prefix + info.key
        if path not in referenced:
            result.files.append((path, info.size))
            if not dry_run:
                store.delete(info.key)
    result.seconds = time.perf_counter() - started
    return result
