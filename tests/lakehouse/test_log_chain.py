"""A "commits" log (`lakehouse.log.chain`): an append is one data object and one commit record whatever its buckets;
offsets stay per bucket, contiguous, from 0; a lost race resends the record, not the rows; retries are recognised;
corruption is named, never skipped; retention removes whole commits with their data, and orphans."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakehouse import Lakehouse
from lakehouse.errors import CorruptSegmentError, OffsetOutOfRange, SequenceConflict
from lakehouse.log import Log
from lakehouse.log import chain as chain_format
from lakehouse.maintenance.retention import apply_log_retention
from lakehouse.table.definition import COMMITS_LOG, SEGMENTS_LOG, TableName
from object_store import ObjectStore
from tests.support.crash import crash, run_worker, tail
from tests.support.profiles import examples

ORDERS = pa.schema([("o_orderkey", pa.int64()), ("o_comment", pa.string())])
NAME = TableName("ods", "orders")


def orders(keys, comment: str = "c") -> pa.Table:
    keys = list(keys)
    return pa.table({"o_orderkey": pa.array(keys, pa.int64()), "o_comment": pa.array([f"{comment}{k}" for k in keys])})


def objects(store: ObjectStore, where: str) -> list[str]:
    return [i.key for i in store.list(f"ods/orders/log/{where}/")]


def reopened(store_spec: tuple[str, dict[str, str]]) -> Lakehouse:
    """Another process' view of the same warehouse: a new store client and `Lakehouse`, nothing cached."""
    url, options = store_spec
    return Lakehouse.open(url, **options)


def all_rows(log_: Log) -> list[tuple[int, int, str]]:
    """(bucket, offset, comment) of every record, per bucket in offset order."""
    out = []
    for b in range(log_.definition.buckets):
        t = log_.read(b)
        out += [
            (b, o, c) for o, c in zip(t.column("_offset").to_pylist(), t.column("o_comment").to_pylist(), strict=True)
        ]
    return out


@pytest.fixture
def chain_log(lakehouse: Lakehouse) -> Log:
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=16, log_format=COMMITS_LOG)
    return lakehouse.log("ods.orders")


@pytest.mark.backends("local", "s3")
def test_an_append_over_16_buckets_is_one_data_object_and_one_commit(chain_log: Log, store: ObjectStore) -> None:
    first = chain_log.append(orders(range(1000)), "upsert")
    second = chain_log.append(orders(range(500, 1500), "d"), "upsert")
    assert len(first.ranges) == 16 and len(second.ranges) == 16
    assert len(objects(store, "data")) == 2 and len(objects(store, "commits")) == 2
    assert not [k for k in (i.key for i in store.list("ods/orders/log/")) if "/commits/" not in k and "/data/" not in k]
    # per bucket contiguous from 0; the second append starts where the first ended in every bucket
    for b in range(16):
        assert first.ranges[b][0] == 0 and second.ranges[b][0] == first.ranges[b][1] + 1
    rows = all_rows(chain_log)
    assert len(rows) == 2000
    for b in range(16):
        offsets = [o for bb, o, _ in rows if bb == b]
        assert offsets == list(range(len(offsets)))
    assert chain_log.end_offsets() == {b: second.ranges[b][1] + 1 for b in range(16)}
    assert chain_log.start_offsets() == dict.fromkeys(range(16), 0)
    # a read of a middle range reads only that part (slices of the parts it overlaps)
    t = chain_log.read(3, first.ranges[3][1], second.ranges[3][0] + 2)
    assert t.column("_offset").to_pylist() == list(range(first.ranges[3][1], second.ranges[3][0] + 2))


