"""Maintenance on both backends: compaction, snapshot expiry, orphan files, log retention; races and crashes."""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from lakehouse import Lakehouse
from lakehouse.errors import InvalidArgument, MaintenanceError, OffsetOutOfRange, TableNotFound
from lakehouse.iceberg.offsets import COMMIT_USER_PROPERTY, tiering_snapshot
from lakehouse.log import Log
from lakehouse.log.log import MAX_INDEX_AGE
from lakehouse.maintenance.retention import record_retention_floors, retention_floors, retention_key
from lakehouse.table.definition import TableName
from lakestream.cli import app
from tests.lakehouse._faults import ThenRun
from tests.support.crash import crash
from tests.support.orders_tables import (
    ORDERS,
    USER_COLS,
    data_files_in_store,
    lake_state,
    log_records,
    orders,
    referenced_files,
    replay,
    rows,
)

LAKE_COLS = [*USER_COLS, "__bucket", "__offset"]


def many_rounds(lh: Lakehouse, name: str, rounds: int = 6, *, pk: bool) -> None:
    log = lh.log(name)
    for i in range(rounds):
        log.append(orders(range(i * 50, i * 50 + 120), tag=f"r{i}"), op="upsert" if pk else "insert")
        if pk:
            log.append(orders(range(i * 50, i * 50 + 10)), op="delete")
        lh.tier(name)


def file_count(lh: Lakehouse, name: str) -> int:
    return len(list(lh.lake_table(name).scan().plan_files()))


def read_file(lh: Lakehouse, path: str) -> pa.Table:
    return pq.read_table(pa.BufferReader(lh.store.get(path.removeprefix(lh.store.url.rstrip("/") + "/")).data))


# ---- compaction ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["log", "pk"])
def test_compaction_keeps_data_and_offsets_with_fewer_files(lakehouse: Lakehouse, kind: str) -> None:
    lh, name = lakehouse, "ods.t"
    pk = kind == "pk"
    lh.create_table(
        name, ORDERS, buckets=2, **({"primary_key": ["o_orderkey"]} if pk else {"bucket_key": "o_orderkey"})
    )
    many_rounds(lh, name, pk=pk)
    before_rows = rows(lh.lake_read(name), LAKE_COLS)
    before_files, offsets = file_count(lh, name), lh.lake_offsets(name)
    snapshots = len(lh.lake_table(name).metadata.snapshots)

    result = lh.compact(name, min_input_files=2)
    table = lh.lake_table(name)
    assert result.snapshot_id == table.current_snapshot().snapshot_id and result.files_rewritten > 2
    assert len(table.metadata.snapshots) == snapshots + 1
    assert table.current_snapshot().summary[COMMIT_USER_PROPERTY] == "compaction"
    assert file_count(lh, name) == result.files_after < before_files
    assert file_count(lh, name) == 2  # one file per bucket partition
    assert rows(lh.lake_read(name), LAKE_COLS) == before_rows
    assert lh.lake_offsets(name) == offsets
    order = "o_orderkey" if pk else "__offset"
    for task in table.scan().plan_files():
        values = read_file(lh, task.file.file_path).column(order).to_pylist()
        assert values == sorted(values)
    # nothing left to do: no new snapshot
    assert lh.compact(name, min_input_files=2).snapshot_id is None
    # tiering keeps working on top of the compaction snapshot
    lh.log(name).append(orders(range(900, 950)), op="upsert" if pk else "insert")
    assert lh.tier(name).rows == 50
    if pk:
        assert lake_state(lh.lake_read(name)) == replay(lh, name)
    else:
        assert rows(lh.lake_read(name), LAKE_COLS) == log_records(lh, name, lh.log(name).end_offsets())


def test_target_size_and_min_files_are_respected(tmp_path) -> None:
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    from lakehouse.maintenance.compaction import plan_groups

    def f(path, size, part=0):
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=Record(part),
            file_size_in_bytes=size,
            record_count=1,
        )

    files = [f("a", 60), f("b", 50), f("c", 40), f("d", 30), f("e", 200), f("x", 10, part=1)]
    groups = plan_groups(files, target_file_size=100, min_input_files=2)
    assert sorted(sorted(x.file_path for x in g.files) for g in groups) == [["a", "c"], ["b", "d"]]
    assert plan_groups(files, target_file_size=100, min_input_files=3) == []


