"""Compaction (rewrite data files): bin-pack a partition's small files into files of the target size, and fold
merge-on-read deletes into clean files.

Plan (driver): the current snapshot's live files, grouped by partition; in each partition, files below
the target size, and files whose position deletes passed a threshold (a share ``delete_ratio`` of their rows,
or ``delete_files`` delete files), are packed first-fit-decreasing into groups of at most the target size;
groups of at least ``min_input_files`` files, or holding a file with such deletes, are rewritten. Write
(tasks, local or Spark): each group becomes one Parquet file of the rows its deletes leave, ordered by
``__offset`` (primary-key tables: by key). Commit (driver): one ``replace``-like overwrite snapshot that deletes
exactly the input files, and the delete files that named only them, and adds the outputs; pyiceberg checks the
inputs are still live on the base it commits to, and that no delete file for them was committed meanwhile (a
tiering round that marked rows of an input: committing would resurrect them). A concurrent tiering append
does not conflict (snapshot isolation); a concurrent compaction that replaced an input makes this one fail and
delete its outputs. ``lakestream.offsets`` are untouched: a compaction snapshot carries none, and the offset
lookup uses the newest tiering snapshot.
"""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException, ValidationException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from lakehouse.errors import InvalidArgument, LakestreamError, MaintenanceError
from lakehouse.executor import LocalExecutor, TaskExecutor
from lakehouse.iceberg.commit_usage import usage_property
from lakehouse.iceberg.commits import rewrite_files
from lakehouse.iceberg.datafiles import LakeContext, added_or_raise, locations
from lakehouse.iceberg.layout import OFFSET_COLUMN, check_lake_layout
from lakehouse.iceberg.offsets import COMMIT_USER_PROPERTY
from lakehouse.iceberg.position_deletes import DeleteIndex, deletes_per_file
from lakehouse.table.definition import TableDefinition
from object_store.usage import Usage, measure_usage

if TYPE_CHECKING:
    from object_store.base import ObjectStore

log = logging.getLogger(__name__)

MiB = 1 << 20
DEFAULT_TARGET_FILE_SIZE = 128 * MiB
DEFAULT_MIN_INPUT_FILES = 5
#: A data file whose position deletes remove this share of its rows, or that this many delete files name, is
#: rewritten without them.
DEFAULT_DELETE_RATIO = 0.1
DEFAULT_DELETE_FILES = 4
COMPACTION_USER = "compaction"


@dataclass
class CompactionResult:
    table: str
    snapshot_id: int | None
    files_before: int
    files_after: int
    groups: int = 0
    files_rewritten: int = 0
    delete_files_removed: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    executor: str = "local"
    #: the compaction's requests to the store and their bytes, its tasks' included (`object_store.usage`); the
    #: Parquet files it reads through pyarrow are not counted (docs/concepts/storage.md, "What it costs")
    usage: Usage = field(default_factory=Usage)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "usage": self.usage.to_dict()}


@dataclass(frozen=True)
class _Group:
    partition: tuple
    files: tuple[DataFile, ...]
    #: per file (same order), its delete files
    deletes: tuple[tuple[DataFile, ...], ...] = ()

    @property
    def size(self) -> int:
        return sum(f.file_size_in_bytes for f in self.files)


@dataclass
class _Outcome:
    added: list[DataFile] = field(default_factory=list)
    error: str | None = None


def plan_groups(
    files: list[DataFile],
    *,
    target_file_size: int,
    min_input_files: int,
    partitions: set[tuple] | None = None,
    deletes: dict[str, tuple[DataFile, ...]] | None = None,
    dirty: set[str] | None = None,
) -> list[_Group]:
    """Bin-pack files per partition (first fit, largest first); keep groups worth rewriting: at least
    ``min_input_files`` files, or a file of ``dirty`` (whose deletes passed the thresholds). ``deletes``: each
    data file's delete files."""
    deletes, dirty = deletes or {}, dirty or set()
    by_partition: dict[tuple, list[DataFile]] = defaultdict(list)
    for f in files:
        key = tuple(f.partition[i] for i in range(len(f.partition)))
        if partitions is not None and key not in partitions:
            continue
        if f.file_size_in_bytes < target_file_size or f.file_path in dirty:
            by_partition[key].append(f)
    groups = []
    for key, candidates in sorted(by_partition.items(), key=lambda kv: repr(kv[0])):
        bins: list[list[DataFile]] = []
        sizes: list[int] = []
        for f in sorted(candidates, key=lambda f: -f.file_size_in_bytes):
            for i, used in enumerate(sizes):
                if used + f.file_size_in_bytes <= target_file_size:
                    bins[i].append(f)
                    sizes[i] += f.file_size_in_bytes
                    break
            else:
                bins.append([f])
                sizes.append(f.file_size_in_bytes)
        groups += [
            _Group(key, tuple(b), tuple(deletes.get(f.file_path, ()) for f in b))
            for b in bins
            if len(b) >= min_input_files or any(f.file_path in dirty for f in b)
        ]
    return groups


