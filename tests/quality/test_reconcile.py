"""Reconciliation of the lake against the log (issue 26, item 1): clean tables pass (first run in full, later runs
commit by commit from the recorded result), and every fault is caught and named: a rogue commit that drops a
row, duplicates one, changes a value or adds a file twice; a missing log segment; offsets moved backwards.
Both backends; the randomized clean runs on the local one."""

from __future__ import annotations

import random
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakehouse import Lakehouse
from lakehouse.iceberg.datafiles import LakeContext
from lakehouse.iceberg.offsets import tiering_snapshot, tiering_summary
from quality.reconcile import reconcile, state_key
from tests.support.keyed_tables import BUCKETS, NAME, SCHEMA, batch, build
from tests.support.rogue import live_files, rewrite, rogue_commit


def codes(result) -> list[str]:
    return sorted({v.check for v in result.violations})


@pytest.mark.parametrize("kind", ["pk", "log"])
def test_clean_tables_pass_in_full_then_commit_by_commit(lakehouse: Lakehouse, kind: str) -> None:
    lh = lakehouse
    build(lh, kind)  # six rounds, tiered in splits, compacted once
    first = reconcile(lh, NAME)
    assert first.ok, [str(v) for v in first.violations]
    assert first.details["mode"] == "full" and first.rows > 0
    assert first.snapshot_id == lh.lake_table(NAME).current_snapshot().snapshot_id
    assert lh.store.exists(state_key(NAME))
    # nothing new: nothing to read
    again = reconcile(lh, NAME)
    assert again.ok and again.details["mode"] == "incremental" and again.details["commits_checked"] == 0
    assert again.rows == 0
    # new commits (tiering in splits, a compaction) are checked one by one
    log = lh.log(NAME)
    log.append(batch(range(40, 90), "late"), op="upsert" if kind == "pk" else "insert")
    if kind == "pk":
        log.append(batch(range(0, 20, 3), "gone"), op="delete")
    lh.tier(NAME, max_split_rows=9)
    lh.compact(NAME, min_input_files=2)
    before = len(lh.lake_table(NAME).metadata.snapshots)
    inc = reconcile(lh, NAME)
    assert inc.ok, [str(v) for v in inc.violations]
    assert inc.details["mode"] == "incremental" and inc.details["commits_checked"] >= 2
    assert len(lh.lake_table(NAME).metadata.snapshots) == before  # checking commits nothing to the lake
    assert reconcile(lh, NAME, full=True).ok