@pytest.mark.backends("local", "s3")
def test_compaction_racing_tiering_loses_nothing(lakehouse: Lakehouse) -> None:
    from lakehouse.maintenance import compact

    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, bucket_key="o_orderkey", buckets=2)
    many_rounds(lh, name, pk=False)

    def tiering_meanwhile():
        lh.log(name).append(orders(range(5000, 5100)))
        assert lh.tier(name).rows == 100

    result = compact(
        lh.store, lh.lake_table(name), lh.table(name), executor=ThenRun(tiering_meanwhile), min_input_files=2
    )
    assert result.snapshot_id is not None
    table = lh.lake_table(name)
    assert table.current_snapshot().summary[COMMIT_USER_PROPERTY] == "compaction"
    assert lh.lake_offsets(name) == lh.log(name).end_offsets()
    assert rows(lh.lake_read(name), LAKE_COLS) == log_records(lh, name, lh.log(name).end_offsets())


def test_compaction_racing_a_merge_on_read_round_never_resurrects_a_row(lakehouse: Lakehouse) -> None:
    """A compaction rewrites files while a tiering round marks rows of them deleted: committing would drop those
    marks (the rows would come back), so it refuses and deletes its own outputs; the round's marks stand, and the
    next compaction folds them."""
    from lakehouse.maintenance import compact

    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, primary_key=["o_orderkey"], buckets=2)
    many_rounds(lh, name, pk=True)

    def round_meanwhile():  # updates and deletes keys of every file
        lh.log(name).append(orders(range(0, 400, 7), tag="late"), op="upsert")
        lh.log(name).append(orders(range(3, 400, 11)), op="delete")
        assert lh.tier(name).files_removed == 0

    with pytest.raises(MaintenanceError, match="marked rows of them deleted meanwhile"):
        compact(
            lh.store,
            lh.lake_table(name),
            lh.table(name),
            executor=ThenRun(round_meanwhile),
            min_input_files=2,
            delete_ratio=0.0,
        )
    table = lh.lake_table(name)
    expected = replay(lh, name)
    assert lake_state(lh.lake_read(name)) == expected
    assert not (data_files_in_store(lh, name) - referenced_files(table))  # the refused outputs are gone
    folded = lh.compact(name, min_input_files=2, delete_ratio=0.0)
    assert folded.delete_files_removed > 0
    table = lh.lake_table(name)
    assert not any(t.delete_files for t in table.scan().plan_files())
    assert lake_state(lh.lake_read(name)) == expected


@pytest.mark.backends("local", "s3")
def test_two_compactions_racing_one_commits_the_other_cleans_up(lakehouse: Lakehouse) -> None:
    from lakehouse.maintenance import compact

    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, primary_key=["o_orderkey"], buckets=2)
    many_rounds(lh, name, pk=True)
    before = rows(lh.lake_read(name), LAKE_COLS)
    other = {}
    loser = ThenRun(lambda: other.setdefault("result", lh.compact(name, min_input_files=2)))
    with pytest.raises(MaintenanceError, match="replaced its input files"):
        compact(lh.store, lh.lake_table(name), lh.table(name), executor=loser, min_input_files=2)
    table = lh.lake_table(name)
    assert table.current_snapshot().snapshot_id == other["result"].snapshot_id
    assert rows(lh.lake_read(name), LAKE_COLS) == before
    assert data_files_in_store(lh, name) == referenced_files(table) & data_files_in_store(lh, name)
    assert not (data_files_in_store(lh, name) - referenced_files(table))  # the loser's outputs are gone


