"""Streaming reads of a lake scan's data files: one file at a time, a batch at a time.

pyiceberg's `ArrowScan.to_record_batches` reads every file of a scan in a thread pool and materializes each
file's (filtered) batches before yielding the first: a "streaming" read of four 2.5 M-row files held most of
them in memory at once. Lakestream's data files are plain Parquet whose columns carry the table's names and
field ids, so this module reads them
with pyarrow's dataset scanner directly, file after file, with the scan's filter pushed into the file
(row-group pruning by statistics, rows filtered while decoding) and a bounded read-ahead: the memory of a
read is a few batches plus the rows its consumer keeps. Small files (the ones frequent tiering leaves before
compaction) are read whole by a few threads ahead of the consumer instead: there a store's round trips, not
decoding, are the cost (200 files of 500 rows on SeaweedFS: 0.6 s one after another, 0.3 s prefetched,
pyiceberg's parallel read 0.4 s). A file with position deletes (merge-on-read) is read the same way, row
group by row group (those whose statistics can match the filter), its deleted positions dropped before the
filter; each delete file is read once per scan. A task pyiceberg must read itself (a column the file lacks, a
format other than Parquet, a file written before a schema change whose names or field ids differ from the
current schema's: `lakehouse.table.evolution`) still goes through `ArrowScan`, which projects it by field id.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.visitors import bind
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, expression_to_pyarrow, schema_to_pyarrow
from pyiceberg.manifest import FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata

from lakehouse.iceberg.position_deletes import check_positions, positions_by_path, read_marks

#: Files a whole-table read (`read_tasks`) decodes at once.
READ_FILES = 4
#: Rows per batch of a streamed file.
BATCH_ROWS = 65_536
#: Batches a file's scanner decodes ahead of its consumer.
READAHEAD_BATCHES = 2
#: Files up to this size are read whole, ahead of the consumer (a few small files' rows in memory at once) ...
SMALL_FILE_BYTES = 1 << 20
#: ... by this many threads.
PREFETCH_FILES = 4
_FORMAT = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=True, buffer_size=8 << 20)
)


def stream_tasks(
    tasks: Iterable[FileScanTask], io: FileIO, metadata: TableMetadata, projected: Schema, expr: BooleanExpression
) -> Iterator[pa.RecordBatch]:
    """The rows of ``tasks`` (a scan of ``metadata``'s table) matching ``expr``, columns ``projected`` (names
    as in the file; the consumer casts to its schema), in task order: large files streamed a few batches at a
    time, small ones (up to `SMALL_FILE_BYTES`, where a store's latency costs more than decoding) read whole by
    `PREFETCH_FILES` threads ahead of the consumer."""
    read = _FileReader(io, metadata, projected, expr)
    tasks = list(tasks)
    small = [_is_small(t) for t in tasks]
    if not any(small):
        for task in tasks:
            yield from read.batches(task)
        return
    with ThreadPoolExecutor(PREFETCH_FILES, thread_name_prefix="lakestream-filescan") as pool:
        ahead: dict[int, Future[list[pa.RecordBatch]]] = {}
        upcoming = iter([i for i, s in enumerate(small) if s])
        for _ in range(PREFETCH_FILES):
            _submit(pool, ahead, upcoming, read, tasks)
        try:
            for i, task in enumerate(tasks):
                if not small[i]:
                    yield from read.batches(task)
                    continue
                batches = ahead.pop(i).result()
                _submit(pool, ahead, upcoming, read, tasks)
                yield from batches
        finally:
            for future in ahead.values():
                future.cancel()


def read_tasks(
    tasks: Iterable[FileScanTask],
    io: FileIO,
    metadata: TableMetadata,
    projected: Schema,
    expr: BooleanExpression,
    threads: int = READ_FILES,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``tasks`` as `stream_tasks` gives them, in task order, but ``threads`` files decoded at once
    and nothing bounding how far ahead: the whole-table reads (a Python union read) that hold the result in
    memory anyway. pyiceberg's parallel read does the same; this one applies position deletes a batch at a
    time, reading each delete file once (pyiceberg's costs 2-3x the read of the compacted table after five
    rounds of 1 % uniform changes)."""
    read = _FileReader(io, metadata, projected, expr)
    with ThreadPoolExecutor(threads, thread_name_prefix="lakestream-read") as pool:
        for batches in pool.map(lambda task: list(read.batches(task)), list(tasks)):
            yield from batches


def _widened(have: pa.DataType, want: pa.DataType) -> bool:
    """A type an alter widened (the consumer casts strings and the like to its schema itself)."""
    return pa.types.is_integer(have) or pa.types.is_floating(have) or pa.types.is_decimal(have)


def _is_small(task: FileScanTask) -> bool:
    return task.file.file_size_in_bytes <= SMALL_FILE_BYTES


def _submit(
    pool: ThreadPoolExecutor,
    ahead: dict[int, Future[list[pa.RecordBatch]]],
    upcoming: Iterator[int],
    read: _FileReader,
    tasks: list[FileScanTask],
) -> None:
    i = next(upcoming, None)
    if i is not None:
        ahead[i] = pool.submit(lambda task: list(read.batches(task)), tasks[i])


class _FileReader:
    """Reads one task's rows (see `stream_tasks`)."""

    def __init__(self, io: FileIO, metadata: TableMetadata, projected: Schema, expr: BooleanExpression) -> None:
        self.io, self.metadata, self.projected, self.expr = io, metadata, projected, expr
        self.columns = [f.name for f in projected.fields]
        schema = metadata.schema()
        self.names = schema.column_names  # a file of ours holds every column (the filter may name any)
        self.ids = {f.name: f.field_id for f in schema.fields}
        self.filter = None if isinstance(expr, AlwaysTrue) else expression_to_pyarrow(bind(schema, expr, True))
        #: per delete file read in this scan, the positions it deletes per data file
        self._deletes: dict[str, dict[str, np.ndarray]] = {}
        self._lock = threading.Lock()

    def _pyiceberg(self, task: FileScanTask) -> Iterator[pa.RecordBatch]:
        return ArrowScan(self.metadata, self.io, self.projected, self.expr).to_record_batches([task])

    def _alive(self, task: FileScanTask) -> np.ndarray:
        """Per row of ``task``'s file, whether no delete file of ``task`` deletes it (a mask rather than sorted
        positions: deletes of one row by two files need no deduplication, and a batch's rows are a slice)."""
        alive = np.ones(task.file.record_count, dtype=bool)
        for delete_file in task.delete_files:
            with self._lock:
                marks = self._deletes.get(delete_file.file_path)
            if marks is None:
                with self.io.new_input(delete_file.file_path).open() as stream:
                    marks = positions_by_path(read_marks(stream))
                with self._lock:
                    self._deletes[delete_file.file_path] = marks
            positions = marks.get(task.file.file_path)
            if positions is not None:
                alive[check_positions(delete_file, task.file, positions)] = False
        return alive

    def _with_deletes(self, task: FileScanTask, fragment: ds.ParquetFileFragment) -> Iterator[pa.RecordBatch]:
        """A file with position deletes: the row groups whose statistics can match the filter, a batch at a time,
        without the deleted rows, then filtered (positions are the file's, so the filter applies after the
        deletes)."""
        alive = self._alive(task)
        physical = fragment.physical_schema
        metadata = fragment.metadata
        starts = np.cumsum([0] + [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)])
        if self.filter is None:
            groups = list(range(metadata.num_row_groups))
        else:
            groups = [g.id for g in fragment.subset(self.filter).row_groups]
        columns = self.names if self.filter is not None else self.columns
        sizes = [int(starts[g + 1] - starts[g]) for g in groups]
        scanner = ds.Scanner.from_fragment(
            fragment if len(groups) == metadata.num_row_groups else fragment.subset(row_group_ids=groups),
            schema=physical,
            columns=columns,
            batch_size=BATCH_ROWS,
            batch_readahead=READAHEAD_BATCHES,
            use_threads=True,
        )
        at, used = 0, 0  # the row group (of ``groups``) the next batch comes from, and its rows read
        for batch in scanner.to_batches():
            n = batch.num_rows
            while at < len(groups) and used == sizes[at]:
                at, used = at + 1, 0
            if at == len(groups) or used + n > sizes[at]:  # batches never span row groups; if one did: fail
                raise AssertionError(f"{task.file.file_path}: a batch crosses a row group")
            position = int(starts[groups[at]]) + used
            used += n
            keep = alive[position : position + n]
            if not keep.all():
                batch = batch.filter(pa.array(keep))
            if self.filter is not None:
                batch = batch.filter(self.filter)
            if batch.num_rows:
                yield batch.select(self.columns)

    def _by_id(self, fragment: ds.ParquetFileFragment) -> Iterator[pa.RecordBatch] | None:
        """The projected columns of a file written before a schema change, matched by field id (renamed: the
        file's name; added since: null; widened: cast), or None if the file has no field ids for them."""
        physical = fragment.physical_schema
        by_id = {}
        for f in physical:
            if f.metadata and b"PARQUET:field_id" in f.metadata:
                by_id[int(f.metadata[b"PARQUET:field_id"])] = f.name
        if not by_id or any(c not in self.ids for c in self.columns):
            return None
        target = self._target
        sources = [by_id.get(self.ids[c]) for c in self.columns]
        scanner = ds.Scanner.from_fragment(
            fragment,
            schema=physical,
            columns=[s for s in sources if s is not None],
            batch_size=BATCH_ROWS,
            batch_readahead=READAHEAD_BATCHES,
            use_threads=True,
        )

        def batches() -> Iterator[pa.RecordBatch]:
            for batch in scanner.to_batches():
                if not batch.num_rows:
                    continue
                arrays = []
                for column, source in zip(self.columns, sources, strict=True):
                    t = target.field(column).type
                    if source is None:
                        arrays.append(pa.nulls(batch.num_rows, t))
                        continue
                    array = batch.column(source)
                    arrays.append(array.cast(t) if array.type != t and _widened(array.type, t) else array)
                yield pa.RecordBatch.from_arrays(arrays, names=self.columns)

        return batches()

    @cached_property
    def _target(self) -> pa.Schema:
        return schema_to_pyarrow(self.projected, include_field_ids=False)

    def _same_ids(self, physical: pa.Schema) -> bool:
        """Whether every column of the current schema is the file's column of that name (same field id): not so
        in a file written before a column was dropped and another of its name added."""
        for name, field_id in self.ids.items():
            meta = physical.field(name).metadata
            if meta and int(meta.get(b"PARQUET:field_id", field_id)) != field_id:
                return False
        return True

    def batches(self, task: FileScanTask) -> Iterator[pa.RecordBatch]:
        if task.file.file_format != FileFormat.PARQUET:
            yield from self._pyiceberg(task)
            return
        with self.io.new_input(task.file.file_path).open() as stream:
            fragment = _FORMAT.make_fragment(stream)
            physical = fragment.physical_schema
            if any(physical.get_field_index(c) < 0 for c in self.names) or not self._same_ids(physical):
                # written before a schema change: projected by field id here if it needs no filter and no
                # deletes (as fast as a current file), else by pyiceberg; not one of our files: pyiceberg
                projected = None if self.filter is not None or task.delete_files else self._by_id(fragment)
                yield from projected if projected is not None else self._pyiceberg(task)
                return
            if task.delete_files:
                yield from self._with_deletes(task, fragment)
                return
            scanner = ds.Scanner.from_fragment(
                fragment,
                schema=physical,
                columns=self.columns,
                filter=self.filter,
                batch_size=BATCH_ROWS,
                batch_readahead=READAHEAD_BATCHES,
                use_threads=True,
            )
            for batch in scanner.to_batches():
                if batch.num_rows:
                    yield batch