def test_rogue_commit_dropping_a_row_is_named(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    build(lh, "pk")
    assert reconcile(lh, NAME).ok
    f = live_files(lh, 1)[0]
    victim = LakeContext.of(lh.store, lh.lake_table(NAME)).read(f.file_path).column("k")[0].as_py()
    rewrite(lh, f, lambda rows: rows.filter(pc.not_equal(rows.column("k"), victim)))
    for result in (reconcile(lh, NAME), reconcile(lh, NAME, full=True)):
        assert not result.ok and codes(result) == ["content"]
        (v,) = result.violations
        assert v.bucket == 1 and v.keys == (victim,) and v.table == NAME
        assert v.expected["k"] == victim and v.actual is None and "missing" in v.message
        assert v.snapshot_id == lh.lake_table(NAME).current_snapshot().snapshot_id
    # the failed check was not recorded: the next run finds it again
    assert not reconcile(lh, NAME).ok


def test_rogue_commit_changing_a_value_names_key_column_and_values(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    build(lh, "pk")
    assert reconcile(lh, NAME).ok
    f = live_files(lh, 2)[0]
    rows = LakeContext.of(lh.store, lh.lake_table(NAME)).read(f.file_path)
    victim, old = rows.column("k")[0].as_py(), rows.column("v")[0].as_py()

    def change(t: pa.Table) -> pa.Table:
        v = pc.if_else(pc.equal(t.column("k"), victim), "tampered", t.column("v"))
        return t.set_column(t.schema.get_field_index("v"), "v", v)

    rewrite(lh, f, change)
    for result in (reconcile(lh, NAME), reconcile(lh, NAME, full=True)):
        (v,) = result.violations
        assert v.check == "content" and v.bucket == 2 and v.keys == (victim,)
        assert v.expected["v"] == old and v.actual["v"] == "tampered"
        assert f"v expected {old!r}, got 'tampered'" in v.message


@pytest.mark.parametrize("kind", ["pk", "log"])
def test_a_row_duplicated_and_a_file_added_twice_are_caught(lakehouse: Lakehouse, kind: str) -> None:
    lh = lakehouse
    build(lh, kind)
    assert reconcile(lh, NAME).ok
    f = live_files(lh, 0)[0]
    ctx = LakeContext.of(lh.store, lh.lake_table(NAME))
    one = ctx.read(f.file_path).slice(0, 1)
    key = one.column("k")[0].as_py()
    copy = ctx.write(one, tuple(f.partition[i] for i in range(len(f.partition))), "dup")
    rogue_commit(lh, add=[copy])
    result = reconcile(lh, NAME)
    (v,) = result.violations
    assert v.check == "content" and v.bucket == 0 and "not in the log" in v.message
    assert v.actual["k"] == key
    assert "content" in codes(reconcile(lh, NAME, full=True))
    # the same file a second time
    lh.store.delete(state_key(NAME))
    rogue_commit(lh, add=[f])
    full = reconcile(lh, NAME, full=True)
    assert "file-twice" in codes(full) and "content" in codes(full)
    assert any(v.check == "file-twice" and f.file_path in v.message for v in full.violations)


def test_a_file_added_twice_is_caught_commit_by_commit(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    build(lh, "log")
    assert reconcile(lh, NAME).ok
    f = live_files(lh, 1)[0]
    rogue_commit(lh, add=[f])
    result = reconcile(lh, NAME)
    assert codes(result) == ["content", "file-twice"]
    twice = next(v for v in result.violations if v.check == "file-twice")
    assert twice.bucket == 1 and f.file_path in twice.message


def test_a_missing_log_segment_is_named_with_its_range(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    build(lh, "pk", log_format="segments")
    assert reconcile(lh, NAME).ok
    log = lh.log(NAME)
    log.append(batch(range(100, 130), "x"), op="upsert")
    log.append(batch(range(130, 160), "y"), op="upsert")
    start = lh.lake_offsets(NAME)
    lh.tier(NAME)
    end = lh.lake_offsets(NAME)
    bucket = next(b for b in range(BUCKETS) if end[b] - start[b] >= 2)
    keys = sorted(k.key for k in lh.store.list(f"ods/t/log/{bucket:05d}/"))
    lh.store.delete(keys[-1])  # the newest segment of a range tiered but not yet checked
    result = reconcile(lh, NAME)
    assert "log-missing" in codes(result)
    v = next(v for v in result.violations if v.check == "log-missing")
    assert v.bucket == bucket and v.offsets == (start[bucket], end[bucket])
    full = reconcile(lh, NAME, full=True)
    assert any(v.check in ("log-missing", "offsets-ahead") and v.bucket == bucket for v in full.violations)


def test_bit_rot_in_a_checked_segment_is_found_by_full_only(lakehouse: Lakehouse) -> None:
    """docs/guides/quality.md says so: an incremental check does not re-read a segment it already checked, so one that
    rots afterwards (a byte changed in place, size and header unchanged) passes it; `full` re-reads every
    retained segment, whose CRC-32C then fails, and names the bucket."""
    lh = lakehouse
    build(lh, "log", log_format="segments")
    lh.tier(NAME)
    assert reconcile(lh, NAME).ok
    key = next(k.key for k in lh.store.list("ods/t/log/00001/"))
    segment = lh.store.get(key)
    rotten = bytearray(segment.data)
    rotten[len(rotten) // 2] ^= 0x01
    lh.store.put(key, bytes(rotten), metadata=segment.metadata)
    assert lh.store.head(key).size == len(segment.data)
    assert reconcile(lh, NAME).ok  # nothing new: the rotten segment is not read again
    full = reconcile(lh, NAME, full=True)
    assert any(v.check == "log-missing" and v.bucket == 1 for v in full.violations), [str(v) for v in full.violations]


def test_offsets_moved_backwards_are_named(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    build(lh, "log")
    assert reconcile(lh, NAME).ok
    table = lh.lake_table(NAME)
    offsets = lh.lake_offsets(NAME)
    back = dict(offsets)
    back[2] = offsets[2] - 3
    rogue_commit(lh, summary=tiering_summary(back, tiering_snapshot(table.metadata)))
    result = reconcile(lh, NAME)
    v = next(v for v in result.violations if v.check == "offsets-backwards")
    assert v.bucket == 2 and v.offsets == (offsets[2], offsets[2] - 3)
    assert v.snapshot_id == lh.lake_table(NAME).current_snapshot().snapshot_id


def test_no_false_alarm_over_randomized_clean_runs(tmp_path) -> None:
    """50 clean randomized histories (upserts, deletes, tiering in splits, compaction), checked after every
    step: never a violation. Local backend (the S3 one runs the fault tests above)."""
    for seed in range(50):
        rng = random.Random(seed)
        lh = Lakehouse.open(f"file://{tmp_path}/wh{seed}")
        pk = seed % 3 != 0
        if pk:
            # integer keys, a string key and a composite key (different reduction and key-set paths)
            key = [["k"], ["v"], ["n", "k"]][seed % 7 % 3]
            lh.create_table(NAME, SCHEMA, primary_key=key, bucket_key=key[-1], buckets=rng.randint(1, 4))
        else:
            lh.create_table(NAME, SCHEMA, bucket_key="k", buckets=rng.randint(1, 4))
        log = lh.log(NAME)
        for step in range(rng.randint(2, 4)):
            keys = rng.sample(range(200), rng.randint(1, 40))
            log.append(batch(keys, f"s{seed}-{step}"), op="upsert" if pk else "insert")
            if pk and rng.random() < 0.6:
                gone = batch(rng.sample(range(200), rng.randint(1, 20)), f"s{seed}-{step - 1}")
                log.append(gone.select([c for c in SCHEMA.names if c in key]), op="delete")
            if rng.random() < 0.8:
                lh.tier(NAME, max_split_rows=rng.choice([None, 5, 17]))
            if rng.random() < 0.3:
                lh.compact(NAME, min_input_files=2)
            result = reconcile(lh, NAME, full=rng.random() < 0.2)
            assert result.ok, (seed, step, [str(v) for v in result.violations])
        lh.close()


def tiered_and_checked(lh: Lakehouse):
    """A tiered primary-key table whose check passes: its lake table, a live file of bucket 0, a context to
    write beside it, and the first key that file holds."""
    build(lh, "pk")
    lh.tier(NAME)
    assert reconcile(lh, NAME).ok
    table = lh.lake_table(NAME)
    f = live_files(lh, 0)[0]
    ctx = LakeContext.of(lh.store, table)
    return table, f, ctx, ctx.read(f.file_path).column("k")[0].as_py()


def test_a_tiering_commit_that_keeps_a_stale_row_is_caught(lakehouse: Lakehouse) -> None:
    """A (buggy) tiering commit adds a key's new row but keeps the file with its old one: the key is twice."""
    from lakehouse.iceberg.layout import log_to_lake_rows

    lh = lakehouse
    table, f, ctx, key = tiered_and_checked(lh)
    log = lh.log(NAME)
    start = lh.lake_offsets(NAME)
    log.append(batch([key], "new"), op="upsert")
    end = log.end_offsets()
    assert [b for b in range(BUCKETS) if end[b] != start[b]] == [0]
    rows = log_to_lake_rows(log.read(0, start[0], end[0]), 0)
    added = ctx.write(rows, tuple(f.partition[i] for i in range(len(f.partition))), "buggy")
    rogue_commit(lh, add=[added], summary=tiering_summary(end, tiering_snapshot(table.metadata)))
    result = reconcile(lh, NAME)
    (v,) = result.violations
    assert v.check == "content" and v.bucket == 0 and v.keys == (key,) and "twice" in v.message
    assert v.offsets == (start[0], end[0])
    assert "content" in codes(reconcile(lh, NAME, full=True))


def test_a_deleted_or_truncated_data_file_is_named_by_every_check(lakehouse: Lakehouse) -> None:
    """A data file of the current snapshot deleted by hand: the incremental check (no new commit) and the full
    one both report `file-missing` naming file and snapshot (the full one without reading it, so no error);
    a file of another size is `file-size`. Existence and sizes come from listings, not reads."""
    lh = lakehouse
    build(lh, "log")
    assert reconcile(lh, NAME).ok
    current = lh.lake_table(NAME).current_snapshot().snapshot_id
    gone, short = live_files(lh, 1)[0], live_files(lh, 2)[0]
    ctx = LakeContext.of(lh.store, lh.lake_table(NAME))
    lh.store.delete(ctx.key_of(gone.file_path))
    for full in (False, True):
        result = reconcile(lh, NAME, full=full)
        assert result.error is None and codes(result) == ["file-missing"], [str(v) for v in result.violations]
        (v,) = result.violations
        assert v.table == NAME and v.bucket == 1 and v.snapshot_id == current and gone.file_path in v.message
        assert result.rows == 0 or full  # the incremental check reads no data to find it
    assert reconcile(lh, NAME, full=True).details["unverified_buckets"] == [1]
    # the failed check recorded nothing: the file is still missing on the next run
    assert codes(reconcile(lh, NAME)) == ["file-missing"]

    data = lh.store.get(ctx.key_of(short.file_path)).data
    lh.store.put(ctx.key_of(short.file_path), data[:-10])
    result = reconcile(lh, NAME)
    assert codes(result) == ["file-missing", "file-size"]
    size = next(v for v in result.violations if v.check == "file-size")
    assert size.bucket == 2 and short.file_path in size.message
    assert (size.expected, size.actual) == (short.file_size_in_bytes, short.file_size_in_bytes - 10)
    assert codes(reconcile(lh, NAME, full=True)) == ["file-missing", "file-size"]


def test_a_log_segment_deleted_by_hand_is_told_from_retention(lakehouse: Lakehouse) -> None:
    """Retention records how far it removes each bucket before deleting; a bucket whose log starts above that
    floor lost the records in between to something else: `log-missing` naming bucket and offsets, in the
    incremental check (no new commit) and the full one. What retention removed is no violation."""
    lh = lakehouse
    build(lh, "log", log_format="segments")  # the last round is not tiered: every bucket keeps un-tiered segments
    assert reconcile(lh, NAME).ok

    def segments(bucket: int) -> list[int]:
        return sorted(int(i.key.rsplit("/", 1)[1][:-6]) for i in lh.store.list(f"ods/t/log/{bucket:05d}/"))

    first, second = segments(1)[:2]
    assert first == 0
    lh.store.delete(f"ods/t/log/00001/{first:020d}.arrow")  # tiered: the lake still has its rows
    for full in (False, True):
        result = reconcile(lh, NAME, full=full)
        assert codes(result) == ["log-missing"], [str(v) for v in result.violations]
        (v,) = result.violations
        assert v.table == NAME and v.bucket == 1 and v.offsets == (0, second)

    # retention leaves the damaged bucket alone (removing more would hide the loss) and records the others
    from lakehouse.maintenance.retention import retention_floors

    retained = lh.apply_log_retention(NAME, retention=timedelta(0))
    assert retained.segments_deleted > 0 and retained.gaps == {1: (0, second)}
    floors = retention_floors(lh.store, lh.table(NAME))
    assert floors == {0: segments(0)[0], 1: 0, 2: segments(2)[0]} and floors[0] > 0 and floors[2] > 0
    for full in (False, True):
        result = reconcile(lh, NAME, full=full)
        assert [(v.check, v.bucket, v.offsets) for v in result.violations] == [("log-missing", 1, (0, second))]

    # the first segment retention kept in bucket 2, deleted by hand
    floor, following = segments(2)[:2]
    lh.store.delete(f"ods/t/log/00002/{floor:020d}.arrow")
    result = reconcile(lh, NAME)
    assert [(v.bucket, v.offsets) for v in result.violations] == [(1, (0, second)), (2, (floor, following))]
    assert "retention" in result.violations[1].message


def test_a_rogue_position_delete_is_named_by_both_checks(lakehouse: Lakehouse) -> None:
    """Merge-on-read: a commit that marks a live row deleted (no log change says so) loses that row. The
    incremental check names it as a commit that is not tiering marking rows; the full one as a missing row."""
    from lakehouse.iceberg.commits import append_row_changes
    from lakehouse.iceberg.position_deletes import write_position_deletes

    lh = lakehouse
    table, f, ctx, key = tiered_and_checked(lh)
    mark = write_position_deletes(
        ctx, tuple(f.partition[i] for i in range(len(f.partition))), "rogue", [(f.file_path, [0])]
    )
    with table.transaction() as txn:
        append_row_changes(txn, [mark], {})
    assert key not in lh.lake_read(NAME).column("k").to_pylist()  # every reader drops it
    result = reconcile(lh, NAME)
    assert "content" in codes(result) and any("marked rows deleted" in v.message for v in result.violations)
    full = reconcile(lh, NAME, full=True)
    assert not full.ok and any(key in v.keys for v in full.violations), [str(v) for v in full.violations]


def test_on_spark_executors_the_driver_reads_no_rows_and_finds_the_same(lakehouse: Lakehouse, spark, monkeypatch):
    """With Spark's executors, each bucket's check (data files, position deletes, the log range) runs in a task
    on the Python workers; only findings come back. The driver process may read no Parquet file and no log
    record (guarded: both fail in this process), and finds what the threads of one process find, full and
    commit by commit."""
    import pyarrow.parquet as pq

    from lakehouse.executor import SparkExecutor
    from lakehouse.log import Log

    lh = lakehouse
    build(lh, "pk")  # merge-on-read rounds, splits, a compaction
    executor = SparkExecutor(spark)

    def driver_read(*args, **kwargs):
        raise AssertionError("the driver read table data")

    with monkeypatch.context() as guard:
        guard.setattr(pq, "read_table", driver_read)
        guard.setattr(Log, "read", driver_read)
        first = reconcile(lh, NAME, executor=executor)
    assert first.ok and first.details["mode"] == "full" and first.rows > 0, [str(v) for v in first.violations]
    log = lh.log(NAME)
    log.append(batch(range(40, 90), "late"), op="upsert")
    log.append(batch(range(0, 20, 3), "gone"), op="delete")
    lh.tier(NAME, max_split_rows=9)
    with monkeypatch.context() as guard:
        guard.setattr(pq, "read_table", driver_read)
        guard.setattr(Log, "read", driver_read)
        inc = reconcile(lh, NAME, executor=executor)
    assert inc.ok and inc.details["mode"] == "incremental" and inc.details["commits_checked"] >= 1 and inc.rows > 0
    # a rogue commit that drops a row: the same violation from the executors as from local threads
    f = live_files(lh, 1)[0]
    victim = LakeContext.of(lh.store, lh.lake_table(NAME)).read(f.file_path).column("k")[0].as_py()
    rewrite(lh, f, lambda rows: rows.filter(pc.not_equal(rows.column("k"), victim)))
    for full in (False, True):
        remote = reconcile(lh, NAME, full=full, executor=executor)
        local = reconcile(lh, NAME, full=full)
        assert remote.violations == local.violations and codes(remote) == ["content"]
        assert remote.violations[0].keys == (victim,) and remote.rows == local.rows