@pytest.mark.backends("local", "s3")
def test_a_retry_is_recognised_from_another_log_and_other_rows_under_its_sequence_are_refused(
    store_spec, chain_log: Log, store: ObjectStore
) -> None:
    done = chain_log.append(orders(range(100)), "upsert", producer_id="p", sequence=7)
    other = reopened(store_spec).log("ods.orders")  # another process: knows nothing of the first
    again = other.append(orders(range(100)), "upsert", producer_id="p", sequence=7)
    assert again.ranges == done.ranges and again.already_appended == frozenset(done.ranges)
    assert len(objects(store, "commits")) == 1 and len(objects(store, "data")) == 1
    with pytest.raises(SequenceConflict, match="already appended other rows under sequence 7"):
        reopened(store_spec).log("ods.orders").append(orders(range(101)), "upsert", producer_id="p", sequence=7)
    other.append(orders(range(5)), "upsert", producer_id="p", sequence=9)
    with pytest.raises(SequenceConflict, match="have reached sequence 9 without one of sequence 8"):
        reopened(store_spec).log("ods.orders").append(orders(range(3)), "upsert", producer_id="p", sequence=8)
    assert len(all_rows(chain_log)) == 105


@pytest.mark.backends("local", "s3")
def test_racing_logs_lose_records_not_rows_and_every_row_lands_once(store_spec, chain_log: Log, store) -> None:
    logs = [reopened(store_spec).log("ods.orders") for _ in range(4)]
    for lg in logs:
        lg.end_offsets()  # each learns the same head: their first commits race for the same number

    def run(i: int) -> None:
        for j in range(10):
            logs[i].append(orders(range(1000 * i + 10 * j, 1000 * i + 10 * j + 10), f"w{i}."), "upsert")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = all_rows(chain_log)
    assert sorted(c for _, _, c in rows) == sorted(f"w{i}.{1000 * i + k}" for i in range(4) for k in range(100))
    for b in range(16):
        offsets = [o for bb, o, _ in rows if bb == b]
        assert offsets == list(range(len(offsets)))
    # 40 appends: 40 records and 40 data objects; a lost race wrote its record again, never its rows
    assert len(objects(store, "commits")) == 40 and len(objects(store, "data")) == 40


def test_a_corrupt_data_object_is_named_with_table_commit_and_bucket(chain_log: Log, store: ObjectStore) -> None:
    result = chain_log.append(orders(range(200)), "upsert")
    (data,) = objects(store, "data")
    body = store.get(data).data
    store.put(data, body[:-7] + b"garbage")  # the last bucket's part overwritten
    last = max(result.ranges)
    with pytest.raises(CorruptSegmentError) as caught:
        chain_log.read(last)
    message = str(caught.value)
    assert data in message and "table ods.orders" in message and "commit 0" in message and f"bucket {last}" in message
    assert "checksum" in message
    assert chain_log.read(0).num_rows == result.ranges[0][1] + 1  # the other parts still read


def test_a_commit_record_that_does_not_continue_the_chain_is_named(store_spec, chain_log: Log, store) -> None:
    chain_log.append(orders(range(50)), "upsert")
    chain_log.append(orders(range(50)), "upsert")
    key = chain_format.commit_key(NAME, 1)
    doc = json.loads(store.get(key).data)
    doc["parts"][0][1] += 1  # a part that starts one past where commit 0 ended (and ends one later)
    doc["ends"][doc["parts"][0][0]] += 1
    store.put(key, json.dumps(doc).encode())
    fresh = reopened(store_spec).log("ods.orders")
    with pytest.raises(CorruptSegmentError, match="log commit 1 starts at offsets .* gap or an overlap"):
        fresh.end_offsets()
    store.put(key, b"{not json")
    with pytest.raises(CorruptSegmentError, match=r"log commit record .*00000000000000000001\.json cannot be read"):
        reopened(store_spec).log("ods.orders").end_offsets()


