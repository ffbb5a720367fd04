"""Net changelogs (issue 24): lh.changes(start, end) applied to the state at start gives the state at end; every
row's kind agrees with the state at start; old rows are looked up (pruned), not scanned; bad ranges are refused;
retention and expiry give a clear error, never a wrong change. Both backends."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakehouse import Lakehouse
from lakehouse.errors import AsOfUnavailable, InvalidArgument, SchemaError
from lakehouse.iceberg.datafiles import LakeContext
from lakehouse.read.changes import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE, apply_changes
from lakestream.cli import app
from tests.support.keyed_tables import BUCKETS, NAME, SCHEMA, USER, batch, build, oracle

COLS = [*USER, "__bucket", "__offset"]


def rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in COLS), strict=True))


def by_key(table: pa.Table) -> dict[int, tuple]:
    return {r[0]: r for r in rows(table)}


class SpyParquet:
    """A spy around the lake's data files as lookups open them (`LakeContext.open_parquet`): which row groups
    are read, with which columns (``reads``: file name, columns or None for whole rows), and the size of every
    batch of whole rows decoded (``sizes``)."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, tuple | None]] = []
        self.sizes: list[int] = []

    def wrap(self, location: str, parquet):
        spy = self

        class File:
            def __enter__(self):
                return self

            def __exit__(self, *exc) -> None:
                parquet.close()

            def __getattr__(self, attr: str):
                return getattr(parquet, attr)

            def read_row_group(self, i: int, columns=None):
                spy.reads.append((location.rsplit("/", 1)[-1], tuple(columns) if columns else None))
                return parquet.read_row_group(i, columns=columns)

            def iter_batches(self, *, row_groups, columns=None, **kwargs):  # whole rows, batch by batch
                spy.reads.extend((location.rsplit("/", 1)[-1], tuple(columns) if columns else None) for _ in row_groups)
                for b in parquet.iter_batches(row_groups=row_groups, columns=columns, **kwargs):
                    spy.sizes.append(b.num_rows)
                    yield b

        return File()


def spy_parquet(monkeypatch) -> SpyParquet:
    spy, real = SpyParquet(), LakeContext.open_parquet
    monkeypatch.setattr(LakeContext, "open_parquet", lambda self, location: spy.wrap(location, real(self, location)))
    return spy


def check_changes(lh: Lakehouse, start: dict[int, int], end: dict[int, int], expected) -> Counter:
    """Every invariant of a primary-key table's changes between ``start`` and ``end``; the kinds seen."""
    before = {r[0]: r for r in expected(start)}
    after = {r[0]: r for r in expected(end)}
    full = lh.changes(NAME, start, end, before_images=True)
    plain = lh.changes(NAME, start, end)
    assert full.column_names == [*USER, "__bucket", "__offset", "__timestamp", "_op"]
    ops = full.column("_op").to_pylist()
    assert set(ops) <= {INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE}
    # the state at start, changed, is the state at end
    state = lh.union_read(NAME, as_of=start).select(COLS)
    assert rows(apply_changes(state, full, ["k"])) == expected(end), (start, end)
    assert rows(apply_changes(state, plain, ["k"])) == expected(end), (start, end)
    # every row agrees with the state at start; one row per changed key and kind
    for op in (INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE):
        part = full.filter(pa.compute.equal(full.column("_op"), op))
        keys = part.column("k").to_pylist()
        assert len(keys) == len(set(keys)), op
        for k, row in by_key(part).items():
            if op == INSERT:
                assert k not in before and after[k] == row
            elif op == UPDATE_AFTER:
                assert k in before and after[k] == row
            elif op == UPDATE_BEFORE:
                assert before[k] == row  # the old row, with its old offset
            else:
                assert before[k] == row and k not in after
    ub = set(full.filter(pa.compute.equal(full.column("_op"), UPDATE_BEFORE)).column("k").to_pylist())
    ua = set(full.filter(pa.compute.equal(full.column("_op"), UPDATE_AFTER)).column("k").to_pylist())
    assert ub == ua
    # within a bucket, before-images come first; without them the same rows minus update_before
    seen_after: set[int] = set()
    for op, bucket in zip(ops, full.column("__bucket").to_pylist(), strict=True):
        if op in (INSERT, UPDATE_AFTER):
            seen_after.add(bucket)
        assert not (bucket in seen_after and op in (UPDATE_BEFORE, DELETE)), ops
    assert sorted(plain.to_pylist(), key=str) == sorted(
        (r for r in full.to_pylist() if r["_op"] != UPDATE_BEFORE), key=str
    )
    return Counter(ops)


