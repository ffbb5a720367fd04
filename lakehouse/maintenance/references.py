"""Which files a lake table still needs: every snapshot's manifest list, manifests, data/delete files and
offsets file, the metadata files of its metadata log, and the metadata files pinned to its tagged snapshots
(`lakehouse.iceberg.pinned`)."""

from __future__ import annotations

from pyiceberg.manifest import ManifestFile
from pyiceberg.table import Table

from lakehouse.iceberg.offsets import offsets_files
from lakehouse.iceberg.pinned import pinned_locations
from object_store.usage import ContextThreadPoolExecutor


def referenced_sizes(table: Table, *, include_metadata: bool = True, live_only: bool = True) -> dict[str, int | None]:
    """Location -> size in bytes of every file any snapshot of ``table`` references (plus its metadata files);
    the size is None where the metadata does not record it (manifest lists, offsets and metadata files).

    ``live_only``: data files count only where a manifest lists them as added or existing; an entry with
    status DELETED records that a snapshot removed the file, which the snapshots still present do not
    need unless another manifest lists it as live (the snapshot before the delete, if it is kept)."""
    out: dict[str, int | None] = {}
    manifests = {}
    for snap in table.metadata.snapshots:
        out[snap.manifest_list] = None
        for m in snap.manifests(table.io):
            manifests[m.manifest_path] = m
    out.update({path: m.manifest_length for path, m in manifests.items()})
    out.update(dict.fromkeys(offsets_files(table.metadata)))

    def files_of(manifest: ManifestFile) -> list[tuple[str, int]]:
        entries = manifest.fetch_manifest_entry(table.io, discard_deleted=live_only)
        return [(e.data_file.file_path, e.data_file.file_size_in_bytes) for e in entries]

    with ContextThreadPoolExecutor(8) as pool:
        for files in pool.map(files_of, manifests.values()):
            out.update(files)
    if include_metadata:
        if table.metadata_location:
            out[table.metadata_location] = None
        out.update(dict.fromkeys(entry.metadata_file for entry in table.metadata.metadata_log))
        out.update(dict.fromkeys(pinned_locations(table)))  # a published state's file for other engines
        out.update({s.statistics_path: s.file_size_in_bytes for s in table.metadata.statistics})
    return out


def referenced_files(table: Table, *, include_metadata: bool = True, live_only: bool = True) -> set[str]:
    """Locations of every file any snapshot of ``table`` references (plus its metadata files); see
    `referenced_sizes`."""
    return set(referenced_sizes(table, include_metadata=include_metadata, live_only=live_only))
