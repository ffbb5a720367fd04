"""Iceberg position deletes: which rows of which data files are gone, as files of their own (merge-on-read).

A merge-on-read tiering round of a primary-key table does not rewrite the files that hold the changed keys' old
versions: it writes the new versions as new data files and marks the old rows deleted with a *position delete
file* (Iceberg format v2): rows ``(file_path, pos)`` naming a data file and a row position in it, sorted by both.
Readers apply them (pyiceberg's scan, DuckDB's ``iceberg_scan``, lakestream's own reads through
`deleted_positions`); compaction folds them into clean files.

pyiceberg 0.12 reads position deletes but has no API that writes them or commits them; `write_position_deletes`
writes the file with the Iceberg field ids and statistics a reader needs (the referenced paths' bounds let
readers skip a delete file for other data files); `lakehouse.iceberg.commits` commits them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
)
from pyiceberg.typedef import Record

from lakehouse.errors import CorruptDataFileError

if TYPE_CHECKING:
    from lakehouse.iceberg.datafiles import LakeContext

__all__ = [
    "FILE_PATH_ID",
    "POS_ID",
    "POSITION_DELETE_SCHEMA",
    "DeleteIndex",
    "check_positions",
    "deleted_positions",
    "in_sorted",
    "positions_by_path",
    "read_marks",
    "sorted_unique",
    "deletes_per_file",
    "is_delete_file",
    "write_position_deletes",
]

#: The Iceberg spec's reserved field ids of a position delete file's columns.
FILE_PATH_ID = 2147483546
POS_ID = 2147483545
POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
    ]
)


def is_delete_file(data_file: DataFile) -> bool:
    return data_file.content == DataFileContent.POSITION_DELETES


def write_position_deletes(
    ctx: LakeContext, partition: tuple, stem: str, deletes: Sequence[tuple[str, np.ndarray]]
) -> DataFile:
    """Write one position delete file of ``partition`` for ``deletes`` (data file location, row positions),
    sorted by location and position; return its `DataFile` entry (content position deletes)."""
    ordered = sorted((path, sorted_unique(np.asarray(positions, dtype=np.int64))) for path, positions in deletes)
    paths = [path for path, positions in ordered for _ in range(len(positions))]
    positions = np.concatenate([p for _, p in ordered]) if ordered else np.empty(0, np.int64)
    rows = pa.table({"file_path": pa.array(paths, pa.string()), "pos": pa.array(positions, pa.int64())})
    rows = rows.cast(POSITION_DELETE_SCHEMA)
    location = ctx.new_location(partition, f"{stem}-deletes")
    out = ctx._open_output(ctx.key_of(location))  # noqa: SLF001 - the context's own output (folders on file://)
    codec = dict(ctx.properties).get("write.parquet.compression-codec", "zstd")
    try:
        pq.write_table(rows, out, compression="none" if codec == "uncompressed" else codec, write_statistics=True)
        size = out.tell()
    finally:
        out.close()
    ctx.count_written(size)
    first, last = ordered[0][0], ordered[-1][0]
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(*partition),
        record_count=rows.num_rows,
        file_size_in_bytes=size,
        lower_bounds={FILE_PATH_ID: first.encode(), POS_ID: int(positions.min()).to_bytes(8, "little", signed=True)},
        upper_bounds={FILE_PATH_ID: last.encode(), POS_ID: int(positions.max()).to_bytes(8, "little", signed=True)},
        value_counts={FILE_PATH_ID: rows.num_rows, POS_ID: rows.num_rows},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        spec_id=ctx.spec.spec_id,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
    )


def _may_reference(delete_file: DataFile, path: str) -> bool:
    lower = (delete_file.lower_bounds or {}).get(FILE_PATH_ID)
    upper = (delete_file.upper_bounds or {}).get(FILE_PATH_ID)
    encoded = path.encode()
    return (lower is None or lower <= encoded) and (upper is None or encoded <= upper)


def _read_delete_file(ctx: LakeContext, delete_file: DataFile, filters: Any = None, columns: Any = None) -> pa.Table:
    """A position delete file's rows; one that cannot be read is an error naming it, never skipped (its rows
    would come back). Read whole (no ``filters``): paths as a dictionary (see `read_marks`)."""
    try:
        if filters is None:
            with ctx.fs.open_input_file(ctx.key_of(delete_file.file_path)) as stream:
                return read_marks(stream, columns)
        return pq.read_table(ctx.key_of(delete_file.file_path), filesystem=ctx.fs, filters=filters, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptDataFileError(
            f"position delete file {delete_file.file_path} cannot be read ({' '.join(str(exc).split())}): the rows it "
            "deletes cannot be told. Restore it from a backup, or roll the table back to a snapshot that does not "
            "reference it"
        ) from exc


def deleted_positions(ctx: LakeContext, data_file: DataFile, delete_files: Iterable[DataFile]) -> np.ndarray:
    """The sorted row positions of ``data_file`` that ``delete_files`` delete (each delete file read with a filter
    on the path: one data file's lookup; a task looking up many data files uses a `DeleteIndex`)."""
    parts = []
    for delete_file in delete_files:
        if not _may_reference(delete_file, data_file.file_path):
            continue
        positions = _read_delete_file(ctx, delete_file, pc.field("file_path") == data_file.file_path)["pos"]
        parts.append(check_positions(delete_file, data_file, positions.to_numpy()))
    if not parts:
        return np.empty(0, np.int64)
    return sorted_unique(np.concatenate(parts))


class DeleteIndex:
    """The positions position delete files delete, each delete file read once, whole, and kept grouped by data file
    path: a task that looks up many data files of a bucket (a tiering round, a compaction group, a changelog) reads
    every delete file once instead of once per data file it may name. A table with ``k`` uncompacted rounds has
    about ``k`` delete files naming each of its files: looked up per data file, a round read ``k`` times ``k``
    files. Memory: the delete files looked up (one task's). Safe to share between threads."""

    def __init__(self, ctx: LakeContext) -> None:
        self.ctx = ctx
        self._files: dict[str, dict[str, np.ndarray]] = {}
        self._lock = threading.Lock()

    def _marks(self, delete_file: DataFile) -> dict[str, np.ndarray]:
        with self._lock:
            marks = self._files.get(delete_file.file_path)
        if marks is None:
            marks = positions_by_path(_read_delete_file(self.ctx, delete_file, columns=["file_path", "pos"]))
            with self._lock:
                self._files[delete_file.file_path] = marks
        return marks

    def positions(self, data_file: DataFile, delete_files: Iterable[DataFile]) -> np.ndarray:
        """The sorted row positions of ``data_file`` that ``delete_files`` delete."""
        parts = []
        for delete_file in delete_files:
            if not _may_reference(delete_file, data_file.file_path):
                continue
            positions = self._marks(delete_file).get(data_file.file_path)
            if positions is not None:
                parts.append(check_positions(delete_file, data_file, positions))
        if not parts:
            return np.empty(0, np.int64)
        return parts[0] if len(parts) == 1 else sorted_unique(np.concatenate(parts))


def read_marks(stream: Any, columns: Sequence[str] | None = ("file_path", "pos")) -> pa.Table:
    """A whole position delete file from ``stream``, its ``file_path`` column as a dictionary: a few data files'
    paths repeated for every row, which read as strings cost most of the read (40 delete files of 14,000 rows:
    46 ms read and grouped by path as strings, 13 ms as a dictionary with `pq.ParquetFile`, which also skips the
    dataset machinery `pq.read_table` sets up per file)."""
    return pq.ParquetFile(stream, read_dictionary=["file_path"]).read(
        columns=None if columns is None else list(columns), use_threads=False
    )


def positions_by_path(rows: pa.Table) -> dict[str, np.ndarray]:
    """A position delete file's rows (``file_path``, ``pos``) as data file path -> its positions, sorted."""
    paths = (
        rows["file_path"].unify_dictionaries()
        if pa.types.is_dictionary(rows.schema.field("file_path").type)
        else rows["file_path"]
    )
    paths = paths.combine_chunks()
    if not pa.types.is_dictionary(paths.type):
        paths = paths.dictionary_encode()
    positions = rows["pos"].to_numpy()
    codes = paths.indices.to_numpy(zero_copy_only=False)
    if len(paths.dictionary) == 1:
        return {paths.dictionary[0].as_py(): sorted_unique(positions)}
    return {path: sorted_unique(positions[codes == i]) for i, path in enumerate(paths.dictionary.to_pylist())}


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``values`` sorted, repeats dropped: numpy 2.4's hash-based ``np.unique`` is several times slower on int64
    (and ``np.isin`` calls it twice)."""
    out = np.sort(values)
    if len(out) > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out


def in_sorted(values: np.ndarray, sorted_values: np.ndarray) -> np.ndarray:
    """Per value, whether it is in ``sorted_values`` (sorted, e.g. by `sorted_unique`): ``np.isin`` by binary
    search."""
    if not len(sorted_values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_values, values), len(sorted_values) - 1)
    return sorted_values[at] == values


def check_positions(delete_file: DataFile, data_file: DataFile, positions: np.ndarray) -> np.ndarray:
    """``positions``, which ``delete_file`` deletes in ``data_file``, if ``data_file`` has them: a delete file
    naming rows past the end was not written for this file, and applying the rest would serve rows it meant to
    delete."""
    if len(positions) and (positions.min() < 0 or positions.max() >= data_file.record_count):
        raise CorruptDataFileError(
            f"position delete file {delete_file.file_path} deletes position {int(positions.max())} of "
            f"{data_file.file_path}, which has {data_file.record_count} rows: it was not written for this data "
            "file. Restore it from a backup, or roll the table back to a snapshot that does not reference it"
        )
    return positions


def deletes_per_file(ctx: LakeContext, delete_files: Iterable[DataFile]) -> dict[str, int]:
    """How many positions ``delete_files`` delete in each data file they name (each delete file read once)."""
    out: dict[str, int] = {}
    for delete_file in delete_files:
        paths = _read_delete_file(ctx, delete_file, columns=["file_path"])
        counts = pc.value_counts(paths["file_path"])
        for value, count in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True):
            out[value] = out.get(value, 0) + count
    return out