@dataclass(frozen=True)
class _Task:
    ctx: LakeContext
    group: _Group
    sort_by: tuple[str, ...]
    stem: str


def _run(task: _Task) -> _Outcome:
    out = _Outcome()
    try:
        deletes = task.group.deletes or ((),) * len(task.group.files)
        index = DeleteIndex(task.ctx)  # the group's files share delete files: each is read once
        data = _ordered_concat(
            [_live_rows(task.ctx, f, d, index) for f, d in zip(task.group.files, deletes, strict=True)], task.sort_by
        )
        out.added.append(task.ctx.write(data, task.group.partition, task.stem))
    except BaseException:  # noqa: BLE001 - returned, the driver cleans up and raises
        task.ctx.delete(locations(out.added))
        return _Outcome(error=traceback.format_exc())
    return out


def _live_rows(
    ctx: LakeContext, data_file: DataFile, delete_files: tuple[DataFile, ...], index: DeleteIndex
) -> pa.Table:
    """A data file's rows, without those its delete files delete."""
    rows = ctx.read(data_file.file_path)
    if not delete_files:
        return rows
    gone = index.positions(data_file, delete_files)
    if not gone.size:
        return rows
    alive = np.ones(rows.num_rows, dtype=bool)
    alive[gone] = False
    return rows.filter(pa.array(alive))


def _ordered_concat(tables: list[pa.Table], sort_by: tuple[str, ...]) -> pa.Table:
    """Concatenate, ordered by ``sort_by``. Tiered files of a log table hold disjoint offset ranges, each
    already in order: ordering the files by their first value usually makes the whole sorted, and then
    the (costly) sort is skipped."""
    tables = [t for t in tables if t.num_rows] or tables[:1]
    first = sort_by[0]
    tables.sort(key=lambda t: t.column(first)[0].as_py() if t.num_rows else 0)
    data = pa.concat_tables(tables, promote_options="permissive")
    if len(sort_by) == 1 and pa.types.is_integer(data.schema.field(first).type):
        values = data.column(first).to_numpy()
        if len(values) < 2 or bool(np.all(values[1:] >= values[:-1])):
            return data
    return data.sort_by([(c, "ascending") for c in sort_by])


def _dirty(
    ctx: LakeContext,
    tasks: list[Any],
    deletes: dict[str, tuple[DataFile, ...]],
    *,
    delete_ratio: float,
    delete_files: int,
) -> set[str]:
    """The data files whose position deletes passed a threshold: ``delete_ratio`` of their rows, or
    ``delete_files`` delete files naming them."""
    if not deletes:
        return set()
    counts = deletes_per_file(ctx, {d.file_path: d for ds in deletes.values() for d in ds}.values())
    out = set()
    for task in tasks:
        path = task.file.file_path
        if path not in deletes:
            continue
        many = len(deletes[path]) >= delete_files
        if many or counts.get(path, 0) >= max(1, delete_ratio * task.file.record_count):
            out.add(path)
    return out


def _folded(tasks: list[Any], removed: set[str]) -> list[DataFile]:
    """The delete files every live data file they apply to is in ``removed``: nothing is left for them to
    delete (a delete file applies to a data file as pyiceberg matches them, a superset of what it names)."""
    applies: dict[str, list[str]] = {}
    files: dict[str, DataFile] = {}
    for task in tasks:
        for d in task.delete_files:
            applies.setdefault(d.file_path, []).append(task.file.file_path)
            files[d.file_path] = d
    return [files[p] for p, data in applies.items() if all(path in removed for path in data)]


def check_arguments(target_file_size: int, min_input_files: int) -> None:
    if not isinstance(target_file_size, int) or target_file_size <= 0:
        raise InvalidArgument(f"target_file_size must be a positive number of bytes, got {target_file_size!r}")
    if not isinstance(min_input_files, int) or min_input_files < 2:
        raise InvalidArgument(
            f"min_input_files must be an integer >= 2 (rewriting one file gains nothing), got {min_input_files!r}"
        )