def test_primary_key_changes_applied_to_the_start_give_the_end(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh, "pk")  # the lake ahead of some maps, behind others; compacted; split snapshots
    expected = oracle(lh, "pk")
    maps = [dict.fromkeys(range(BUCKETS), 0), *ends]
    rng = random.Random(5)
    last = ends[-1]
    maps += [{b: rng.randint(0, last[b]) for b in range(BUCKETS)} for _ in range(3)]
    kinds: Counter = Counter()
    for start in maps:
        for end in maps:
            if all(start[b] <= end[b] for b in range(BUCKETS)):
                kinds += check_changes(lh, start, end, expected)
    assert set(kinds) == {INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE}  # the test saw every kind


def test_log_table_changes_are_the_records_in_the_range(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh, "log")
    log = lh.log(NAME)
    records = {b: log.read(b, 0).to_pylist() for b in range(BUCKETS)}
    for start, end in [(dict.fromkeys(range(BUCKETS), 0), ends[2]), (ends[1], ends[4]), (ends[3], ends[5])]:
        got = lh.changes(NAME, start, end, before_images=True)
        assert set(got.column("_op").to_pylist()) <= {INSERT}
        want = sorted(
            (*(r[c] for c in USER), b, r["_offset"]) for b in range(BUCKETS) for r in records[b][start[b] : end[b]]
        )
        assert rows(got) == want
    assert lh.changes(NAME, ends[2], ends[2]).num_rows == 0


def test_a_key_deleted_and_inserted_again_and_one_that_never_existed(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=1)
    log = lh.log(NAME)
    log.append(batch([1, 2, 3], "a"), op="upsert")
    lh.tier(NAME)
    start = log.end_offsets()
    log.append(batch([1], "x"), op="delete")
    log.append(batch([1], "b"), op="upsert")  # deleted, then back: an update of the old row
    log.append(batch([2], "x"), op="delete")  # gone
    log.append(batch([9], "c"), op="upsert")
    log.append(batch([9], "x"), op="delete")  # born and gone inside the range: nothing
    log.append(batch([3], "a"), op="upsert")  # the same values again: still an update
    got = lh.changes(NAME, start, log.end_offsets(), before_images=True)
    assert sorted((r["k"], r["v"], r["_op"]) for r in got.to_pylist()) == [
        (1, "a-1", UPDATE_BEFORE),
        (1, "b-1", UPDATE_AFTER),
        (2, "a-2", DELETE),  # what was deleted, not the key-only delete record
        (3, "a-3", UPDATE_AFTER),
        (3, "a-3", UPDATE_BEFORE),
    ]


def test_projection_keeps_the_key_and_the_system_columns(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh, "pk")
    got = lh.changes(NAME, ends[0], ends[3], columns=["n"], before_images=True)
    assert got.column_names == ["n", "k", "__bucket", "__offset", "__timestamp", "_op"]
    full = lh.changes(NAME, ends[0], ends[3], before_images=True)
    assert sorted(got.select(["k", "n", "_op"]).to_pylist(), key=str) == sorted(
        full.select(["k", "n", "_op"]).to_pylist(), key=str
    )
    with pytest.raises(SchemaError, match="unknown column"):
        lh.changes(NAME, ends[0], ends[3], columns=["nope"])


def test_bad_ranges_are_refused_before_anything_is_read(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh, "pk")
    zero = dict.fromkeys(range(BUCKETS), 0)
    with pytest.raises(InvalidArgument, match=r"start after their end in bucket \d \(start \d+ > end 0\)"):
        lh.changes(NAME, ends[1], zero)
    with pytest.raises(InvalidArgument, match="start must name every bucket.*lacks bucket"):
        lh.changes(NAME, {0: 0}, ends[1])
    with pytest.raises(InvalidArgument, match="start names bucket"):
        lh.changes(NAME, {**zero, 7: 0}, ends[1])
    with pytest.raises(InvalidArgument, match="start offsets must be >= 0"):
        lh.changes(NAME, {**zero, 1: -1}, ends[1])
    with pytest.raises(InvalidArgument, match="end is beyond the end"):
        lh.changes(NAME, zero, {**ends[-1], 0: ends[-1][0] + 1})
    with pytest.raises(InvalidArgument, match="start maps bucket numbers to offsets"):
        lh.changes(NAME, {**zero, 0: "x"}, ends[1])


