"""Metadata that stays small: offsets files for tables of many buckets, manifests merged as rounds accumulate."""

from __future__ import annotations

import json
from datetime import timedelta

import pyarrow as pa
import pytest

from lakehouse import Lakehouse
from lakehouse.errors import LakeStateError, TieringConflict
from lakehouse.iceberg import offsets as protocol
from lakehouse.iceberg.offsets import (
    INLINE_OFFSETS_BUCKETS,
    OFFSETS_FILE_PROPERTY,
    OFFSETS_PROPERTY,
    offsets_files,
    tiering_snapshot,
)
from lakehouse.maintenance.references import referenced_files
from tests.conftest import duckdb_connection
from tests.lakehouse._faults import ThenRun

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
BUCKETS = INLINE_OFFSETS_BUCKETS + 4  # more than fit a snapshot summary


def batch(keys, tag: str = "v") -> pa.Table:
    keys = list(keys)
    return pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([f"{tag}{k}" for k in keys])})


def offsets_files_in_store(lh: Lakehouse, name: str) -> set[str]:
    table = lh.lake_table(name)
    prefix = table.metadata.location.removeprefix(lh.store.url.rstrip("/") + "/") + "/metadata/"
    return {f"{lh.store.url.rstrip('/')}/{i.key}" for i in lh.store.list(prefix) if "lakestream-offsets-" in i.key}


def state(table: pa.Table) -> list[tuple]:
    return sorted(zip(table["k"].to_pylist(), table["v"].to_pylist(), strict=True))


def replay(lh: Lakehouse, name: str) -> list[tuple]:
    out: dict[int, str] = {}
    log = lh.log(name)
    for b, end in log.end_offsets().items():
        for r in log.read(b, 0, end).to_pylist():
            if r["_op"] == "delete":
                out.pop(r["k"], None)
            else:
                out[r["k"]] = r["v"]
    return sorted(out.items())


def test_a_table_of_many_buckets_keeps_its_offsets_in_files(lakehouse: Lakehouse) -> None:
    """Each tiering snapshot names an offsets file instead of holding every bucket's offset; the file holds the
    lake's offsets, as-of reads find older snapshots' offsets, expiry deletes the files of expired snapshots and
    the metadata every commit rewrites holds no per-bucket offsets."""
    lh = lakehouse
    lh.create_table("ods.wide", SCHEMA, primary_key=["k"], buckets=BUCKETS)
    log = lh.log("ods.wide")
    points = []
    for round_ in range(3):
        log.append(batch(range(round_ * 10, round_ * 10 + 30), tag=f"r{round_}-"), op="upsert")
        points.append(log.end_offsets())
        lh.tier("ods.wide")
    table = lh.lake_table("ods.wide")
    snaps = [s for s in table.metadata.snapshots if s.summary[OFFSETS_FILE_PROPERTY]]
    assert len(snaps) == 3 and all(s.summary[OFFSETS_PROPERTY] is None for s in snaps)
    newest = tiering_snapshot(table.metadata)
    with table.io.new_input(newest.summary[OFFSETS_FILE_PROPERTY]).open() as f:
        assert {int(b): o for b, o in json.loads(f.read()).items()} == log.end_offsets()
    assert lh.lake_offsets("ods.wide") == log.end_offsets()
    with table.io.new_input(table.metadata_location).open() as f:
        metadata = json.loads(f.read())
    assert all(OFFSETS_PROPERTY not in s["summary"] for s in metadata["snapshots"])
    protocol._OFFSETS_FILES.clear()  # as a new process: the files are read, not the cache
    assert state(lh.union_read("ods.wide", as_of=points[0])) == [(k, f"r0-{k}") for k in range(30)]
    assert offsets_files_in_store(lh, "ods.wide") == offsets_files(table.metadata)
    lh.expire_snapshots("ods.wide", older_than=timedelta(0), retain_last=1)
    table = lh.lake_table("ods.wide")
    assert (
        offsets_files_in_store(lh, "ods.wide")
        == offsets_files(table.metadata)
        == {newest.summary[OFFSETS_FILE_PROPERTY]}
    )
    assert state(lh.union_read("ods.wide")) == replay(lh, "ods.wide")
    assert lh.remove_orphans("ods.wide", older_than=timedelta(0), unsafe_orphan_age=True).files == []


