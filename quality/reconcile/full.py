"""The full check: per bucket, the lake at the current snapshot against the retained log replayed to its offsets.

It runs with ``full=True``, and whenever the chain of checked commits cannot be followed (the first run, or the
last checked snapshot was expired). Rows older than the log's retention cannot be checked against it (they are
counted, ``unverified_rows``); every row with an offset in the retained log, and every key changed there, is.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pyarrow.compute as pc
from pyiceberg.manifest import DataFile
from pyiceberg.table.snapshots import Snapshot

from lakehouse.iceberg.layout import OFFSET_COLUMN
from lakehouse.merge.keyed_rows import KeySet, upserts_of
from quality.reconcile.checker import Checker


@dataclass
class FullBucket:
    """A full check of one bucket: its live files (with their position deletes) against its log range."""

    bucket: int
    snapshot: Snapshot
    files: list[DataFile]
    deletes: dict[str, list[DataFile]]
    start: int
    end: int


def check_full(c: Checker, snapshot: Snapshot, offsets: dict[int, int], start: dict[int, int]) -> None:
    """The lake at ``snapshot`` (at log ``offsets``) against the log from ``start`` (its first retained offset
    per bucket): its files once each, present with their sizes, then each bucket's rows."""
    r = c.reader
    live: dict[int, list[DataFile]] = defaultdict(list)
    files = r.live_files(snapshot)
    deletes = r.live_deletes(snapshot)
    c.check_twice(files, snapshot, None)
    delete_files = {d.file_path: d for ds in deletes.values() for d in ds}
    c.verify_files([(f, snapshot) for f in files] + [(d, snapshot) for d in delete_files.values()])
    for f in files:
        live[r.bucket_of(f)].append(f)
    gone = {v.bucket for v in c.violations if v.check == "log-missing"}
    items = []
    for b in range(r.buckets):
        if start.get(b, 0) > offsets[b]:
            if b not in gone:  # else its loss is reported already (above the retention floor)
                c.violate(
                    "log-missing",
                    f"the log of bucket {b} starts at offset {start[b]}, after the lake's {offsets[b]}: the "
                    "records in between are gone from the log",
                    bucket=b,
                    offsets=(offsets[b], start[b]),
                    snapshot=snapshot,
                )
            continue
        mine = live.get(b, [])
        items.append(
            FullBucket(
                bucket=b,
                snapshot=snapshot,
                files=mine,
                deletes={f.file_path: deletes[f.file_path] for f in mine if f.file_path in deletes},
                start=start.get(b, 0),
                end=offsets[b],
            )
        )
    c.run_buckets(check_full_bucket, items)
    c.details["unverified_rows"] = c.unverified_rows


def check_full_bucket(c: Checker, item: FullBucket) -> None:
    """One bucket of a full check: the lake's rows against the retained log replayed to the lake's offset."""
    r = c.reader
    b, snapshot, lo = item.bucket, item.snapshot, item.start
    needed = [*item.files, *(d for ds in item.deletes.values() for d in ds)]
    if not c.readable(b, needed):
        return
    actual = c.read_files(item.files, item.deletes)
    rng = (lo, item.end)
    log_rows = c.read_log(b, lo, item.end, snapshot)
    if log_rows is None:
        return
    fresh = pc.greater_equal(actual.column(OFFSET_COLUMN), lo)
    if r.engine is not None and lo > 0:
        # a merge engine's rows as of ``lo`` are gone from the log: its keys' rows cannot be recomputed (each
        # tiering commit was checked against its parent's rows by the incremental check)
        c.unverified_rows += actual.num_rows
        return
    if r.key:
        changes = log_rows
        if actual.num_rows and changes.num_rows:
            fresh = pc.or_(fresh, KeySet(changes, r.key).hits(actual))
        expected = upserts_of(changes).select(r.columns)
    else:
        expected = log_rows.select(r.columns)
    checked = actual.filter(fresh) if lo > 0 else actual
    c.unverified_rows += actual.num_rows - checked.num_rows
    c.compare(expected, checked, bucket=b, offsets=rng, snapshot=snapshot, what="the lake against the log")


__all__ = ["FullBucket", "check_full", "check_full_bucket"]
