"""Subscriptions (issue 24): durable consumer positions in the warehouse; a compare-and-swap advance; they pin
snapshot expiry and log retention, so the as-of read at a subscription's position never becomes unservable.
Both backends (SeaweedFS enforces If-Match as S3 does)."""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakehouse import Lakehouse
from lakehouse.errors import (
    AsOfUnavailable,
    InvalidArgument,
    InvalidSubscriptionName,
    SubscriptionBackwards,
    SubscriptionConflict,
    SubscriptionNotFound,
    TableNotFound,
)
from lakehouse.read.changes import apply_changes
from lakehouse.read.union import plan_as_of
from lakehouse.subscriptions import SUBSCRIPTIONS_PREFIX, check_consumer
from lakehouse.table.definition import TableName
from lakestream.cli import app
from tests.lakehouse._subscription_workers import advance_once

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
NAME = "ods.t"
BUCKETS = 2
CONSUMER = "dwd.orders_enriched"


def batch(keys, tag: str) -> pa.Table:
    keys = list(keys)
    return pa.table({"k": pa.array(keys, pa.int64()), "v": [f"{tag}-{k}" for k in keys]})


def build(lh: Lakehouse) -> list[dict[int, int]]:
    """Five rounds of upserts (and deletes); tiered after rounds 1, 2 and 3, so the lake holds snapshots at ends[1],
    ends[2], ends[3] and round 4 stays in the log. Returns the log's end offsets after each round."""
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=BUCKETS)
    log = lh.log(NAME)
    ends = []
    for r in range(5):
        log.append(batch(range(r, 40, 2), f"r{r}a"), op="upsert")
        log.append(batch(range(r * 3, r * 3 + 12), f"r{r}b"), op="upsert")
        if r:
            log.append(batch(range(r, 40, 9), f"r{r}d"), op="delete")
        ends.append(log.end_offsets())
        if r in (1, 2, 3):
            lh.tier(NAME)
    return ends


def oracle(lh: Lakehouse):
    """A function m -> the table as of ``m``, replayed from the log alone (read now, before anything is deleted)."""
    log = lh.log(NAME)
    records = {b: log.read(b, 0).to_pylist() for b in range(BUCKETS)}

    def expected(m: dict[int, int]) -> list[tuple]:
        state = {}
        for b in range(BUCKETS):
            for r in records[b][: m[b]]:
                if r["_op"] == "delete":
                    state.pop(r["k"], None)
                else:
                    state[r["k"]] = (r["k"], r["v"])
        return sorted(state.values())

    return expected


def rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(table.column("k").to_pylist(), table.column("v").to_pylist(), strict=True))


