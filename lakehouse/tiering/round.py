"""Tiering: move a table's log into its Iceberg table, exactly once (Fluss's tiering service, as tasks).

One round:

1. **Plan** (driver): the lake's offsets (newest tiering snapshot) against the log's end offsets give
   per-bucket ranges; log tables cut them into splits of at most ``max_split_rows`` records so a huge
   bucket still spreads over tasks. A primary-key table gets one task per changed bucket (its changes
   must be reduced per key across the whole range).
2. **Write** (tasks, on the local executor or Spark): a task reads its log segments and writes Parquet
   data files (Iceberg field ids, statistics), returning their `DataFile` entries. Log-table tasks stream:
   memory is bounded by the write buffer, not by the split. Primary-key tasks reduce the changes per key
   (last wins), rewrite the bucket's data files that hold changed keys without them (copy-on-write) and
   write the new versions; untouched buckets are neither read nor rewritten.
3. **Commit** (driver): one snapshot with every file of the round and the new offsets
   (``lakestream.offsets``), planned on the newest tiering snapshot (``lakestream.tiering-base``). The
   catalog refuses it if another tiering run committed in between (`TieringConflict`): the loser deletes
   its files and never re-applies them. A crash before the commit leaves only unreferenced files (orphans
   for maintenance); a crash after it leaves a committed round. Either way a rerun tiers exactly what the
   lake does not hold yet.
"""

from __future__ import annotations

import json
import logging
import math
import time
import traceback
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    ValidationException,
)
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from lakehouse.errors import InvalidArgument, LakeStateError, LakestreamError, TieringConflict
from lakehouse.executor import LocalExecutor, TaskExecutor
from lakehouse.iceberg.commit_usage import usage_property
from lakehouse.iceberg.commits import append_row_changes, rewrite_files
from lakehouse.iceberg.datafiles import LakeContext, added_or_raise, locations
from lakehouse.iceberg.layout import (
    check_lake_layout,
    log_to_lake_rows,
    parse_partition_by,
    partition_groups,
)
from lakehouse.iceberg.load import load_lake_table
from lakehouse.iceberg.offsets import (
    AFTER_IMAGES_IN_ADDED_FILES,
    ROUND_CHANGES_PROPERTY,
    lake_offsets,
    tiering_snapshot,
    write_tiering_summary,
)
from lakehouse.log import Log
from lakehouse.merge import engine_of
from lakehouse.merge.keyed_rows import KeySet, mark_bucket, reduce_changes, rewrite_bucket, round_counts, stored_rows
from lakehouse.table.definition import TableDefinition
from lakehouse.table.evolution import sync_lake_schema
from object_store import ObjectStore
from object_store.usage import Usage, measure_usage

log = logging.getLogger(__name__)

DEFAULT_MAX_SPLIT_ROWS = 2_000_000
#: Rows a streaming task buffers before handing them to the Parquet writer (bounds its memory).
WRITE_BUFFER_ROWS = 262_144


class TieringError(LakestreamError):
    """A tiering task failed; nothing was committed and the round's files were deleted."""


@dataclass(frozen=True)
class Split:
    """Log records [start, end) of one bucket."""

    bucket: int
    start: int
    end: int

    @property
    def rows(self) -> int:
        return self.end - self.start