def compact(
    store: ObjectStore,
    table: Table,
    definition: TableDefinition,
    *,
    executor: TaskExecutor | None = None,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    min_input_files: int = DEFAULT_MIN_INPUT_FILES,
    partitions: set[tuple] | None = None,
    delete_ratio: float = DEFAULT_DELETE_RATIO,
    delete_files: int = DEFAULT_DELETE_FILES,
) -> CompactionResult:
    """Rewrite small files of ``table`` (see the module docstring). Nothing to do: ``snapshot_id`` None. The
    result's ``usage`` holds the run's requests to the store, its tasks' included.

    Raises:
        ValueError: a bad argument (nothing was planned).
        MaintenanceError: a task failed, or another compaction replaced an input first; this run's files
            were deleted and the table is unchanged.
    """
    with measure_usage() as used:
        result = _compact(
            store,
            table,
            definition,
            executor,
            target_file_size,
            min_input_files,
            partitions,
            delete_ratio,
            delete_files,
        )
    result.usage = used.usage()
    return result


def _compact(
    store: ObjectStore,
    table: Table,
    definition: TableDefinition,
    executor: TaskExecutor | None,
    target_file_size: int,
    min_input_files: int,
    partitions: set[tuple] | None,
    delete_ratio: float,
    delete_files: int,
) -> CompactionResult:
    check_arguments(target_file_size, min_input_files)
    check_lake_layout(table.metadata, definition)
    started = time.perf_counter()
    executor = executor or LocalExecutor()
    tasks = list(table.scan().plan_files()) if table.current_snapshot() is not None else []
    live = [t.file for t in tasks]
    deletes = {t.file.file_path: tuple(t.delete_files) for t in tasks if t.delete_files}
    ctx = LakeContext.of(store, table)
    dirty = _dirty(ctx, tasks, deletes, delete_ratio=delete_ratio, delete_files=delete_files)
    groups = plan_groups(
        live,
        target_file_size=target_file_size,
        min_input_files=min_input_files,
        partitions=partitions,
        deletes=deletes,
        dirty=dirty,
    )
    result = CompactionResult(str(definition.name), None, len(live), len(live), len(groups), executor=executor.name)
    if not groups:
        result.seconds = time.perf_counter() - started
        return result
    sort_by = definition.primary_key or (OFFSET_COLUMN,)
    stem = f"compact-{uuid.uuid4().hex[:12]}"
    outcomes = executor.map(_run, [_Task(ctx, g, sort_by, stem) for g in groups])
    added = added_or_raise(
        ctx,
        outcomes,
        lambda failed, first: MaintenanceError(
            f"{definition.name}: {failed} of {len(groups)} compaction tasks failed; the table is unchanged "
            f"and this run's files were deleted. First failure:\n{first}"
        ),
    )
    removed = [f for g in groups for f in g.files]
    folded = _folded(tasks, {f.file_path for f in removed})
    try:
        with table.transaction() as txn:
            properties = {COMMIT_USER_PROPERTY: COMPACTION_USER, **usage_property()}
            if folded or deletes:
                rewrite_files(txn, [*removed, *folded], added, properties)
            else:
                with txn.update_snapshot(snapshot_properties=properties).overwrite() as ow:
                    for f in removed:
                        ow.delete_data_file(f)
                    for f in added:
                        ow.append_data_file(f)
    except CommitStateUnknownException:
        raise
    except (CommitFailedException, ValidationException) as exc:
        ctx.delete(locations(added))
        raise MaintenanceError(
            f"{definition.name}: compaction not committed ({exc}); another writer replaced its input files or "
            "marked rows of them deleted meanwhile. The table is unchanged and this run's files were deleted; run "
            "compaction again"
        ) from exc
    committed = table.current_snapshot()
    assert committed is not None  # the commit above made one
    result.snapshot_id = committed.snapshot_id
    result.files_rewritten = len(removed)
    result.delete_files_removed = len(folded)
    result.files_after = len(live) - len(removed) + len(added)
    result.bytes_read = sum(f.file_size_in_bytes for f in removed)
    result.bytes_written = sum(f.file_size_in_bytes for f in added)
    result.seconds = time.perf_counter() - started
    return result


__all__ = ["CompactionResult", "LakestreamError", "compact", "plan_groups"]