@pytest.mark.backends("local", "s3")
@pytest.mark.slow
@pytest.mark.parametrize("point", ["mid-write", "tasks-done", "metadata-written"])
def test_kill_9_mid_compaction_leaves_the_table_unchanged(store_spec, point: str) -> None:
    url, options = store_spec
    lh = Lakehouse.open(url, **options)
    name = "ods.t"
    lh.create_table(name, ORDERS, primary_key=["o_orderkey"], buckets=2)
    many_rounds(lh, name, pk=True)
    assert any(t.delete_files for t in lh.lake_table(name).scan().plan_files())  # deletes for it to fold
    before_rows, before_snapshot = rows(lh.lake_read(name), LAKE_COLS), lh.lake_table(name).current_snapshot()
    crash("tests.lakehouse._tiering_workers", url, json.dumps(options), name, point, "compact", timeout=120)
    assert lh.lake_table(name).current_snapshot().snapshot_id == before_snapshot.snapshot_id
    assert lh.compact(name, min_input_files=2).snapshot_id is not None  # the rerun
    assert rows(lh.lake_read(name), LAKE_COLS) == before_rows
    orphans = lh.remove_orphans(name, older_than=timedelta(0), dry_run=True).files
    assert orphans, "the dead run's files are orphans for remove_orphans"
    lh.close()


# ---- expiry and orphans --------------------------------------------------------------------------------


def test_expiry_keeps_the_newest_tiering_snapshot_and_deletes_unreferenced_files(lakehouse: Lakehouse) -> None:
    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, primary_key=["o_orderkey"], buckets=2)
    many_rounds(lh, name, pk=True)
    table = lh.lake_table(name)
    newest_tiering = tiering_snapshot(table.metadata).snapshot_id
    offsets, before = lh.lake_offsets(name), rows(lh.lake_read(name), LAKE_COLS)
    assert len(table.metadata.snapshots) == 6
    assert lh.expire_snapshots(name).expired == []  # default age: nothing is 5 days old

    result = lh.expire_snapshots(name, older_than=timedelta(0), retain_last=1)
    table = lh.lake_table(name)
    assert [s.snapshot_id for s in table.metadata.snapshots] == [newest_tiering] and len(result.expired) == 5
    assert result.files_deleted > 0 and result.bytes_freed > 0
    assert lh.lake_offsets(name) == offsets and rows(lh.lake_read(name), LAKE_COLS) == before
    live = {f.file_path for t in table.scan().plan_files() for f in (t.file, *t.delete_files)}
    assert data_files_in_store(lh, name) == live  # data files and the delete files applying to them
    lh.log(name).append(orders(range(3)), op="delete")
    assert lh.tier(name).rows == 3


def test_expiry_after_compaction_frees_the_replaced_files(lakehouse: Lakehouse) -> None:
    """The newest tiering snapshot pins the files a compaction replaced; expiry carries its offsets forward
    (an empty tiering commit fenced on it) so they can go without waiting for new data."""
    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, bucket_key="o_orderkey", buckets=2)
    many_rounds(lh, name, pk=False)
    offsets, before = lh.lake_offsets(name), rows(lh.lake_read(name), LAKE_COLS)
    lh.compact(name, min_input_files=2)
    assert lh.expire_snapshots(name, older_than=timedelta(days=1)).expired == []  # too young: no checkpoint
    assert lh.lake_table(name).current_snapshot().summary[COMMIT_USER_PROPERTY] == "compaction"

    result = lh.expire_snapshots(name, older_than=timedelta(0))
    table = lh.lake_table(name)
    current = table.current_snapshot()
    assert [s.snapshot_id for s in table.metadata.snapshots] == [current.snapshot_id]
    assert current.summary[COMMIT_USER_PROPERTY] == "tiering" and len(result.expired) == 7
    assert lh.lake_offsets(name) == offsets and rows(lh.lake_read(name), LAKE_COLS) == before
    live = {f.file_path for t in table.scan().plan_files() for f in (t.file, *t.delete_files)}
    assert data_files_in_store(lh, name) == live  # data files and the delete files applying to them
    assert len(data_files_in_store(lh, name)) == 2
    lh.log(name).append(orders(range(3)))
    assert lh.tier(name).rows == 3


