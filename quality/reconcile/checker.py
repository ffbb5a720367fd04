"""A reconciliation's findings, and what the checks of every mode share: reads counted and guarded (a missing log
range or an unreadable file is a violation, not an exception), the files confirmed against a listing of the
table's data location, the comparison of expected and actual rows that names the rows that differ, and the
buckets' checks run as tasks of an executor, from which only findings come back.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
from pyiceberg.manifest import DataFile
from pyiceberg.table.snapshots import Snapshot

from lakehouse.errors import CorruptDataFileError, CorruptSegmentError, OffsetOutOfRange
from lakehouse.executor import LocalExecutor, TaskExecutor
from lakehouse.iceberg.datafiles import shared_store
from lakehouse.iceberg.layout import OFFSET_COLUMN
from quality.digest import Digest, difference, row_hashes
from quality.reconcile.reader import TableReader
from quality.results import Violation

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

#: Sample keys named per violation.
SAMPLE_KEYS = 5
#: Buckets checked at once: one per core (more only add memory; reads and Arrow's kernels release the GIL).
WORKERS = min(4, os.cpu_count() or 1)


class BucketItem(Protocol):
    """What one bucket's check is given (`quality.reconcile.full.FullBucket`, `quality.reconcile.commits.
    CommitBucket`): picklable, it travels to an executor's worker."""

    bucket: int


@dataclass
class Outcome:
    """What one bucket's check found (all that comes back from a task: no rows)."""

    violations: list[Violation]
    rows: int
    unverified: set[int]
    unverified_rows: int


class InTask:
    """The task function of the bucket checks: runs ``check`` (a module-level function: it pickles by name) with
    a fork of ``checker`` on one item, in this process or (unpickled) in an executor's, and returns the
    `Outcome`."""

    def __init__(self, checker: Checker, check: Callable[[Checker, Any], None]) -> None:
        self.checker, self.check = checker, check

    def __call__(self, item: BucketItem) -> Outcome:
        c = self.checker.fork()
        c.guarded(item.bucket, lambda: self.check(c, item))
        return Outcome(c.violations, c.rows, c.unverified, c.unverified_rows)


#: Readers unpickled in this process (an executor's Python worker runs many tasks of one check), by
#: (store, table, metadata file): each loads the table's definition and metadata once. A worker lives on across
#: checks, so only the newest few are kept.
TASK_READERS_KEPT = 8
_TASK_READERS: dict[tuple, TableReader] = {}
_TASK_READERS_LOCK = threading.Lock()


class Checker:
    """One reconciliation's findings about one table (violations, rows read, buckets left unverified, details
    for the result), with the table's `TableReader`. A task works on a `fork`: its own findings, the same
    reader."""

    #: Where the bucket checks run (None: `WORKERS` threads of this process).
    executor: TaskExecutor | None = None

    def __init__(self, reader: TableReader) -> None:
        self.reader = reader
        self.name = reader.name
        self.violations: list[Violation] = []
        self.rows = 0
        self.details: dict[str, Any] = {}
        #: files that are missing or of another size than recorded (reported; never read)
        self.unavailable: set[str] = set()
        #: buckets whose content could not be checked because one of those files was needed
        self.unverified: set[int] = set()
        self.unverified_rows = 0
        self._lock = threading.Lock()

    @classmethod
    def open(cls, lh: Lakehouse, name: str) -> Checker:
        """A checker of table ``name``.

        Raises:
            TableNotFound, LakeStateError: there is no such table, or its lake cannot be loaded.
        """
        return cls(TableReader(lh, name))

    # ---- running in tasks ----------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """What a task needs to rebuild the checker: the store, the table, the lake metadata file, the files
        found unavailable (never read). Not the driver's findings, nor open connections."""
        lh = self.reader.lh
        return {
            "store_url": lh.store.url,
            "store_options": tuple(sorted(lh.store.connection_options().items())),
            "name": self.name,
            "metadata_location": self.reader.lake.metadata_location,
            "unavailable": set(self.unavailable),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        from lakehouse import Lakehouse

        key = (state["store_url"], state["store_options"], state["name"], state["metadata_location"])
        with _TASK_READERS_LOCK:
            reader = _TASK_READERS.get(key)
            if reader is None:
                reader = TableReader(Lakehouse(shared_store(state["store_url"], state["store_options"])), state["name"])
                _TASK_READERS[key] = reader
                while len(_TASK_READERS) > TASK_READERS_KEPT:
                    del _TASK_READERS[next(iter(_TASK_READERS))]  # the oldest (dicts keep insertion order)
        Checker.__init__(self, reader)
        self.unavailable = set(state["unavailable"])

    def fork(self) -> Checker:
        """A checker sharing this one's reader and files found unavailable, with its own findings."""
        c = Checker(self.reader)
        c.executor, c.unavailable = self.executor, self.unavailable
        return c

    def guarded(self, bucket: int, work: Callable[[], None]) -> None:
        """``work()``; a file that cannot be read is a ``file-corrupt`` violation, and the bucket unverified."""
        try:
            work()
        except CorruptDataFileError as exc:
            self.unverified.add(bucket)
            self.violate("file-corrupt", f"{exc} (the content of bucket {bucket} is not verified)", bucket=bucket)

    def run_buckets(self, check: Callable[[Checker, Any], None], items: Sequence[BucketItem]) -> None:
        """``check`` of each item (a bucket's check), as tasks of the executor (`WORKERS` threads of this
        process if none); only their findings come back."""
        if not items:
            return
        executor = self.executor or LocalExecutor(min(WORKERS, len(items)))
        for outcome in executor.map(InTask(self, check), list(items)):
            self.violations.extend(outcome.violations)
            self.rows += outcome.rows
            self.unverified |= outcome.unverified
            self.unverified_rows += outcome.unverified_rows

    # ---- reads, counted and guarded --------------------------------------------------------------------

    def counted(self, table: pa.Table) -> pa.Table:
        """``table``, its rows counted as read."""
        with self._lock:
            self.rows += table.num_rows
        return table

    def read_files(
        self, files: Sequence[DataFile], deletes: Mapping[str, Sequence[DataFile]] | None = None
    ) -> pa.Table:
        """`TableReader.read_files`, counted."""
        return self.counted(self.reader.read_files(files, deletes)) if files else self.reader.empty()

    def read_log(
        self,
        bucket: int,
        start: int,
        end: int,
        snapshot: Snapshot | None,
        stored: Sequence[tuple[DataFile, Sequence[DataFile]]] = (),
    ) -> pa.Table | None:
        """The log's records [start, end) of ``bucket`` as lake rows (`TableReader.as_lake_rows`); None (and a
        violation) if segments in the range are missing."""
        if end <= start:
            return self.reader.no_log_rows(bucket)
        try:
            data = self.reader.log_records(bucket, start, end)
        except (CorruptSegmentError, OffsetOutOfRange) as exc:
            self.violate(
                "log-missing",
                f"the log cannot serve the range the lake claims: {exc}",
                bucket=bucket,
                offsets=(start, end),
                snapshot=snapshot,
            )
            return None
        self.counted(data)
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
        return self.reader.as_lake_rows(data, bucket, stored)

    def readable(self, bucket: int, files: Iterable[DataFile]) -> bool:
        """False (and ``bucket`` noted as unverified) if one of ``files`` failed `verify_files`."""
        if any(f.file_path in self.unavailable for f in files):
            with self._lock:
                self.unverified.add(bucket)
            return False
        return True

    # ---- findings --------------------------------------------------------------------------------------

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

    # ---- files -------------------------------------------------------------------------------------------

    def check_twice(self, files: Sequence[DataFile], snapshot: Snapshot, live_before: set[str] | None) -> None:
        """Each file is listed once and (if ``live_before`` is given) was not live already."""
        seen: set[str] = set()
        for f in files:
            path = f.file_path
            if path in seen or (live_before is not None and path in live_before):
                self.violate(
                    "file-twice",
                    f"data file {path} is referenced twice: its rows count twice in the lake",
                    bucket=self.reader.bucket_of(f),
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
        r = self.reader
        wanted: dict[str, tuple[DataFile, Snapshot]] = {}
        for f, snap in files:
            wanted.setdefault(r.store_key(f.file_path), (f, snap))
        data = r.store_key(r.lake.properties.get("write.data.path") or f"{r.lake.metadata.location}/data")
        prefix = data.rstrip("/") + "/"
        found: dict[str, int] = {}
        if "://" not in prefix and any(k.startswith(prefix) for k in wanted):
            for info in r.lh.store.list(prefix):
                if info.key in wanted:
                    found[info.key] = info.size
        outside = [k for k in wanted if not k.startswith(prefix) or "://" in prefix]
        for key, info in zip(outside, r.fs.get_file_info(outside) if outside else [], strict=True):
            if info.type != pafs.FileType.NotFound:
                found[key] = info.size
        for key, (f, snap) in wanted.items():
            path, bucket, size = f.file_path, r.bucket_of(f), found.get(key)
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
        columns = self.reader.columns
        parts = [expected] if isinstance(expected, pa.Table) else list(expected)
        if sum(p.num_rows for p in parts) == actual.num_rows and _equal_by_offset(parts, actual, columns):
            return
        hashes = [row_hashes(p, columns) for p in parts]
        h_exp = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
        h_act = row_hashes(actual, columns)
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
        """One ``content`` violation for rows missing from (``m_rows``) and extra in (``extra``) the lake: how
        many of each, the first differing key with its first differing column, sample keys."""
        key = list(self.reader.key) if self.reader.key else [OFFSET_COLUMN]
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
        shown = _show(first) if first is not None else ""
        detail = ""
        if exp_row is not None and act_row is not None:
            diffs = [c for c in self.reader.columns if exp_row.get(c) != act_row.get(c)]
            if diffs:
                c = diffs[0]
                detail = f"; key {shown}: {c} expected {exp_row[c]!r}, got {act_row[c]!r}"
        elif exp_row is not None:
            detail = f"; key {shown} is missing"
        elif act_row is not None:
            detail = f"; key {shown} should not be there"
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


def key_value(row: dict[str, Any], key: Sequence[str]) -> Any:
    """A row's key as a violation names it: the value of a one-column key, else the tuple."""
    return row[key[0]] if len(key) == 1 else tuple(row[k] for k in key)


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


def _show(key: tuple[Any, ...]) -> str:
    return repr(key[0]) if len(key) == 1 else repr(key)


__all__ = ["SAMPLE_KEYS", "WORKERS", "Checker", "InTask", "Outcome", "key_value"]
