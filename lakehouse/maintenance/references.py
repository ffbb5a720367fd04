"""Which files a lake table still needs: every snapshot's manifest list, manifests, data/delete files and
offsets file, and the metadata files of its metadata log."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pyiceberg.table import Table

from lakehouse.lake_layout import offsets_files


def referenced_files(table: Table, *, include_metadata: bool = True, live_only: bool = True) -> set[str]:
    """Locations of every file any snapshot of ``table`` references (plus its metadata files).

    ``live_only``: data files count only where a manifest lists them as added or existing; an entry with
    status DELETED records that a snapshot removed the file, which the snapshots still present do not
    need unless another manifest lists it as live (the snapshot before the delete, if it is kept)."""
    out: set[str] = set()
    manifests = {}
    for snap in table.metadata.snapshots:
        out.add(snap.manifest_list)
        for m in snap.manifests(table.io):
            manifests[m.manifest_path] = m
    out |= set(manifests)
    out |= offsets_files(table.metadata)

    def files_of(manifest) -> list[str]:
        return [e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=live_only)]

    with ThreadPoolExecutor(8) as pool:
        for paths in pool.map(files_of, manifests.values()):
            out.update(paths)
    if include_metadata:
        if table.metadata_location:
            out.add(table.metadata_location)
        out |= {entry.metadata_file for entry in table.metadata.metadata_log}
        out |= {s.statistics_path for s in table.metadata.statistics}
    return out
