"""The warehouse publication (issue 44): one consistent set of checked snapshots across the layers, recorded by
compare-and-swap with a history entry per generation.

A small ODS -> DWD warehouse without Spark: DWD is a copy of ODS whose rounds are recorded as the layers runner
records them (`layers.rounds`: an intent naming the ODS offsets read, the appends, the report), so the
publication sees what it sees of a real model. Every ODS row's ``v`` is the step that wrote it, and a DWD round
copies ODS as of the offsets it records, so the publication is consistent iff the newest step in published DWD
is at most the newest in published ODS (a DWD snapshot whose round read ODS past the published ODS snapshot
holds a newer step)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakehouse import Lakehouse
from lakestream.cli import app
from layers.lease import Owner
from layers.rounds import RoundRecord, RoundReport, create_round, latest_round, write_report
from quality import warehouse_publication as pub
from quality.check import publish_run
from quality.errors import PublicationError
from quality.published_tag import PUBLISHED
from quality.results import RECONCILE, CheckResult, QualityRun, Violation
from quality.warehouse_publication import PUBLICATION, publish_warehouse, read_history, read_publication
from tests.conftest import duckdb_connection
from tests.support.crash import crash

ODS, DWD = "ods.src", "dwd.copy"
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])
ROOT = Path(__file__).resolve().parents[2]
#: the local store: what is tested is the record's protocol, which both stores serve alike (If-Match, create-only)
pytestmark = pytest.mark.parametrize("backend", ["local"])


def make(lh: Lakehouse) -> None:
    for name in (ODS, DWD):
        lh.create_table(name, SCHEMA, primary_key=["k"], buckets=2)


def ods_write(lh: Lakehouse, step: int, keys=range(6)) -> None:
    keys = list(keys)
    lh.log(ODS).append(pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([step] * len(keys), pa.int64())}))


def dwd_round(lh: Lakehouse) -> int:
    """One round of DWD (a copy of ODS), recorded as `layers.runner` records it; its number."""
    latest = latest_round(lh.store, DWD)
    number = 0 if latest is None else latest.number + 1
    ends = lh.log(ODS).end_offsets()
    uuids = {ODS: lh.table(ODS).table_uuid}
    record = RoundRecord(
        DWD, number, "full", None, {ODS: ends}, lh.log(DWD).end_offsets(), "", lh.table(DWD).table_uuid, uuids
    )
    lease = create_round(lh.store, record, Owner.new())
    lh.log(DWD).append(lh.union_read(ODS, columns=["k", "v"], as_of=ends), "upsert")
    report = RoundReport(
        DWD, number, "full", "", {ODS: ends}, output=lh.log(DWD).end_offsets(), finished_at=time.time()
    )
    write_report(lh.store, report)
    lease.finish()
    return number


def tier(lh: Lakehouse, name: str) -> int:
    lh.tier(name)
    return lh.lake_table(name).metadata.current_snapshot_id


def passed(lh: Lakehouse, *names: str) -> list[CheckResult]:
    """Every check of ``names`` passed on their current snapshots (read one after the other)."""
    return [CheckResult(RECONCILE, n, snapshot_id=lh.lake_table(n).metadata.current_snapshot_id) for n in names]


def newest_step(rows: pa.Table) -> int:
    return max(rows.column("v").to_pylist(), default=-1)


def assert_consistent(lh: Lakehouse, record) -> None:
    """Published DWD holds no ODS row that published ODS does not (the oracle, by content), read through the
    tags and through each entry's pinned metadata file with DuckDB."""
    assert record.entries[DWD].inputs[ODS]  # the round's positions are recorded
    read = {n: lh.lake_read(n, columns=["k", "v"], ref=PUBLICATION) for n in (ODS, DWD)}
    assert newest_step(read[DWD]) <= newest_step(read[ODS])
    con = duckdb_connection()
    for name, entry in record.entries.items():
        assert lh.lake_table(name).metadata.refs[PUBLICATION].snapshot_id == entry.snapshot_id
        duck = con.sql(f"SELECT k, v FROM iceberg_scan('{entry.metadata_location.removeprefix('file://')}')")
        assert sorted(duck.fetchall()) == sorted(zip(*read[name].to_pydict().values(), strict=True)), name


