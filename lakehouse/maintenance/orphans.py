"""Orphan files: objects under a table's ``data/`` and ``metadata/`` that nothing references.

The log shares the table's folder (``<ns>/<table>/log/``) and is never looked at here.

They come from runs that died before committing (tiering, compaction) or lost a race and could not
clean up. Only files older than a grace period are candidates, so the fresh files of a running tiering
or compaction job are never touched: the default (3 days, as Iceberg's) is far longer than any job.
The listing happens before the references are read, so a commit landing in between is seen. Memory does
not grow with the object count: the listing streams into a spill file on local disk (the candidates' keys
and sizes), is read back after the references, and orphans go in bulk deletes (S3 DeleteObjects, 1,000 keys a
request); the result names the first `LISTED_ORPHANS` of them and counts them all.

A grace period below `MIN_ORPHAN_AGE` (1 hour) is refused unless ``unsafe_orphan_age`` is set: a tiering
round writes its data files first and references them only when it commits, so a removal that runs
between the two deletes files the commit then references (reads fail with FileNotFoundError). One hour
is far above the longest round (tiering and compaction rounds take seconds to minutes; a round over an
hour is a stuck one) and well below Iceberg's 3 days. A dry run deletes nothing, so it may look closer.
"""

from __future__ import annotations

import collections
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from pyiceberg.table import Table

from lakehouse.errors import InvalidArgument
from lakehouse.maintenance.expiry import cutoff_of
from lakehouse.maintenance.references import referenced_files
from object_store import ObjectStore

DEFAULT_ORPHAN_AGE = timedelta(days=3)
#: The shortest grace period allowed without ``unsafe_orphan_age`` (see the module docstring).
MIN_ORPHAN_AGE = timedelta(hours=1)


#: How many orphans a result names (it counts every one).
LISTED_ORPHANS = 10_000


@dataclass
class OrphanResult:
    table: str
    files: list[tuple[str, int]] = field(default_factory=list)  # (location, size): the first LISTED_ORPHANS
    deleted: bool = False
    seconds: float = 0.0
    count: int = 0  # every orphan found
    bytes: int = 0  # their total size

    def found(self, path: str, size: int) -> None:
        self.count += 1
        self.bytes += size
        if len(self.files) < LISTED_ORPHANS:
            self.files.append((path, size))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_orphan_age(older_than: timedelta, *, unsafe_orphan_age: bool = False, dry_run: bool = False) -> None:
    """Refuse a grace period below `MIN_ORPHAN_AGE` unless ``unsafe_orphan_age`` (or ``dry_run``) says so.

    Raises:
        InvalidArgument: ``older_than`` is negative, or below the floor without the flag.
    """
    cutoff_of(older_than)  # negative or not a timedelta: InvalidArgument
    if older_than < MIN_ORPHAN_AGE and not (unsafe_orphan_age or dry_run):
        raise InvalidArgument(
            f"an orphan age of {older_than} is below the safe floor of {MIN_ORPHAN_AGE}: a tiering or compaction "
            "round still running has written files its commit has not referenced yet, and removing them makes "
            "that commit reference missing files (reads then fail with FileNotFoundError). Use at least "
            f"{MIN_ORPHAN_AGE}, or allow it with --unsafe-orphan-age (unsafe_orphan_age=True) only while no "
            "tiering or compaction can run"
        )


def remove_orphans(
    store: ObjectStore,
    table: Table,
    *,
    older_than: timedelta = DEFAULT_ORPHAN_AGE,
    dry_run: bool = False,
    unsafe_orphan_age: bool = False,
) -> OrphanResult:
    """Delete (or with ``dry_run`` only list) unreferenced files older than ``older_than``, which must be at
    least `MIN_ORPHAN_AGE` unless ``unsafe_orphan_age`` is set (see the module docstring).

    Raises:
        InvalidArgument: ``older_than`` is negative, or below `MIN_ORPHAN_AGE` without ``unsafe_orphan_age``.
    """
    if isinstance(older_than, timedelta):
        check_orphan_age(older_than, unsafe_orphan_age=unsafe_orphan_age, dry_run=dry_run)
    cutoff = cutoff_of(older_than)
    started = time.perf_counter()
    prefix = store.url.rstrip("/") + "/"
    location = table.metadata.location.rstrip("/") + "/"
    if not location.startswith(prefix):
        raise InvalidArgument(f"table location {location} is outside the warehouse {store.url}: not cleaning it")
    result = OrphanResult(".".join(table.name()), deleted=not dry_run)
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spill:
        # Only Iceberg's folders: the table's log lives under the same location (<ns>/<table>/log/).
        for folder in ("data/", "metadata/"):
            for info in store.list(location[len(prefix) :] + folder):
                if info.last_modified < cutoff:
                    spill.write(f"{info.size}\t{info.key}\n")
        table.refresh()
        referenced = referenced_files(table)
        spill.seek(0)

        def orphans() -> Iterator[str]:
            for line in spill:
                size, key = line.rstrip("\n").split("\t", 1)
                if prefix + key not in referenced:
                    result.found(prefix + key, int(size))
                    yield key

        if dry_run:
            collections.deque(orphans(), maxlen=0)
        else:
            store.delete_many(orphans())
    result.seconds = time.perf_counter() - started
    return result
