"""The offsets protocol: which log offsets each lake snapshot holds, and the fence that keeps tiering exact.

Every tiering commit stores the complete map of tiered offsets (bucket -> next offset), marked
``lakestream.commit-user = tiering``: in its snapshot summary under ``lakestream.offsets`` for a table of
up to `INLINE_OFFSETS_BUCKETS` buckets, else in a small JSON file beside the table's metadata named by
``lakestream.offsets-file`` (written before the commit, immutable, removed with its snapshot), so the
metadata every commit rewrites grows with the snapshots kept, not with buckets x snapshots. The lake's
offsets are those of the newest tiering snapshot by sequence number; other commits (compaction, expiry)
carry no offsets and do not confuse the lookup.

The tiering fence: every tiering commit names, in its snapshot summary under ``lakestream.tiering-base``, the
tiering snapshot it was planned on (``-1``: the table before its first tiering). `check_tiering_fence` refuses
the commit if the table's newest tiering snapshot is another one, so a round whose offsets were overtaken is never
re-applied on a new base, and a tiering round is committed once or not at all. Every
`lakehouse.iceberg.catalog.ObjectStoreCatalog` runs it on every commit by construction (nothing registers it):
this module needs only pyiceberg and `lakehouse.errors`, so the catalog imports it without the rest of the lake.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot, Summary

from lakehouse.errors import LakeStateError, TieringConflict
from object_store.usage import ContextThreadPoolExecutor

COMMIT_USER_PROPERTY = "lakestream.commit-user"
TIERING_BASE_PROPERTY = "lakestream.tiering-base"
TIERING_USER = "tiering"
OFFSETS_PROPERTY = "lakestream.offsets"
OFFSETS_FILE_PROPERTY = "lakestream.offsets-file"
#: A tiering commit's net changes (JSON: ``inserts``, ``updates``, ``deletes`` as `lakehouse.read.changes` counts them)
#: and whether its added data files are exactly the after-images (``after_images``: "added-files"; merge-on-read
#: and log tables) or not (copy-on-write: they also hold the rewritten files' other rows). Readers of a commit's
#: figures (metrics) take them from here instead of looking the changed keys up in the lake.
ROUND_CHANGES_PROPERTY = "lakestream.round-changes"
AFTER_IMAGES_IN_ADDED_FILES = "added-files"

#: Tables of up to this many buckets keep their offsets in the snapshot summary (about 250 bytes, as much
#: as Iceberg's own summary fields); larger ones in an offsets file per tiering snapshot.
INLINE_OFFSETS_BUCKETS = 16


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


def summary_of(snap: Snapshot) -> Summary:
    """The summary of a tiering snapshot (one has a summary: it is found by its commit user)."""
    assert snap.summary is not None
    return snap.summary


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


def lake_offsets(metadata: TableMetadata, buckets: int, *, name: str = "", io: FileIO | None = None) -> dict[int, int]:
    """The tiered offsets of every bucket (0 where nothing is tiered), from the newest tiering snapshot.
    ``io`` reads offsets files (tables of more than `INLINE_OFFSETS_BUCKETS` buckets).

    Raises:
        LakeStateError: the table has snapshots but no tiering snapshot (written by another tool), or the
            newest tiering snapshot's offsets are missing, malformed or their file unreadable.
    """
    snap = tiering_snapshot(metadata)
    if snap is None:
        if metadata.current_snapshot_id is not None:
            raise LakeStateError(
                f"lake table {name} has snapshots but none records {OFFSETS_PROPERTY}: it was written by another "
                "tool, so lakestream cannot tell which log offsets it holds. Tier into a fresh table, or register "
                "the offsets by hand (docs/concepts/tiering-and-union-read.md)"
            )
        return dict.fromkeys(range(buckets), 0)
    raw = summary_of(snap)[OFFSETS_PROPERTY] or summary_of(snap)[OFFSETS_FILE_PROPERTY]
    try:
        return offsets_in_snapshot(snap, buckets, io)
    except OSError as exc:
        raise LakeStateError(
            f"lake table {name}: the offsets file {raw} of tiering snapshot {snap.snapshot_id} cannot be read "
            f"({type(exc).__name__}: {exc}); the table's tiered offsets are unknown. Restore the file from a "
            "backup, or re-tier into a fresh table"
        ) from None
    except (TypeError, ValueError, AttributeError):
        raise LakeStateError(
            f"lake table {name}: tiering snapshot {snap.snapshot_id} has no valid {OFFSETS_PROPERTY} "
            f"({raw!r}); the table's tiered offsets are unknown. Restore the property or re-tier into a fresh table"
        ) from None
    except IndexError:
        raise LakeStateError(
            f"lake table {name}: {OFFSETS_PROPERTY} of snapshot {snap.snapshot_id} names buckets or offsets outside "
            f"the table's {buckets} buckets: {raw}"
        ) from None


#: Offsets files by location: immutable once written, so a process reads each one once.
_OFFSETS_FILES: dict[str, str] = {}
_OFFSETS_FILES_MAX = 4096
_OFFSETS_LOCK = threading.Lock()


def _offsets_text(snap: Snapshot, io: FileIO | None) -> str:
    """The JSON of a tiering snapshot's offsets: its summary's, or its offsets file's (cached)."""
    inline = summary_of(snap)[OFFSETS_PROPERTY]
    if inline is not None:
        return inline
    path = summary_of(snap)[OFFSETS_FILE_PROPERTY]
    if path is None:
        raise ValueError(f"snapshot {snap.snapshot_id} records no offsets")
    with _OFFSETS_LOCK:
        cached = _OFFSETS_FILES.get(path)
    if cached is not None:
        return cached
    if io is None:
        raise ValueError(f"snapshot {snap.snapshot_id} keeps its offsets in {path}: reading them needs the table's io")
    with io.new_input(path).open() as f:
        text = f.read().decode()
    with _OFFSETS_LOCK:
        if len(_OFFSETS_FILES) >= _OFFSETS_FILES_MAX:
            _OFFSETS_FILES.clear()
        _OFFSETS_FILES[path] = text
    return text


