"""Write-audit-publish: the Iceberg tag ``published`` of a table's lake table moves to a snapshot only after
every check on that snapshot passed.

Writers (tiering, layer rounds) commit to the lake's ``main`` branch as always (*write*); `lakestream check`
checks a snapshot (*audit*, `quality.results.CheckResult` with its ``snapshot_id``); `publish` then moves the tag
(*publish*). Readers that want only audited data read at the tag: ``lh.lake_read(name, ref="published")``,
``lakestream table read NAME --ref published``, ``spark.read.format("lakestream").option("ref", "published")``,
or any Iceberg engine's tag read (``VERSION AS OF 'published'``).

`publish` refuses (`PublishRefused`, the tag untouched) unless, for the table:

- there are results, each passed (``ok``: no violation, no error, not *not evaluated*) and was made on that very
  snapshot (results of other tables are ignored; a result of another snapshot says nothing about this one; a
  check not evaluated because an upstream table failed vouches for nothing);
- the snapshot is in the table and does not move the tag backwards: it is the current snapshot or a descendant of
  the published one (an ancestor of it, or an older snapshot, is refused; publishing the published snapshot
  again is a no-op).

The tag is set by a ref-only commit (``SetSnapshotRefUpdate`` of a tag, guarded by ``AssertRefSnapshotId`` on
its previous value) through the catalog's compare-and-swap. It adds no snapshot, so the tiering fence
(`lakehouse.iceberg.offsets.check_tiering_fence`) ignores it; a commit racing it is rebuilt on the new metadata by
pyiceberg's retry (tiering, compaction keep the tag: updates carry the refs forward), and a lost CAS of the tag
commit itself (pyiceberg does not retry commits without a snapshot) is retried here on fresh metadata, checking
again that the tag still moves forward. Snapshot expiry keeps every snapshot a tag points at
(`lakehouse.maintenance.expiry`), and orphan removal every file of a retained snapshot, so the published
state stays readable through maintenance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.metadata import TableMetadata

from lakehouse.errors import InvalidTableName
from lakehouse.table.definition import TableName
from quality.errors import PublishRefused
from quality.results import CheckResult

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

#: The tag readers read audited data at.
PUBLISHED = "published"

#: Tag commits that lost the catalog's compare-and-swap to another writer before giving up.
ATTEMPTS = 20


def _name(table: str | TableName) -> str:
    try:
        return str(TableName.parse(table))
    except InvalidTableName:
        return str(table)


def published_snapshot(lh: Lakehouse, table: str | TableName) -> int | None:
    """The snapshot id ``published`` points at in ``table``'s lake table (None: never published)."""
    ref = lh.lake_table(table).metadata.refs.get(PUBLISHED)
    return ref.snapshot_id if ref is not None else None


def _ancestors(metadata: TableMetadata, snapshot_id: int) -> tuple[list[int], bool]:
    """The retained ancestry of ``snapshot_id``, itself first, and whether it ends at the first snapshot
    (False: a parent was expired, so the ancestry is not complete)."""
    out: list[int] = []
    snap = metadata.snapshot_by_id(snapshot_id)
    while snap is not None:
        out.append(snap.snapshot_id)
        if snap.parent_snapshot_id is None:
            return out, True
        snap = metadata.snapshot_by_id(snap.parent_snapshot_id)
    return out, False


