"""Reconciliation of a table's lake against its log: ``reconcile(lh, table, full=False)``.

**Metadata**, along the current snapshot's ancestry: per-bucket offsets of tiering snapshots never decrease
and never pass the log's end; a tiering commit of a log table adds exactly the records of the range it claims
(``added-records`` == the offsets it advanced) and removes none; no data file is live twice. Every run, new
commits or not, confirms that each file of the current snapshot (and each file a checked commit added or
removed) exists with its recorded size, from a listing of the table's data location compared with the
manifests: a missing file is ``file-missing``, another size ``file-size``, and such a file is never read (the
content of its bucket is reported unverified instead).

**Content**, per commit (incremental, the default): each commit since the last checked snapshot is checked
against its own offset range, by digests (`quality.digest`) of the rows it touched:

* tiering, log table: the added rows == the log's records of the range (as lake rows);
* tiering, primary-key table: the added rows == the removed files' rows whose key did not change + the last
  change of every changed key that leaves a row (copy-on-write, as `lakehouse.merge.keyed_rows.rewrite_bucket` does),
  and no file the commit kept holds a changed key;
* any other commit (compaction, or a rogue writer): the added rows == the removed rows.

Each commit's check reads what the commit wrote and removed plus its log range, so its cost grows with the
commit, not the table. Checked commits are recorded in the warehouse (``_lakestream/quality/reconcile/
<table>.json``); the next run starts after the last one. By induction from an empty table (or from a full
check), the lake at every checked snapshot equals the log replayed to its offsets.

**Full** (``full=True``, and whenever the chain cannot be followed: the first run, or the last checked snapshot
was expired): per bucket, the lake at the current snapshot against the retained log replayed to its offsets.
Rows older than the log's retention cannot be checked against it (they are counted, ``unverified_rows``);
every row with an offset in the retained log, and every key changed there, is.

A mismatch names table, bucket, offset range, snapshot and sample keys with expected and actual rows: both
sides' row hashes are in memory, so their multiset difference names the rows exactly.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntryStatus
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from lakehouse.errors import CorruptDataFileError, CorruptSegmentError, OffsetOutOfRange
from lakehouse.executor import LocalExecutor, TaskExecutor
from lakehouse.iceberg.datafiles import LakeContext, shared_store
from lakehouse.iceberg.layout import OFFSET_COLUMN, TIMESTAMP_COLUMN, log_to_lake_rows
from lakehouse.iceberg.offsets import tiering_snapshots
from lakehouse.iceberg.position_deletes import deleted_positions, positions_by_path, read_marks, sorted_unique
from lakehouse.maintenance.retention import retention_floors
from lakehouse.merge import engine_of
from lakehouse.merge.keyed_rows import KeySet, reduce_changes, stored_rows, upserts_of
from lakehouse.table.evolution import project_lake_file
from object_store.errors import NotFound
from quality.digest import Digest, difference, row_hashes
from quality.results import RECONCILE, CheckResult, Violation

STATE_PREFIX = "_lakestream/quality/reconcile/"
#: Sample keys named per violation.
SAMPLE_KEYS = 5
#: Buckets checked at once: one per core (more only add memory; reads and Arrow's kernels release the GIL).
WORKERS = min(4, os.cpu_count() or 1)


def state_key(table: str) -> str:
    return f"{STATE_PREFIX}{table}.json"


@dataclass
class _Commit:
    """One snapshot's change of data files and of position delete files, by bucket."""

    snapshot: Snapshot
    added: dict[int, list[DataFile]] = field(default_factory=lambda: defaultdict(list))
    removed: dict[int, list[DataFile]] = field(default_factory=lambda: defaultdict(list))
    added_deletes: dict[int, list[DataFile]] = field(default_factory=lambda: defaultdict(list))
    removed_deletes: dict[int, list[DataFile]] = field(default_factory=lambda: defaultdict(list))


@dataclass
class _FullBucket:
    """A full check of one bucket: its live files (with their position deletes) against its log range."""

    bucket: int
    snapshot: Snapshot
    files: list[DataFile]
    deletes: dict[str, list[DataFile]]
    start: int
    end: int


@dataclass
class _CommitBucket:
    """One commit's change to one bucket (``commit`` holds only that bucket's files), checked against the log
    range it claims (``new`` None: not a tiering commit); ``parent_files`` are the bucket's data files live
    before it (primary-key tiering), ``parent_deletes`` the parent's position deletes of the files read."""

    bucket: int
    commit: _Commit
    prev: int
    new: int | None
    parent_files: list[DataFile]
    parent_deletes: dict[str, list[DataFile]]


@dataclass
class _Outcome:
    """What one bucket's check found (all that comes back from a task: no rows)."""

    violations: list[Violation]
    rows: int
    unverified: set[int]
    unverified_rows: int


class _InTask:
    """The task function of the bucket checks: runs ``method`` of a fork of ``checker`` on one item, in this
    process or (unpickled) in an executor's, and returns the `_Outcome`."""

    def __init__(self, checker: _Checker, method: str) -> None:
        self.checker, self.method = checker, method

    def __call__(self, item: _FullBucket | _CommitBucket) -> _Outcome:
        c = self.checker.fork()
        c.guarded(item.bucket, lambda: getattr(c, self.method)(item))
        return _Outcome(c.violations, c.rows, c.unverified, c.unverified_rows)