def test_an_overtaken_round_deletes_its_offsets_file_and_a_crashed_one_leaves_an_orphan(lakehouse: Lakehouse) -> None:
    from lakehouse.tiering.round import tier

    lh = lakehouse
    lh.create_table("ods.wide", SCHEMA, bucket_key="k", buckets=BUCKETS)
    lh.log("ods.wide").append(batch(range(100)))
    racing = ThenRun(lambda: lh.tier("ods.wide"))
    with pytest.raises(TieringConflict):
        tier(lh.store, lh.catalog, lh.log("ods.wide"), executor=racing)
    table = lh.lake_table("ods.wide")
    assert offsets_files_in_store(lh, "ods.wide") == offsets_files(table.metadata)  # the loser's file is gone
    assert len(offsets_files(table.metadata)) == 1
    # a round killed between writing its offsets file and committing: nothing names the file
    stray = table.metadata.location.rstrip("/") + "/metadata/lakestream-offsets-killed.json"
    with table.io.new_output(stray).create() as f:
        f.write(b'{"0": 999}')
    assert stray not in referenced_files(table)
    removed = lh.remove_orphans("ods.wide", older_than=timedelta(0), unsafe_orphan_age=True)
    assert [path for path, _ in removed.files] == [stray]
    assert lh.lake_offsets("ods.wide") == lh.log("ods.wide").end_offsets()


def test_a_round_whose_offsets_file_cannot_be_written_commits_nothing(lakehouse: Lakehouse, monkeypatch) -> None:
    """The offsets file is created write-once: when that fails (here: a file is already there) the round fails
    with a TieringError saying so, commits nothing and deletes the data files it wrote; the next round tiers."""
    import uuid

    from lakehouse.tiering.round import TieringError

    lh = lakehouse
    lh.create_table("ods.wide", SCHEMA, primary_key=["k"], buckets=BUCKETS)
    log = lh.log("ods.wide")
    log.append(batch(range(40)))
    lh.tier("ods.wide")
    table = lh.lake_table("ods.wide")
    prefix = table.metadata.location.removeprefix(lh.store.url.rstrip("/") + "/") + "/data/"
    data_before = {i.key for i in lh.store.list(prefix)}
    taken = uuid.UUID(int=7)
    with table.io.new_output(f"{table.metadata.location}/metadata/lakestream-offsets-{taken}.json").create() as f:
        f.write(b"{}")
    log.append(batch(range(20, 60), "u"), op="upsert")
    monkeypatch.setattr(protocol.uuid, "uuid4", lambda: taken)
    with pytest.raises(TieringError, match="offsets file could not be written.*nothing was committed"):
        lh.tier("ods.wide")
    monkeypatch.undo()
    assert lh.lake_table("ods.wide").metadata.current_snapshot_id == table.metadata.current_snapshot_id
    assert {i.key for i in lh.store.list(prefix)} == data_before
    lh.tier("ods.wide")
    assert state(lh.lake_read("ods.wide")) == replay(lh, "ods.wide")


