"""The tiering fence: a tiering round commits only on the tiering snapshot it was planned on.

Every tiering commit names, in its snapshot summary under ``lakestream.tiering-base``, the tiering snapshot it was
planned on (``-1``: the table before its first tiering). `check_tiering_fence` refuses the commit if the table's
newest tiering snapshot is another one, so a round whose offsets were overtaken is never re-applied on a new base.
Every `lakehouse.catalog.ObjectStoreCatalog` runs it on every commit by construction (nothing registers it): the
catalog imports this module, which needs only pyiceberg and `lakehouse.errors`, not the lake layout around it
(`lakehouse.lake_layout` re-exports these names).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from lakehouse.errors import TieringConflict

COMMIT_USER_PROPERTY = "lakestream.commit-user"
TIERING_BASE_PROPERTY = "lakestream.tiering-base"
TIERING_USER = "tiering"


def tiering_snapshot(metadata: TableMetadata) -> Snapshot | None:
    """The newest tiering snapshot by sequence number (None if nothing was tiered yet)."""
    snapshots = metadata.snapshots
    sequence = [s.sequence_number or 0 for s in snapshots]
    if all(a < b for a, b in zip(sequence, sequence[1:], strict=False)):
        # Commits append their snapshot with the next sequence number (format v2), so the newest tiering
        # snapshot is the last one in the list: found without reading every summary (a commit's tiering
        # fence asks, and the list grows by a snapshot a round until expiry).
        for snap in reversed(snapshots):
            if snap.summary is not None and snap.summary[COMMIT_USER_PROPERTY] == TIERING_USER:
                return snap
        return None
    best: Snapshot | None = None
    for snap in snapshots:
        if snap.summary is None or snap.summary[COMMIT_USER_PROPERTY] != TIERING_USER:
            continue
        if best is None or (snap.sequence_number or 0, snap.timestamp_ms) > (
            best.sequence_number or 0,
            best.timestamp_ms,
        ):
            best = snap
    return best


def check_tiering_fence(base: TableMetadata | None, updates: Sequence[object], *, name: str = "") -> None:
    """Refuse a tiering snapshot planned on another tiering snapshot than the base's newest one.

    Called by the catalog against the exact metadata it will compare-and-swap, so a tiering round whose
    offsets were overtaken is never re-applied on a new base (pyiceberg's own commit retry would
    otherwise rebuild the append on top of the winner's and duplicate its offsets).

    Raises:
        TieringConflict: another tiering commit landed since this one was planned.
    """
    from pyiceberg.table.update import AddSnapshotUpdate

    for update in updates:
        if not isinstance(update, AddSnapshotUpdate) or update.snapshot.summary is None:
            continue
        expected = update.snapshot.summary[TIERING_BASE_PROPERTY]
        if expected is None:
            continue
        newest = tiering_snapshot(base) if base is not None else None
        actual = str(newest.snapshot_id if newest is not None else -1)
        if actual != expected:
            planned = "the table before its first tiering" if expected == "-1" else f"tiering snapshot {expected}"
            raise TieringConflict(
                f"{name}: another tiering run committed snapshot {actual} after this run planned on {planned}; "
                "its offsets moved, so this run's files must not be applied. Rerun tiering to tier what is left"
            )


__all__ = [
    "COMMIT_USER_PROPERTY",
    "TIERING_BASE_PROPERTY",
    "TIERING_USER",
    "check_tiering_fence",
    "tiering_snapshot",
]
