"""Reads as of log offsets (issue 24): union_read(as_of=m) == the log alone, reduced, below m, whether the lake
is ahead of m, behind it or both; a clear error once expiry and retention removed what m needs. Both backends."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakehouse import Lakehouse
from lakehouse.errors import AsOfUnavailable, CorruptDataFileError, InvalidArgument
from lakehouse.iceberg.offsets import COMMIT_USER_PROPERTY, TIERING_USER
from lakehouse.read.union import plan_as_of, plan_read, snapshot_offsets
from lakestream.cli import app
from tests.support.keyed_tables import BUCKETS, NAME, SCHEMA, USER, batch, build, oracle


def got(table: pa.Table | list[pa.RecordBatch]) -> list[tuple]:
    if isinstance(table, list):
        table = pa.Table.from_batches(table) if table else pa.table({c: [] for c in [*USER, "__bucket", "__offset"]})
    cols = [*USER, "__bucket", "__offset"]
    return sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True))


def mixes(ends: list[dict[int, int]], n: int, seed: int) -> list[dict[int, int]]:
    """``n`` maps taking each bucket from a random recorded map, and ``n`` with random offsets (mid-segment)."""
    rng = random.Random(seed)
    last = ends[-1]
    out = [{b: rng.choice(ends)[b] for b in range(BUCKETS)} for _ in range(n)]
    out += [{b: rng.randint(0, last[b]) for b in range(BUCKETS)} for _ in range(n)]
    return out


@pytest.mark.parametrize("kind", ["pk", "log"])
def test_as_of_equals_the_log_reduced_below_the_offsets(lakehouse: Lakehouse, kind: str) -> None:
    lh = lakehouse
    ends = build(lh, kind)
    expected = oracle(lh, kind)
    lake = lh.lake_offsets(NAME)
    table = lh.lake_table(NAME)
    seen = set()
    maps = [*ends, dict.fromkeys(range(BUCKETS), 0), *mixes(ends, 8, seed=len(kind))]
    for m in maps:
        ahead = {b for b in range(BUCKETS) if lake[b] > m[b]}
        seen.add("ahead" if len(ahead) == BUCKETS else "behind" if not ahead else "mixed")
        assert got(lh.union_read(NAME, as_of=m)) == expected(m), (m, lake)
        plan = plan_as_of(table, lh.table(NAME), m)
        assert len(plan.scans) == len({sid for sid, _ in plan.scans})  # one scan per snapshot
    assert seen == {"ahead", "behind", "mixed"}
    # the stream gives the same rows, and the default read is still the log's end
    for m in ends[:3]:
        assert got(list(lh.union_batches(NAME, as_of=m))) == expected(m)
    assert got(lh.union_read(NAME)) == expected(ends[-1]) == got(lh.union_read(NAME, as_of=ends[-1]))
    # a map the lake holds exactly (after round 2: tiered and compacted) is one scan of one snapshot, no tail
    plan = plan_as_of(table, lh.table(NAME), ends[1])
    assert plan.bases == ends[1] and len(plan.scans) == 1


@pytest.mark.parametrize("kind", ["pk", "log"])
def test_projection_and_filter_give_the_rows_of_the_full_as_of_result(lakehouse: Lakehouse, kind: str) -> None:
    lh = lakehouse
    ends = build(lh, kind)
    for m in [*ends[:3], *mixes(ends, 3, seed=7)]:
        full = lh.union_read(NAME, as_of=m).to_pylist()
        # the filter's column is not projected; for primary keys a key updated out of the filter hides its old row
        for where, keep in [("n < 3", lambda r: r["n"] < 3), ("v >= 'r2'", lambda r: r["v"] >= "r2")]:
            want = sorted((r["k"], r["__offset"]) for r in full if keep(r))
            part = lh.union_read(NAME, columns=["k", "__offset"], row_filter=where, as_of=m)
            assert part.column_names == ["k", "__offset"]
            assert sorted(zip(part["k"].to_pylist(), part["__offset"].to_pylist(), strict=True)) == want, (m, where)
            batches = list(lh.union_batches(NAME, columns=["k", "__offset"], row_filter=where, as_of=m))
            streamed = pa.Table.from_batches(batches, schema=part.schema)
            assert sorted(zip(streamed["k"].to_pylist(), streamed["__offset"].to_pylist(), strict=True)) == want


def test_lake_read_as_of_serves_the_offsets_a_tiering_round_committed(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh, "pk")
    expected = oracle(lh, "pk")
    for m in (ends[0], ends[1], ends[3], ends[4]):  # tiered right after these rounds
        assert got(lh.lake_read(NAME, as_of=m)) == expected(m)
    assert lh.lake_read(NAME, as_of=ends[1], columns=["k"], row_filter="n < 3").column_names == ["k"]
    with pytest.raises(AsOfUnavailable, match="lake holds no snapshot at bucket .* union_read as_of serves any offset"):
        lh.lake_read(NAME, as_of=ends[2])  # never tiered as such: round 3 was tiered with round 4


def test_as_of_is_checked_before_anything_is_read(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh, "pk")
    end = ends[-1]
    with pytest.raises(
        InvalidArgument, match=r"as_of must name every bucket of ods.t \(0..2\); it lacks bucket\(s\) \[1\]"
    ):
        lh.union_read(NAME, as_of={0: end[0], 2: end[2]})
    with pytest.raises(InvalidArgument, match=r"as_of names bucket\(s\) \[3\]; ods.t has buckets 0..2"):
        lh.union_read(NAME, as_of={**end, 3: 0})
    with pytest.raises(InvalidArgument, match=r"as_of offsets must be >= 0, got \{1: -1\}"):
        lh.union_read(NAME, as_of={**end, 1: -1})
    with pytest.raises(InvalidArgument, match=f"bucket 2 offset {end[2] + 1} \\(its end is {end[2]}\\)"):
        lh.union_batches(NAME, as_of={**end, 2: end[2] + 1})
    with pytest.raises(InvalidArgument, match="integers"):
        lh.union_read(NAME, as_of={0: "5", 1: 0, 2: 0})
    with pytest.raises(InvalidArgument, match="must map every bucket"):
        lh.union_read(NAME, as_of=[0, 0, 0])


def _old_enough() -> None:
    time.sleep(1.1)  # object listings have whole seconds: let every segment be older than "now"


@pytest.mark.parametrize("kind", ["pk", "log"])
def test_after_expiry_alone_the_log_serves_every_as_of(lakehouse: Lakehouse, kind: str) -> None:
    lh = lakehouse
    ends = build(lh, kind)
    expected = oracle(lh, kind)
    _old_enough()
    assert lh.expire_snapshots(NAME, older_than=timedelta(0)).expired  # only the newest tiering snapshot is left
    for m in [*ends, *mixes(ends, 4, seed=3)]:
        assert got(lh.union_read(NAME, as_of=m)) == expected(m)


@pytest.mark.segments  # per-bucket retention leaves both cases below; whole commits' retention keeps more
@pytest.mark.parametrize("kind", ["pk", "log"])
def test_after_expiry_and_retention_a_clear_error_never_a_wrong_state(lakehouse: Lakehouse, kind: str) -> None:
    lh = lakehouse
    ends = build(lh, kind)
    expected = oracle(lh, kind)
    lake = lh.lake_offsets(NAME)
    before = [(m, expected(m)) for m in [*ends, *mixes(ends, 6, seed=5)]]
    _old_enough()
    retained = lh.apply_log_retention(NAME, retention=timedelta(0))
    assert retained.segments_deleted > 0
    starts = lh.log(NAME).start_offsets()
    assert all(0 < starts[b] <= lake[b] for b in range(BUCKETS))
    # retention alone: the retained snapshots serve what the log lost (time travel, no log below the lake)
    served = refused = 0
    for m, rows in before:
        try:
            result = lh.union_read(NAME, as_of=m)
        except AsOfUnavailable as exc:  # only where the newest snapshot at or below m is below the log's start
            refused += 1
            bases = plan_as_of(lh.lake_table(NAME), lh.table(NAME), m).bases
            assert exc.unavailable and all(bases[b] < starts[b] and bases[b] < m[b] for b in exc.unavailable)
        else:
            served += 1
            assert got(result) == rows, m
    assert served and refused
    for m in (ends[0], ends[1]):  # tiered exactly, the log below them gone: the snapshots serve them
        assert got(lh.union_read(NAME, as_of=m)) == expected(m)
    assert lh.expire_snapshots(NAME, older_than=timedelta(0)).expired
    # now only the lake's newest offsets and the retained log remain
    m = ends[0]
    with pytest.raises(AsOfUnavailable) as info:
        lh.union_read(NAME, as_of=m)
    err = info.value
    assert set(err.unavailable) == {b for b in range(BUCKETS) if 0 < m[b] < lake[b]} != set()
    for b, oldest in err.unavailable.items():
        assert oldest == lake[b]  # the newest tiering snapshot's offset: the log holds the bucket from there on
        assert f"bucket {b} as of offset {m[b]}" in str(err)
    assert f"the oldest offset it can still be read as of is {err.oldest}" in str(err)
    with pytest.raises(AsOfUnavailable):
        list(lh.union_batches(NAME, as_of=m))
    # what is still servable is served right: the lake's own offsets, and anything from there on
    for m, rows in before:
        if all(m[b] >= lake[b] or m[b] == 0 for b in range(BUCKETS)):
            served += 1
            assert got(lh.union_read(NAME, as_of=m)) == rows
    assert got(lh.union_read(NAME, as_of=lake)) == expected(lake)


def test_cli_reads_as_of(tmp_path) -> None:
    wh = tmp_path.as_uri()
    lh = Lakehouse.open(wh)
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=2)
    log = lh.log(NAME)
    log.append(batch([1, 2, 3], "old"), op="upsert")
    first = log.end_offsets()
    lh.tier(NAME)
    log.append(batch([2], "new"), op="upsert")
    log.append(batch([3], "x"), op="delete")
    as_of = ",".join(f"{b}:{o}" for b, o in first.items())
    runner = CliRunner()
    result = runner.invoke(app, ["table", "read", NAME, "-w", wh, "--as-of", as_of, "--columns", "k,v"])
    assert result.exit_code == 0, result.output
    assert "3 rows (union read as of" in result.output and "old-2" in result.output and "new-2" not in result.output
    lake = runner.invoke(app, ["table", "read", NAME, "-w", wh, "--lake", "--as-of", as_of])
    assert lake.exit_code == 0 and "3 rows (lake as of" in lake.output, lake.output
    missing = runner.invoke(app, ["table", "read", NAME, "-w", wh, "--as-of", "0:1"])
    assert missing.exit_code == 1 and "lacks bucket(s) [1]" in missing.output
    bad = runner.invoke(app, ["table", "read", NAME, "-w", wh, "--as-of", "0=1"])
    assert bad.exit_code == 1 and "bucket:offset" in bad.output


@pytest.mark.parametrize(
    ("raw", "error"),
    [("nope", "has no valid lakestream.offsets"), ('{"0": 5, "9": 1}', "outside"), ('{"0": -1}', "outside")],
)
def test_a_malformed_offsets_property_is_an_error_for_the_newest_and_skipped_among_older(raw, error) -> None:
    """`lake_offsets` and `tiering_snapshots` parse the property with one function: strict for the newest
    tiering snapshot, skipping it among the retained ones."""
    from types import SimpleNamespace

    from pyiceberg.table.snapshots import Operation, Snapshot, Summary

    from lakehouse.errors import LakeStateError
    from lakehouse.iceberg.offsets import (
        COMMIT_USER_PROPERTY,
        OFFSETS_PROPERTY,
        TIERING_USER,
        lake_offsets,
        tiering_snapshots,
    )

    def snap(i: int, offsets: str) -> Snapshot:
        summary = Summary(Operation.APPEND, **{COMMIT_USER_PROPERTY: TIERING_USER, OFFSETS_PROPERTY: offsets})
        return Snapshot(snapshot_id=i, sequence_number=i, timestamp_ms=i, manifest_list="m", summary=summary)

    metadata = SimpleNamespace(snapshots=[snap(1, '{"0": 1}'), snap(2, raw)], current_snapshot_id=2)
    with pytest.raises(LakeStateError, match=error):
        lake_offsets(metadata, 2, name="t.x")
    assert [(s.snapshot_id, o) for s, o in tiering_snapshots(metadata, 2)] == [(1, {0: 1, 1: 0})]
    good = SimpleNamespace(snapshots=[snap(1, '{"0": 1}'), snap(2, '{"0": 5, "1": 7}')], current_snapshot_id=2)
    assert lake_offsets(good, 2) == {0: 5, 1: 7}


@pytest.mark.parametrize("as_of", [False, True])
@pytest.mark.parametrize("streamed", [False, True])
def test_a_read_racing_compaction_and_expiry_reads_again(lakehouse: Lakehouse, as_of: bool, streamed: bool) -> None:
    """The lake table is loaded, then a compaction and an expiry delete the files of its snapshot before they
    are read (a fault-injecting wrapper hands the read the table as it was): the read loads the lake again and
    returns the right rows, not a CorruptDataFileError. ``streamed``: the read narrows each batch with ``keep``
    (streamed file by file), here keeping every row."""
    lh = lakehouse
    ends = build(lh, "pk")
    expected = oracle(lh, "pk")
    lh.tier(NAME)
    stale = lh.lake_table(NAME)
    assert lh.compact(NAME, min_input_files=2).files_rewritten
    assert lh.expire_snapshots(NAME, older_than=timedelta(0), retain_last=1).files_deleted
    real, handed = lh.lake_table, []

    def racing(name):
        if not handed:
            handed.append(stale)
            return stale
        return real(name)

    lh.lake_table = racing
    m = ends[-1] if as_of else None
    keep = (lambda rows: rows) if streamed else None
    assert got(lh.union_read(NAME, as_of=m, keep=keep)) == expected(ends[-1])
    assert handed  # the stale table was read first
    # a file missing from the current snapshot is still corruption, named as such
    lh.lake_table = real
    victim = next(iter(lh.lake_table(NAME).scan().plan_files())).file.file_path
    lh.store.delete(victim[len(lh.store.url.rstrip("/")) + 1 :])
    with pytest.raises(CorruptDataFileError, match="is missing"):
        lh.union_read(NAME, as_of=m, keep=keep)


@pytest.mark.parametrize("kind", ["pk", "log"])
def test_a_compaction_snapshot_holds_the_offsets_of_the_tiering_snapshot_below_it(
    lakehouse: Lakehouse, kind: str
) -> None:
    """A snapshot that no tiering round committed (here a compaction's, the current one) holds the log offsets of
    the newest tiering snapshot among its ancestors: a union read after the compaction reads the log tail from
    them (nothing doubled, nothing lost), and a read at the compaction snapshot or as of those offsets is planned
    at them and gives the rows the log defines below them (`snapshot_offsets` walks to the parent)."""
    lh = lakehouse
    ends = build(lh, kind)
    tiered = lh.lake_offsets(NAME)
    assert tiered == ends[4]  # rounds 1..5 tiered; round 6 is still in the log only
    tiering = lh.lake_table(NAME).current_snapshot()
    assert lh.compact(NAME, min_input_files=2).files_rewritten
    table = lh.lake_table(NAME)
    compaction = table.current_snapshot()
    assert compaction.parent_snapshot_id == tiering.snapshot_id
    assert compaction.summary[COMMIT_USER_PROPERTY] not in (None, TIERING_USER)
    # more of the log after the compaction: the tail grows past the lake
    lh.log(NAME).append(batch(range(40, 70), "late"), op="upsert" if kind == "pk" else "insert")
    end = lh.log(NAME).end_offsets()
    assert all(end[b] >= ends[-1][b] for b in range(BUCKETS)) and end != ends[-1]
    expected = oracle(lh, kind)

    assert lh.lake_offsets(NAME) == tiered
    assert got(lh.union_read(NAME)) == expected(end)  # lake + tail from the tiered offsets: the log's fold
    assert got(list(lh.union_batches(NAME))) == expected(end)
    # at the compaction snapshot itself: the offsets of its tiering parent, and exactly the rows below them
    assert snapshot_offsets(table.metadata, compaction.snapshot_id, BUCKETS) == tiered
    at = plan_read(table, lh.table(NAME), snapshot_id=compaction.snapshot_id)
    assert {b: read.base for b, read in at.buckets.items()} == tiered
    assert got(list(at.execute_all(None, table=table))) == expected(tiered)
    # as of the tiered offsets: the compaction snapshot serves them alone, no tail
    asof = plan_as_of(table, lh.table(NAME), tiered)
    assert asof.bases == tiered and [sid for sid, _ in asof.scans] == [compaction.snapshot_id]
    assert got(lh.lake_read(NAME, as_of=tiered)) == expected(tiered)
    assert got(lh.union_read(NAME, as_of=tiered)) == expected(tiered)
    assert got(lh.union_read(NAME, as_of=end)) == expected(end)