def offsets_in_snapshot(snap: Snapshot, buckets: int, io: FileIO | None = None) -> dict[int, int]:
    """A tiering snapshot's offsets of every bucket (0 where none is recorded). Raises TypeError, ValueError or
    AttributeError if they do not parse, IndexError if they name a bucket or offset out of range, OSError if
    their file cannot be read."""
    parsed = {int(b): int(o) for b, o in json.loads(_offsets_text(snap, io)).items()}
    if any(b < 0 or b >= buckets or o < 0 for b, o in parsed.items()):
        raise IndexError(f"offsets outside the table's {buckets} buckets: {parsed}")
    return {b: parsed.get(b, 0) for b in range(buckets)}


def tiering_snapshots(
    metadata: TableMetadata, buckets: int, io: FileIO | None = None
) -> list[tuple[Snapshot, dict[int, int]]]:
    """Every retained tiering snapshot with its offsets of every bucket (0 where none is recorded), newest
    first by sequence number; snapshots whose offsets do not parse or cannot be read are left out
    (`lake_offsets` reports the newest one's). Offsets files are read in parallel, each once per process."""
    snaps = [s for s in metadata.snapshots if s.summary is not None and s.summary[COMMIT_USER_PROPERTY] == TIERING_USER]

    def offsets_of(snap: Snapshot) -> dict[int, int] | None:
        try:
            return offsets_in_snapshot(snap, buckets, io)
        except (TypeError, ValueError, AttributeError, IndexError, OSError):
            return None

    with _OFFSETS_LOCK:  # files not read yet by this process; inline offsets and cached files need no threads
        unread = [
            s
            for s in snaps
            if (path := summary_of(s)[OFFSETS_FILE_PROPERTY]) is not None and path not in _OFFSETS_FILES
        ]
    if len(unread) > 1:
        with ContextThreadPoolExecutor(min(16, len(unread))) as pool:
            parsed = list(pool.map(offsets_of, snaps))
    else:
        parsed = [offsets_of(s) for s in snaps]
    out = [(s, o) for s, o in zip(snaps, parsed, strict=True) if o is not None]
    out.sort(key=lambda so: (so[0].sequence_number or 0, so[0].timestamp_ms), reverse=True)
    return out


def offsets_json(offsets: dict[int, int]) -> str:
    """A tiering snapshot's offsets as stored (inline or in its file): {"bucket": next offset}, sorted."""
    return json.dumps({str(b): o for b, o in sorted(offsets.items())}, separators=(",", ":"))


def write_tiering_summary(
    io: FileIO, metadata: TableMetadata, offsets: dict[int, int], base: Snapshot | None
) -> tuple[dict[str, str], str | None]:
    """The snapshot summary of a tiering commit of ``offsets`` planned on ``base``, and the offsets file it
    names, written first (None when the offsets go inline). The caller deletes the file if the commit
    certainly failed; one left by a crash is an orphan (nothing names it) for orphan removal."""
    if len(offsets) <= INLINE_OFFSETS_BUCKETS:
        return tiering_summary(offsets, base), None
    location = f"{metadata.location.rstrip('/')}/metadata/lakestream-offsets-{uuid.uuid4()}.json"
    text = offsets_json(offsets)
    with io.new_output(location).create(overwrite=False) as f:
        f.write(text.encode())
    with _OFFSETS_LOCK:
        _OFFSETS_FILES[location] = text
    return tiering_summary(offsets, base, offsets_file=location), location


def round_changes(snap: Snapshot) -> dict[str, Any] | None:
    """The net changes a tiering snapshot recorded (`ROUND_CHANGES_PROPERTY`), or None (not recorded: a commit of
    an earlier version, or not a tiering commit)."""
    text = snap.summary[ROUND_CHANGES_PROPERTY] if snap.summary is not None else None
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or any(not isinstance(doc.get(k), int) for k in ("inserts", "updates", "deletes")):
        return None
    return doc


def offsets_files(metadata: TableMetadata) -> set[str]:
    """The offsets files the retained snapshots of ``metadata`` name."""
    return {
        path
        for s in metadata.snapshots
        if s.summary is not None and (path := s.summary[OFFSETS_FILE_PROPERTY]) is not None
    }


def tiering_summary(
    offsets: dict[int, int], base: Snapshot | None, *, offsets_file: str | None = None
) -> dict[str, str]:
    """Snapshot summary properties of a tiering commit: its offsets inline, or the offsets file holding them."""
    where = {OFFSETS_FILE_PROPERTY: offsets_file} if offsets_file else {OFFSETS_PROPERTY: offsets_json(offsets)}
    return {
        **where,
        COMMIT_USER_PROPERTY: TIERING_USER,
        TIERING_BASE_PROPERTY: str(base.snapshot_id if base is not None else -1),
    }


__all__ = [
    "AFTER_IMAGES_IN_ADDED_FILES",
    "COMMIT_USER_PROPERTY",
    "INLINE_OFFSETS_BUCKETS",
    "OFFSETS_FILE_PROPERTY",
    "OFFSETS_PROPERTY",
    "ROUND_CHANGES_PROPERTY",
    "TIERING_BASE_PROPERTY",
    "TIERING_USER",
    "check_tiering_fence",
    "lake_offsets",
    "offsets_files",
    "offsets_in_snapshot",
    "offsets_json",
    "round_changes",
    "tiering_snapshot",
    "tiering_snapshots",
    "tiering_summary",
    "write_tiering_summary",
]
