"""Streaming reads of a lake scan's data files: one file at a time, a batch at a time.

pyiceberg's `ArrowScan.to_record_batches` reads every file of a scan in a thread pool and materializes each
file's (filtered) batches before yielding the first: a "streaming" read of four 2.5 M-row files held most of
them in memory at once. Lakestream's data files are plain Parquet whose columns carry the table's names and
field ids (lakestream tables do not evolve: `lakehouse.lake.check_lake_layout`), so this module reads them
with pyarrow's dataset scanner directly, file after file, with the scan's filter pushed into the file
(row-group pruning by statistics, rows filtered while decoding) and a bounded read-ahead: the memory of a
read is a few batches plus the rows its consumer keeps. A task pyiceberg must read itself (delete files, a
column the file lacks, a format other than Parquet) still goes through `ArrowScan`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.visitors import bind
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, expression_to_pyarrow
from pyiceberg.manifest import FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata

#: Rows per batch of a streamed file.
BATCH_ROWS = 65_536
#: Batches a file's scanner decodes ahead of its consumer.
READAHEAD_BATCHES = 2
_FORMAT = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=True, buffer_size=8 << 20)
)


def stream_tasks(
    tasks: Iterable[FileScanTask], io: FileIO, metadata: TableMetadata, projected: Schema, expr: BooleanExpression
) -> Iterator[pa.RecordBatch]:
    """The rows of ``tasks`` (a scan of ``metadata``'s table) matching ``expr``, columns ``projected`` (names
    as in the file; the consumer casts to its schema), streamed file by file."""
    columns = [f.name for f in projected.fields]
    schema = metadata.schema()
    names = schema.column_names  # a file of ours holds every column (the filter may name any)
    arrow_filter = None if isinstance(expr, AlwaysTrue) else expression_to_pyarrow(bind(schema, expr, True))
    for task in tasks:
        if task.delete_files or task.file.file_format != FileFormat.PARQUET:
            yield from ArrowScan(metadata, io, projected, expr).to_record_batches([task])
            continue
        with io.new_input(task.file.file_path).open() as stream:
            fragment = _FORMAT.make_fragment(stream)
            physical = fragment.physical_schema
            if any(physical.get_field_index(c) < 0 for c in names):  # not one of our files: pyiceberg maps it
                yield from ArrowScan(metadata, io, projected, expr).to_record_batches([task])
                continue
            scanner = ds.Scanner.from_fragment(
                fragment,
                schema=physical,
                columns=columns,
                filter=arrow_filter,
                batch_size=BATCH_ROWS,
                batch_readahead=READAHEAD_BATCHES,
                use_threads=True,
            )
            for batch in scanner.to_batches():
                if batch.num_rows:
                    yield batch