def test_orphans_respect_the_grace_period_and_spare_referenced_files_and_the_log(lakehouse: Lakehouse) -> None:
    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, bucket_key="o_orderkey", buckets=2)
    many_rounds(lh, name, rounds=2, pk=False)
    location = lh.lake_table(name).metadata.location.removeprefix(lh.store.url.rstrip("/") + "/")
    lh.store.put(f"{location}/data/o_orderkey_bucket=0/dead-run.parquet", b"x" * 100)
    lh.store.put(f"{location}/metadata/dead-run.avro", b"y" * 10)
    segments = sorted(i.key for i in lh.store.list(f"{location}/log/"))
    assert segments

    assert lh.remove_orphans(name).files == []  # younger than the default grace period (3 days)
    listed = lh.remove_orphans(name, older_than=timedelta(0), dry_run=True)
    assert sorted((p.rsplit("/", 1)[1], s) for p, s in listed.files) == [
        ("dead-run.avro", 10),
        ("dead-run.parquet", 100),
    ]
    assert lh.store.exists(f"{location}/metadata/dead-run.avro")  # dry run
    removed = lh.remove_orphans(name, older_than=timedelta(0), unsafe_orphan_age=True)
    assert removed.bytes == 110 and not lh.store.exists(f"{location}/metadata/dead-run.avro")
    assert sorted(i.key for i in lh.store.list(f"{location}/log/")) == segments
    assert rows(lh.lake_read(name), LAKE_COLS) == log_records(lh, name, lh.log(name).end_offsets())


@pytest.mark.backends("local", "s3")
def test_orphans_go_in_bulk_and_the_result_counts_past_what_it_names(lakehouse: Lakehouse, monkeypatch) -> None:
    import object_store.base
    from lakehouse.maintenance import orphans

    monkeypatch.setattr(object_store.base, "DELETE_BATCH", 10)  # S3: three DeleteObjects requests
    monkeypatch.setattr(orphans, "LISTED_ORPHANS", 5)
    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, bucket_key="o_orderkey", buckets=2)
    many_rounds(lh, name, rounds=2, pk=False)
    location = lh.lake_table(name).metadata.location.removeprefix(lh.store.url.rstrip("/") + "/")
    for i in range(25):
        lh.store.put(f"{location}/data/o_orderkey_bucket=1/dead-{i:02d}.parquet", b"x" * i)
    live = data_files_in_store(lh, name) & referenced_files(lh.lake_table(name))
    removed = lh.remove_orphans(name, older_than=timedelta(0), unsafe_orphan_age=True)
    assert (removed.count, removed.bytes, len(removed.files)) == (25, sum(range(25)), 5)
    assert removed.to_dict()["count"] == 25
    assert data_files_in_store(lh, name) == live
    assert rows(lh.lake_read(name), LAKE_COLS) == log_records(lh, name, lh.log(name).end_offsets())


def test_an_orphan_age_below_the_floor_is_refused_unless_forced(tmp_path) -> None:
    """`maintain --orphan-age 0s` between a tiering round's writes and its commit deleted the files the commit
    then referenced: every read of the table failed with FileNotFoundError."""
    wh = tmp_path.as_uri()
    lh = Lakehouse.open(wh)
    name = "ods.t"
    lh.create_table(name, ORDERS, bucket_key="o_orderkey", buckets=2)
    lh.log(name).append(orders(range(100)))
    maintained = []
    between = lambda: maintained.append(CliRunner().invoke(app, ["maintain", "-w", wh, "--orphan-age", "0s"]))  # noqa: E731
    from lakehouse.tiering.round import tier

    tier(lh.store, lh.catalog, lh.log(name), executor=ThenRun(between))
    assert maintained[0].exit_code == 1, maintained[0].output
    assert "below the safe floor of 1:00:00" in maintained[0].output and "--unsafe-orphan-age" in maintained[0].output
    assert rows(lh.lake_read(name), LAKE_COLS) == log_records(lh, name, lh.log(name).end_offsets())
    for older_than in (timedelta(0), timedelta(minutes=59)):
        with pytest.raises(InvalidArgument, match="below the safe floor"):
            lh.remove_orphans(name, older_than=older_than)
        with pytest.raises(InvalidArgument, match="below the safe floor"):
            lh.maintain(name, orphan_age=older_than)
    assert lh.remove_orphans(name, older_than=timedelta(0), dry_run=True).files == []  # a dry run deletes nothing
    assert lh.remove_orphans(name, older_than=timedelta(hours=1)).files == []
    assert lh.remove_orphans(name, older_than=timedelta(0), unsafe_orphan_age=True).files == []
    lh.close()


