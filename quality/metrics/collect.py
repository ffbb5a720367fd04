"""Metrics per commit: for every lake commit of every table, figures computed from that commit's changes.

``collect_metrics(lh, tables=None, spark=None)`` walks each table's lake snapshots after the last one recorded
(`quality.metrics.table`: the metrics table's own summary says where each table stands), and for each snapshot
that adds data records in the metrics table (long format, one row per metric):

- ``rows``: the table's rows after the commit, from its snapshot summary (``total-records`` less
  ``total-position-deletes``: metadata only);
- for a tiering commit (``kind`` "tiering", or "round" for a layers model's table), from the net changes of its
  offset range (the parent tiering snapshot's offsets to its own, as `lakehouse.read.changes` reads them):
  ``inserts``, ``updates``, ``deletes``, ``changes`` (their sum), ``freshness_seconds_max`` / ``_min`` (the commit's
  time less the append time of the range's oldest / newest records), and per column of the after-images (inserted
  and updated rows) ``null_fraction``, ``distinct_estimate`` (`quality.metrics.sketch`: HyperLogLog, 1.6 % relative
  standard error) and for numeric columns ``min``, ``max``, ``mean``;
- any other commit that adds records (compaction, another writer: ``kind`` "other") changes no offset: only
  ``rows``;
- for any commit that recorded what it asked of the store (tiering and compaction do:
  `lakehouse.iceberg.commit_usage`): ``write_requests``, ``read_requests``, ``bytes_sent``, ``bytes_received``.

**Cost follows the changes.** A tiering commit records its net changes in its summary
(`lakehouse.iceberg.offsets.round_changes`: the round finds the changed keys' old rows anyway), and a merge-on-read or
log table's commit adds exactly its after-images as data files: its metrics read those files, bucket by bucket, and
nothing of the table before it. Other commits (copy-on-write tables, commits of earlier versions) are read as a
changes read does: the log range, and the old state of the changed keys looked up by key in the parent's files (no
before-images: no metric needs the old values, and a delete's old row comes anyway); with changes spread over the
keys that lookup reads the key column of most of the table. Each bucket's read becomes a tiny partial (counts, sums,
min/max, the sketch's registers; `quality.metrics.partials`), merged on the driver. Where: a commit of up to
``quality_driver_budget_rows`` changed records (the records of its offset range, known from the offsets without
reading; the setting every quality check's driver shortcut uses) is read by threads of this process; a larger
one by Spark's executors (one ``mapInArrow`` task per bucket, `lakehouse.executor.SparkExecutor`) when a session
is given, and without one it is not collected: `MetricsError` names the setting after what could be recorded was.

**Incremental and idempotent.** At most ``max_commits`` commits per table per call; one append per call,
recording with the rows how far each table got, so a rerun starts after it, and a crash before the append
records nothing (the next run computes it again). Nothing new costs a metadata load per table.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.types import PrimitiveType

from lakehouse.errors import AsOfUnavailable, LakestreamError
from lakehouse.executor import LocalExecutor, SparkExecutor
from lakehouse.iceberg.commit_usage import snapshot_usage
from lakehouse.iceberg.datafiles import LakeContext, shared_store
from lakehouse.iceberg.layout import BUCKET_COLUMN
from lakehouse.iceberg.offsets import (
    AFTER_IMAGES_IN_ADDED_FILES,
    COMMIT_USER_PROPERTY,
    TIERING_USER,
    round_changes,
    tiering_snapshots,
)
from lakehouse.read.changes import BucketChanges, ChangesPlan, plan_changes, read_bucket_changes
from quality.errors import QualityError
from quality.metrics.partials import (
    BucketPartial,
    after_images_partial,
    bucket_partial,
    merge_partials,
    metric_rows,
    numeric,
    usage_rows,
)
from quality.metrics.table import Recorded, append_metrics, metrics_table, recorded

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

log = logging.getLogger(__name__)

TIERING, ROUND, OTHER = "tiering", "round", "other"
#: Commits per table one call collects at most (the next call goes on).
MAX_COMMITS = 100
#: Buckets read at once in the driver (reads overlap; pyarrow decodes with its own threads).
WORKERS = min(4, os.cpu_count() or 1)


class MetricsError(QualityError):
    """Metrics could not be collected (the message says which commits and what to do)."""


@dataclass
class _Commit:
    """One lake commit to record: its changes' offset range (None: none, or not known) and, once read, their
    merged partial."""

    table: str
    snapshot: Snapshot
    kind: str
    start: dict[int, int] | None = None
    end: dict[int, int] | None = None
    total: BucketPartial | None = None
    #: the net changes the commit recorded, when its added data files are its after-images (read those instead)
    recorded: dict[str, Any] | None = None


@dataclass(frozen=True)
class _AfterImages:
    """One bucket of a commit whose added data files are its after-images: the bucket's offset range (for
    freshness) and those files (picklable: a Spark task reads them)."""

    bucket: int
    start: int
    end: int
    files: tuple[str, ...]
    columns: tuple[str, ...]


def collect_metrics(
    lh: Lakehouse,
    *,
    tables: list[str] | None = None,
    spark: Any = None,
    driver_budget_rows: int | None = None,
    max_commits: int = MAX_COMMITS,
) -> int:
    """Record the metrics of each table's commits not recorded yet (see the module); returns the rows written.

    Raises:
        MetricsError: a commit above the driver's budget and no Spark session, or a table that could not be
            read (missing, its store failing): raised after the other tables' commits (and this table's before
            the refused one) were recorded.
    """
    from lakehouse.settings import budget_rows

    budget = budget_rows(lh.settings, "quality_driver_budget_rows", driver_budget_rows)
    names = [str(t) for t in tables] if tables else [str(t) for t in lh.list_tables()]
    done = recorded(metrics_table(lh))
    rows: list[dict[str, Any]] = []
    progress: Recorded = {}
    refused: list[str] = []
    failed: list[str] = []
    for name in names:
        try:
            lake = lh.lake_table(name)
            commits, last = _new_commits(lh, name, lake, done.get(name), max_commits)
            if not commits and last is None:
                continue
            kept, over = _read_changes(lh, name, lake, commits, spark, budget)
            numeric_columns = {f.name for f in lh.table(name).schema if numeric(f.type)}
        except (LakestreamError, OSError) as exc:  # the other tables are still collected
            log.warning("metrics of %s not collected: %s", name, exc)
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if over is not None:
            refused.append(over)
            last = (kept[-1].snapshot.snapshot_id, kept[-1].snapshot.timestamp_ms) if kept else None
        for c in kept:
            rows.extend(_rows(c, numeric_columns))
        if last is not None:
            progress[name] = last
    written = append_metrics(lh, rows, progress, is_new_for(lh)) if progress else 0
    if refused:
        failed.append(
            "; ".join(refused) + ": give a Spark session (lakestream metrics collect --spark-master ...) or raise the "
            "setting quality_driver_budget_rows (LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS); the commits before were "
            "recorded"
        )
    if failed:
        raise MetricsError(f"metrics not collected ({written} rows were written for the rest): " + "; ".join(failed))
    return written


def is_new_for(lh: Lakehouse) -> Any:
    """``is_new(table, snapshot_id, recorded)``: whether a snapshot comes after the one ``recorded`` for its
    table (by the table's ancestry; a recorded snapshot no longer retained, by commit time)."""
    cache: dict[str, tuple[Table, dict[int, int]]] = {}
    lock = threading.Lock()

    def is_new(table: str, snapshot_id: int, done: Recorded) -> bool:
        last = done.get(table)
        if last is None:
            return True
        with lock:
            if table not in cache:
                lake = lh.lake_table(table)
                current = lake.current_snapshot()
                order = [s.snapshot_id for s in ancestors_of(current, lake.metadata)][::-1] if current else []
                cache[table] = (lake, {sid: i for i, sid in enumerate(order)})
            lake, position = cache[table]
        if last[0] in position and snapshot_id in position:
            return position[snapshot_id] > position[last[0]]
        snap = lake.metadata.snapshot_by_id(snapshot_id)
        return snap is not None and snap.timestamp_ms > last[1]

    return is_new


def _new_commits(
    lh: Lakehouse, name: str, lake: Table, last: tuple[int, int] | None, limit: int
) -> tuple[list[_Commit], tuple[int, int] | None]:
    """The commits of ``name`` (its lake table ``lake``) after ``last`` (oldest first, at most ``limit``), and
    the snapshot they reach (None: nothing new)."""
    current = lake.current_snapshot()
    if current is None or (last is not None and last[0] == current.snapshot_id):
        return [], None
    definition = lh.table(name)
    ancestry = list(ancestors_of(current, lake.metadata))[::-1]  # oldest first
    ids = [s.snapshot_id for s in ancestry]
    if last is None:
        begin = 0
    elif last[0] in ids:
        begin = ids.index(last[0]) + 1
    else:  # the last recorded snapshot was expired: go on after its time
        begin = next((i for i, s in enumerate(ancestry) if s.timestamp_ms > last[1]), len(ancestry))
    offsets = {s.snapshot_id: o for s, o in tiering_snapshots(lake.metadata, definition.buckets, lake.io)}
    # the offsets before the oldest retained snapshot: none if it is the table's first, unknown if expired
    previous: dict[int, int] | None = (
        dict.fromkeys(range(definition.buckets), 0) if ancestry and ancestry[0].parent_snapshot_id is None else None
    )
    model = _is_model(lh, name)
    commits: list[_Commit] = []
    reached: Snapshot | None = None
    for i, snap in enumerate(ancestry):
        own = offsets.get(snap.snapshot_id)
        tiering = snap.summary is not None and snap.summary[COMMIT_USER_PROPERTY] == TIERING_USER and own is not None
        if i >= begin:
            if len(commits) == limit:
                break
            reached = snap
            if tiering:
                commits.append(_Commit(name, snap, ROUND if model else TIERING, previous, own))
            elif _summary_int(snap, "added-records"):
                commits.append(_Commit(name, snap, OTHER))
        if tiering:
            previous = own
    if reached is None:
        return [], None
    return commits, (reached.snapshot_id, reached.timestamp_ms)


def _is_model(lh: Lakehouse, name: str) -> bool:
    """Whether a layers model writes table ``name`` (its rounds are recorded in the warehouse)."""
    from layers.rounds import LAYERS_PREFIX

    return next(iter(lh.store.list(f"{LAYERS_PREFIX}{name}/round-")), None) is not None


def _summary_int(snap: Snapshot, key: str) -> int | None:
    try:
        value = snap.summary[key] if snap.summary is not None else None
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _rows(c: _Commit, numeric_columns: set[str]) -> list[dict[str, Any]]:
    snap = c.snapshot
    total_records = _summary_int(snap, "total-records")
    rows = None if total_records is None else total_records - (_summary_int(snap, "total-position-deletes") or 0)
    at = datetime.fromtimestamp(snap.timestamp_ms / 1000, UTC)
    return [
        {
            "table": c.table,
            "snapshot_id": snap.snapshot_id,
            "committed_at": at,
            "kind": c.kind,
            "metric": metric,
            "column": column,
            "value": value,
        }
        for metric, column, value in [
            *metric_rows(c.total, rows, snap.timestamp_ms, numeric_columns),
            *usage_rows(snapshot_usage(snap)),
        ]
    ]


def _read_changes(
    lh: Lakehouse, name: str, lake: Table, commits: list[_Commit], spark: Any, budget: int
) -> tuple[list[_Commit], str | None]:
    """Read the changes of ``commits`` into their partials: those up to ``budget`` changed records in this
    process, larger ones on Spark's executors. Returns the commits kept (all, or those before the first one
    above the budget without Spark) and, then, why the rest was not."""
    log_ = lh.log(name)
    ctx = LakeContext.of(lh.store, lake)
    user_columns = tuple(f.name for f in lh.table(name).schema)
    local: list[tuple[int, Any]] = []
    remote: list[tuple[int, Any]] = []
    kept: list[_Commit] = []
    refused = None
    for index, c in enumerate(commits):
        if c.start is not None and c.end is not None:
            changed = sum(c.end[b] - c.start.get(b, 0) for b in c.end)
            if changed > budget and spark is None:
                refused = (
                    f"{name}: snapshot {c.snapshot.snapshot_id} changed {changed:,} records, above the driver's "
                    f"budget of {budget:,}"
                )
                break
            work: Sequence[_AfterImages | tuple[ChangesPlan, BucketChanges]] | None = _after_images_work(
                lake, c, user_columns
            )
            if work is None:
                try:
                    plan = plan_changes(lake, log_, c.start, c.end)
                except AsOfUnavailable as exc:
                    log.warning("%s: the changes of snapshot %s cannot be read (%s): rows only", name, c.snapshot, exc)
                    plan = None
                work = [] if plan is None else [(replace(plan, buckets=(item,)), item) for item in plan.buckets]
                if plan is not None:
                    c.total = BucketPartial()  # the buckets' partials merge into it (no bucket changed: zeros)
            else:
                c.total = BucketPartial()
            (local if changed <= budget else remote).extend((index, w) for w in work)
        kept.append(c)
    task = _BucketTask(lh, name, ctx)
    parts: dict[int, list[BucketPartial | None]] = {}
    for items, executor in (
        (local, lambda: LocalExecutor(min(WORKERS, len(local)))),
        (remote, lambda: SparkExecutor(spark)),
    ):
        if not items:
            continue
        results = executor().map(task, [w for _, w in items])
        for (index, _), part in zip(items, results, strict=True):
            parts.setdefault(index, []).append(part)
    for index, c in enumerate(kept):
        if c.total is None:
            continue
        mine = parts.get(index, [])
        c.total = None if any(p is None for p in mine) else merge_partials([p for p in mine if p is not None])
        if c.total is None:
            log.warning("%s: log retention removed changes of snapshot %s: rows only", name, c.snapshot.snapshot_id)
        elif c.recorded is not None:
            c.total.inserts, c.total.updates = c.recorded["inserts"], c.recorded["updates"]
            c.total.deletes = c.recorded["deletes"]
    return kept, refused


def _after_images_work(lake: Table, c: _Commit, columns: tuple[str, ...]) -> list[_AfterImages] | None:
    """The per-bucket work of a commit whose summary records its net changes and whose added data files are its
    after-images (sets ``c.recorded``), or None (read its changes instead): the data files the snapshot added,
    found in the manifests it wrote (the table's other manifests are not read)."""
    recorded = round_changes(c.snapshot)
    if recorded is None or recorded.get("after_images") != AFTER_IMAGES_IN_ADDED_FILES:
        return None
    assert c.start is not None and c.end is not None
    snapshot_id = c.snapshot.snapshot_id
    bucket_id = lake.metadata.schema().find_field(BUCKET_COLUMN).field_id
    files: dict[int, list[str]] = {}
    for manifest in c.snapshot.manifests(lake.io):
        if manifest.content != ManifestContent.DATA or manifest.added_snapshot_id != snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(lake.io, discard_deleted=True):
            if entry.status != ManifestEntryStatus.ADDED or entry.snapshot_id != snapshot_id:
                continue
            if entry.data_file.content != DataFileContent.DATA:
                continue
            lower, upper = entry.data_file.lower_bounds or {}, entry.data_file.upper_bounds or {}
            if bucket_id not in lower or lower.get(bucket_id) != upper.get(bucket_id):
                return None  # a file whose bucket its statistics do not say: read the changes
            bucket_type = cast(PrimitiveType, lake.metadata.schema().find_field(bucket_id).field_type)  # an int
            bucket = from_bytes(bucket_type, lower[bucket_id])
            files.setdefault(int(bucket), []).append(entry.data_file.file_path)
    c.recorded = recorded
    return [
        _AfterImages(b, c.start.get(b, 0), end, tuple(files.get(b, ())), columns)
        for b, end in sorted(c.end.items())
        if end > c.start.get(b, 0)
    ]


#: Lakehouses opened in an executor's Python worker, by (store URL, options): one per store per process.
_TASK_LAKEHOUSES: dict[tuple, Any] = {}
_TASK_LOCK = threading.Lock()


class _BucketTask:
    """The task of one bucket of one commit: its changes read (`read_bucket_changes`) into a `BucketPartial`
    (None if log retention removed the range). Pickled to Spark's workers without the driver's `Lakehouse`."""

    def __init__(self, lh: Lakehouse, name: str, ctx: LakeContext) -> None:
        self.lh, self.name, self.ctx = lh, name, ctx
        self._log: Any = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "store": (self.lh.store.url, tuple(sorted(self.lh.store.connection_options().items()))),
            "name": self.name,
            "ctx": self.ctx,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        from lakehouse import Lakehouse

        with _TASK_LOCK:
            lh = _TASK_LAKEHOUSES.get(state["store"])
            if lh is None:
                lh = _TASK_LAKEHOUSES[state["store"]] = Lakehouse(shared_store(*state["store"]))
        self.__init__(lh, state["name"], state["ctx"])  # type: ignore[misc]

    def log(self) -> Any:
        with self._lock:
            if self._log is None:
                self._log = self.lh.log(self.name)
            return self._log

    def __call__(self, work: tuple[ChangesPlan, BucketChanges] | _AfterImages) -> BucketPartial | None:
        if isinstance(work, _AfterImages):
            return self._after_images(work)
        plan, item = work
        log_ = self.log()
        try:
            changes = read_bucket_changes(plan, item, log_, self.ctx)
        except AsOfUnavailable:
            return None
        appended = (log_.appended_at(item.bucket, item.start), log_.appended_at(item.bucket, item.end - 1))
        return bucket_partial(changes, list(plan.columns), appended)

    def _after_images(self, work: _AfterImages) -> BucketPartial:
        log_ = self.log()
        columns = list(work.columns)
        tables = [self.ctx.read(path, columns=columns) for path in work.files]
        after = (
            pa.concat_tables(tables)
            if tables
            else pa.schema([self.ctx.arrow_schema.field(c) for c in columns]).empty_table()
        )
        appended = (log_.appended_at(work.bucket, work.start), log_.appended_at(work.bucket, work.end - 1))
        return after_images_partial(after, columns, appended)


__all__ = ["MAX_COMMITS", "OTHER", "ROUND", "TIERING", "MetricsError", "collect_metrics", "is_new_for"]