def _forward(metadata: TableMetadata, snapshot_id: int, published: int) -> str | None:
    """Why moving the tag from ``published`` to ``snapshot_id`` is not forward (None: it is)."""
    snap, old = metadata.snapshot_by_id(snapshot_id), metadata.snapshot_by_id(published)
    if snap is None:
        return f"snapshot {snapshot_id} is not in the table (expired, or never committed)"
    if old is None:  # cannot happen while expiry keeps tagged snapshots; nothing to compare with
        return None
    ancestry, complete = _ancestors(metadata, snapshot_id)
    if published in ancestry:
        return None  # a descendant
    if snapshot_id in _ancestors(metadata, published)[0] or (snap.sequence_number or 0) < (old.sequence_number or 0):
        return f"snapshot {snapshot_id} is older than the published snapshot {published}: `published` never moves back"
    if snapshot_id == metadata.current_snapshot_id:
        return None  # the current snapshot, on another line than the published one (the table was rolled back)
    if not complete and (snap.sequence_number or 0) > (old.sequence_number or 0):
        return None  # expiry removed snapshots in between: newer by sequence number on a broken ancestry
    return (
        f"snapshot {snapshot_id} is neither the current snapshot ({metadata.current_snapshot_id}) nor a "
        f"descendant of the published snapshot {published}"
    )


def _stays(published: int | None) -> str:
    return f"`{PUBLISHED}` stays at snapshot {published}" if published is not None else f"`{PUBLISHED}` stays unset"


def publish(lh: Lakehouse, table: str | TableName, snapshot_id: int, results: Sequence[CheckResult]) -> int:
    """Move ``table``'s tag ``published`` to ``snapshot_id`` if every check result of ``table`` passed and was
    made on that snapshot, and the move is forward (see the module docstring). Returns ``snapshot_id``.

    Raises:
        PublishRefused: no results for the table; a result failed (the message names each violation and error)
            or was not evaluated;
            a result was made on another snapshot; the snapshot is not in the table, or would move the tag back.
            The message ends saying where `published` stays.
        TableNotFound: no such table.
    """
    name = _name(table)
    mine = [r for r in results if _name(r.table) == name]
    problems: list[str] = []
    if not mine:
        problems.append(f"no check results for {name} (run the checks on snapshot {snapshot_id} first)")
    for r in mine:
        if r.error is not None:
            problems.append(f"check {r.check} could not run: {r.error}")
        if r.not_evaluated is not None:
            problems.append(f"check {r.check} was not evaluated: {r.not_evaluated}")
        problems += [f"check {r.check} failed: {v}" for v in r.violations]
        if r.snapshot_id != snapshot_id:
            problems.append(f"check {r.check} was made on snapshot {r.snapshot_id}, not on {snapshot_id}")
    for attempt in range(ATTEMPTS):
        lake = lh.lake_table(name)
        metadata = lake.metadata
        ref = metadata.refs.get(PUBLISHED)
        published = ref.snapshot_id if ref is not None else None
        if problems:
            raise PublishRefused(
                f"{name}: not publishing snapshot {snapshot_id}: {'; '.join(problems)}. {_stays(published)}"
            )
        if published == snapshot_id:
            return snapshot_id
        if published is not None:
            why = _forward(metadata, snapshot_id, published)
        elif metadata.snapshot_by_id(snapshot_id) is None:
            why = f"snapshot {snapshot_id} is not in the table (expired, or never committed)"
        else:
            current = metadata.current_snapshot_id
            why = (
                None
                if current is not None and snapshot_id in _ancestors(metadata, current)[0]
                else f"snapshot {snapshot_id} is not on the table's main branch (current snapshot {current})"
            )
        if why is not None:
            raise PublishRefused(f"{name}: not publishing snapshot {snapshot_id}: {why}. {_stays(published)}")
        try:
            # a tag-only commit: SetSnapshotRefUpdate + AssertRefSnapshotId(published's value read above)
            lake.manage_snapshots().create_tag(snapshot_id, PUBLISHED).commit()
        except CommitFailedException as exc:
            if attempt == ATTEMPTS - 1:
                raise PublishRefused(
                    f"{name}: not publishing snapshot {snapshot_id}: the table kept changing ({ATTEMPTS} tag commits "
                    f"lost to other writers: {exc}); run it again. {_stays(published)}"
                ) from exc
            continue  # another writer committed (or moved the tag) meanwhile: check again on fresh metadata
        return snapshot_id
    raise AssertionError("unreachable")


__all__ = ["PUBLISHED", "publish", "published_snapshot"]
