"""What a reconciliation reads of one table, and nothing it concludes: the lake's metadata (a commit's files by
bucket, the files live in a snapshot and their position deletes, the key statistics of files), the lake's rows
(data files less the positions their deletes remove, or only their key columns) and the log's records as lake
rows. Whatever is wrong with what it reads is for the checks (`quality.reconcile.checker`) to say.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, cast

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
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import PrimitiveType

from lakehouse.iceberg.datafiles import LakeContext
from lakehouse.iceberg.layout import OFFSET_COLUMN, TIMESTAMP_COLUMN, log_to_lake_rows
from lakehouse.iceberg.offsets import tiering_snapshots
from lakehouse.iceberg.position_deletes import deleted_positions, positions_by_path, read_marks, sorted_unique
from lakehouse.merge import engine_of
from lakehouse.merge.keyed_rows import KeySet, reduce_changes, stored_rows
from lakehouse.table.evolution import project_lake_file

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse


@dataclass
class Commit:
    """One snapshot's change of data files and of position delete files, by bucket."""

    snapshot: Snapshot
    added: dict[int, list[DataFile]] = field(default_factory=lambda: defaultdict(list))
    removed: dict[int, list[DataFile]] = field(default_factory=lambda: defaultdict(list))
    added_deletes: dict[int, list[DataFile]] = field(default_factory=lambda: defaultdict(list))
    removed_deletes: dict[int, list[DataFile]] = field(default_factory=lambda: defaultdict(list))


