"""What a lake commit cost to make, kept in its own snapshot summary.

A tiering round and a compaction measure their requests to the store (`object_store.usage`, their tasks'
included) and write what they measured up to the commit into the snapshot they commit, as JSON under
``lakestream.usage`` (the commit itself, one or two requests, is not in it). The figures then live as long as the
snapshot: `lakestream table cost` and the metrics table read them from the table's metadata, with no ledger to
keep beside the lake, and any Iceberg reader sees them in the snapshot's summary.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from pyiceberg.table.snapshots import Snapshot

from lakehouse.iceberg.offsets import COMMIT_USER_PROPERTY
from object_store.usage import Usage, current_usage

#: The snapshot summary property holding the commit's usage (`Usage.to_dict`, as JSON).
USAGE_PROPERTY = "lakestream.usage"


def usage_property() -> dict[str, str]:
    """The summary entry of what the current usage scope counted so far (`object_store.usage.current_usage`)."""
    return {USAGE_PROPERTY: json.dumps(current_usage().to_dict(), separators=(",", ":"), sort_keys=True)}


def snapshot_usage(snapshot: Snapshot) -> Usage | None:
    """The usage ``snapshot``'s commit recorded; None when it recorded none (another writer, an older version)
    or the entry is unreadable."""
    text = snapshot.summary[USAGE_PROPERTY] if snapshot.summary is not None else None
    if not text:
        return None
    try:
        return Usage.from_dict(json.loads(text))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


@dataclass(frozen=True)
class CommitUsage:
    """The commits of one writer (``user``: the summary's ``lakestream.commit-user``, "other" without one) in a
    period: how many, how many of them recorded their usage, and the sum of what they recorded."""

    user: str
    commits: int
    measured: int
    usage: Usage


def commit_usage(snapshots: Iterable[Snapshot], since_ms: int, until_ms: int) -> list[CommitUsage]:
    """What the commits among ``snapshots`` made in ``[since_ms, until_ms)`` recorded, by writer."""
    found: dict[str, tuple[int, int, Usage]] = {}
    for snap in snapshots:
        if not since_ms <= snap.timestamp_ms < until_ms:
            continue
        user = (snap.summary[COMMIT_USER_PROPERTY] if snap.summary is not None else None) or "other"
        commits, measured, total = found.get(user, (0, 0, Usage()))
        used = snapshot_usage(snap)
        found[user] = (commits + 1, measured + (used is not None), total + used if used is not None else total)
    return [CommitUsage(user, c, m, u) for user, (c, m, u) in sorted(found.items())]