def test_the_publication_never_mixes_a_dwd_round_with_ods_it_had_not_read(lakehouse) -> None:
    lh = lakehouse
    make(lh)
    ods_write(lh, 0)
    ods1 = tier(lh, ODS)
    dwd_round(lh)
    dwd1 = tier(lh, DWD)
    first = publish_warehouse(lh, passed(lh, ODS, DWD), run_id="r1")
    assert first is not None and first.generation == 1 and first.snapshots == {ODS: ods1, DWD: dwd1}
    assert first.left_out == {} and first.entries[DWD].round == 0
    assert_consistent(lh, first)
    assert read_history(lh, 1) == first

    # DWD's next round reads ODS from its log, past the lake; DWD is tiered, ODS not yet: DWD's newest snapshot
    # passed its checks but read ODS rows the checked ODS snapshot does not hold, so the set stays
    ods_write(lh, 1, keys=[0, 9])
    dwd_round(lh)
    dwd2 = tier(lh, DWD)
    same = publish_warehouse(lh, passed(lh, ODS, DWD))
    assert same.generation == 1 and same.snapshots == {ODS: ods1, DWD: dwd1}
    assert_consistent(lh, same)

    # ODS tiered to the round's positions: the pair moves together
    ods2 = tier(lh, ODS)
    second = publish_warehouse(lh, passed(lh, ODS, DWD))
    assert second.generation == 2 and second.snapshots == {ODS: ods2, DWD: dwd2}
    assert second.entries[DWD].round == 1
    assert_consistent(lh, second)

    # an ODS tiered further than DWD read keeps the DWD snapshot that matches; a DWD round ahead of the newest
    # ODS snapshot with no older DWD candidate left (and no entry for it) is left out with the reason
    ods_write(lh, 2)
    ods3 = tier(lh, ODS)
    third = publish_warehouse(lh, passed(lh, ODS, DWD))
    assert third.snapshots == {ODS: ods3, DWD: dwd2}
    assert_consistent(lh, third)
    ods_write(lh, 3)
    dwd_round(lh)
    tier(lh, DWD)
    entries, left_out = pub.plan_publication(lh, passed(lh, ODS, DWD))  # no previous publication, no tag
    assert (
        set(entries) == {ODS}
        and f"past the offsets {dict(sorted(third.entries[ODS].offsets.items()))}" in (left_out[DWD])
    )

    out = CliRunner().invoke(app, ["published", "-w", lh.url, "--json"])
    assert out.exit_code == 0, out.output
    assert '"generation": 3' in out.output and str(ods3) in out.output and "metadata_location" in out.output
    table = CliRunner().invoke(app, ["published", "-w", lh.url])
    assert table.exit_code == 0 and "generation 3" in table.output and DWD in table.output, table.output
    old = CliRunner().invoke(app, ["published", "-w", lh.url, "--generation", "1", "--json"])
    assert old.exit_code == 0 and '"generation": 1' in old.output and str(ods1) in old.output, old.output


def test_a_failing_check_keeps_the_previous_consistent_set(lakehouse) -> None:
    lh = lakehouse
    make(lh)
    ods_write(lh, 0)
    tier(lh, ODS)
    dwd_round(lh)
    tier(lh, DWD)
    before = publish_warehouse(lh, passed(lh, ODS, DWD))
    ods_write(lh, 1)
    ods2 = tier(lh, ODS)
    dwd_round(lh)
    dwd2 = tier(lh, DWD)
    bad = CheckResult(RECONCILE, ODS, snapshot_id=ods2, violations=[Violation("content", ODS, "a row differs")])
    good = CheckResult(RECONCILE, DWD, snapshot_id=dwd2)
    run = QualityRun("r-fail", "s", "f", results=[bad, good], tables={ODS: {}, DWD: {}})
    moved = publish_run(lh, run)  # the run's publish step: tags `published`, then the warehouse publication
    assert moved[DWD] == dwd2 and moved[ODS] is None  # DWD's own checks passed: its tag moves
    after = read_publication(lh)
    assert after.generation == before.generation and after.snapshots == before.snapshots
    assert_consistent(lh, after)
    assert lh.lake_table(DWD).metadata.refs[PUBLISHED].snapshot_id == dwd2 != after.snapshots[DWD]


def test_concurrent_tiering_and_rounds_never_give_an_inconsistent_set(lakehouse) -> None:
    lh = lakehouse
    make(lh)
    ods_write(lh, 0)
    tier(lh, ODS)
    dwd_round(lh)
    tier(lh, DWD)
    publish_warehouse(lh, passed(lh, ODS, DWD))
    stop, errors = threading.Event(), []

    def writer() -> None:  # the DWD round and its tiering land before ODS is tiered to what the round read
        try:
            for step in range(1, 7):
                ods_write(lh, step, keys=[step % 6, 6 + step])
                dwd_round(lh)
                tier(lh, DWD)
                tier(lh, ODS)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    generations = set()
    while not stop.is_set() or not generations:
        record = publish_warehouse(lh, passed(lh, ODS, DWD))
        generations.add(record.generation)
        read = {n: lh.lake_read(n, columns=["v"], ref=PUBLICATION) for n in (ODS, DWD)}
        assert newest_step(read[DWD]) <= newest_step(read[ODS]), record
    thread.join()
    assert not errors, errors
    final = publish_warehouse(lh, passed(lh, ODS, DWD))
    assert_consistent(lh, final)
    assert newest_step(lh.lake_read(DWD, columns=["v"], ref=PUBLICATION)) == 6
    history = [read_history(lh, g) for g in range(1, final.generation + 1)]
    assert all(h is not None and h.generation == g for g, h in enumerate(history, 1))