def test_retention_removes_whole_commits_with_their_data_keeps_the_newest_and_removes_orphans(
    store_spec, chain_log: Log, store: ObjectStore
) -> None:
    results = [chain_log.append(orders(range(10 * i, 10 * i + 10)), "upsert") for i in range(5)]
    ends = chain_log.end_offsets()
    # an orphan: a data object whose producer died before its commit (named by a time an hour before the first)
    orphan = f"{chain_format.data_prefix(NAME)}{0:016d}-deadbeef.arrow"
    store.put(orphan, b"rows of a commit that never landed")
    # the lake holds the first three appends: only those may go
    tiered = {b: results[2].ranges[b][1] + 1 if b in results[2].ranges else 0 for b in range(16)}
    for i in (0, 1):
        for b, (_, last) in results[i].ranges.items():
            tiered[b] = max(tiered[b], last + 1)
    result = apply_log_retention(chain_log, tiered, retention=timedelta(0))
    assert result.segments_deleted == 3 and result.records_deleted == 30
    assert len(objects(store, "commits")) == 2 and len(objects(store, "data")) == 2
    assert orphan not in objects(store, "data")
    starts = chain_log.start_offsets()
    assert all(starts[b] == result.start_offsets[b] for b in range(16)) and result.floors == result.start_offsets
    assert chain_log.end_offsets() == ends
    first_kept = min(b for b in results[3].ranges)
    with pytest.raises(OffsetOutOfRange, match="no longer in the log|removed by log retention"):
        chain_log.read(first_kept, 0)
    with pytest.raises(OffsetOutOfRange, match="no longer in the log; the earliest available offset is"):
        reopened(store_spec).log("ods.orders").read(first_kept, 0)  # a Log that never knew them
    assert chain_log.read(first_kept, starts[first_kept]).num_rows == ends[first_kept] - starts[first_kept]
    # everything tiered: all but the newest commit go (it holds the ends), and appends continue from them
    apply_log_retention(chain_log, ends, retention=timedelta(0))
    assert len(objects(store, "commits")) == 1
    fresh = reopened(store_spec).log("ods.orders")
    assert fresh.end_offsets() == ends
    after = fresh.append(orders([7]), "upsert")
    ((b, (first, _)),) = after.ranges.items()
    assert first == ends[b]


def test_segments_stay_the_format_of_a_table_created_so(lakehouse: Lakehouse, store_spec, store: ObjectStore) -> None:
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4, log_format=SEGMENTS_LOG)
    lakehouse.log("ods.orders").append(orders(range(100)), "upsert")
    keys = [i.key for i in store.list("ods/orders/log/")]
    assert len(keys) == 4 and all("/commits/" not in k and "/data/" not in k for k in keys)
    assert reopened(store_spec).table("ods.orders").log_format == SEGMENTS_LOG


@pytest.mark.subprocess
def test_kill_9_between_the_data_and_the_commit_then_retry_lands_once(lakehouse: Lakehouse, chain_log, store) -> None:
    crash("tests.lakehouse._chain_worker", lakehouse.url, "after-data")
    assert len(objects(store, "data")) == 1 and objects(store, "commits") == []  # the rows: never visible
    assert chain_log.end_offsets() == dict.fromkeys(range(16), 0)
    crash("tests.lakehouse._chain_worker", lakehouse.url, "after-commit")  # landed; the caller never heard
    again = run_worker("tests.lakehouse._chain_worker", lakehouse.url, "none")
    assert again.returncode == 0, tail(again)
    assert again.stdout.strip() == "already"
    rows = all_rows(chain_log)
    assert sorted(c for _, _, c in rows) == sorted(f"c{k}" for k in range(100))
    assert len(objects(store, "commits")) == 1 and len(objects(store, "data")) == 2  # one orphan, for retention


def test_one_producer_id_and_sequence_name_one_batch_per_bucket_as_tasks_append_them(
    store_spec, chain_log: Log
) -> None:
    """A Spark job's tasks append one bucket each under the job's producer id and one sequence (the layers writer
    does): each lands, a retry of each is recognised, and other rows for a bucket already written are refused."""
    keys = list(range(400))
    buckets = chain_log.bucket_of(keys).to_pylist()
    by_bucket = {b: [k for k, kb in zip(keys, buckets, strict=True) if kb == b] for b in sorted(set(buckets))}
    first, second = list(by_bucket)[:2]
    a = chain_log.append(orders(by_bucket[first]), "upsert", producer_id="job", sequence=3)
    b = (
        reopened(store_spec)
        .log("ods.orders")
        .append(orders(by_bucket[second]), "upsert", producer_id="job", sequence=3)
    )
    assert set(a.ranges) == {first} and set(b.ranges) == {second} and not a.already_appended | b.already_appended
    again = (
        reopened(store_spec)
        .log("ods.orders")
        .append(orders(by_bucket[first] + by_bucket[second]), "upsert", producer_id="job", sequence=3)
    )
    assert again.already_appended == {first, second} and again.ranges == {**a.ranges, **b.ranges}
    with pytest.raises(SequenceConflict, match=f"in bucket {first}"):
        reopened(store_spec).log("ods.orders").append(
            orders(by_bucket[first][:-1]), "upsert", producer_id="job", sequence=3
        )
    assert len(all_rows(chain_log)) == len(by_bucket[first]) + len(by_bucket[second])


