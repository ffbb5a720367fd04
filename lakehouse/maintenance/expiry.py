"""Snapshot expiry: drop old snapshots from the metadata and delete the files only they referenced.

Never expired: the current snapshot, the newest tiering snapshot (its ``lakestream.offsets`` are the
lake's offsets), the newest ``retain_last`` snapshots, branch or tag heads, and the snapshots the caller
pins (``keep``: those an as-of read at a subscription's position scans, `lakehouse.subscriptions.pins`;
the result's ``pinned`` says which of them would have been expired otherwise, and for whom). When compactions followed
the newest tiering snapshot, its offsets are first carried forward by an empty tiering commit (see
`_checkpoint_offsets`), so the files a compaction replaced can be freed without waiting for new data.
Files are deleted only if no remaining snapshot references them, computed from the metadata after the
expiry commit, so files of a commit that lands meanwhile are never touched.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pyiceberg.table import Table

from lakehouse.errors import InvalidArgument, TieringConflict
from lakehouse.iceberg.offsets import (
    OFFSETS_FILE_PROPERTY,
    OFFSETS_PROPERTY,
    summary_of,
    tiering_snapshot,
    tiering_summary,
)
from lakehouse.maintenance.references import referenced_files, referenced_sizes
from object_store import NotFound, ObjectStore

DEFAULT_SNAPSHOT_AGE = timedelta(days=5)
DEFAULT_RETAIN_LAST = 1


@dataclass
class ExpiryResult:
    table: str
    expired: list[int] = field(default_factory=list)
    snapshots_left: int = 0
    #: snapshot id -> who pinned it (e.g. "subscription dwd.x"): kept only because of that pin
    pinned: dict[int, str] = field(default_factory=dict)
    files_deleted: int = 0
    bytes_freed: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cutoff_of(older_than: timedelta | datetime, what: str = "older_than") -> datetime:
    if isinstance(older_than, timedelta):
        if older_than < timedelta(0):
            raise InvalidArgument(f"{what} must not be negative, got {older_than}")
        return datetime.now(UTC) - older_than
    if isinstance(older_than, datetime):
        return older_than if older_than.tzinfo else older_than.replace(tzinfo=UTC)
    raise InvalidArgument(f"{what} must be a timedelta or a datetime, got {older_than!r}")


def checkpoint_offsets(table: Table, older_than: timedelta | datetime) -> None:
    """`_checkpoint_offsets` for snapshots older than ``older_than`` (an age or a point in time)."""
    _checkpoint_offsets(table, int(cutoff_of(older_than).timestamp() * 1000))


def _checkpoint_offsets(table: Table, cutoff_ms: int) -> None:
    """Carry the lake's offsets forward to the current snapshot when only non-tiering commits (compaction)
    followed the newest tiering snapshot and it is old enough to expire.

    Otherwise that snapshot, which must be kept for its offsets, would pin every file a compaction
    replaced until the next tiering round with data. The checkpoint is an empty tiering commit with the
    same offsets, planned on that tiering snapshot: the tiering fence refuses it if a real tiering round
    committed meanwhile (whose snapshot is then the newer one anyway).
    """
    metadata = table.metadata
    newest = tiering_snapshot(metadata)
    if newest is None or newest.snapshot_id == metadata.current_snapshot_id or newest.timestamp_ms >= cutoff_ms:
        return
    try:  # no inline offsets (None): TypeError, as malformed ones
        offsets = {int(b): int(o) for b, o in json.loads(summary_of(newest)[OFFSETS_PROPERTY]).items()}  # type: ignore[arg-type]
    except (TypeError, ValueError, AttributeError):
        offsets = None
    # an offsets file is immutable: the checkpoint names the same file, which it then keeps alive
    offsets_file = summary_of(newest)[OFFSETS_FILE_PROPERTY]
    if offsets is None and offsets_file is None:
        return  # unreadable offsets: keep the snapshot, lake_offsets reports the problem
    try:
        with table.transaction() as txn:
            summary = tiering_summary(offsets or {}, newest, offsets_file=offsets_file)
            with txn.update_snapshot(snapshot_properties=summary).fast_append():
                pass
    except TieringConflict:
        table.refresh()


def expire_snapshots(
    store: ObjectStore,
    table: Table,
    *,
    older_than: timedelta | datetime = DEFAULT_SNAPSHOT_AGE,
    retain_last: int = DEFAULT_RETAIN_LAST,
    keep: Mapping[int, str] | None = None,
) -> ExpiryResult:
    """Expire snapshots older than ``older_than`` (an age or a point in time), keeping the protected ones and
    those in ``keep`` (snapshot id -> who needs it)."""
    if not isinstance(retain_last, int) or retain_last < 1:
        raise InvalidArgument(f"retain_last must be an integer >= 1, got {retain_last!r}")
    cutoff_ms = int(cutoff_of(older_than).timestamp() * 1000)
    pinned = dict(keep or {})
    started = time.perf_counter()
    name = ".".join(table.name())
    _checkpoint_offsets(table, cutoff_ms)
    metadata = table.metadata
    newest = sorted(metadata.snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms), reverse=True)
    protected = {s.snapshot_id for s in newest[:retain_last]}
    protected |= {ref.snapshot_id for ref in metadata.refs.values()}
    if metadata.current_snapshot_id is not None:
        protected.add(metadata.current_snapshot_id)
    if (tiering := tiering_snapshot(metadata)) is not None:
        protected.add(tiering.snapshot_id)
    old = [s.snapshot_id for s in metadata.snapshots if s.timestamp_ms < cutoff_ms and s.snapshot_id not in protected]
    expire = [s for s in old if s not in pinned]
    result = ExpiryResult(name, snapshots_left=len(metadata.snapshots))
    result.pinned = {s: pinned[s] for s in old if s in pinned}
    if not expire:
        result.seconds = time.perf_counter() - started
        return result
    before = referenced_sizes(table, include_metadata=False, live_only=False)
    table.maintenance.expire_snapshots().by_ids(expire).commit()
    table.refresh()
    after = referenced_files(table, include_metadata=False)
    prefix = store.url.rstrip("/") + "/"
    location = table.metadata.location.rstrip("/") + "/"

    def gone() -> Iterator[str]:
        """Keys of the files only expired snapshots referenced; sizes from the manifests (a HEAD only for
        manifest lists and offsets files, one per expired snapshot)."""
        for path, size in before.items():
            if path in after or not path.startswith(location) or not path.startswith(prefix):
                continue  # still needed, or outside the table (a registered table may point elsewhere)
            key = path[len(prefix) :]
            if size is None:
                try:
                    size = store.head(key).size
                except NotFound:
                    continue
            result.files_deleted += 1
            result.bytes_freed += size
            yield key

    store.delete_many(gone())  # in bulk: S3 DeleteObjects, 1,000 keys a request
    result.expired = expire
    result.snapshots_left = len(table.metadata.snapshots)
    result.seconds = time.perf_counter() - started
    return result
