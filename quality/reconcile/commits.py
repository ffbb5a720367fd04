"""The checks run on commits (the incremental reconciliation, and the offsets of every run).

Metadata, along the ancestry: the offsets of tiering snapshots never decrease and never pass the log's end
(`check_offsets`); a tiering commit of a log table adds exactly the records of the range it claims; no commit adds
a file already live. Content, per commit since the last checked snapshot and per bucket it touched
(`check_commit_bucket`), against its own offset range:

* tiering, log table: the added rows == the log's records of the range (as lake rows);
* tiering, primary-key table: the added rows == the removed files' rows whose key did not change + the last
  change of every changed key that leaves a row (copy-on-write, as `lakehouse.merge.keyed_rows.rewrite_bucket` does),
  and no file the commit kept holds a changed key; merge-on-read: the added rows are the changes' upserts and
  the commit's position deletes mark exactly the parent's live rows of the changed keys;
* any other commit (compaction, or a rogue writer): the added rows == the removed rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import DataFile
from pyiceberg.table.snapshots import Snapshot

from lakehouse.merge.keyed_rows import KeySet, upserts_of
from quality.reconcile.checker import SAMPLE_KEYS, Checker, key_value
from quality.reconcile.reader import Commit


@dataclass
class CommitBucket:
    """One commit's change to one bucket (``commit`` holds only that bucket's files), checked against the log
    range it claims (``new`` None: not a tiering commit); ``parent_files`` are the bucket's data files live
    before it (primary-key tiering), ``parent_deletes`` the parent's position deletes of the files read."""

    bucket: int
    commit: Commit
    prev: int
    new: int | None
    parent_files: list[DataFile]
    parent_deletes: dict[str, list[DataFile]]


def check_offsets(c: Checker, ancestry: Sequence[Snapshot]) -> dict[int, dict[int, int]]:
    """Offsets recorded by each tiering snapshot of the ancestry; a violation for each snapshot whose offsets
    move backwards or pass the log's end."""
    r = c.reader
    parsed = r.recorded_offsets()
    end = r.log.end_offsets()
    previous: dict[int, int] = dict.fromkeys(range(r.buckets), 0)
    out = {}
    for snap in ancestry:
        offsets = parsed.get(snap.snapshot_id)
        if offsets is None:
            continue
        for b in range(r.buckets):
            if offsets[b] < previous[b]:
                c.violate(
                    "offsets-backwards",
                    f"tiering snapshot moved bucket {b}'s offset back from {previous[b]} to {offsets[b]}: "
                    "records would be tiered twice",
                    bucket=b,
                    offsets=(previous[b], offsets[b]),
                    snapshot=snap,
                    expected=f">= {previous[b]}",
                    actual=offsets[b],
                )
            if offsets[b] > end.get(b, 0):
                c.violate(
                    "offsets-ahead",
                    f"the lake claims bucket {b} up to offset {offsets[b]}, the log ends at {end.get(b, 0)}",
                    bucket=b,
                    offsets=(previous[b], offsets[b]),
                    snapshot=snap,
                    expected=end.get(b, 0),
                    actual=offsets[b],
                )
        previous = {b: max(previous[b], offsets[b]) for b in range(r.buckets)}
        out[snap.snapshot_id] = offsets
    return out


def check_commits(
    c: Checker, ancestry: Sequence[Snapshot], first: int, offsets_of: Mapping[int, dict[int, int]]
) -> int:
    """Check the commits ``ancestry[first:]`` (oldest first; ``ancestry[first - 1]`` was checked before), each
    against its own offset range; returns how many were checked."""
    r = c.reader
    current = ancestry[-1]
    prev = dict.fromkeys(range(r.buckets), 0)
    for snap in ancestry[:first]:
        prev = offsets_of.get(snap.snapshot_id, prev)
    commits_of = [r.commit_of(snap) for snap in ancestry[first:]]
    # Every run confirms the current snapshot's files, new commits or not (a file deleted since the last
    # run is found now), and the files the new commits added and removed, before any is read.
    wanted = [(f, current) for f in r.live_entries(current)]
    for commit, parent in zip(commits_of, ancestry[first - 1 :], strict=False):
        for added in (commit.added, commit.added_deletes):
            wanted += [(f, commit.snapshot) for files in added.values() for f in files]
        for removed in (commit.removed, commit.removed_deletes):
            wanted += [(f, parent) for files in removed.values() for f in files]
    c.verify_files(wanted)
    items: list[CommitBucket] = []
    commits = 0
    for i, commit in enumerate(commits_of, start=first):
        snap, parent = ancestry[i], ancestry[i - 1]
        live_before = {f.file_path for f in r.live_files(parent)} if any(commit.added.values()) else set()
        removed_paths = {f.file_path for files in commit.removed.values() for f in files}
        c.check_twice([f for files in commit.added.values() for f in files], snap, live_before - removed_paths)
        new = offsets_of.get(snap.snapshot_id)
        if new is not None and not r.key:
            claimed = sum(new[b] - prev[b] for b in range(r.buckets))
            added_records = int((snap.summary["added-records"] if snap.summary else None) or 0)
            if added_records != claimed:
                c.violate(
                    "records-count",
                    f"the tiering commit's summary adds {added_records} records for a range of {claimed} log records",
                    snapshot=snap,
                    expected=claimed,
                    actual=added_records,
                )
        items += commit_items(c, commit, parent, prev, new)
        if new is not None:
            prev = new
        commits += 1
    c.run_buckets(check_commit_bucket, items)  # every new commit's buckets in one job
    return commits


