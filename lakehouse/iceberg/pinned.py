"""Metadata files pinned to one snapshot, for engines that read a metadata file's current snapshot.

DuckDB's ``iceberg_scan(metadata.json)`` (and any engine given a bare metadata file) reads the snapshot the file
calls current. A table's own metadata files name its ``main`` head, so a tagged snapshot behind it (a published
state) has no metadata file of its own. `pin_metadata` writes one: the table's metadata as it is, with
``current-snapshot-id`` and ``main`` set to the snapshot, at ``<location>/metadata/pinned-<snapshot id>.metadata.json``.
It is never a version of the table (the catalog's pointer never names it, and its name has no version number, so
the scan for the highest version ignores it).

Orphan removal keeps the pinned file of every snapshot a tag or branch points at
(`lakehouse.maintenance.references`); once no ref points at its snapshot, the file is an orphan like any other and
goes after the grace period. The snapshot's own files are kept as long as the snapshot is (expiry keeps every
snapshot a ref points at).
"""

from __future__ import annotations

from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRef, SnapshotRefType

from lakehouse.errors import SnapshotNotFound

PINNED_PREFIX = "pinned-"

__all__ = ["PINNED_PREFIX", "pin_metadata", "pinned_location", "pinned_locations"]


def pinned_location(table: Table, snapshot_id: int) -> str:
    """Where `pin_metadata` writes the metadata file pinned to ``snapshot_id``."""
    return f"{table.metadata.location.rstrip('/')}/metadata/{PINNED_PREFIX}{snapshot_id}.metadata.json"


def pinned_locations(table: Table) -> set[str]:
    """The pinned metadata files orphan removal keeps: those of the snapshots a tag or branch points at."""
    return {pinned_location(table, ref.snapshot_id) for ref in table.metadata.refs.values()}


def pin_metadata(table: Table, snapshot_id: int) -> str:
    """Write (once) the metadata file of ``table`` pinned to ``snapshot_id`` and return its location; a file
    already there (pinned by an earlier call, or a concurrent one) is kept: any of them reads that snapshot.

    Raises:
        SnapshotNotFound: ``table`` has no such snapshot (expired, or of another table).
    """
    metadata = table.metadata
    if metadata.snapshot_by_id(snapshot_id) is None:
        raise SnapshotNotFound(
            f"lake table {'.'.join(table.name())} has no snapshot {snapshot_id} to pin a metadata file to (expired "
            "by maintenance, or one of another table)"
        )
    location = pinned_location(table, snapshot_id)
    output = table.io.new_output(location)
    if output.exists():
        return location
    # mypy reads pyiceberg's pydantic fields as __init__ (the real __init__ takes these arguments)
    main = SnapshotRef(snapshot_id=snapshot_id, snapshot_ref_type=SnapshotRefType.BRANCH)  # type: ignore[call-arg]
    pinned = metadata.model_copy(update={"current_snapshot_id": snapshot_id, "refs": {MAIN_BRANCH: main}})
    try:
        with output.create(overwrite=False) as stream:
            stream.write(pinned.model_dump_json(exclude_none=True).encode())
    except FileExistsError:  # a concurrent call pinned it first
        pass
    return location