# ---- log retention -------------------------------------------------------------------------------------


def test_retention_never_deletes_untiered_records(lakehouse: Lakehouse, caplog) -> None:
    # retention of per-bucket segments (a "commits" log: tests/lakehouse/test_log_chain.py)
    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, primary_key=["o_orderkey"], buckets=2, log_format="segments")
    log = lh.log(name)
    for i in range(4):
        log.append(orders(range(i * 10, i * 10 + 30), tag=f"r{i}"), op="upsert")
    ends = log.end_offsets()

    # tiering stopped, retention elapsed: nothing deleted, and it says why
    result = lh.apply_log_retention(name, retention=timedelta(0))
    assert result.segments_deleted == 0 and sum(result.overdue.values()) == sum(ends.values())
    assert "overdue" in result.message and "not tiered" in result.message
    assert "overdue" in caplog.text

    lh.tier(name)
    log.append(orders(range(100, 110)), op="upsert")  # an un-tiered tail
    assert lh.apply_log_retention(name).segments_deleted == 0  # default retention: 7 days
    result = lh.apply_log_retention(name, retention=timedelta(0))
    assert result.segments_deleted == 8 and result.records_deleted == sum(ends.values())
    assert result.start_offsets == ends and sum(result.overdue.values()) == 10
    assert Lakehouse(lh.store).log(name).start_offsets() == ends
    assert log.start_offsets() == ends  # a Log that knew the deleted segments: it said 0 and read from there failed
    assert log.read(0, ends[0]).num_rows == log.end_offsets()[0] - ends[0]
    # union read stays correct (lake + the un-tiered tail); the log says where it starts now
    union = lake_state(lh.union_read(name))
    assert union == {
        **lake_state(lh.lake_read(name)),
        **{k: (k, k % 97, orders([k]).column("o_orderdate")[0].as_py(), f"v-{k}") for k in range(100, 110)},
    }
    assert len(union) == 70
    with pytest.raises(OffsetOutOfRange, match="earliest available offset is"):
        log.read(0, 0)
    with pytest.raises(OffsetOutOfRange, match=f"earliest available offset is {ends[1]}"):
        Lakehouse(lh.store).log(name).read(1, 0)


def test_bad_arguments_get_clear_errors(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.t", ORDERS, bucket_key="o_orderkey", buckets=2)
    with pytest.raises(InvalidArgument, match="target_file_size must be a positive"):
        lh.compact("ods.t", target_file_size=0)
    with pytest.raises(InvalidArgument, match="min_input_files must be an integer >= 2"):
        lh.compact("ods.t", min_input_files=1)
    with pytest.raises(InvalidArgument, match="older_than must not be negative"):
        lh.expire_snapshots("ods.t", older_than=timedelta(days=-1))
    with pytest.raises(InvalidArgument, match="retain_last must be an integer >= 1"):
        lh.expire_snapshots("ods.t", retain_last=0)
    with pytest.raises(InvalidArgument, match="older_than must not be negative"):
        lh.remove_orphans("ods.t", older_than=timedelta(seconds=-5))
    with pytest.raises(InvalidArgument, match="retention must not be negative"):
        lh.apply_log_retention("ods.t", retention=timedelta(hours=-1))
    with pytest.raises(TableNotFound, match="no table ods.nope"):
        lh.compact("ods.nope")


def test_maintain_command_runs_everything_in_order(tmp_path) -> None:
    wh = tmp_path.as_uri()
    lh = Lakehouse.open(wh)
    lh.create_table("ods.t", ORDERS, bucket_key="o_orderkey", buckets=2)
    many_rounds(lh, "ods.t", pk=False)
    expected = log_records(lh, "ods.t", lh.log("ods.t").end_offsets())
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "maintain",
            "-w",
            wh,
            "--snapshot-age",
            "0s",
            "--orphan-age",
            "0s",
            "--unsafe-orphan-age",
            "--retention",
            "0s",
        ],
    )
    assert result.exit_code == 0, result.output
    for word in ("compaction  files", "expiry", "orphans", "retention   ", " records, "):
        assert word in result.output
    assert file_count(lh, "ods.t") == 2
    assert rows(lh.union_read("ods.t"), LAKE_COLS) == expected
    bad = runner.invoke(app, ["maintain", "-w", wh, "--retention", "soon"])
    assert bad.exit_code == 1 and "bad duration" in bad.output
    compacted = runner.invoke(app, ["compact", "-w", wh, "--target-file-size", "0"])
    assert compacted.exit_code == 1 and "target_file_size must be a positive" in compacted.output


