"""Iceberg position deletes: which rows of which data files are gone, as files of their own (merge-on-read).

A merge-on-read tiering round of a primary-key table does not rewrite the files that hold the changed keys' old
versions: it writes the new versions as new data files and marks the old rows deleted with a *position delete
file* (Iceberg format v2): rows ``(file_path, pos)`` naming a data file and a row position in it, sorted by both.
Readers apply them (pyiceberg's scan, DuckDB's ``iceberg_scan``, lakestream's own reads through
`deleted_positions`); compaction folds them into clean files.

pyiceberg 0.12 reads position deletes but has no API that writes them or commits them; `write_position_deletes`
writes the file with the Iceberg field ids and statistics a reader needs (the referenced paths' bounds let
readers skip a delete file for other data files), and `append_row_changes` commits data and delete files in
one snapshot, through pyiceberg's snapshot producer (so its transaction retries it like any append), the
delete files in a manifest of content ``deletes``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles, _OverwriteFiles
from pyiceberg.typedef import Record

from lakehouse.errors import CorruptDataFileError

if TYPE_CHECKING:
    from pyiceberg.table import Transaction

    from lakehouse.datafiles import LakeContext

__all__ = [
    "FILE_PATH_ID",
    "POS_ID",
    "POSITION_DELETE_SCHEMA",
    "append_row_changes",
    "rewrite_files",
    "deleted_positions",
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
    ordered = sorted((path, np.unique(np.asarray(positions, dtype=np.int64))) for path, positions in deletes)
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
    would come back)."""
    try:
        return pq.read_table(ctx.key_of(delete_file.file_path), filesystem=ctx.fs, filters=filters, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptDataFileError(
            f"position delete file {delete_file.file_path} cannot be read ({' '.join(str(exc).split())}): the rows it "
            "deletes cannot be told. Restore it from a backup, or roll the table back to a snapshot that does not "
            "reference it"
        ) from exc


def deleted_positions(ctx: LakeContext, data_path: str, delete_files: Iterable[DataFile]) -> np.ndarray:
    """The sorted row positions of data file ``data_path`` that ``delete_files`` delete."""
    parts = []
    for delete_file in delete_files:
        if not _may_reference(delete_file, data_path):
            continue
        parts.append(_read_delete_file(ctx, delete_file, pc.field("file_path") == data_path)["pos"].to_numpy())
    if not parts:
        return np.empty(0, np.int64)
    return np.unique(np.concatenate(parts))


def deletes_per_file(ctx: LakeContext, delete_files: Iterable[DataFile]) -> dict[str, int]:
    """How many positions ``delete_files`` delete in each data file they name (each delete file read once)."""
    out: dict[str, int] = {}
    for delete_file in delete_files:
        paths = _read_delete_file(ctx, delete_file, columns=["file_path"])
        counts = pc.value_counts(paths["file_path"])
        for value, count in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True):
            out[value] = out.get(value, 0) + count
    return out