# -- the property: several producers, restarts with replays, tiering and retention in between ---------------------

EVENTS = pa.schema([("id", pa.int64()), ("producer", pa.int32())])
PRODUCERS = 3

_steps = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, PRODUCERS - 1), st.integers(1, 40)),
        st.tuples(st.just("restart"), st.integers(0, PRODUCERS - 1), st.integers(0, 3)),
        st.tuples(st.just("tier")),
        st.tuples(st.just("retain")),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_producers_restarts_replays_tiering_and_retention_every_reader_equals_the_replay(tmp_path_factory, steps):
    """Random sends from several producers (ids and sequences) over 8 buckets; a producer restarts (a new
    `Lakehouse`, nothing cached) and sends its last few appends again; tiering and log retention in between. Every
    replay is recognised where it first landed; every bucket's offsets are contiguous from the log's start to its
    end; the log, the union read and another process's view hold each sent row exactly once."""
    url = tmp_path_factory.mktemp("wh").as_uri()
    lh = Lakehouse.open(url)
    lh.create_table("ods.events", EVENTS, bucket_key="id", buckets=8, log_format=COMMITS_LOG)
    views = [Lakehouse.open(url) for _ in range(PRODUCERS)]
    sent: list[list[tuple[pa.Table, dict]]] = [[] for _ in range(PRODUCERS)]  # per producer: (batch, ranges)
    since_retention: list[int] = [0] * PRODUCERS  # sends of each producer made since the last retention
    next_id = 0
    try:
        for step in steps:
            if step[0] == "send":
                _, p, rows = step
                batch = pa.table(
                    {
                        "id": pa.array(range(next_id, next_id + rows), pa.int64()),
                        "producer": pa.array([p] * rows, pa.int32()),
                    }
                )
                next_id += rows
                res = views[p].log("ods.events").append(batch, "insert", producer_id=f"p{p}", sequence=len(sent[p]))
                assert not res.already_appended
                sent[p].append((batch, res.ranges))
                since_retention[p] += 1
            elif step[0] == "restart":
                _, p, replay = step
                views[p].close()
                views[p] = Lakehouse.open(url)
                # a restarted producer sends again what it cannot know landed: its newest appends (those retention
                # removed are past the window every producer id is remembered by: docs/concepts/log.md)
                for seq in range(len(sent[p]) - min(replay, since_retention[p]), len(sent[p])):
                    batch, ranges = sent[p][seq]
                    res = views[p].log("ods.events").append(batch, "insert", producer_id=f"p{p}", sequence=seq)
                    assert res.ranges == ranges and res.already_appended == frozenset(ranges), (p, seq, res)
            elif step[0] == "tier":
                lh.tier("ods.events")
            else:
                lh.apply_log_retention("ods.events", retention=timedelta(0))
                since_retention = [0] * PRODUCERS
                # Retention's contract: it removes records older than its age (at least 10 minutes, it warns
                # below), longer than a writer trusts what it knows of the chain (`MAX_INDEX_AGE`, 60 s), so no
                # writer's view predates what it removed. With an age of 0 here, the writers catch up as time
                # would have made them (a writer still at a removed number would create that record again).
                for view in views:
                    view.log("ods.events").end_offsets()
        expected = sorted(i for per in sent for batch, _ in per for i in batch.column("id").to_pylist())
        for reader in (lh, Lakehouse.open(url)):
            log_ = reader.log("ods.events")
            starts, ends = log_.start_offsets(), log_.end_offsets()
            logged: list[int] = []
            for b in range(8):
                got = log_.read(b, starts[b])
                assert got.column("_offset").to_pylist() == list(range(starts[b], ends[b])), f"bucket {b}"
                logged += got.column("id").to_pylist()
            assert len(logged) == len(set(logged)) and set(logged) <= set(expected)
            lake = reader.lake_offsets("ods.events")
            assert all(lake[b] >= starts[b] for b in range(8))  # retention removed only what the lake holds
            assert sorted(reader.union_read("ods.events").column("id").to_pylist()) == expected
            claimed = [
                (b, o) for per in sent for _, ranges in per for b, (lo, hi) in ranges.items() for o in range(lo, hi + 1)
            ]
            assert len(claimed) == len(set(claimed)) == len(expected)
    finally:
        for view in views:
            view.close()
        lh.close()