def test_union_read_survives_retention_racing_it(tmp_path, monkeypatch) -> None:
    """A union read that loaded the lake just before a tiering commit + retention retries on the new lake."""
    from lakehouse.read.union import union_read

    lh = Lakehouse.open(tmp_path.as_uri())
    lh.create_table("ods.t", ORDERS, primary_key=["o_orderkey"], buckets=1)
    lh.log("ods.t").append(orders(range(10)), op="upsert")
    lh.log("ods.t").append(orders(range(5)), op="delete")
    stale = lh.lake_table("ods.t")  # offsets 0: its tail starts at the first segment
    lh.tier("ods.t")
    lh.apply_log_retention("ods.t", retention=timedelta(0))
    with pytest.raises(OffsetOutOfRange):
        union_read(stale, lh.log("ods.t"))
    fresh = lh.lake_table
    tables = iter([stale])
    monkeypatch.setattr(lh, "lake_table", lambda name: next(tables, None) or fresh(name))
    assert lh.union_read("ods.t").num_rows == 5


def test_retention_keeps_each_buckets_newest_segment_so_offsets_are_never_reused(lakehouse: Lakehouse) -> None:
    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, bucket_key="o_orderkey", buckets=2, log_format="segments")
    for i in range(3):
        lh.log(name).append(orders(range(i * 20, i * 20 + 20)))
    lh.tier(name)
    ends = lh.log(name).end_offsets()
    result = lh.apply_log_retention(name, retention=timedelta(0))
    assert result.segments_deleted == 4 and not result.overdue  # everything tiered, all old: 3 - 1 per bucket
    fresh = Lakehouse(lh.store).log(name)
    assert fresh.end_offsets() == ends  # learned from the kept newest segments
    appended = fresh.append(orders(range(1000, 1004)))
    assert all(first == ends[b] for b, (first, _) in appended.ranges.items())


def test_a_producer_idle_past_retention_does_not_reuse_deleted_offsets(lakehouse: Lakehouse, caplog) -> None:
    """An idle producer's known end can be an offset that others appended and retention has deleted since;
    a create-only PUT there would succeed. A bucket end older than MAX_INDEX_AGE is listed again first."""
    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, primary_key=["o_orderkey"], buckets=1)
    now = [time.time()]
    idle = Log(lh.store, lh.table(name), clock=lambda: now[0])  # another process, with its own clock
    idle.append(orders(range(0, 10)), op="upsert")  # knows: end 10
    busy = Lakehouse(lh.store).log(name)
    for i in range(1, 5):
        busy.append(orders(range(i * 10, i * 10 + 10)), op="upsert")  # offsets 10..49
    lh.tier(name)
    assert lh.apply_log_retention(name, retention=timedelta(0)).segments_deleted == 4  # keeps 40..49
    assert "below 0:10:00" in caplog.text  # a retention this short is warned about
    now[0] += MAX_INDEX_AGE + 1  # idle for longer than its bucket end is trusted
    assert idle.append(orders(range(100, 110)), op="upsert").ranges == {0: (50, 59)}
    lh.tier(name)
    assert lh.lake_offsets(name) == {0: 60}
    keys = sorted(lh.lake_read(name).column("o_orderkey").to_pylist())
    assert keys == sorted([*range(50), *range(100, 110)])  # nothing lost, no offset reused