#: Checkers unpickled in this process (an executor's Python worker runs many tasks of one check), by
#: (store, table, metadata file): each loads the table's definition and metadata once. A worker lives on across
#: checks, so only the newest few are kept.
TASK_CHECKERS_KEPT = 8
_TASK_CHECKERS: dict[tuple, _Checker] = {}
_TASK_CHECKERS_LOCK = threading.Lock()


class _Checker:
    #: Where the bucket checks run (None: `WORKERS` threads of this process).
    executor: TaskExecutor | None = None
    unverified_rows: int = 0

    def __init__(self, lh: Any, name: str) -> None:
        self.lh = lh
        self.definition = lh.table(name)
        self.name = str(self.definition.name)
        self.buckets = self.definition.buckets
        self.key = tuple(self.definition.primary_key or ())
        engine = engine_of(self.definition)
        #: a merge engine whose rows depend on the stored ones (the log alone does not say a key's row)
        self.engine = engine if self.key and engine.needs_stored else None
        self.columns = [f.name for f in self.definition.schema] + [OFFSET_COLUMN, TIMESTAMP_COLUMN]
        self.lake: Table = lh.lake_table(name)
        self.log = lh.log(name)
        self.violations: list[Violation] = []
        self.rows = 0
        self.details: dict[str, Any] = {}
        #: files that are missing or of another size than recorded (reported; never read)
        self.unavailable: set[str] = set()
        #: buckets whose content could not be checked because one of those files was needed
        self.unverified: set[int] = set()
        self._prefix = lh.store.url.rstrip("/") + "/"
        self._lock = threading.Lock()

    # ---- running in tasks ----------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """What a task needs to rebuild the checker: the store, the table, the lake metadata file, the files
        found unavailable (never read). Not the driver's findings, nor open connections."""
        return {
            "store_url": self.lh.store.url,
            "store_options": tuple(sorted(self.lh.store.connection_options().items())),
            "name": self.name,
            "metadata_location": self.lake.metadata_location,
            "unavailable": set(self.unavailable),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        from lakehouse import Lakehouse

        key = (state["store_url"], state["store_options"], state["name"], state["metadata_location"])
        with _TASK_CHECKERS_LOCK:
            base = _TASK_CHECKERS.get(key)
            if base is None:
                base = _Checker(Lakehouse(shared_store(state["store_url"], state["store_options"])), state["name"])
                _TASK_CHECKERS[key] = base
                while len(_TASK_CHECKERS) > TASK_CHECKERS_KEPT:
                    del _TASK_CHECKERS[next(iter(_TASK_CHECKERS))]  # the oldest (dicts keep insertion order)
        self.__dict__.update(base.fork().__dict__)
        self.unavailable = set(state["unavailable"])

    def fork(self) -> _Checker:
        """A checker sharing this one's table, log and files found unavailable, with its own findings."""
        c = object.__new__(_Checker)
        c.__dict__.update(self.__dict__)
        c.violations, c.rows, c.unverified, c.unverified_rows, c.details = [], 0, set(), 0, {}
        c._lock = threading.Lock()
        return c

    def guarded(self, bucket: int, work: Callable[[], None]) -> None:
        """``work()``; a file that cannot be read is a ``file-corrupt`` violation, and the bucket unverified."""
        try:
            work()
        except CorruptDataFileError as exc:
            self.unverified.add(bucket)
            self.violate("file-corrupt", f"{exc} (the content of bucket {bucket} is not verified)", bucket=bucket)

    def run_buckets(self, method: str, items: Sequence[_FullBucket | _CommitBucket]) -> None:
        """``method`` on each item (a bucket's check), as tasks of the executor (`WORKERS` threads of this
        process if none); only their findings come back."""
        if not items:
            return
        executor = self.executor or LocalExecutor(min(WORKERS, len(items)))
        for outcome in executor.map(_InTask(self, method), list(items)):
            self.violations.extend(outcome.violations)
            self.rows += outcome.rows
            self.unverified |= outcome.unverified
            self.unverified_rows += outcome.unverified_rows

    # ---- reading ---------------------------------------------------------------------------------------

    def read_files(
        self, files: Sequence[DataFile], deletes: Mapping[str, Sequence[DataFile]] | None = None
    ) -> pa.Table:
        """The checked columns of ``files``, with the log's types, without the rows their position deletes
        (``deletes``: data file path -> its delete files) delete. Parquet is read directly (lakestream writes
        its files with the table's column names and field ids); a file whose columns do not match (written
        before a schema change) is projected by field id, or goes through pyiceberg's scan."""
        if not files:
            return self._empty()
        parts = []
        for f in files:
            try:
                part = pq.read_table(self._key(f.file_path), filesystem=self._fs, columns=self.columns)
                # by field id: in a file written before a column was dropped and another of its name added, that
                # name is the old column (`lakehouse.table.evolution`); a renamed one is missing, read by pyiceberg
                part = project_lake_file(part, self._file_schema).cast(self.schema)
            except (KeyError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                scan = ArrowScan(self.lake.metadata, self.lake.io, self.lake.schema(), AlwaysTrue())
                part = scan.to_table([FileScanTask(f)]).select(self.columns).cast(self.schema)
            gone = self.deleted(f, (deletes or {}).get(f.file_path, ()))
            if gone.size:
                alive = np.ones(part.num_rows, dtype=bool)
                alive[gone[gone < part.num_rows]] = False
                part = part.filter(pa.array(alive))
            parts.append(part)
        table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        with self._lock:
            self.rows += table.num_rows
        return table

    @cached_property
    def _fs(self):  # noqa: ANN202 - pyarrow's FileSystem
        return self.lh.store.arrow_filesystem()

    @cached_property
    def _file_schema(self) -> pa.Schema:
        """The checked columns as the current lake schema has them, with their field ids."""
        return pa.schema([self._ctx.arrow_schema.field(c) for c in self.columns])

    @cached_property
    def _ctx(self) -> LakeContext:
        return LakeContext.of(self.lh.store, self.lake)

    def deleted(self, data_file: DataFile, delete_files: Sequence[DataFile]) -> np.ndarray:
        """The row positions of ``data_file`` that ``delete_files`` delete."""
        return deleted_positions(self._ctx, data_file, delete_files) if delete_files else np.empty(0, int)

    def marks(self, delete_files: Sequence[DataFile]) -> dict[str, np.ndarray]:
        """What position delete files mark: data file path -> sorted positions."""
        out: dict[str, list[np.ndarray]] = defaultdict(list)
        for d in delete_files:
            with self._fs.open_input_file(self._key(d.file_path)) as stream:
                for path, positions in positions_by_path(read_marks(stream)).items():
                    out[path].append(positions)
        return {path: sorted_unique(np.concatenate(parts)) for path, parts in out.items()}

    def read_log(
        self,
        bucket: int,
        start: int,
        end: int,
        snapshot: Snapshot | None,
        stored: Sequence[tuple[DataFile, Sequence[DataFile]]] = (),
    ) -> pa.Table | None:
        """The log's records [start, end) of ``bucket`` as lake rows (with ``_op``), for a primary-key table
        only the net change of each key (a merge engine's: merged into the rows of its keys in ``stored``, data
        files with their delete files); None (and a violation) if segments in the range are missing."""
        if end <= start:
            return log_to_lake_rows(self.log.read_schema.empty_table(), bucket, keep_op=True)
        try:
            data = self.log.read(bucket, start, end)
        except (CorruptSegmentError, OffsetOutOfRange) as exc:
            self.violate(
                "log-missing",
                f"the log cannot serve the range the lake claims: {exc}",
                bucket=bucket,
                offsets=(start, end),
                snapshot=snapshot,
            )
            return None
        with self._lock:
            self.rows += data.num_rows
        if data.num_rows != end - start:
            self.violate(
                "log-missing",
                f"the log holds {data.num_rows} records in a range of {end - start} offsets",
                bucket=bucket,
                offsets=(start, end),
                snapshot=snapshot,
                expected=end - start,
                actual=data.num_rows,
            )
            return None
        if self.engine is not None:
            columns = [*self.key, *self.engine.stored_columns(data)]
            rows = stored_rows(self._ctx, stored, KeySet(data, self.key), columns) if stored else pa.table({})
            data = self.engine.resolve(rows, data)
        elif self.key:
            data = reduce_changes(data, self.key)
        return log_to_lake_rows(data, bucket, keep_op=True)

    def _empty(self) -> pa.Table:
        return self.schema.empty_table()

    @cached_property
    def schema(self) -> pa.Schema:
        """The checked columns with the log's types (lake reads are cast to them: one type per column)."""
        return log_to_lake_rows(self.log.read_schema.empty_table(), 0).select(self.columns).schema

    def violate(
        self,
        check: str,
        message: str,
        *,
        bucket: int | None = None,
        offsets: tuple[int, int] | None = None,
        snapshot: Snapshot | None = None,
        keys: Iterable[Any] = (),
        expected: Any = None,
        actual: Any = None,
    ) -> None:
        self.violations.append(
            Violation(
                check=check,
                table=self.name,
                message=message,
                bucket=bucket,
                offsets=offsets,
                snapshot_id=snapshot.snapshot_id if snapshot is not None else None,
                keys=tuple(keys),
                expected=expected,
                actual=actual,
            )
        )

    # ---- metadata --------------------------------------------------------------------------------------

    def commit_of(self, snapshot: Snapshot) -> _Commit:
        commit = _Commit(snapshot)
        for manifest in snapshot.manifests(self.lake.io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(self.lake.io, discard_deleted=False):
                if entry.snapshot_id != snapshot.snapshot_id:
                    continue
                bucket = self.bucket_of(entry.data_file)
                delete = entry.data_file.content == DataFileContent.POSITION_DELETES
                if entry.status == ManifestEntryStatus.ADDED:
                    (commit.added_deletes if delete else commit.added)[bucket].append(entry.data_file)
                elif entry.status == ManifestEntryStatus.DELETED:
                    (commit.removed_deletes if delete else commit.removed)[bucket].append(entry.data_file)
        return commit

    @staticmethod
    def bucket_of(f: DataFile) -> int:
        partition = f.partition
        return int(partition[len(partition) - 1])

    def live_files(self, snapshot: Snapshot) -> list[DataFile]:
        """The data files live in ``snapshot`` (its delete files: `live_deletes`)."""
        return [f for f in self._live_entries(snapshot) if f.content == DataFileContent.DATA]

    def live_deletes(self, snapshot: Snapshot) -> dict[str, list[DataFile]]:
        """Each data file live in ``snapshot`` that position deletes apply to -> those delete files (pyiceberg
        matches them as every reader does: partition, sequence number, the path's bounds)."""
        if not any(f.content == DataFileContent.POSITION_DELETES for f in self._live_entries(snapshot)):
            return {}
        out: dict[str, list[DataFile]] = {}
        for task in self.lake.scan(snapshot_id=snapshot.snapshot_id).plan_files():
            if task.delete_files:
                out[task.file.file_path] = list(task.delete_files)
        return out

    def _live_entries(self, snapshot: Snapshot) -> list[DataFile]:
        files = []
        for manifest in snapshot.manifests(self.lake.io):
            files.extend(e.data_file for e in manifest.fetch_manifest_entry(self.lake.io, discard_deleted=True))
        return files

    def check_twice(self, files: Sequence[DataFile], snapshot: Snapshot, live_before: set[str] | None) -> None:
        """Each file is listed once and (if ``live_before`` is given) was not live already."""
        seen: set[str] = set()
        for f in files:
            path = f.file_path
            if path in seen or (live_before is not None and path in live_before):
                self.violate(
                    "file-twice",
                    f"data file {path} is referenced twice: its rows count twice in the lake",
                    bucket=self.bucket_of(f),
                    snapshot=snapshot,
                )
                continue
            seen.add(path)

    def verify_files(self, files: Iterable[tuple[DataFile, Snapshot]]) -> None:
        """Each file exists with the size its manifest records; ``files`` pairs each with the snapshot that
        references it (the first pair of a path names it). A file that does not is a violation and joins
        ``unavailable``: it is never read, and the content of its bucket is reported unverified.

        Metadata and listings only: the table's data location is listed once (a LIST per 1,000 objects,
        streamed: only the wanted files are held) and compared with the manifests' paths and sizes; a file
        outside it (a registered table's) gets a HEAD. Sizes come from the listing or the filesystem's stat,
        not from the store's head (which may hash a file to give its ETag)."""
        wanted: dict[str, tuple[DataFile, Snapshot]] = {}
        for f, snap in files:
            wanted.setdefault(self._key(f.file_path), (f, snap))
        data = self._key(self.lake.properties.get("write.data.path") or f"{self.lake.metadata.location}/data")
        prefix = data.rstrip("/") + "/"
        found: dict[str, int] = {}
        if "://" not in prefix and any(k.startswith(prefix) for k in wanted):
            for info in self.lh.store.list(prefix):
                if info.key in wanted:
                    found[info.key] = info.size
        outside = [k for k in wanted if not k.startswith(prefix) or "://" in prefix]
        for key, info in zip(outside, self._fs.get_file_info(outside) if outside else [], strict=True):
            if info.type != pafs.FileType.NotFound:
                found[key] = info.size
        for key, (f, snap) in wanted.items():
            path, bucket, size = f.file_path, self.bucket_of(f), found.get(key)
            if size == f.file_size_in_bytes:
                continue
            self.unavailable.add(path)
            if size is None:
                self.violate(
                    "file-missing",
                    f"data file {path} is referenced but does not exist: its rows are lost to every reader "
                    f"(not read: the content of bucket {bucket} is not verified)",
                    bucket=bucket,
                    snapshot=snap,
                )
            else:
                self.violate(
                    "file-size",
                    f"data file {path} has {size} bytes, its manifest records {f.file_size_in_bytes} "
                    f"(not read: the content of bucket {bucket} is not verified)",
                    bucket=bucket,
                    snapshot=snap,
                    expected=f.file_size_in_bytes,
                    actual=size,
                )

    def readable(self, bucket: int, files: Iterable[DataFile]) -> bool:
        """False (and ``bucket`` noted as unverified) if one of ``files`` failed `verify_files`."""
        if any(f.file_path in self.unavailable for f in files):
            with self._lock:
                self.unverified.add(bucket)
            return False
        return True

    def _key(self, location: str) -> str:
        if location.startswith(self._prefix):
            return location[len(self._prefix) :]
        if location.startswith("file://") and self._prefix.startswith("file://"):
            return location[len(self._prefix) :]
        return location

    def tiering_offsets(self, ancestry: Sequence[Snapshot]) -> dict[int, dict[int, int]]:
        """Offsets recorded by each tiering snapshot of the ancestry; a violation for each snapshot whose offsets
        move backwards or pass the log's end."""
        parsed = {s.snapshot_id: o for s, o in tiering_snapshots(self.lake.metadata, self.buckets, self.lake.io)}
        end = self.log.end_offsets()
        previous: dict[int, int] = dict.fromkeys(range(self.buckets), 0)
        out = {}
        for snap in ancestry:
            offsets = parsed.get(snap.snapshot_id)
            if offsets is None:
                continue
            for b in range(self.buckets):
                if offsets[b] < previous[b]:
                    self.violate(
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
                    self.violate(
                        "offsets-ahead",
                        f"the lake claims bucket {b} up to offset {offsets[b]}, the log ends at {end.get(b, 0)}",
                        bucket=b,
                        offsets=(previous[b], offsets[b]),
                        snapshot=snap,
                        expected=end.get(b, 0),
                        actual=offsets[b],
                    )
            previous = {b: max(previous[b], offsets[b]) for b in range(self.buckets)}
            out[snap.snapshot_id] = offsets
        return out

    # ---- content -----------------------------------------------------------------------------------------

    def compare(
        self,
        expected: pa.Table | Sequence[pa.Table],
        actual: pa.Table,
        *,
        bucket: int,
        offsets: tuple[int, int] | None,
        snapshot: Snapshot,
        what: str,
    ) -> None:
        """Compare the rows ``expected`` (a table, or parts whose union is expected) with ``actual``.

        Fast path: within a bucket every row has its own offset, so both sides sorted by offset must be equal
        column by column (Arrow's C++ equality: no hashing of strings). Otherwise the order-independent digests
        decide (two NaNs are not equal to Arrow, their bits are), and their difference names the rows."""
        parts = [expected] if isinstance(expected, pa.Table) else list(expected)
        if sum(p.num_rows for p in parts) == actual.num_rows and _equal_by_offset(parts, actual, self.columns):
            return
        hashes = [row_hashes(p, self.columns) for p in parts]
        h_exp = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
        h_act = row_hashes(actual, self.columns)
        if Digest.of(h_exp) == Digest.of(h_act):
            return
        missing, extra = difference(h_exp, h_act)
        self.report_difference(
            _take(parts, missing),
            actual.take(pa.array(extra, pa.int64())),
            bucket=bucket,
            offsets=offsets,
            snapshot=snapshot,
            what=what,
        )

    def report_difference(
        self,
        m_rows: list[dict[str, Any]],
        extra: pa.Table,
        *,
        bucket: int,
        offsets: tuple[int, int] | None,
        snapshot: Snapshot,
        what: str,
    ) -> None:
        key = list(self.key) if self.key else [OFFSET_COLUMN]
        e_rows = extra.to_pylist()
        m_by_key = {tuple(r[k] for k in key): r for r in m_rows}
        e_by_key = {tuple(r[k] for k in key): r for r in e_rows}
        changed = [k for k in m_by_key if k in e_by_key]
        only_missing = [k for k in m_by_key if k not in e_by_key]
        only_extra = [k for k in e_by_key if k not in m_by_key]
        parts = []
        if changed:
            parts.append(f"{len(changed)} with other values")
        if only_missing:
            parts.append(f"{len(only_missing)} missing from the lake")
        if only_extra:
            parts.append(f"{len(only_extra)} in the lake but not in the log")
        if len(e_rows) > len(e_by_key):
            parts.append(f"{len(e_rows) - len(e_by_key)} more duplicated")
        sample = (changed + only_missing + only_extra)[:SAMPLE_KEYS]
        first = sample[0] if sample else None
        exp_row = m_by_key.get(first) if first is not None else None
        act_row = e_by_key.get(first) if first is not None else None
        detail = ""
        if exp_row is not None and act_row is not None:
            diffs = [c for c in self.columns if exp_row.get(c) != act_row.get(c)]
            if diffs:
                c = diffs[0]
                detail = f"; key {_show(first)}: {c} expected {exp_row[c]!r}, got {act_row[c]!r}"
        elif exp_row is not None:
            detail = f"; key {_show(first)} is missing"
        elif act_row is not None:
            detail = f"; key {_show(first)} should not be there"
        self.violate(
            "content",
            f"{what}: rows differ ({', '.join(parts) or 'digests differ'}){detail}",
            bucket=bucket,
            offsets=offsets,
            snapshot=snapshot,
            keys=[k[0] if len(k) == 1 else k for k in sample],
            expected=exp_row,
            actual=act_row,
        )

    def commit_items(
        self, commit: _Commit, parent: Snapshot | None, prev: dict[int, int], new: dict[int, int] | None
    ) -> list[_CommitBucket]:
        """The bucket checks of one commit (metadata only: which files and log range each bucket's check reads)."""
        buckets = set(commit.added) | set(commit.removed)
        if new is not None:
            buckets |= {b for b in range(self.buckets) if new[b] != prev[b]}
        buckets |= set(commit.added_deletes) | set(commit.removed_deletes)
        parent_live: dict[int, list[DataFile]] = defaultdict(list)
        if self.key and new is not None and parent is not None:
            for f in self.live_files(parent):
                parent_live[self.bucket_of(f)].append(f)
        # what the parent's position deletes leave of the files this commit reads (removed, or marked)
        touches = any(commit.removed.values()) or any(commit.added_deletes.values()) or parent_live
        parent_deletes = self.live_deletes(parent) if parent is not None and touches else {}
        items = []
        for b in sorted(buckets):
            parts = _Commit(commit.snapshot)
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
                _CommitBucket(
                    bucket=b,
                    commit=parts,
                    prev=prev[b],
                    new=None if new is None else new[b],
                    parent_files=parent_live.get(b, []),
                    parent_deletes={p: parent_deletes[p] for p in read if p in parent_deletes},
                )
            )
        return items

    def commit_bucket(self, item: _CommitBucket) -> None:
        commit, b, parent_files, parent_deletes = item.commit, item.bucket, item.parent_files, item.parent_deletes
        snap = commit.snapshot
        removed_files = commit.removed.get(b, [])
        marked = commit.added_deletes.get(b, [])
        if not self.readable(b, [*commit.added.get(b, []), *removed_files, *marked]):
            return
        added = self.read_files(commit.added.get(b, []))
        if item.new is None:  # not a tiering commit: it may move rows (and fold deletes), never change them
            removed = self.read_files(removed_files, parent_deletes)
            if marked:
                self.violate(
                    "content",
                    f"a commit that is not tiering marked rows deleted ({len(marked)} position delete files)",
                    bucket=b,
                    snapshot=snap,
                )
            self.compare(removed, added, bucket=b, offsets=None, snapshot=snap, what="a commit that is not tiering")
            return
        rng = (item.prev, item.new)
        stored = [(f, parent_deletes.get(f.file_path, ())) for f in parent_files] if self.engine is not None else []
        log_rows = self.read_log(b, item.prev, item.new, snap, stored)
        if log_rows is None:
            return
        if not self.key:
            if removed_files:
                self.violate(
                    "content",
                    f"a tiering commit of a log table removed {len(removed_files)} data files",
                    bucket=b,
                    offsets=rng,
                    snapshot=snap,
                )
            self.compare(log_rows, added, bucket=b, offsets=rng, snapshot=snap, what="tiered records")
            return
        changes = log_rows  # reduced: the last change of each key
        keys = KeySet(changes, self.key)
        if marked or not removed_files:
            # merge-on-read (or nothing removed): the new versions are added, the old ones marked deleted
            self.compare(
                upserts_of(changes).select(self.columns),
                added,
                bucket=b,
                offsets=rng,
                snapshot=snap,
                what="tiered changes",
            )
            if removed_files:
                self.violate(
                    "content",
                    f"a merge-on-read tiering commit removed {len(removed_files)} data files",
                    bucket=b,
                    offsets=rng,
                    snapshot=snap,
                )
            if parent_files and len(keys):
                self.check_marks(parent_files, marked, keys, b, rng, snap, parent_deletes)
            return
        removed = self.read_files(removed_files, parent_deletes)
        kept = removed.filter(pc.invert(keys.hits(removed))) if removed.num_rows and len(keys) else removed
        expected = [kept, upserts_of(changes).select(self.columns)]
        self.compare(expected, added, bucket=b, offsets=rng, snapshot=snap, what="tiered changes")
        if parent_files and len(keys):
            gone = {f.file_path for f in removed_files}
            kept = [f for f in parent_files if f.file_path not in gone]
            if self.readable(b, kept):
                self.check_kept(kept, keys, b, rng, snap)

    def check_marks(
        self,
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
        marks = self.marks(marked)
        by_path = {f.file_path: f for f in files}
        stray = sorted(p for p in marks if p not in by_path)
        if stray:
            self.violate(
                "content",
                f"the commit marks rows of {len(stray)} data files that are not live, e.g. {stray[0]}",
                bucket=bucket,
                offsets=rng,
                snapshot=snap,
            )
        named = [by_path[p] for p in marks if p in by_path]
        candidates = {f.file_path: f for f in [*self.may_hold(files, keys), *named]}
        for path, f in candidates.items():
            data = pq.read_table(self._key(path), filesystem=self._fs, columns=list(self.key))
            with self._lock:
                self.rows += data.num_rows
            data = data.cast(pa.schema([self.schema.field(k) for k in self.key]))
            hit = np.flatnonzero(keys.hits(data).to_numpy(zero_copy_only=False))
            live = np.setdiff1d(hit, self.deleted(f, parent_deletes.get(path, ())))
            got = marks.get(path, np.empty(0, int))
            kept = np.setdiff1d(live, got)
            if kept.size:
                self.violate(
                    "content",
                    f"data file {path} still holds {kept.size} live rows of keys the commit changed (not marked "
                    "deleted): those keys are in the lake twice",
                    bucket=bucket,
                    offsets=rng,
                    snapshot=snap,
                    keys=[_key_value(r, self.key) for r in data.take(pa.array(kept[:SAMPLE_KEYS])).to_pylist()],
                )
            wrong = np.setdiff1d(got, live)
            if wrong.size:
                rows = data.take(pa.array(wrong[wrong < data.num_rows][:SAMPLE_KEYS])).to_pylist()
                self.violate(
                    "content",
                    f"the commit marks {wrong.size} rows of {path} deleted that are no live row of a key it changed: "
                    "those rows are lost to every reader",
                    bucket=bucket,
                    offsets=rng,
                    snapshot=snap,
                    keys=[_key_value(r, self.key) for r in rows],
                )

    def check_kept(self, files: list[DataFile], keys: KeySet, bucket: int, rng: tuple[int, int], snap: Snapshot):
        """No file a primary-key tiering commit kept may hold a key it changed (that row would be stale). Files
        whose key statistics exclude every changed key are not read; the others' key columns are."""
        for f in self.may_hold(files, keys):
            scan = ArrowScan(self.lake.metadata, self.lake.io, self.lake.schema().select(*self.key), AlwaysTrue())
            data = scan.to_table([FileScanTask(f)])
            with self._lock:
                self.rows += data.num_rows
            data = data.select(list(self.key)).cast(pa.schema([self.schema.field(k) for k in self.key]))
            hits = keys.hits(data)
            if pc.any(hits).as_py():
                stale = data.filter(hits)
                self.violate(
                    "content",
                    f"data file {f.file_path} kept by the commit still holds {stale.num_rows} rows of keys the "
                    "commit changed: those keys are in the lake twice",
                    bucket=bucket,
                    offsets=rng,
                    snapshot=snap,
                    keys=[_key_value(r, self.key) for r in stale.to_pylist()[:SAMPLE_KEYS]],
                )

    def may_hold(self, files: list[DataFile], keys: KeySet) -> list[DataFile]:
        """The files whose lower/upper bounds of the first key column admit one of ``keys`` (all of them where
        a file has no bounds)."""
        field = self.lake.schema().find_field(self.key[0])
        values = keys.keys.column(0)
        out = []
        for f in files:
            lo = (f.lower_bounds or {}).get(field.field_id)
            hi = (f.upper_bounds or {}).get(field.field_id)
            if lo is None or hi is None:
                out.append(f)
                continue
            try:
                low = pa.scalar(from_bytes(field.field_type, lo), values.type)
                high = pa.scalar(from_bytes(field.field_type, hi), values.type)
            except (TypeError, ValueError, pa.ArrowException):
                out.append(f)
                continue
            inside = pc.and_(pc.greater_equal(values, low), pc.less_equal(values, high))
            if pc.any(inside).as_py():
                out.append(f)
        return out

    def check_retention(self, start: dict[int, int]) -> None:
        """A bucket whose log starts above the floor retention recorded (`lakehouse.maintenance.retention`) lost
        the records in between to something other than retention. ``start`` must be listed before the record
        is read: a retention that removed what the listing no longer shows recorded that first. A table
        without a record (created before retention recorded its floors, and not retained since) cannot tell
        and is not checked (``details["retention_floors"]`` is None)."""
        floors = retention_floors(self.lh.store, self.definition)
        self.details["retention_floors"] = None if floors is None else {str(b): o for b, o in floors.items()}
        if floors is None:
            return
        for b in range(self.buckets):
            floor, first = floors.get(b, 0), start.get(b, 0)
            if first > floor:
                self.violate(
                    "log-missing",
                    f"the log of bucket {b} starts at offset {first}, but log retention removed it only below "
                    f"offset {floor}: records [{floor}, {first}) were deleted by something other than retention "
                    "(restore the segments; docs/guides/quality.md says how to accept the loss)",
                    bucket=b,
                    offsets=(floor, first),
                    expected=floor,
                    actual=first,
                )

    def check_full(self, snapshot: Snapshot, offsets: dict[int, int], start: dict[int, int]) -> None:
        live: dict[int, list[DataFile]] = defaultdict(list)
        files = self.live_files(snapshot)
        deletes = self.live_deletes(snapshot)
        self.check_twice(files, snapshot, None)
        delete_files = {d.file_path: d for ds in deletes.values() for d in ds}
        self.verify_files([(f, snapshot) for f in files] + [(d, snapshot) for d in delete_files.values()])
        for f in files:
            live[self.bucket_of(f)].append(f)
        gone = {v.bucket for v in self.violations if v.check == "log-missing"}
        items = []
        for b in range(self.buckets):
            if start.get(b, 0) > offsets[b]:
                if b not in gone:  # else its loss is reported already (above the retention floor)
                    self.violate(
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
                _FullBucket(
                    bucket=b,
                    snapshot=snapshot,
                    files=mine,
                    deletes={f.file_path: deletes[f.file_path] for f in mine if f.file_path in deletes},
                    start=start.get(b, 0),
                    end=offsets[b],
                )
            )
        self.run_buckets("full_bucket", items)
        self.details["unverified_rows"] = self.unverified_rows

    def full_bucket(self, item: _FullBucket) -> None:
        """One bucket of a full check: the lake's rows against the retained log replayed to the lake's offset."""
        b, snapshot, lo = item.bucket, item.snapshot, item.start
        needed = [*item.files, *(d for ds in item.deletes.values() for d in ds)]
        if not self.readable(b, needed):
            return
        actual = self.read_files(item.files, item.deletes)
        rng = (lo, item.end)
        log_rows = self.read_log(b, lo, item.end, snapshot)
        if log_rows is None:
            return
        fresh = pc.greater_equal(actual.column(OFFSET_COLUMN), lo)
        if self.engine is not None and lo > 0:
            # a merge engine's rows as of ``lo`` are gone from the log: its keys' rows cannot be recomputed (each
            # tiering commit was checked against its parent's rows by the incremental check)
            self.unverified_rows += actual.num_rows
            return
        if self.key:
            changes = log_rows
            if actual.num_rows and changes.num_rows:
                fresh = pc.or_(fresh, KeySet(changes, self.key).hits(actual))
            expected = upserts_of(changes).select(self.columns)
        else:
            expected = log_rows.select(self.columns)
        checked = actual.filter(fresh) if lo > 0 else actual
        self.unverified_rows += actual.num_rows - checked.num_rows
        self.compare(expected, checked, bucket=b, offsets=rng, snapshot=snapshot, what="the lake against the log")


def _by_offset(table: pa.Table) -> pa.Table:
    offsets = table.column(OFFSET_COLUMN).to_numpy()
    if len(offsets) < 2 or bool(np.all(offsets[1:] > offsets[:-1])):
        return table
    return table.take(pa.array(np.argsort(offsets, kind="stable")))


def _equal_by_offset(parts: Sequence[pa.Table], actual: pa.Table, columns: Sequence[str]) -> bool:
    nonempty = [p for p in parts if p.num_rows]
    if not nonempty:
        return actual.num_rows == 0
    expected = _by_offset(pa.concat_tables(nonempty) if len(nonempty) > 1 else nonempty[0])
    actual = _by_offset(actual)
    return all(expected.column(c).equals(actual.column(c)) for c in columns)


def _take(parts: Sequence[pa.Table], positions: np.ndarray) -> list[dict[str, Any]]:
    """Rows of the union of ``parts`` at ``positions`` (as dicts)."""
    bounds = np.cumsum([0] + [p.num_rows for p in parts])
    rows = []
    for i, part in enumerate(parts):
        mine = positions[(positions >= bounds[i]) & (positions < bounds[i + 1])] - bounds[i]
        if len(mine):
            rows.extend(part.take(pa.array(mine, pa.int64())).to_pylist())
    return rows


def _key_value(row: dict[str, Any], key: Sequence[str]) -> Any:
    return row[key[0]] if len(key) == 1 else tuple(row[k] for k in key)


def _show(key: tuple) -> str:
    return repr(key[0]) if len(key) == 1 else repr(key)


def _load_state(lh: Any, name: str) -> dict[str, Any] | None:
    try:
        return json.loads(lh.store.get(state_key(name)).data)
    except NotFound:
        return None
    except ValueError:
        return None  # unreadable: check in full and write it again


def _save_state(lh: Any, name: str, state: dict[str, Any]) -> None:
    lh.store.put(state_key(name), json.dumps(state, indent=1, sort_keys=True).encode())


def reconcile(lh: Any, table: str, full: bool = False, *, executor: TaskExecutor | None = None) -> CheckResult:
    """Check ``table``'s lake against its log (see the module docstring). A found difference is a `Violation`
    in the result, never an exception; the result's ``snapshot_id`` is the lake snapshot checked. ``executor``
    runs the buckets' content checks (`lakehouse.executor.task_executor`: Spark's executors given a session);
    by default `WORKERS` threads of this process.

    Raises:
        TableNotFound, LakeStateError: there is no such table, or its lake cannot be loaded.
    """
    started = time.perf_counter()
    c = _Checker(lh, table)
    c.executor = executor
    current = c.lake.current_snapshot()
    result = CheckResult(RECONCILE, c.name, snapshot_id=current.snapshot_id if current else None)
    if current is None:
        result.details = {"mode": "empty", "commits_checked": 0}
        result.seconds = time.perf_counter() - started
        return result
    ancestry = list(ancestors_of(current, c.lake.metadata))[::-1]  # oldest first
    offsets_of = c.tiering_offsets(ancestry)
    state = None if full else _load_state(lh, c.name)
    ids = [s.snapshot_id for s in ancestry]
    resumable = (
        state is not None and state.get("table_uuid") == c.definition.table_uuid and state.get("snapshot_id") in ids
    )
    newest_offsets = dict.fromkeys(range(c.buckets), 0)
    for snap in ancestry:
        newest_offsets = offsets_of.get(snap.snapshot_id, newest_offsets)
    commits = 0
    start = c.log.start_offsets()  # listed before the retention record is read (see check_retention)
    c.check_retention(start)
    if not resumable:
        c.details["mode"] = "full"
        c.check_full(current, newest_offsets, start)
        commits = len(ancestry)
    else:
        c.details["mode"] = "incremental"
        first = ids.index(state["snapshot_id"]) + 1
        prev = dict.fromkeys(range(c.buckets), 0)
        for snap in ancestry[:first]:
            prev = offsets_of.get(snap.snapshot_id, prev)
        commits_of = [c.commit_of(snap) for snap in ancestry[first:]]
        # Every run confirms the current snapshot's files, new commits or not (a file deleted since the last
        # run is found now), and the files the new commits added and removed, before any is read.
        wanted = [(f, current) for f in c._live_entries(current)]  # noqa: SLF001 - data and delete files
        for commit, parent in zip(commits_of, ancestry[first - 1 :], strict=False):
            for added in (commit.added, commit.added_deletes):
                wanted += [(f, commit.snapshot) for files in added.values() for f in files]
            for removed in (commit.removed, commit.removed_deletes):
                wanted += [(f, parent) for files in removed.values() for f in files]
        c.verify_files(wanted)
        items: list[_CommitBucket] = []
        for i, commit in enumerate(commits_of, start=first):
            snap, parent = ancestry[i], ancestry[i - 1]
            live_before = {f.file_path for f in c.live_files(parent)} if any(commit.added.values()) else set()
            removed_paths = {f.file_path for files in commit.removed.values() for f in files}
            c.check_twice([f for files in commit.added.values() for f in files], snap, live_before - removed_paths)
            new = offsets_of.get(snap.snapshot_id)
            if new is not None and not c.key:
                claimed = sum(new[b] - prev[b] for b in range(c.buckets))
                added = int((snap.summary["added-records"] if snap.summary else None) or 0)
                if added != claimed:
                    c.violate(
                        "records-count",
                        f"the tiering commit's summary adds {added} records for a range of {claimed} log records",
                        snapshot=snap,
                        expected=claimed,
                        actual=added,
                    )
            items += c.commit_items(commit, parent, prev, new)
            if new is not None:
                prev = new
            commits += 1
        c.run_buckets("commit_bucket", items)  # every new commit's buckets in one job
        c.details["from_snapshot"] = state["snapshot_id"]
    c.details["commits_checked"] = commits
    if c.unverified:
        c.details["unverified_buckets"] = sorted(c.unverified)
    c.details["offsets"] = {str(b): o for b, o in newest_offsets.items()}
    order = {s.snapshot_id: i for i, s in enumerate(ancestry)}
    result.violations = sorted(
        c.violations, key=lambda v: (order.get(v.snapshot_id, -1), v.bucket if v.bucket is not None else -1)
    )
    result.rows = c.rows
    result.details.update(c.details)
    result.seconds = time.perf_counter() - started
    result.details["rows_per_second"] = round(c.rows / result.seconds) if result.seconds > 0 else None
    if not c.violations:
        _save_state(
            lh,
            c.name,
            {
                "table_uuid": c.definition.table_uuid,
                "snapshot_id": current.snapshot_id,
                "offsets": {str(b): o for b, o in newest_offsets.items()},
                "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "mode": c.details["mode"],
                "seconds": round(result.seconds, 3),
            },
        )
    return result


__all__ = ["reconcile", "state_key"]