def between(a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
    """A position strictly between two tiering rounds in every bucket: no snapshot holds it."""
    m = {k: (a[k] + b[k]) // 2 for k in a}
    assert all(a[k] < m[k] < b[k] for k in a)
    return m


def old_enough() -> None:
    time.sleep(1.1)  # object listings and snapshot times have whole seconds: let everything be older than "now"


def stored(lh: Lakehouse, consumer: str = CONSUMER) -> bytes:
    return lh.store.get(f"{SUBSCRIPTIONS_PREFIX}{NAME}/{consumer}.json").data


# ---- create, advance, lag, list, drop ----------------------------------------------------------------------


def test_create_advance_lag_list_and_drop(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh)
    sub = lh.subscription(NAME, CONSUMER)  # "latest": the log's end
    assert sub.position == ends[-1] and sub.table == NAME and sub.consumer == CONSUMER
    assert all(lag.records == 0 and lag.seconds == 0 for lag in sub.lag().values())
    doc = json.loads(stored(lh))
    assert doc["table-uuid"] == lh.table(NAME).table_uuid and doc["position"] == {"0": ends[-1][0], "1": ends[-1][1]}
    # the same name again is the same subscription, whatever start says
    again = lh.subscription(NAME, CONSUMER, start="earliest")
    assert again.position == sub.position and again.etag == sub.etag
    # appends put it behind: records and the age of the oldest unconsumed record
    time.sleep(0.2)
    log = lh.log(NAME)
    log.append(batch(range(100, 130), "new"), op="upsert")
    lag = sub.lag()
    end = log.end_offsets()
    assert {b: lg.records for b, lg in lag.items()} == {b: end[b] - sub.position[b] for b in range(BUCKETS)}
    assert sum(lg.records for lg in lag.values()) == 30
    assert all(lg.seconds is not None and 0 <= lg.seconds < 60 for lg in lag.values() if lg.records)
    # advance: one bucket alone, then all; it is stored, a fresh handle reads it
    sub.advance({0: end[0]})
    assert sub.position == {0: end[0], 1: ends[-1][1]}
    sub.advance(end)
    assert lh.subscription(NAME, CONSUMER, create=False).position == end == sub.position
    assert json.loads(stored(lh))["advances"] == 2
    assert all(lg.records == 0 for lg in sub.lag().values())
    # list and drop
    other = lh.subscription(NAME, "audit", start="earliest")
    assert other.position == {b: 0 for b in range(BUCKETS)}  # nothing retired from the log yet
    assert [(s.table, s.consumer, s.stale) for s in lh.subscriptions()] == [
        (NAME, "audit", False),
        (NAME, CONSUMER, False),
    ]
    assert [s.consumer for s in lh.subscriptions(NAME)] == ["audit", CONSUMER]
    lh.drop_subscription(NAME, "audit")
    sub.drop()
    assert lh.subscriptions() == []
    with pytest.raises(SubscriptionNotFound, match="no subscription"):
        lh.subscription(NAME, CONSUMER, create=False)
    with pytest.raises(SubscriptionNotFound, match="nothing to drop"):
        lh.drop_subscription(NAME, CONSUMER)


def test_start_at_an_offset_map_is_checked_and_must_be_servable(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh)
    expected = oracle(lh)
    m = between(ends[1], ends[2])
    assert lh.subscription(NAME, "a", start=m).position == m
    for start, error, match in [
        ("soon", InvalidArgument, "start must be 'latest', 'earliest'"),
        ({0: 1}, InvalidArgument, "lacks bucket"),
        ({0: 1, 1: 1, 2: 1}, InvalidArgument, "names bucket"),
        ({0: -1, 1: 0}, InvalidArgument, ">= 0"),
        ({0: ends[-1][0] + 1, 1: 0}, InvalidArgument, "beyond the end"),
    ]:
        with pytest.raises(error, match=match):
            lh.subscription(NAME, "b", start=start)
    old_enough()
    lh.expire_snapshots(NAME, older_than=timedelta(0), pinned=None)  # "a" pins ends[1]'s snapshot
    lh.apply_log_retention(NAME, retention=timedelta(0))
    with pytest.raises(AsOfUnavailable):  # the log from 0 is gone and no snapshot holds ends[0]
        lh.subscription(NAME, "b", start=ends[0])
    assert [s.consumer for s in lh.subscriptions()] == ["a"]  # nothing was written for "b"
    earliest = lh.subscription(NAME, "c", start="earliest").position
    starts = lh.log(NAME).start_offsets()
    assert all(earliest[b] >= starts[b] > 0 for b in range(BUCKETS))
    assert rows(lh.union_read(NAME, as_of=earliest)) == expected(earliest)


# ---- bad input: a specific error each, nothing written -------------------------------------------------------


@pytest.mark.parametrize("consumer", ["", "1st", "has space", "a/b", "dwd:x", "x" * 129, "é", None, 7, ".hidden"])
def test_an_invalid_consumer_name_is_refused_before_anything_is_read(lakehouse: Lakehouse, consumer) -> None:
    with pytest.raises(InvalidSubscriptionName, match="letters, digits, '_', '.' or '-'"):
        lakehouse.subscription("ods.missing", consumer)  # checked before the table is even looked up
    with pytest.raises(InvalidSubscriptionName):
        lakehouse.drop_subscription("ods.missing", consumer)
    assert list(lakehouse.store.list("")) == []


def test_valid_consumer_names() -> None:
    for name in ("dwd.orders_enriched", "_x", "Spark-job-1", "a" * 128):
        assert check_consumer(name) == name


def test_bad_advances_raise_their_error_and_write_nothing(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh)
    sub = lh.subscription(NAME, CONSUMER, start=ends[2])
    before, etag = stored(lh), sub.etag
    end = ends[-1]
    cases = [
        ({0: ends[1][0]}, SubscriptionBackwards, f"bucket 0 from {ends[2][0]} to {ends[1][0]}"),
        ({0: end[0], 1: ends[2][1] - 1}, SubscriptionBackwards, "cannot move back"),
        ({2: 5}, InvalidArgument, "names bucket"),
        ({0: -3}, InvalidArgument, ">= 0"),
        ({1: end[1] + 1}, InvalidArgument, "beyond the end"),
        ({0: "x"}, InvalidArgument, "integers"),
        ([1, 2], InvalidArgument, "maps buckets to offsets"),
    ]
    for position, error, match in cases:
        with pytest.raises(error, match=match):
            sub.advance(position)
        assert stored(lh) == before and sub.etag == etag and sub.position == ends[2]
    assert issubclass(SubscriptionBackwards, InvalidArgument)
    # a concurrent advance: the runner that read it first and advances second loses; nothing of it is written
    other = lh.subscription(NAME, CONSUMER, create=False)
    other.advance(ends[3])
    with pytest.raises(SubscriptionConflict, match="another runner") as info:
        sub.advance(end)
    assert info.value.current == ends[3]
    assert json.loads(stored(lh))["position"] == {str(b): o for b, o in ends[3].items()}
    assert sub.refresh().position == ends[3]  # refresh and continue
    sub.advance(end)
    # a dropped subscription: advancing it is a conflict too, and does not bring it back
    other.drop()
    with pytest.raises(SubscriptionConflict, match="dropped"):
        sub.advance(end)
    assert lh.subscriptions() == []
    with pytest.raises(SubscriptionNotFound):
        sub.refresh()
    with pytest.raises(TableNotFound):
        lh.subscription("ods.nope", CONSUMER)


@pytest.mark.backends("local", "s3")
@pytest.mark.slow
def test_two_processes_advance_one_subscription_and_exactly_one_wins(lakehouse: Lakehouse, store_spec) -> None:
    url, options = store_spec
    lh = lakehouse
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=BUCKETS)
    lh.log(NAME).append(batch(range(200), "a"), op="upsert")
    lh.subscription(NAME, CONSUMER, start={0: 0, 1: 0})
    rounds, workers = 3, 2
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        for r in range(rounds):
            barrier = manager.Barrier(workers)
            futures = [pool.submit(advance_once, url, options, NAME, CONSUMER, 0, barrier) for _ in range(workers)]
            outcomes = sorted(f.result(timeout=300) for f in futures)
            assert outcomes == ["lost", "won"], outcomes
            assert lh.subscription(NAME, CONSUMER, create=False).position == {0: r + 1, 1: 0}
    assert json.loads(stored(lh))["advances"] == rounds


# ---- pins: retention and expiry keep what a subscription's as-of read needs -----------------------------------


@pytest.mark.segments  # per-bucket retention: whole commits' retention keeps more of the log
def test_log_retention_keeps_what_a_subscription_needs(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh)
    expected = oracle(lh)
    m = between(ends[1], ends[2])  # served by the snapshot at ends[1] plus the log from there to m
    want = expected(m)
    sub = lh.subscription(NAME, CONSUMER, start=m)
    lake = lh.lake_offsets(NAME)
    old_enough()
    result = lh.apply_log_retention(NAME, retention=timedelta(0))
    assert result.segments_deleted > 0  # the log below ends[1] went: the snapshot holds it
    assert result.pinned == {b: (ends[1][b], f"subscription {CONSUMER}") for b in range(BUCKETS)}
    assert result.to_dict()["pinned"]["0"] == {"offset": ends[1][0], "by": f"subscription {CONSUMER}"}
    starts = lh.log(NAME).start_offsets()
    assert all(starts[b] <= ends[1][b] < lake[b] for b in range(BUCKETS))
    assert rows(lh.union_read(NAME, as_of=sub.position)) == want
    # without the subscription, the same retention removes what that read needs
    sub.drop()
    assert lh.apply_log_retention(NAME, retention=timedelta(0)).pinned == {}
    with pytest.raises(AsOfUnavailable):
        lh.union_read(NAME, as_of=m)


@pytest.mark.segments  # per-bucket retention: whole commits' retention keeps more of the log
def test_a_subscription_below_every_snapshot_keeps_the_log_from_its_start(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh)
    expected = oracle(lh)
    m = ends[0]  # before the first tiering round: the log alone serves it, from offset 0
    want = expected(m)
    lh.subscription(NAME, CONSUMER, start=m)
    old_enough()
    result = lh.apply_log_retention(NAME, retention=timedelta(0))
    assert result.segments_deleted == 0 and set(result.pinned) == set(range(BUCKETS))
    assert lh.expire_snapshots(NAME, older_than=timedelta(0)).expired  # it pins no snapshot
    assert rows(lh.union_read(NAME, as_of=m)) == want
    lh.drop_subscription(NAME, CONSUMER)
    lh.apply_log_retention(NAME, retention=timedelta(0))
    with pytest.raises(AsOfUnavailable):
        lh.union_read(NAME, as_of=m)


@pytest.mark.segments  # per-bucket retention: whole commits' retention keeps more of the log
def test_snapshot_expiry_keeps_the_snapshot_a_subscription_needs(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    ends = build(lh)
    expected = oracle(lh)
    m = between(ends[1], ends[2])
    want = expected(m)
    lh.subscription(NAME, CONSUMER, start=m)
    table = lh.lake_table(NAME)
    [(needed, _)] = plan_as_of(table, lh.table(NAME), m).scans  # the tiering snapshot at ends[1]
    old_enough()
    pinned = lh.subscription_pins(NAME)
    assert pinned.snapshots == {needed: f"subscription {CONSUMER}"}
    expiry = lh.expire_snapshots(NAME, older_than=timedelta(0), retain_last=1, pinned=pinned)
    assert expiry.expired and needed not in expiry.expired
    assert expiry.pinned == {needed: f"subscription {CONSUMER}"}
    assert needed in {s.snapshot_id for s in lh.lake_table(NAME).metadata.snapshots}
    retention = lh.apply_log_retention(NAME, retention=timedelta(0), pinned=pinned)
    assert retention.segments_deleted > 0
    assert rows(lh.union_read(NAME, as_of=m)) == want
    # without the subscription, expiry removes it, and the read is refused (never a wrong state)
    lh.drop_subscription(NAME, CONSUMER)
    assert needed in lh.expire_snapshots(NAME, older_than=timedelta(0)).expired
    with pytest.raises(AsOfUnavailable):
        lh.union_read(NAME, as_of=m)


def test_maintain_keeps_what_subscriptions_need_and_reports_idle_ones(lakehouse: Lakehouse, caplog) -> None:
    lh = lakehouse
    ends = build(lh)
    expected = oracle(lh)
    m = between(ends[1], ends[2])
    want = expected(m)
    lh.subscription(NAME, CONSUMER, start=m)
    lh.subscription(NAME, "fresh")  # at the log's end: pins nothing maintenance would delete anyway
    old_enough()
    with caplog.at_level(logging.WARNING, logger="lakehouse"):
        report = lh.maintain(NAME, snapshot_age=timedelta(0), retention=timedelta(0))
    assert report.idle_subscriptions == []
    assert report.expiry.expired and set(report.expiry.pinned.values()) == {f"subscription {CONSUMER}"}
    assert report.retention.segments_deleted > 0 and report.retention.pinned
    assert rows(lh.union_read(NAME, as_of=m)) == want
    # the consumer's next step reads the changes from its position: they are all still there
    end = lh.log(NAME).end_offsets()
    changes = lh.changes(NAME, m, end, before_images=True)
    state = lh.union_read(NAME, as_of=m).select(["k", "v"])
    assert rows(apply_changes(state, changes, ["k"])) == expected(end)
    sub = lh.subscription(NAME, CONSUMER, create=False)
    sub.advance(sub.position)  # an advance in place is a heartbeat
    time.sleep(0.1)
    report = lh.maintain(NAME, subscription_idle=timedelta(seconds=0.05))
    assert len(report.idle_subscriptions) == 2  # both were written more than 50 ms ago
    assert any(CONSUMER in message and "has not advanced for" in message for message in report.idle_subscriptions)
    assert "lakestream subscription drop ods.t fresh" in " ".join(report.idle_subscriptions)
    assert report.to_dict()["idle_subscriptions"] == report.idle_subscriptions
    assert any("has not advanced" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert [s.consumer for s in lh.idle_subscriptions(NAME, older_than=timedelta(seconds=0.05))] == [
        CONSUMER,
        "fresh",
    ]
    assert lh.idle_subscriptions(older_than=timedelta(days=1)) == []
    with pytest.raises(InvalidArgument, match="subscription_idle"):
        lh.maintain(NAME, subscription_idle=timedelta(-1))


# ---- dropped tables ------------------------------------------------------------------------------------------


def test_drop_table_deletes_its_subscriptions_and_a_stale_one_pins_nothing(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=BUCKETS)
    lh.create_table("ods.other", SCHEMA, primary_key=["k"], buckets=BUCKETS)
    lh.subscription(NAME, CONSUMER)
    lh.subscription("ods.other", CONSUMER)
    old = stored(lh)
    assert lh.drop_table(NAME).subscriptions == 1
    assert [(s.table, s.consumer) for s in lh.subscriptions()] == [("ods.other", CONSUMER)]
    # a subscription object left over from the earlier table of the name (as a drop racing a create leaves it)
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=BUCKETS)
    lh.store.put(f"{SUBSCRIPTIONS_PREFIX}{NAME}/{CONSUMER}.json", old)
    [stale] = lh.subscriptions(NAME)
    assert stale.stale
    assert not lh.subscription_pins(NAME)
    with pytest.raises(SubscriptionNotFound, match="earlier table of this name"):
        lh.subscription(NAME, CONSUMER)
    lh.drop_subscription(NAME, CONSUMER)
    assert lh.subscription(NAME, CONSUMER).position == {0: 0, 1: 0}
    # a table dropped with only its subscriptions left is dropped again, as any half-dropped table
    lh.store.put(f"{SUBSCRIPTIONS_PREFIX}ods.gone/{CONSUMER}.json", old)
    assert [s.stale for s in lh.subscriptions("ods.gone")] == [True]
    assert lh.drop_table("ods.gone").subscriptions == 1
    assert TableName.parse("ods.gone") not in lh.list_tables()


# ---- CLI ------------------------------------------------------------------------------------------------------


def test_cli_list_show_drop_and_maintain(tmp_path) -> None:
    wh = (tmp_path / "wh").as_uri()
    runner = CliRunner(env={"COLUMNS": "200"})
    lh = Lakehouse.open(wh)
    ends = build(lh)
    expected = oracle(lh)
    m = between(ends[1], ends[2])
    want = expected(m)
    lh.subscription(NAME, CONSUMER, start=m)
    result = runner.invoke(app, ["subscription", "list", "-w", wh])
    assert result.exit_code == 0, result.output
    behind = sum(ends[-1][b] - m[b] for b in range(BUCKETS))
    assert CONSUMER in result.output and f"0:{m[0]},1:{m[1]}" in result.output and str(behind) in result.output
    result = runner.invoke(app, ["subscription", "show", NAME, CONSUMER, "-w", wh])
    assert result.exit_code == 0, result.output
    assert "records behind" in result.output and "pins snapshots" in result.output
    [(needed, _)] = plan_as_of(lh.lake_table(NAME), lh.table(NAME), m).scans
    assert str(needed) in result.output
    result = runner.invoke(app, ["subscription", "show", NAME, "no_such", "-w", wh])
    assert result.exit_code == 1 and result.output.count("error:") == 1 and "no subscription" in result.output
    result = runner.invoke(app, ["subscription", "show", NAME, "bad name", "-w", wh])
    assert result.exit_code == 1 and "invalid subscription name" in result.output and "Traceback" not in result.output
    old_enough()
    args = ["maintain", "-w", wh, "--snapshot-age", "0s", "--retention", "0s", "--subscription-idle", "0s"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"kept for subscription {CONSUMER}" in result.output
    assert "log kept from offset" in result.output and "idle:" in result.output
    assert rows(lh.union_read(NAME, as_of=m)) == want
    result = runner.invoke(app, ["subscription", "drop", NAME, CONSUMER, "-w", wh], input="n\n")
    assert result.exit_code == 1 and lh.subscriptions()  # not confirmed: kept
    result = runner.invoke(app, ["subscription", "drop", NAME, CONSUMER, "-w", wh, "--yes"])
    assert result.exit_code == 0 and "dropped" in result.output, result.output
    assert lh.subscriptions() == []
    result = runner.invoke(app, ["subscription", "list", "-w", wh])
    assert result.exit_code == 0 and "no subscriptions" in result.output
    lh.subscription(NAME, "audit")
    result = runner.invoke(app, ["table", "drop", NAME, "-w", wh, "--yes"])
    assert result.exit_code == 0 and "1 subscription," in result.output, result.output
    assert lh.subscriptions() == []