def test_old_rows_are_looked_up_in_the_files_that_can_hold_them(lakehouse: Lakehouse, monkeypatch) -> None:
    """Three tiering rounds of disjoint key ranges (one file each per bucket, row groups of 100 rows): a change of
    keys from the second range reads only the second round's files, in them only the row groups whose key range
    holds a changed key, and whole rows only of the row groups holding one."""
    lh = lakehouse
    monkeypatch.setattr("lakehouse.iceberg.datafiles.ROW_GROUP_ROWS", 100)
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=2)
    log = lh.log(NAME)
    for r in range(3):
        log.append(batch(range(r * 1000, r * 1000 + 1000), f"r{r}"), op="upsert")
        lh.tier(NAME)
    start = log.end_offsets()
    log.append(batch([1500, 1501], "new"), op="upsert")
    updated = log.end_offsets()
    log.append(batch([2999], "new"), op="delete")
    end = log.end_offsets()
    reads = spy_parquet(monkeypatch).reads
    got = lh.changes(NAME, start, end, before_images=True)
    assert sorted((r["k"], r["_op"]) for r in got.to_pylist()) == [
        (1500, UPDATE_AFTER),
        (1500, UPDATE_BEFORE),
        (1501, UPDATE_AFTER),
        (1501, UPDATE_BEFORE),
        (2999, DELETE),
    ]
    files = {name for name, _ in reads}
    assert len(lh.lake_table(NAME).inspect.files()) == 6  # 3 rounds x 2 buckets
    # key 1500/1501 sit in round 1's files, 2999 in round 2's: at most those 4 files (of 6) are opened, each
    # first for its key column; whole rows only where a key matched
    assert len(files) <= 4, reads
    assert {cols for _, cols in reads} == {("k",), None}
    # ~5 row groups per file; 3 keys: at most 3 groups (one per key) read, each for its key column, then whole
    assert sum(cols == ("k",) for _, cols in reads) <= 3, reads
    assert sum(cols is None for _, cols in reads) <= 3
    # without before-images, updates need only to know the key existed: no whole row is read
    reads.clear()
    got = lh.changes(NAME, start, updated)
    assert sorted((r["k"], r["_op"]) for r in got.to_pylist()) == [(1500, UPDATE_AFTER), (1501, UPDATE_AFTER)]
    assert reads and all(cols == ("k",) for _, cols in reads), reads


def test_a_lookup_decodes_whole_rows_batch_by_batch_and_keeps_exactly_its_keys(
    lakehouse: Lakehouse, monkeypatch
) -> None:
    """Row groups of 100 rows decoded 7 rows at a time (a row group's mask is cut at batch boundaries): the rows
    found are exactly those of the keys, with their values; no batch of whole rows is larger than 7."""
    lh = lakehouse
    monkeypatch.setattr("lakehouse.iceberg.datafiles.ROW_GROUP_ROWS", 100)
    monkeypatch.setattr("lakehouse.read.changes.LOOKUP_BATCH_ROWS", 7)
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=2)
    log = lh.log(NAME)
    log.append(batch(range(1000), "lake"), op="upsert")
    lh.tier(NAME)
    log.append(batch([5, 6], "tail"), op="upsert")  # the log after the snapshot wins
    sizes = spy_parquet(monkeypatch).sizes
    keys = [0, 5, 6, 13, 14, 99, 100, 101, 499, 500, 998, 999, 5000]  # batch and row-group edges, one absent
    found = lh.lookup(NAME, pa.table({"k": pa.array(keys, pa.int64())}), as_of=log.end_offsets())
    expected = lh.union_read(NAME).filter(pa.compute.field("k").isin(keys))
    assert sorted(found.to_pylist(), key=lambda r: r["k"]) == sorted(
        expected.select(USER).to_pylist(), key=lambda r: r["k"]
    )
    assert {r["k"]: r["v"] for r in found.to_pylist()}[5].startswith("tail")
    assert sizes and max(sizes) <= 7