@pytest.mark.subprocess
def test_kill_9_while_publishing_leaves_a_whole_publication_that_maintenance_keeps(lakehouse, store_spec) -> None:
    lh = lakehouse
    make(lh)
    ods_write(lh, 0)
    tier(lh, ODS)
    dwd_round(lh)
    tier(lh, DWD)
    first = publish_warehouse(lh, passed(lh, ODS, DWD))
    rows = {n: lh.lake_read(n, columns=["k", "v"], ref=PUBLICATION) for n in (ODS, DWD)}
    for step, (point, generation) in enumerate([("protected", 1), ("swapped", 2)], 1):
        ods_write(lh, step)
        tier(lh, ODS)
        dwd_round(lh)
        tier(lh, DWD)
        crash("tests.quality._publication_worker", store_spec[0], point, timeout=120, context=point)
        record = read_publication(lh)
        assert record.generation == generation, point
        if point == "protected":  # the previous publication stands, tags and all
            assert record == first
            for name in (ODS, DWD):
                assert lh.lake_read(name, columns=["k", "v"], ref=PUBLICATION).equals(rows[name])
        else:  # the new one is recorded whole; its tags lag; the previous one is in the history
            assert record.snapshots != first.snapshots and read_history(lh, 1) == first
        # commits go on, then maintenance: it keeps the recorded snapshots (tagged `publication`, or pending by
        # the dead publisher) and their pinned metadata files
        ods_write(lh, 10 + step)
        tier(lh, ODS)
        tier(lh, DWD)
        for name in (ODS, DWD):
            lh.expire_snapshots(name, older_than=timedelta(0), retain_last=1)
            lh.remove_orphans(name, older_than=timedelta(0), unsafe_orphan_age=True)
        con = duckdb_connection()
        for entry in record.entries.values():
            duck = con.sql(f"SELECT count(*) FROM iceberg_scan('{entry.metadata_location.removeprefix('file://')}')")
            assert duck.fetchone()[0] > 0
        for name in (ODS, DWD):
            assert lh.lake_read(name, columns=["k", "v"], ref=PUBLICATION).num_rows > 0
    healed = publish_warehouse(lh, passed(lh, ODS, DWD))  # the next publish moves the lagging tags
    assert healed.generation == 3 and read_history(lh, 3) == healed and read_history(lh, 2) == record
    assert_consistent(lh, healed)
    assert not [t for n in (ODS, DWD) for t in lh.lake_table(n).metadata.refs if t.startswith(pub.PENDING_PREFIX)]


def test_concurrent_publishers_one_wins_the_other_retries_or_fails_clearly(lakehouse, monkeypatch) -> None:
    lh = lakehouse
    make(lh)
    ods_write(lh, 0)
    tier(lh, ODS)
    dwd_round(lh)
    tier(lh, DWD)
    write_record = pub._write_record

    def race(attempts: int) -> list:
        barrier = threading.Barrier(2, timeout=60)
        met: set[int] = set()

        def together(*a, **k):  # both publishers planned on the same record; now both swap
            if threading.get_ident() not in met:
                met.add(threading.get_ident())
                barrier.wait()
            write_record(*a, **k)

        monkeypatch.setattr(pub, "_write_record", together)
        monkeypatch.setattr(pub, "WRITE_ATTEMPTS", attempts)
        outcomes: list = [None, None]

        def publisher(i: int) -> None:
            try:
                outcomes[i] = publish_warehouse(lh, passed(lh, ODS, DWD), run_id=f"p{i}")
            except PublicationError as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=publisher, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return outcomes

    outcomes = race(1)
    failed = [o for o in outcomes if isinstance(o, PublicationError)]
    assert len(failed) == 1 and "written by other publishers" in str(failed[0]), outcomes
    won = next(o for o in outcomes if not isinstance(o, PublicationError))
    assert read_publication(lh) == won and won.generation == 1

    ods_write(lh, 1)
    tier(lh, ODS)
    dwd_round(lh)
    tier(lh, DWD)
    outcomes = race(5)  # the loser plans again on the winner's record: the same set, nothing more to write
    assert all(not isinstance(o, Exception) for o in outcomes), outcomes
    assert outcomes[0] == outcomes[1] == read_publication(lh) and outcomes[0].generation == 2
    assert read_history(lh, 3) is None
    assert not [t for n in (ODS, DWD) for t in lh.lake_table(n).metadata.refs if t.startswith(pub.PENDING_PREFIX)]