def commit_items(
    c: Checker, commit: Commit, parent: Snapshot | None, prev: dict[int, int], new: dict[int, int] | None
) -> list[CommitBucket]:
    """The bucket checks of one commit (metadata only: which files and log range each bucket's check reads)."""
    r = c.reader
    buckets = set(commit.added) | set(commit.removed)
    if new is not None:
        buckets |= {b for b in range(r.buckets) if new[b] != prev[b]}
    buckets |= set(commit.added_deletes) | set(commit.removed_deletes)
    parent_live: dict[int, list[DataFile]] = defaultdict(list)
    if r.key and new is not None and parent is not None:
        for f in r.live_files(parent):
            parent_live[r.bucket_of(f)].append(f)
    # what the parent's position deletes leave of the files this commit reads (removed, or marked)
    touches = any(commit.removed.values()) or any(commit.added_deletes.values()) or parent_live
    parent_deletes = r.live_deletes(parent) if parent is not None and touches else {}
    items = []
    for b in sorted(buckets):
        parts = Commit(commit.snapshot)
        for whole, part in (
            (commit.added, parts.added),
            (commit.removed, parts.removed),
            (commit.added_deletes, parts.added_deletes),
            (commit.removed_deletes, parts.removed_deletes),
        ):
            if b in whole:
                part[b] = whole[b]
        read = [f.file_path for f in [*parts.removed.get(b, []), *parent_live.get(b, [])]]
        items.append(
            CommitBucket(
                bucket=b,
                commit=parts,
                prev=prev[b],
                new=None if new is None else new[b],
                parent_files=parent_live.get(b, []),
                parent_deletes={p: parent_deletes[p] for p in read if p in parent_deletes},
            )
        )
    return items


def check_commit_bucket(c: Checker, item: CommitBucket) -> None:
    """One commit's change to one bucket against the log range it claims (see the module docstring)."""
    r = c.reader
    commit, b, parent_files, parent_deletes = item.commit, item.bucket, item.parent_files, item.parent_deletes
    snap = commit.snapshot
    removed_files = commit.removed.get(b, [])
    marked = commit.added_deletes.get(b, [])
    if not c.readable(b, [*commit.added.get(b, []), *removed_files, *marked]):
        return
    added = c.read_files(commit.added.get(b, []))
    if item.new is None:  # not a tiering commit: it may move rows (and fold deletes), never change them
        removed = c.read_files(removed_files, parent_deletes)
        if marked:
            c.violate(
                "content",
                f"a commit that is not tiering marked rows deleted ({len(marked)} position delete files)",
                bucket=b,
                snapshot=snap,
            )
        c.compare(removed, added, bucket=b, offsets=None, snapshot=snap, what="a commit that is not tiering")
        return
    rng = (item.prev, item.new)
    stored = [(f, parent_deletes.get(f.file_path, ())) for f in parent_files] if r.engine is not None else []
    log_rows = c.read_log(b, item.prev, item.new, snap, stored)
    if log_rows is None:
        return
    if not r.key:
        if removed_files:
            c.violate(
                "content",
                f"a tiering commit of a log table removed {len(removed_files)} data files",
                bucket=b,
                offsets=rng,
                snapshot=snap,
            )
        c.compare(log_rows, added, bucket=b, offsets=rng, snapshot=snap, what="tiered records")
        return
    changes = log_rows  # reduced: the last change of each key
    keys = KeySet(changes, r.key)
    if marked or not removed_files:
        # merge-on-read (or nothing removed): the new versions are added, the old ones marked deleted
        c.compare(
            upserts_of(changes).select(r.columns),
            added,
            bucket=b,
            offsets=rng,
            snapshot=snap,
            what="tiered changes",
        )
        if removed_files:
            c.violate(
                "content",
                f"a merge-on-read tiering commit removed {len(removed_files)} data files",
                bucket=b,
                offsets=rng,
                snapshot=snap,
            )
        if parent_files and len(keys):
            check_marks(c, parent_files, marked, keys, b, rng, snap, parent_deletes)
        return
    removed = c.read_files(removed_files, parent_deletes)
    kept = removed.filter(pc.invert(keys.hits(removed))) if removed.num_rows and len(keys) else removed
    expected = [kept, upserts_of(changes).select(r.columns)]
    c.compare(expected, added, bucket=b, offsets=rng, snapshot=snap, what="tiered changes")
    if parent_files and len(keys):
        gone = {f.file_path for f in removed_files}
        kept_files = [f for f in parent_files if f.file_path not in gone]
        if c.readable(b, kept_files):
            check_kept(c, kept_files, keys, b, rng, snap)