def test_lookup_of_keys_as_of_offsets(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh, "pk")  # the lake ahead of some maps, behind others
    expected = oracle(lh, "pk")
    for m in ends:
        state = {r[0]: r for r in expected(m)}
        keys = sorted(state)[::3] + [10**9]
        found = lh.lookup(NAME, pa.table({"k": pa.array(keys + keys[:2], pa.int64())}), as_of=m)  # repeats: once
        assert sorted(found.to_pylist(), key=lambda r: r["k"]) == [
            dict(zip(USER, state[k][: len(USER)], strict=True)) for k in keys if k in state
        ]
        assert found.schema == lh.union_read(NAME, as_of=m).select(USER).schema  # union_read's types
    assert lh.lookup(NAME, pa.table({"k": pa.array([], pa.int64())}), as_of=ends[0]).num_rows == 0
    assert lh.lookup(NAME, pa.table({"k": pa.array([None], pa.int64())}), as_of=ends[0]).num_rows == 0
    with pytest.raises(InvalidArgument, match="lack primary-key column"):
        lh.lookup(NAME, pa.table({"x": [1]}), as_of=ends[0])
    with pytest.raises(InvalidArgument):
        lh.lookup(NAME, pa.table({"k": [1]}), as_of={0: -1})
    lh.create_table("ods.records", SCHEMA, bucket_key="k", buckets=BUCKETS)  # no primary key
    with pytest.raises(InvalidArgument, match="no primary key"):
        lh.lookup("ods.records", pa.table({"k": [1]}), as_of=dict.fromkeys(range(BUCKETS), 0))


def test_retention_of_the_range_is_a_clear_error(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh, "log")
    lh.tier(NAME)
    lh.apply_log_retention(NAME, retention=timedelta(0))
    first = lh.log(NAME).start_offsets()
    lost = [b for b in range(BUCKETS) if first[b] > 0]
    assert lost
    with pytest.raises(AsOfUnavailable, match=f"changes of bucket {lost[0]} from offset 0: the log holds it") as info:
        lh.changes(NAME, dict.fromkeys(range(BUCKETS), 0), ends[-1])
    assert info.value.unavailable == {lost[0]: first[lost[0]]}
    # from the log's first offsets on, the changes read
    assert lh.changes(NAME, first, lh.log(NAME).end_offsets()).num_rows == sum(
        ends[-1][b] - first[b] for b in range(BUCKETS)
    )


@pytest.mark.segments  # per-bucket retention: whole commits' retention keeps more of the log
def test_expired_old_state_is_a_clear_error_or_read_from_what_is_left(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh, "pk")
    expected = oracle(lh, "pk")
    lh.tier(NAME)
    lh.expire_snapshots(NAME, older_than=timedelta(0), retain_last=1)
    # the log is all there: the old state comes from the log alone
    check_changes(lh, ends[0], ends[2], expected)
    lh.apply_log_retention(NAME, retention=timedelta(0))
    with pytest.raises(AsOfUnavailable, match="cannot read the changes of bucket"):
        lh.changes(NAME, ends[0], ends[-1])


def test_cli_prints_changes(tmp_path) -> None:
    wh = tmp_path.as_uri()
    lh = Lakehouse.open(wh)
    ends = build(lh, "pk")
    start = ",".join(f"{b}:{o}" for b, o in ends[0].items())
    end = ",".join(f"{b}:{o}" for b, o in ends[2].items())
    runner = CliRunner()
    result = runner.invoke(app, ["table", "changes", NAME, "--start", start, "--end", end, "--before-images", "-w", wh])
    assert result.exit_code == 0, result.output
    n = lh.changes(NAME, ends[0], ends[2], before_images=True).num_rows
    assert f"{n:,} changes" in result.output and "update_before" in result.output
    # without --end: up to the log's end, which it prints
    now = runner.invoke(app, ["table", "changes", NAME, "--start", end, "-w", wh, "--limit", "0"])
    assert now.exit_code == 0 and "up to " + ",".join(f"{b}:{o}" for b, o in ends[-1].items()) in now.output
    bad = runner.invoke(app, ["table", "changes", NAME, "--start", end, "--end", start, "-w", wh])
    assert bad.exit_code == 1 and "start after their end" in bad.output
