"""What a lake commit writes into manifests: snapshot producers for row changes and rewrites, with manifests
merged as rounds accumulate.

pyiceberg 0.12 has no producer that commits delete files or removes them, and its manifest merging (the
merge append) only merges data manifests of appends. `append_row_changes` commits data and position delete
files in one snapshot (data files in a data manifest, delete files in a manifest of content ``deletes``);
`rewrite_files` replaces data and delete files (compaction, copy-on-write rounds). Both go through
pyiceberg's snapshot producer, so its transaction retries and validates them like its own.

Manifest merging (Iceberg's ``commit.manifest-merge.enabled``, ``commit.manifest.min-count-to-merge``,
``commit.manifest.target-size-bytes``): every commit adds a manifest per content; once a content has at
least the minimum count of manifests of a spec, the small ones are rewritten into one (packed by the target
size), data and delete manifests alike, so planning reads a bounded number of manifests however many rounds
were committed. lakestream tables merge by default (16 manifests); a table property turns it off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table import TableProperties
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles, _ManifestMergeManager, _OverwriteFiles
from pyiceberg.utils.properties import property_as_bool, property_as_int

from lakehouse.iceberg.position_deletes import is_delete_file

if TYPE_CHECKING:
    from pyiceberg.table import Transaction

__all__ = ["DeleteManifestWriterV2", "append_row_changes", "rewrite_files"]

#: lakestream's defaults where a table does not set Iceberg's manifest merge properties.
MERGE_ENABLED_DEFAULT = True
MIN_COUNT_TO_MERGE_DEFAULT = 16


class DeleteManifestWriterV2(ManifestWriterV2):
    """pyiceberg's v2 manifest writer, for a manifest of delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def _writer(producer: Any, spec: Any, content: ManifestContent) -> Any:
    if content == ManifestContent.DATA:
        return producer.new_manifest_writer(spec)
    return DeleteManifestWriterV2(
        spec,
        producer.schema(),
        producer.new_manifest_output(),
        producer._snapshot_id,  # noqa: SLF001 - as pyiceberg's own producers build their writers
        producer._compression,  # noqa: SLF001
    )


def _write_entries(
    producer: Any, spec: Any, files: Sequence[DataFile], entries: Sequence[ManifestEntry]
) -> list[ManifestFile]:
    """``files`` (added) and ``entries`` (as they are) in manifests of their content: data or deletes."""
    out = []
    for content, manifest_content in (
        (DataFileContent.DATA, ManifestContent.DATA),
        (DataFileContent.POSITION_DELETES, ManifestContent.DELETES),
    ):
        added = [f for f in files if f.content == content]
        kept = [e for e in entries if e.data_file.content == content]
        if not added and not kept:
            continue
        with _writer(producer, spec, manifest_content) as writer:
            for f in added:
                writer.add(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=producer._snapshot_id,  # noqa: SLF001
                        sequence_number=None,
                        file_sequence_number=None,
                        data_file=f,
                    )
                )
            for entry in kept:
                writer.add_entry(entry)
        out.append(writer.to_manifest_file())
    return out


class _MergeManager(_ManifestMergeManager):
    """pyiceberg's manifest merge manager, writing merged manifests of one content (data or deletes)."""

    def __init__(self, content: ManifestContent, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._content = content

    def _create_manifest(self, spec_id: int, manifest_bin: list[ManifestFile]) -> ManifestFile:
        producer = self._snapshot_producer
        with _writer(producer, producer.spec(spec_id), self._content) as writer:
            for manifest in manifest_bin:
                for entry in producer.fetch_manifest_entry(manifest=manifest, discard_deleted=False):
                    ours = entry.snapshot_id == producer.snapshot_id
                    if entry.status == ManifestEntryStatus.DELETED and ours:
                        writer.delete(entry)  # a removal of this commit stays recorded
                    elif entry.status == ManifestEntryStatus.ADDED and ours:
                        writer.add(entry)
                    elif entry.status != ManifestEntryStatus.DELETED:
                        writer.existing(entry)  # keeps the entry's sequence numbers (deletes depend on them)
        return writer.to_manifest_file()


class _MergingManifests:
    """Merges the manifests of a commit per content, as Iceberg's merge append does for data manifests."""

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        properties = self._transaction.table_metadata.properties  # type: ignore[attr-defined]
        enabled = property_as_bool(properties, TableProperties.MANIFEST_MERGE_ENABLED, MERGE_ENABLED_DEFAULT)
        if not enabled:
            return manifests
        options = {
            "target_size_bytes": property_as_int(
                properties,
                TableProperties.MANIFEST_TARGET_SIZE_BYTES,
                TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT,
            ),
            "min_count_to_merge": property_as_int(
                properties, TableProperties.MANIFEST_MIN_MERGE_COUNT, MIN_COUNT_TO_MERGE_DEFAULT
            ),
            "merge_enabled": True,
            "snapshot_producer": self,
        }
        out = []
        for content in (ManifestContent.DATA, ManifestContent.DELETES):
            group = [m for m in manifests if m.content == content]
            if group:
                out += _MergeManager(content, **options).merge_manifests(group)
        return out


class _AppendRowChanges(_MergingManifests, _FastAppendFiles):
    """A fast append whose added files may be delete files: data files go to a data manifest, delete files to
    a delete manifest; the summary counts both (pyiceberg's collector knows delete files)."""

    def _manifests(self) -> list[ManifestFile]:
        spec = self._transaction.table_metadata.spec()
        return self._process_manifests(
            _write_entries(self, spec, self._added_data_files, []) + self._existing_manifests()
        )


class _RewriteFiles(_MergingManifests, _OverwriteFiles):
    """pyiceberg's overwrite, able to remove delete files too (compaction folds a data file's deletes into its
    rewrite, and drops the delete files left referencing nothing): every manifest is rewritten in its own
    content, the removed files' entries marked deleted in manifests of theirs. pyiceberg's validation on a retry
    still refuses the commit if a delete file was added meanwhile for a data file this one removes."""

    def _existing_manifests(self) -> list[ManifestFile]:
        out: list[ManifestFile] = []
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
    operation Iceberg names row-level changes, or an append when they are data files only."""
    producer = _AppendRowChanges(
        operation=Operation.OVERWRITE if any(is_delete_file(f) for f in files) else Operation.APPEND,
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