def test_a_process_that_knows_nothing_of_a_long_chain_reads_a_few_records_not_all_of_them(
    lakehouse: Lakehouse, store: ObjectStore
) -> None:
    """A fresh process (a tiering job, a CLI command) learned the chain by reading every retained record: a
    week of records is millions of GETs. It now starts at the head hint, written every `HINT_EVERY` commits,
    and reaches older offsets by bisection over the commit numbers."""
    from object_store.usage import measure_usage

    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4, log_format=COMMITS_LOG)
    log_ = lakehouse.log("ods.orders")
    appends = 5 * chain_format.HINT_EVERY + 7
    for i in range(appends):
        log_.append(orders([i]), "upsert")
    ends = log_.end_offsets()
    expected = all_rows(log_)
    url = lakehouse.url

    fresh = Lakehouse.open(url)
    with measure_usage() as used:
        assert fresh.log("ods.orders").end_offsets() == ends
    assert used.requests["GET"] <= chain_format.HINT_EVERY + 2 and used.requests["LIST"] <= 1, used.requests
    with measure_usage() as used:
        assert all_rows(fresh.log("ods.orders")) == expected  # every offset, the oldest found by bisection
    # each record and each data object once (read by all four buckets), and a bisection per bucket
    assert used.requests["GET"] <= 2 * appends + 4 * 12 and used.requests["LIST"] <= 8, used.requests
    with measure_usage() as used:
        assert fresh.log("ods.orders").start_offsets() == dict.fromkeys(range(4), 0)
    assert used.requests["LIST"] == 1
    fresh.close()

    # a missing or unreadable hint only costs a listing from the start; a hint past what retention left, too
    for hint in (None, b"not json", json.dumps({"n": 10**9}).encode()):
        if hint is None:
            store.delete(chain_format.head_hint_key(TableName("ods", "orders")))
        else:
            store.put(chain_format.head_hint_key(TableName("ods", "orders")), hint)
        other = Lakehouse.open(url)
        assert other.log("ods.orders").end_offsets() == ends and all_rows(other.log("ods.orders")) == expected
        other.close()


def test_a_fresh_process_s_retry_finds_an_append_older_than_what_it_learned(lakehouse: Lakehouse) -> None:
    """A restarted producer knows only the newest commits (from the hint); its retry of an older append is still
    found by reading older records (up to `LOOK_BACK_READS`), never appended twice."""
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4, log_format=COMMITS_LOG)
    log_ = lakehouse.log("ods.orders")
    first = log_.append(orders(range(10)), "upsert", producer_id="p", sequence=0)
    for i in range(3 * chain_format.HINT_EVERY):
        log_.append(orders([100 + i]), "upsert")
    fresh = Lakehouse.open(lakehouse.url)
    again = fresh.log("ods.orders").append(orders(range(10)), "upsert", producer_id="p", sequence=0)
    assert again.ranges == first.ranges and again.already_appended == frozenset(first.ranges)
    assert sum(fresh.log("ods.orders").end_offsets().values()) == 10 + 3 * chain_format.HINT_EVERY
    fresh.close()
