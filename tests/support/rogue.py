"""Rogue commits: another writer's commits to a lake table through pyiceberg, outside lakestream's tiering
(`rogue_commit`: files added and removed; `rewrite`: a data file replaced by a changed copy), and the table's live
data files (`live_files`). What reconciliation and the checks built on it must catch."""

from __future__ import annotations

from lakehouse import Lakehouse
from lakehouse.iceberg.datafiles import LakeContext
from tests.support.keyed_tables import NAME


def live_files(lh: Lakehouse, bucket: int | None = None):
    table = lh.lake_table(NAME)
    files = [t.file for t in table.scan().plan_files()]
    return [f for f in files if bucket is None or f.partition[len(f.partition) - 1] == bucket]


def rogue_commit(lh: Lakehouse, *, add=(), remove=(), summary=None, name: str = NAME) -> None:
    """A commit by another writer: files added and removed through pyiceberg, outside lakestream's tiering."""
    table = lh.lake_table(name)
    with table.transaction() as txn:
        update = txn.update_snapshot(snapshot_properties=summary or {})
        with update.overwrite() if remove else update.fast_append() as producer:
            for f in remove:
                producer.delete_data_file(f)
            for f in add:
                producer.append_data_file(f)


def rewrite(lh: Lakehouse, f, change) -> None:
    """Replace data file ``f`` by a copy whose rows went through ``change`` (a rogue overwrite)."""
    table = lh.lake_table(NAME)
    ctx = LakeContext.of(lh.store, table)
    rows = ctx.read(f.file_path)
    new = ctx.write(change(rows), tuple(f.partition[i] for i in range(len(f.partition))), "rogue")
    rogue_commit(lh, add=[new], remove=[f])