def test_a_missing_offsets_file_fails_naming_it(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.wide", SCHEMA, bucket_key="k", buckets=BUCKETS)
    lh.log("ods.wide").append(batch(range(10)))
    lh.tier("ods.wide")
    path = tiering_snapshot(lh.lake_table("ods.wide").metadata).summary[OFFSETS_FILE_PROPERTY]
    lh.store.delete(path.removeprefix(lh.store.url.rstrip("/") + "/"))
    protocol._OFFSETS_FILES.clear()
    with pytest.raises(LakeStateError, match=f"the offsets file {path} of tiering snapshot .* cannot be read"):
        lh.lake_offsets("ods.wide")
    with pytest.raises(LakeStateError, match="cannot be read"):
        lh.union_read("ods.wide")
    with pytest.raises(LakeStateError, match="cannot be read"):
        lh.tier("ods.wide")


def test_manifests_are_merged_as_rounds_accumulate(lakehouse: Lakehouse) -> None:
    """Every merge-on-read round adds a data and a delete manifest; from 16 of a content on they are merged,
    so a scan plans over a bounded number of manifests, and every reader still applies every delete."""
    lh = lakehouse
    lh.create_table("ods.t", SCHEMA, primary_key=["k"], buckets=2)
    log = lh.log("ods.t")
    log.append(batch(range(50)), op="upsert")
    lh.tier("ods.t")
    counts = []
    for round_ in range(40):
        log.append(batch(range(round_, round_ + 5), tag=f"r{round_}-"), op="upsert")
        log.append(batch([round_ + 7]), op="delete")
        lh.tier("ods.t")
        table = lh.lake_table("ods.t")
        counts.append(len(table.current_snapshot().manifests(table.io)))
    assert max(counts) <= 2 * 16 + 2 and counts[-1] < 40, counts
    assert len({f for t in table.scan().plan_files() for f in t.delete_files}) > 16  # deletes are in merged manifests
    want = replay(lh, "ods.t")
    assert state(lh.lake_read("ods.t")) == want
    assert state(table.scan().to_arrow()) == want
    if lh.url.startswith("file://"):  # DuckDB reads local files offline (no httpfs here)
        location = table.metadata_location.removeprefix("file://")
        assert sorted(duckdb_connection().sql(f"SELECT k, v FROM iceberg_scan('{location}')").fetchall()) == want
    # a table that turns merging off keeps a manifest per round and content
    with table.transaction() as txn:
        txn.set_properties({"commit.manifest-merge.enabled": "false"})
    before = len(table.current_snapshot().manifests(table.io))
    for round_ in range(3):
        log.append(batch([round_]), op="upsert")
        lh.tier("ods.t")
    table = lh.lake_table("ods.t")
    assert len(table.current_snapshot().manifests(table.io)) == before + 6
    assert state(lh.lake_read("ods.t")) == replay(lh, "ods.t")


def test_a_table_tiered_by_the_previous_version_keeps_working(lakehouse: Lakehouse, monkeypatch) -> None:
    """Snapshots written before offsets files (every bucket's offsets inline) and after them, in one table:
    the newest decides the lake's offsets, as-of reads use either, expiry keeps what is named."""
    lh = lakehouse
    lh.create_table("ods.wide", SCHEMA, primary_key=["k"], buckets=BUCKETS)
    log = lh.log("ods.wide")
    log.append(batch(range(40), tag="old-"), op="upsert")
    old_point = log.end_offsets()
    with monkeypatch.context() as m:  # the previous version: offsets inline whatever the bucket count
        m.setattr(protocol, "INLINE_OFFSETS_BUCKETS", 1 << 30)
        lh.tier("ods.wide")
    [old] = lh.lake_table("ods.wide").metadata.snapshots
    assert old.summary[OFFSETS_PROPERTY] is not None and old.summary[OFFSETS_FILE_PROPERTY] is None
    log.append(batch(range(20, 60), tag="new-"), op="upsert")
    lh.tier("ods.wide")
    assert lh.lake_offsets("ods.wide") == log.end_offsets()
    assert tiering_snapshot(lh.lake_table("ods.wide").metadata).summary[OFFSETS_FILE_PROPERTY] is not None
    assert state(lh.union_read("ods.wide", as_of=old_point)) == [(k, f"old-{k}") for k in range(40)]
    assert state(lh.union_read("ods.wide")) == replay(lh, "ods.wide")
    lh.expire_snapshots("ods.wide", older_than=timedelta(0), retain_last=1)
    assert state(lh.lake_read("ods.wide")) == replay(lh, "ods.wide")
    assert offsets_files_in_store(lh, "ods.wide") == offsets_files(lh.lake_table("ods.wide").metadata)


def test_the_newest_tiering_snapshot_is_found_from_the_end_and_in_any_order(lakehouse: Lakehouse) -> None:
    """`tiering_snapshot` walks back from the newest snapshot when sequence numbers grow along the list (what
    every commit leaves) and compares them all otherwise: the same answer either way, a compaction after the
    last round (not a tiering snapshot) skipped."""
    lh = lakehouse
    lh.create_table("ods.order", SCHEMA, primary_key=["k"], buckets=2)
    log = lh.log("ods.order")
    for r in range(3):
        log.append(batch(range(r * 10, r * 10 + 10)), op="upsert")
        lh.tier("ods.order")
    lh.compact("ods.order", min_input_files=2)
    metadata = lh.lake_table("ods.order").metadata
    assert metadata.snapshots[-1].summary[protocol.COMMIT_USER_PROPERTY] != protocol.TIERING_USER
    rounds = [s for s in metadata.snapshots if s.summary[protocol.COMMIT_USER_PROPERTY] == protocol.TIERING_USER]
    assert len(rounds) == 3
    assert tiering_snapshot(metadata) == rounds[-1]
    shuffled = metadata.model_copy(
        update={"snapshots": [metadata.snapshots[-2], *metadata.snapshots[:-2], metadata.snapshots[-1]]}
    )
    assert tiering_snapshot(shuffled) == rounds[-1]
    assert tiering_snapshot(metadata.model_copy(update={"snapshots": [metadata.snapshots[-1]]})) is None