def plan_splits(
    lake: dict[int, int], log_end: dict[int, int], *, max_split_rows: int, whole_buckets: bool = False
) -> list[Split]:
    """Splits covering every bucket's range [lake offset, log end), each at most ``max_split_rows`` records
    (unless ``whole_buckets``), cut evenly so a bucket's splits are about the same size."""
    if max_split_rows < 1:
        raise InvalidArgument(f"max_split_rows must be >= 1, got {max_split_rows}")
    splits = []
    for bucket in sorted(log_end):
        start, end = lake.get(bucket, 0), log_end[bucket]
        if end <= start:
            continue
        pieces = 1 if whole_buckets else math.ceil((end - start) / max_split_rows)
        bounds = [start + (i * (end - start)) // pieces for i in range(pieces + 1)]
        splits += [Split(bucket, lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]
    # biggest first: better packing of tasks onto cores
    return sorted(splits, key=lambda s: -s.rows)


@dataclass
class TieringResult:
    """What one tiering round did. ``snapshot_id`` is None when there was nothing to tier."""

    table: str
    snapshot_id: int | None
    previous_offsets: dict[int, int]
    offsets: dict[int, int]
    rows: int = 0
    files_added: int = 0
    files_removed: int = 0
    bytes_written: int = 0
    splits: int = 0
    tasks: int = 0  # a merge-on-read bucket's split may run as several tasks, each with a share of its files
    executor: str = "local"
    parallelism: int = 1
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    #: the round's requests to the store and their bytes, its tasks' included (`object_store.usage`)
    usage: Usage = field(default_factory=Usage)

    @property
    def tiered(self) -> bool:
        return self.snapshot_id is not None

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["previous_offsets"] = {str(k): v for k, v in self.previous_offsets.items()}
        doc["offsets"] = {str(k): v for k, v in self.offsets.items()}
        doc["usage"] = self.usage.to_dict()
        return doc


@dataclass(frozen=True)
class _Task:
    ctx: LakeContext
    definition_json: bytes
    split: Split
    stem: str
    primary_key: tuple[str, ...]
    #: A primary-key bucket's live data files, each with its delete files (merge-on-read: this part's share).
    candidates: tuple[tuple[DataFile, tuple[DataFile, ...]], ...] = ()
    merge_on_read: bool = False
    #: A merge-on-read bucket split by file: this task's number; part 0 also writes the new rows.
    part: int = 0


@dataclass
class _TaskResult:
    added: list[DataFile] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    rows: int = 0
    error: str | None = None
    #: a primary-key bucket's keys the round upserts (counted by the part writing them), and of its changed keys
    #: those found live (updated / deleted): the round's net changes (`keyed_rows.round_counts`)
    upsert_keys: int = 0
    found_updates: int = 0
    found_deletes: int = 0


# ---- tasks (run on the executor; everything they need is in the _Task) --------------------------------


def _run_task(task: _Task) -> _TaskResult:
    """Never raises: a failed task deletes what it wrote and returns the error, so the driver can clean
    up the other tasks' files whatever the executor (Spark would drop their results on a raise)."""
    result = _TaskResult()
    try:
        definition = TableDefinition.from_json(task.definition_json)
        log_ = Log(task.ctx.store, definition, max_workers=4)
        try:
            if task.primary_key:
                _rewrite_bucket(task, definition, log_, result)
            else:
                _write_split(task, definition, log_, result)
        finally:
            log_.close()
    except BaseException:  # noqa: BLE001 - returned to the driver, which raises it
        task.ctx.delete(locations(result.added))
        return _TaskResult(error=f"split {task.split}: {traceback.format_exc()}")
    return result


def _write_split(task: _Task, definition: TableDefinition, log_: Log, result: _TaskResult) -> None:
    split, ctx = task.split, task.ctx
    parts = parse_partition_by(definition, definition.schema)
    if parts:  # several partitions per split: group the whole split (bounded by the split cap)
        data = log_to_lake_rows(log_.read(split.bucket, split.start, split.end), split.bucket)
        result.rows = data.num_rows
        for partition, rows in partition_groups(definition, data, split.bucket, parts):
            result.added.append(ctx.write(rows, partition, f"{task.stem}-{split.bucket:05d}-{split.start}"))
    else:  # one partition: stream segments into one file, a row group at a time

        def lake_batches() -> Iterator[pa.Table]:
            buffered, count = [], 0
            for batch in log_.read_batches(split.bucket, split.start, split.end):
                buffered.append(batch)
                count += batch.num_rows
                if count >= WRITE_BUFFER_ROWS:
                    yield log_to_lake_rows(pa.Table.from_batches(buffered), split.bucket)
                    buffered, count = [], 0
            if buffered:
                yield log_to_lake_rows(pa.Table.from_batches(buffered), split.bucket)

        data_file = ctx.write_stream(lake_batches(), (split.bucket,), f"{task.stem}-{split.bucket:05d}-{split.start}")
        if data_file is not None:
            result.rows = data_file.record_count
            result.added.append(data_file)
    if result.rows != split.rows:
        raise LakeStateError(
            f"{definition.name} bucket {split.bucket}: read {result.rows} records for offsets "
            f"[{split.start}, {split.end}), expected {split.rows}"
        )


def _rewrite_bucket(task: _Task, definition: TableDefinition, log_: Log, result: _TaskResult) -> None:
    split = task.split
    data = log_.read(split.bucket, split.start, split.end)
    if data.num_rows != split.rows:
        raise LakeStateError(
            f"{definition.name} bucket {split.bucket}: read {data.num_rows} records for offsets "
            f"[{split.start}, {split.end}), expected {split.rows}"
        )
    stem = f"{task.stem}-{split.bucket:05d}-{split.start}" + (f"-p{task.part}" if task.part else "")
    engine = engine_of(definition)
    stored = None
    if engine.needs_stored:  # the merged rows depend on the stored ones: look the changed keys' rows up
        columns = [*task.primary_key, *engine.stored_columns(data)]
        stored = stored_rows(task.ctx, task.candidates, KeySet(data, task.primary_key), columns)
        changes = engine.resolve(stored, data)
    else:
        changes = reduce_changes(data, task.primary_key)
    result.rows = data.num_rows if task.part == 0 else 0  # every part reads the range; it counts once
    if task.merge_on_read:
        mark_bucket(
            task.ctx,
            definition,
            split.bucket,
            changes,
            task.candidates,
            stem,
            result,
            write_rows=task.part == 0,
            stored=stored,
        )
    else:
        rewrite_bucket(task.ctx, definition, split.bucket, changes, [f for f, _ in task.candidates], stem, result)


# ---- driver --------------------------------------------------------------------------------------------


def _round_changes(definition: TableDefinition, outcomes: Sequence[_TaskResult]) -> str:
    """The round's net changes for its snapshot summary (`ROUND_CHANGES_PROPERTY`)."""
    if definition.has_primary_key:
        counts = round_counts(
            sum(o.upsert_keys for o in outcomes),
            sum(o.found_updates for o in outcomes),
            sum(o.found_deletes for o in outcomes),
        )
    else:
        counts = round_counts(sum(o.rows for o in outcomes), 0, 0)
    # copy-on-write's added files also hold the rewritten files' unchanged rows
    if definition.merge_on_read or not definition.has_primary_key:
        counts["after_images"] = AFTER_IMAGES_IN_ADDED_FILES  # type: ignore[assignment]
    return json.dumps(counts, separators=(",", ":"))


def check_offsets(name: str, lake: dict[int, int], log_end: dict[int, int]) -> None:
    ahead = {b: (lake[b], log_end.get(b, 0)) for b in lake if lake[b] > log_end.get(b, 0)}
    if ahead:
        detail = ", ".join(f"bucket {b}: lake {lo} > log {le}" for b, (lo, le) in sorted(ahead.items()))
        raise LakeStateError(
            f"the lake of {name} holds offsets the log does not have ({detail}): the log was recreated or "
            "lost segments. Tiering stops here; restore the log or re-create the table"
        )


def bucket_files(
    table: Table, buckets: set[int] | None = None
) -> dict[int, list[tuple[DataFile, tuple[DataFile, ...]]]]:
    """Live data files of the current snapshot, each with its delete files, by bucket (the last partition field
    is the bucket)."""
    out: dict[int, list[tuple[DataFile, tuple[DataFile, ...]]]] = defaultdict(list)
    if table.current_snapshot() is None:
        return out
    for task in table.scan().plan_files():
        partition = task.file.partition
        bucket = partition[len(partition) - 1]
        if buckets is None or bucket in buckets:
            out[bucket].append((task.file, tuple(task.delete_files)))
    return out


def share_files(
    files: Sequence[tuple[DataFile, tuple[DataFile, ...]]], parts: int
) -> list[tuple[tuple[DataFile, tuple[DataFile, ...]], ...]]:
    """``files`` in at most ``parts`` shares of about equal bytes (biggest file first onto the lightest share);
    one empty share if there are no files."""
    shares: list[list[tuple[DataFile, tuple[DataFile, ...]]]] = [[] for _ in range(max(1, min(parts, len(files))))]
    weights = [0] * len(shares)
    for entry in sorted(files, key=lambda e: -e[0].file_size_in_bytes):
        lightest = weights.index(min(weights))
        shares[lightest].append(entry)
        weights[lightest] += entry[0].file_size_in_bytes
    return [tuple(s) for s in shares]


def _conflict(catalog: Catalog, definition: TableDefinition, base: Snapshot | None, exc: Exception) -> TieringConflict:
    """A commit pyiceberg refused after losing the pointer to another writer (its retry found the files this
    round rewrote deleted: "Data files were concurrently deleted"), or gave up retrying, as a
    `TieringConflict` saying who won."""
    name = str(definition.name)
    try:
        newest = tiering_snapshot(load_lake_table(catalog, definition).metadata)
    except Exception:  # noqa: BLE001 - the conflict is the error to report; the reload only words it
        newest = base
    planned = base.snapshot_id if base is not None else None
    cause = f"{type(exc).__name__}: {exc}"
    cause = cause if len(cause) <= 300 else cause[:300] + "..."
    if newest is not None and newest.snapshot_id != planned:
        return TieringConflict(
            f"{name}: another tiering run committed snapshot {newest.snapshot_id} while this run was committing "
            f"({cause}); this run's files were deleted and nothing of it was committed. "
            "Rerun tiering to tier what is left"
        )
    return TieringConflict(
        f"{name}: another commit (a compaction?) changed the data files this run rewrote or kept changing the "
        f"table ({cause}); this run's files were deleted and nothing of it was committed. "
        "Rerun tiering"
    )


def tier(
    store: ObjectStore,
    catalog: Catalog,
    log_: Log,
    *,
    executor: TaskExecutor | None = None,
    max_split_rows: int | None = None,
    end: Mapping[int, int] | None = None,
) -> TieringResult:
    """One tiering round of ``log_``'s table (see `_tier`), its requests to the store in its ``usage``."""
    with measure_usage() as used:
        result = _tier(store, catalog, log_, executor=executor, max_split_rows=max_split_rows, end=end)
    result.usage = used.usage()
    return result


def _tier(
    store: ObjectStore,
    catalog: Catalog,
    log_: Log,
    *,
    executor: TaskExecutor | None = None,
    max_split_rows: int | None = None,
    end: Mapping[int, int] | None = None,
) -> TieringResult:
    """One tiering round of ``log_``'s table. See the module docstring. ``end`` caps the offsets tiered per
    bucket (default: the log's end): the boundary the table's writer declared (`lakehouse.tiering.boundaries`), so
    that its lake snapshots hold whole changes.

    Raises:
        LakeStateError: the lake table is missing or foreign, its offsets are unreadable or ahead of the log.
        TieringConflict: another tiering run (or a compaction of the files it rewrote) committed first; this
            round's files were deleted.
        TieringError: a task failed, or the offsets file could not be written; this round's files were deleted,
            nothing was committed.
        CommitStateUnknownException: the store never confirmed the commit; files were kept (they may be
            referenced). Reload and compare `lake_offsets` before tiering again.
    """
    started = time.perf_counter()
    executor = executor or LocalExecutor()
    definition = log_.definition
    name = str(definition.name)
    # after an alter that stopped before its lake step, the lake's schema is brought up to the definition first
    table = sync_lake_schema(load_lake_table(catalog, definition), definition)
    check_lake_layout(table.metadata, definition)
    base = tiering_snapshot(table.metadata)
    lake = lake_offsets(table.metadata, definition.buckets, name=name, io=table.io)
    log_end = log_.end_offsets()
    check_offsets(name, lake, log_end)
    if end is not None:  # never past the log's end, never back behind what the lake holds
        log_end = {b: max(lake.get(b, 0), min(o, end.get(b, 0))) for b, o in log_end.items()}
    splits = plan_splits(
        lake,
        log_end,
        max_split_rows=DEFAULT_MAX_SPLIT_ROWS if max_split_rows is None else max_split_rows,
        whole_buckets=definition.has_primary_key,
    )
    result = TieringResult(
        table=name,
        snapshot_id=None,
        previous_offsets=lake,
        offsets=dict(lake),
        splits=len(splits),
        executor=executor.name,
        parallelism=executor.parallelism,
    )
    if not splits:
        result.seconds = time.perf_counter() - started
        return result
    ctx = LakeContext.of(store, table)
    candidates = bucket_files(table, {s.bucket for s in splits}) if definition.has_primary_key else {}
    stem = f"tier-{uuid.uuid4().hex[:12]}"
    # merge-on-read buckets split by file when they are fewer than the executor's cores: each part finds the
    # old versions in its share of the files (the costly part), so 4 buckets still use every core
    # (not with a merge engine that reads the stored rows: every task would need all of the bucket's files)
    split = definition.merge_on_read and not engine_of(definition).needs_stored
    parts = math.ceil(2 * executor.parallelism / len(splits)) if split else 1
    tasks = [
        _Task(ctx, definition.to_json(), s, stem, definition.primary_key, share, definition.merge_on_read, i)
        for s in splits
        for i, share in enumerate(share_files(candidates.get(s.bucket, ()), parts))
    ]
    result.tasks = len(tasks)
    planned = time.perf_counter()
    outcomes = executor.map(_run_task, tasks)
    written = time.perf_counter()
    added = added_or_raise(
        ctx,
        outcomes,
        lambda failed, first: TieringError(
            f"{name}: {failed} of {len(tasks)} tiering tasks failed; nothing was committed and the round's "
            f"files were deleted. First failure:\n{first}"
        ),
    )
    new_offsets = dict(lake)
    for s in splits:
        new_offsets[s.bucket] = max(new_offsets[s.bucket], s.end)
    removed_paths = {p for o in outcomes for p in o.removed}
    removed = [f for files in candidates.values() for f, _ in files if f.file_path in removed_paths]
    try:
        summary, offsets_file = write_tiering_summary(table.io, table.metadata, new_offsets, base)
    except Exception as exc:
        ctx.delete(locations(added))
        raise TieringError(
            f"{name}: the round's offsets file could not be written ({' '.join(str(exc).split())}); nothing was "
            "committed and the round's files were deleted. Check that the warehouse is writable, then run the "
            "round again"
        ) from exc
    summary[ROUND_CHANGES_PROPERTY] = _round_changes(definition, outcomes)
    summary.update(usage_property())  # what the round asked of the store so far, kept with its snapshot
    written_files = locations(added) + ([offsets_file] if offsets_file else [])
    try:
        with table.transaction() as txn:
            if removed:  # copy-on-write: the files holding changed keys are replaced
                rewrite_files(txn, removed, added, summary)
            else:  # new rows, or merge-on-read's new versions and position deletes
                append_row_changes(txn, added, summary)
    except CommitStateUnknownException:
        log.warning("%s: commit outcome unknown; keeping %d data files (they may be referenced)", name, len(added))
        raise
    except TieringConflict:
        ctx.delete(written_files)  # certainly not committed: nothing can ever reference these files
        raise
    except (CommitFailedException, ValidationException) as exc:
        ctx.delete(written_files)
        raise _conflict(catalog, definition, base, exc) from None
    snapshot = tiering_snapshot(table.metadata)
    result.snapshot_id = snapshot.snapshot_id if snapshot is not None else None
    result.offsets = new_offsets
    result.rows = sum(o.rows for o in outcomes)
    result.files_added = len(added)
    result.files_removed = len(removed)
    result.bytes_written = sum(f.file_size_in_bytes for f in added)
    done = time.perf_counter()
    result.phases = {"plan": planned - started, "write": written - planned, "commit": done - written}
    result.seconds = done - started
    return result