def check_marks(
    c: Checker,
    files: list[DataFile],
    marked: list[DataFile],
    keys: KeySet,
    bucket: int,
    rng: tuple[int, int],
    snap: Snapshot,
    parent_deletes: Mapping[str, Sequence[DataFile]],
) -> None:
    """A merge-on-read commit's position deletes mark exactly the rows of the keys it changed that were live
    in the parent (no other row, none twice, none missing): files whose key statistics exclude every changed
    key and that no mark names are not read; the others' key columns are."""
    r = c.reader
    marks = r.marks(marked)
    by_path = {f.file_path: f for f in files}
    stray = sorted(p for p in marks if p not in by_path)
    if stray:
        c.violate(
            "content",
            f"the commit marks rows of {len(stray)} data files that are not live, e.g. {stray[0]}",
            bucket=bucket,
            offsets=rng,
            snapshot=snap,
        )
    named = [by_path[p] for p in marks if p in by_path]
    candidates = {f.file_path: f for f in [*r.may_hold(files, keys), *named]}
    for path, f in candidates.items():
        data = c.counted(r.read_keys(path)).cast(r.key_schema)
        hit = np.flatnonzero(keys.hits(data).to_numpy(zero_copy_only=False))
        live = np.setdiff1d(hit, r.deleted(f, parent_deletes.get(path, ())))
        got = marks.get(path, np.empty(0, int))
        kept = np.setdiff1d(live, got)
        if kept.size:
            c.violate(
                "content",
                f"data file {path} still holds {kept.size} live rows of keys the commit changed (not marked "
                "deleted): those keys are in the lake twice",
                bucket=bucket,
                offsets=rng,
                snapshot=snap,
                keys=[key_value(row, r.key) for row in data.take(pa.array(kept[:SAMPLE_KEYS])).to_pylist()],
            )
        wrong = np.setdiff1d(got, live)
        if wrong.size:
            rows = data.take(pa.array(wrong[wrong < data.num_rows][:SAMPLE_KEYS])).to_pylist()
            c.violate(
                "content",
                f"the commit marks {wrong.size} rows of {path} deleted that are no live row of a key it changed: "
                "those rows are lost to every reader",
                bucket=bucket,
                offsets=rng,
                snapshot=snap,
                keys=[key_value(row, r.key) for row in rows],
            )


def check_kept(
    c: Checker, files: list[DataFile], keys: KeySet, bucket: int, rng: tuple[int, int], snap: Snapshot
) -> None:
    """No file a primary-key tiering commit kept may hold a key it changed (that row would be stale). Files
    whose key statistics exclude every changed key are not read; the others' key columns are."""
    r = c.reader
    for f in r.may_hold(files, keys):
        data = c.counted(r.scan_keys(f))
        data = data.select(list(r.key)).cast(r.key_schema)
        hits = keys.hits(data)
        if pc.any(hits).as_py():
            stale = data.filter(hits)
            c.violate(
                "content",
                f"data file {f.file_path} kept by the commit still holds {stale.num_rows} rows of keys the "
                "commit changed: those keys are in the lake twice",
                bucket=bucket,
                offsets=rng,
                snapshot=snap,
                keys=[key_value(row, r.key) for row in stale.to_pylist()[:SAMPLE_KEYS]],
            )


__all__ = ["CommitBucket", "check_commit_bucket", "check_commits", "check_offsets", "commit_items"]