class TableReader:
    """One table's lake and log as a reconciliation reads them: its definition, the lake table (loaded once) and
    the log. Shared by the checks of one run and, in an executor's worker, by the tasks of one check; holds no
    findings."""

    def __init__(self, lh: Lakehouse, name: str) -> None:
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
        self._prefix = lh.store.url.rstrip("/") + "/"

    # ---- where things are ------------------------------------------------------------------------------

    @cached_property
    def fs(self) -> pafs.FileSystem:
        return self.lh.store.arrow_filesystem()

    @cached_property
    def ctx(self) -> LakeContext:
        return LakeContext.of(self.lh.store, self.lake)

    def store_key(self, location: str) -> str:
        """The store key of a file's location (a location outside the store is returned as it is)."""
        if location.startswith(self._prefix):
            return location[len(self._prefix) :]
        if location.startswith("file://") and self._prefix.startswith("file://"):
            return location[len(self._prefix) :]
        return location

    @cached_property
    def schema(self) -> pa.Schema:
        """The checked columns with the log's types (lake reads are cast to them: one type per column)."""
        return log_to_lake_rows(self.log.read_schema.empty_table(), 0).select(self.columns).schema

    @cached_property
    def key_schema(self) -> pa.Schema:
        """The primary key's columns with the log's types."""
        return pa.schema([self.schema.field(k) for k in self.key])

    @cached_property
    def _file_schema(self) -> pa.Schema:
        """The checked columns as the current lake schema has them, with their field ids."""
        return pa.schema([self.ctx.arrow_schema.field(c) for c in self.columns])

    # ---- the lake's metadata ---------------------------------------------------------------------------

    @staticmethod
    def bucket_of(f: DataFile) -> int:
        partition = f.partition
        return int(partition[len(partition) - 1])

    def commit_of(self, snapshot: Snapshot) -> Commit:
        """The files ``snapshot`` added and removed, by bucket."""
        commit = Commit(snapshot)
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

    def live_entries(self, snapshot: Snapshot) -> list[DataFile]:
        """The data and delete files live in ``snapshot``."""
        files: list[DataFile] = []
        for manifest in snapshot.manifests(self.lake.io):
            files.extend(e.data_file for e in manifest.fetch_manifest_entry(self.lake.io, discard_deleted=True))
        return files

    def live_files(self, snapshot: Snapshot) -> list[DataFile]:
        """The data files live in ``snapshot`` (its delete files: `live_deletes`)."""
        return [f for f in self.live_entries(snapshot) if f.content == DataFileContent.DATA]

    def live_deletes(self, snapshot: Snapshot) -> dict[str, list[DataFile]]:
        """Each data file live in ``snapshot`` that position deletes apply to -> those delete files (pyiceberg
        matches them as every reader does: partition, sequence number, the path's bounds)."""
        if not any(f.content == DataFileContent.POSITION_DELETES for f in self.live_entries(snapshot)):
            return {}
        out: dict[str, list[DataFile]] = {}
        for task in self.lake.scan(snapshot_id=snapshot.snapshot_id).plan_files():
            if task.delete_files:
                out[task.file.file_path] = list(task.delete_files)
        return out

    def recorded_offsets(self) -> dict[int, dict[int, int]]:
        """The offsets each tiering snapshot of the lake records, by snapshot id."""
        return {s.snapshot_id: o for s, o in tiering_snapshots(self.lake.metadata, self.buckets, self.lake.io)}

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
                kind = cast(PrimitiveType, field.field_type)  # only primitive columns have bounds
                low = pa.scalar(from_bytes(kind, lo), values.type)
                high = pa.scalar(from_bytes(kind, hi), values.type)
            except (TypeError, ValueError, pa.ArrowException):
                out.append(f)
                continue
            inside = pc.and_(pc.greater_equal(values, low), pc.less_equal(values, high))
            if pc.any(inside).as_py():
                out.append(f)
        return out

    # ---- the lake's rows -------------------------------------------------------------------------------

    def empty(self) -> pa.Table:
        return self.schema.empty_table()

    def read_files(
        self, files: Sequence[DataFile], deletes: Mapping[str, Sequence[DataFile]] | None = None
    ) -> pa.Table:
        """The checked columns of ``files``, with the log's types, without the rows their position deletes
        (``deletes``: data file path -> its delete files) delete. Parquet is read directly (lakestream writes
        its files with the table's column names and field ids); a file whose columns do not match (written
        before a schema change) is projected by field id, or goes through pyiceberg's scan."""
        if not files:
            return self.empty()
        parts = []
        for f in files:
            try:
                part = pq.read_table(self.store_key(f.file_path), filesystem=self.fs, columns=self.columns)
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
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def read_keys(self, path: str) -> pa.Table:
        """The key columns of the data file at ``path``, every row (deleted or not), as Parquet has them."""
        return pq.read_table(self.store_key(path), filesystem=self.fs, columns=list(self.key))

    def scan_keys(self, f: DataFile) -> pa.Table:
        """The key columns of data file ``f``, every row, through pyiceberg's scan (any schema it was written
        with)."""
        scan = ArrowScan(self.lake.metadata, self.lake.io, self.lake.schema().select(*self.key), AlwaysTrue())
        return scan.to_table([FileScanTask(f)])

    def deleted(self, data_file: DataFile, delete_files: Sequence[DataFile]) -> np.ndarray:
        """The row positions of ``data_file`` that ``delete_files`` delete."""
        return deleted_positions(self.ctx, data_file, delete_files) if delete_files else np.empty(0, int)

    def marks(self, delete_files: Sequence[DataFile]) -> dict[str, np.ndarray]:
        """What position delete files mark: data file path -> sorted positions."""
        out: dict[str, list[np.ndarray]] = defaultdict(list)
        for d in delete_files:
            with self.fs.open_input_file(self.store_key(d.file_path)) as stream:
                for path, positions in positions_by_path(read_marks(stream)).items():
                    out[path].append(positions)
        return {path: sorted_unique(np.concatenate(parts)) for path, parts in out.items()}

    # ---- the log ---------------------------------------------------------------------------------------

    def no_log_rows(self, bucket: int) -> pa.Table:
        """An empty range of the log, as lake rows (with ``_op``)."""
        return log_to_lake_rows(self.log.read_schema.empty_table(), bucket, keep_op=True)

    def log_records(self, bucket: int, start: int, end: int) -> pa.Table:
        """The log's records [start, end) of ``bucket``, as the log has them.

        Raises:
            CorruptSegmentError, OffsetOutOfRange: segments of the range are missing or unreadable.
        """
        return self.log.read(bucket, start, end)

    def as_lake_rows(
        self, records: pa.Table, bucket: int, stored: Sequence[tuple[DataFile, Sequence[DataFile]]] = ()
    ) -> pa.Table:
        """Log ``records`` of ``bucket`` as lake rows (with ``_op``), for a primary-key table only the net change
        of each key (a merge engine's: merged into the rows of its keys in ``stored``, data files with their
        delete files)."""
        if self.engine is not None:
            columns = [*self.key, *self.engine.stored_columns(records)]
            rows = stored_rows(self.ctx, stored, KeySet(records, self.key), columns) if stored else pa.table({})
            records = self.engine.resolve(rows, records)
        elif self.key:
            records = reduce_changes(records, self.key)
        return log_to_lake_rows(records, bucket, keep_op=True)


__all__ = ["Commit", "TableReader"]