@pytest.mark.slow
def test_compaction_on_spark_equals_compaction_on_the_local_executor(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    for name in ("ods.a", "ods.b"):
        lh.create_table(name, ORDERS, primary_key=["o_orderkey"], buckets=2)
        many_rounds(lh, name, pk=True)
    a = lh.compact("ods.a", min_input_files=2)
    b = lh.compact("ods.b", min_input_files=2, spark=spark)
    assert b.executor == "spark" and (a.files_before, a.files_after) == (b.files_before, b.files_after)
    cols = USER_COLS  # offsets and timestamps differ: the two logs were appended apart
    assert rows(lh.lake_read("ods.a"), cols) == rows(lh.lake_read("ods.b"), cols)


def segment_bases(lh: Lakehouse, name: str, bucket: int) -> list[int]:
    prefix = TableName.parse(name).bucket_prefix(bucket)
    return sorted(int(i.key[len(prefix) : -len(".arrow")]) for i in lh.store.list(prefix))


def test_retention_records_each_buckets_floor_before_it_deletes(lakehouse: Lakehouse, monkeypatch) -> None:
    """The record (floors 0 from the table's creation on) is raised to where retention will delete up to before
    the first delete: a retention killed there leaves segments below the floor, never a deleted range above it."""
    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, bucket_key="o_orderkey", buckets=2, log_format="segments")
    assert retention_floors(lh.store, lh.table(name)) == {0: 0, 1: 0}
    for i in range(3):
        lh.log(name).append(orders(range(i * 20, i * 20 + 20)))
    lh.tier(name)
    before = {b: segment_bases(lh, name, b) for b in range(2)}
    assert all(len(bases) == 3 for bases in before.values())

    def killed(keys) -> None:
        raise RuntimeError(f"killed before deleting {next(iter(keys))}")

    monkeypatch.setattr(lh.store, "delete_many", killed)
    with pytest.raises(RuntimeError, match="killed"):
        lh.apply_log_retention(name, retention=timedelta(0))
    monkeypatch.undo()
    newest = {b: bases[-1] for b, bases in before.items()}
    assert retention_floors(lh.store, lh.table(name)) == newest  # recorded, nothing deleted yet
    assert {b: segment_bases(lh, name, b) for b in range(2)} == before
    result = lh.apply_log_retention(name, retention=timedelta(0))  # the floors do not move again
    assert result.segments_deleted == 4 and result.floors == result.start_offsets == newest and not result.gaps
    assert result.to_dict()["floors"] == {"0": newest[0], "1": newest[1]}


@pytest.mark.backends("local", "s3")
def test_retention_floors_only_move_up_under_racing_writers(lakehouse: Lakehouse) -> None:
    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, bucket_key="o_orderkey", buckets=4)
    definition = lh.table(name)
    rng = random.Random(37)
    proposals = [{b: rng.randint(0, 1000) for b in range(4)} for _ in range(12)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda floors: record_retention_floors(lh.store, definition, floors), proposals))
    highest = {b: max(p[b] for p in proposals) for b in range(4)}
    assert retention_floors(lh.store, definition) == highest
    assert record_retention_floors(lh.store, definition, dict.fromkeys(range(4), 0)) == highest  # never lowered


def test_a_table_without_a_record_gets_one_when_retention_first_runs(lakehouse: Lakehouse) -> None:
    """A table from before retention records: what is gone already cannot be told from retention and is
    adopted as the floor the first time retention runs. A dropped table's record goes with it."""
    lh, name = lakehouse, "ods.t"
    lh.create_table(name, ORDERS, bucket_key="o_orderkey", buckets=2, log_format="segments")
    for i in range(3):
        lh.log(name).append(orders(range(i * 20, i * 20 + 20)))
    lh.tier(name)
    old = lh.store.get(retention_key(name)).data
    lh.store.delete(retention_key(name))
    lh.store.delete(f"{TableName.parse(name).bucket_prefix(0)}{0:020d}.arrow")  # before any record
    assert retention_floors(lh.store, lh.table(name)) is None
    result = lh.apply_log_retention(name, retention=timedelta(0))
    assert not result.gaps and result.segments_deleted == 3
    newest = {b: segment_bases(lh, name, b)[-1] for b in range(2)}
    assert retention_floors(lh.store, lh.table(name)) == result.floors == newest

    lh.drop_table(name)
    assert not lh.store.exists(retention_key(name))
    lh.store.put(retention_key(name), old)  # a stale record of the dropped table: not the new table's
    lh.create_table(name, ORDERS, bucket_key="o_orderkey", buckets=2)
    assert retention_floors(lh.store, lh.table(name)) == {0: 0, 1: 0}
