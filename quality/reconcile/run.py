"""``reconcile(lh, table, full=False)``: which check runs (incremental from the recorded snapshot, or full), in
what order, and the result; a clean run's state recorded for the next one (see `quality.reconcile`).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pyiceberg.table.snapshots import ancestors_of

from lakehouse.executor import TaskExecutor
from quality.reconcile.checker import Checker
from quality.reconcile.commits import check_commits, check_offsets
from quality.reconcile.full import check_full
from quality.reconcile.state import check_retention, load_state, save_state
from quality.results import RECONCILE, CheckResult

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse


def reconcile(lh: Lakehouse, table: str, full: bool = False, *, executor: TaskExecutor | None = None) -> CheckResult:
    """Check ``table``'s lake against its log (see `quality.reconcile`). A found difference is a `Violation`
    in the result, never an exception; the result's ``snapshot_id`` is the lake snapshot checked. ``executor``
    runs the buckets' content checks (`lakehouse.executor.task_executor`: Spark's executors given a session);
    by default `quality.reconcile.checker.WORKERS` threads of this process.

    Raises:
        TableNotFound, LakeStateError: there is no such table, or its lake cannot be loaded.
    """
    started = time.perf_counter()
    c = Checker.open(lh, table)
    c.executor = executor
    r = c.reader
    current = r.lake.current_snapshot()
    result = CheckResult(RECONCILE, c.name, snapshot_id=current.snapshot_id if current else None)
    if current is None:
        result.details = {"mode": "empty", "commits_checked": 0}
        result.seconds = time.perf_counter() - started
        return result
    ancestry = list(ancestors_of(current, r.lake.metadata))[::-1]  # oldest first
    offsets_of = check_offsets(c, ancestry)
    state = None if full else load_state(lh, c.name)
    ids = [s.snapshot_id for s in ancestry]
    resumable = (
        state is not None and state.get("table_uuid") == r.definition.table_uuid and state.get("snapshot_id") in ids
    )
    newest_offsets = dict.fromkeys(range(r.buckets), 0)
    for snap in ancestry:
        newest_offsets = offsets_of.get(snap.snapshot_id, newest_offsets)
    start = r.log.start_offsets()  # listed before the retention record is read (see check_retention)
    check_retention(c, start)
    if not resumable:
        c.details["mode"] = "full"
        check_full(c, current, newest_offsets, start)
        commits = len(ancestry)
    else:
        assert state is not None  # resumable
        c.details["mode"] = "incremental"
        commits = check_commits(c, ancestry, ids.index(state["snapshot_id"]) + 1, offsets_of)
        c.details["from_snapshot"] = state["snapshot_id"]
    c.details["commits_checked"] = commits
    if c.unverified:
        c.details["unverified_buckets"] = sorted(c.unverified)
    c.details["offsets"] = {str(b): o for b, o in newest_offsets.items()}
    order: dict[int | None, int] = {s.snapshot_id: i for i, s in enumerate(ancestry)}
    result.violations = sorted(
        c.violations, key=lambda v: (order.get(v.snapshot_id, -1), v.bucket if v.bucket is not None else -1)
    )
    result.rows = c.rows
    result.details.update(c.details)
    result.seconds = time.perf_counter() - started
    result.details["rows_per_second"] = round(c.rows / result.seconds) if result.seconds > 0 else None
    if not c.violations:
        save_state(
            lh,
            c.name,
            {
                "table_uuid": r.definition.table_uuid,
                "snapshot_id": current.snapshot_id,
                "offsets": {str(b): o for b, o in newest_offsets.items()},
                "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "mode": c.details["mode"],
                "seconds": round(result.seconds, 3),
            },
        )
    return result


__all__ = ["reconcile"]