class DeleteManifestWriterV2(ManifestWriterV2):
    """pyiceberg's v2 manifest writer, for a manifest of delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def _write_entries(
    producer: Any, spec: Any, files: Sequence[DataFile], entries: Sequence[ManifestEntry]
) -> list[ManifestFile]:
    """``files`` (added) and ``entries`` (as they are) in manifests of their content: data or deletes."""
    out = []
    for content in (DataFileContent.DATA, DataFileContent.POSITION_DELETES):
        added = [f for f in files if f.content == content]
        kept = [e for e in entries if e.data_file.content == content]
        if not added and not kept:
            continue
        if content == DataFileContent.DATA:
            writer: Any = producer.new_manifest_writer(spec)
        else:
            output = producer.new_manifest_output()
            writer = DeleteManifestWriterV2(
                spec, producer.schema(), output, producer._snapshot_id, producer._compression
            )
        with writer:
            for f in added:
                writer.add(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=producer._snapshot_id,
                        sequence_number=None,
                        file_sequence_number=None,
                        data_file=f,
                    )
                )
            for entry in kept:
                writer.add_entry(entry)
        out.append(writer.to_manifest_file())
    return out


class _AppendRowChanges(_FastAppendFiles):
    """A fast append whose added files may be delete files: data files go to a data manifest, delete files to
    a delete manifest; the summary counts both (pyiceberg's collector knows delete files)."""

    def _manifests(self) -> list[ManifestFile]:
        spec = self._transaction.table_metadata.spec()
        return self._process_manifests(
            _write_entries(self, spec, self._added_data_files, []) + self._existing_manifests()
        )


class _RewriteFiles(_OverwriteFiles):
    """pyiceberg's overwrite, able to remove delete files too (compaction folds a data file's deletes into its
    rewrite, and drops the delete files left referencing nothing): every manifest is rewritten in its own
    content, the removed files' entries marked deleted in manifests of theirs. pyiceberg's validation on a retry
    still refuses the commit if a delete file was added meanwhile for a data file this one removes."""

    def _existing_manifests(self) -> list[ManifestFile]:
        out = []
        snapshot = self._transaction.table_metadata.snapshot_by_name(name=self._target_branch)
        if snapshot is None:
            return out
        removed = self._deleted_data_files
        for manifest in snapshot.manifests(io=self._io):
            entries = manifest.fetch_manifest_entry(io=self._io, discard_deleted=True)
            kept = [e for e in entries if e.data_file not in removed]
            if len(kept) == len(entries):
                out.append(manifest)
            elif kept:
                existing = [
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.EXISTING,
                        snapshot_id=e.snapshot_id,
                        sequence_number=e.sequence_number,
                        file_sequence_number=e.file_sequence_number,
                        data_file=e.data_file,
                    )
                    for e in kept
                ]
                out += _write_entries(self, self.spec(manifest.partition_spec_id), [], existing)
        return out

    def _deleted_entries(self) -> list[ManifestEntry]:
        if self._parent_snapshot_id is None:
            return []
        previous = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
        if previous is None:
            raise ValueError(f"Could not find the previous snapshot: {self._parent_snapshot_id}")
        deleted = [
            ManifestEntry.from_args(
                status=ManifestEntryStatus.DELETED,
                snapshot_id=self._snapshot_id,
                sequence_number=entry.sequence_number,
                file_sequence_number=entry.file_sequence_number,
                data_file=entry.data_file,
            )
            for manifest in previous.manifests(self._io)
            for entry in manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            if entry.data_file in self._deleted_data_files
        ]
        found = {e.data_file for e in deleted}
        missing = sorted(f.file_path for f in self._deleted_data_files if f not in found)
        if missing:
            raise ValidationException(f"Missing required files to delete: {', '.join(missing)}")
        return deleted

    def _manifests(self) -> list[ManifestFile]:
        deleted = self._deleted_entries()
        by_spec: dict[int, list[ManifestEntry]] = {}
        for entry in deleted:
            by_spec.setdefault(entry.data_file.spec_id, []).append(entry)
        spec = self._transaction.table_metadata.spec()
        out = _write_entries(self, spec, self._added_data_files, [])
        for spec_id, entries in by_spec.items():
            out += _write_entries(self, self.spec(spec_id), [], entries)
        return self._process_manifests(out + self._existing_manifests())


def append_row_changes(txn: Transaction, files: Sequence[DataFile], snapshot_properties: dict[str, str]) -> None:
    """Commit ``files`` (data files and position delete files) as one snapshot of ``txn``: an overwrite, the
    operation Iceberg names row-level changes."""
    producer = _AppendRowChanges(
        operation=Operation.OVERWRITE,
        transaction=txn,
        io=txn._table.io,  # noqa: SLF001 - as pyiceberg's UpdateSnapshot builds its producers
        snapshot_properties=snapshot_properties,
    )
    for f in files:
        producer.append_data_file(f)
    producer.commit()


def rewrite_files(
    txn: Transaction, removed: Sequence[DataFile], added: Sequence[DataFile], snapshot_properties: dict[str, str]
) -> None:
    """Commit the replacement of ``removed`` (data and delete files) by ``added`` as one snapshot of ``txn``."""
    producer = _RewriteFiles(
        operation=Operation.OVERWRITE,
        transaction=txn,
        io=txn._table.io,  # noqa: SLF001 - as pyiceberg's UpdateSnapshot builds its producers
        snapshot_properties=snapshot_properties,
    )
    for f in removed:
        producer.delete_data_file(f)
    for f in added:
        producer.append_data_file(f)
    producer.commit()
