"""Producer: batching, order across operations, back-pressure, and failures reported, never dropped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter

import pyarrow as pa
import pytest

from lakehouse import Lakehouse
from lakehouse.errors import InvalidArgument, LogClosed, ProducerError, SchemaError
from lakehouse.log import Log
from object_store import ObjectStore
from tests.lakehouse._faults import CountingReads, FailingPuts, GatedPuts
from tests.support.crash import start_worker

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def rows(keys, v="x") -> pa.Table:
    return pa.table({"k": pa.array(list(keys), pa.int64()), "v": [f"{v}{k}" for k in keys]})


@pytest.fixture
def log(lakehouse: Lakehouse) -> Log:
    lakehouse.create_table("ods.kv", SCHEMA, primary_key=["k"], buckets=2)
    return lakehouse.log("ods.kv")


@pytest.fixture
def segments_log(lakehouse: Lakehouse) -> Log:
    """The table as an earlier version created it: one segment object per bucket per append."""
    lakehouse.create_table("ods.kv", SCHEMA, primary_key=["k"], buckets=2, log_format="segments")
    return lakehouse.log("ods.kv")


def all_rows(log: Log) -> list[dict]:
    return [r for b in range(2) for r in log.read(b).to_pylist()]


@pytest.mark.backends("local", "s3")
def test_batches_per_bucket_into_few_full_segments(log: Log) -> None:
    """``batch_rows`` is per bucket: 50 sends of 10 rows over 2 buckets make segments of 91-100 rows (a
    send puts about 5 rows in each bucket), not appends of 100 rows split into two segments of ~50."""
    with log.producer(batch_rows=100, linger=10) as p:
        for i in range(50):
            p.send(rows(range(i * 10, i * 10 + 10)), "upsert")
    assert p.rows_appended == 500 and len(p.results) < 10
    assert Counter(r["k"] for r in all_rows(log)) == Counter(range(500))
    assert [r.sequence for r in p.results] == list(range(len(p.results)))
    for b in range(2):
        sizes = [r.ranges[b][1] - r.ranges[b][0] + 1 for r in p.results if b in r.ranges]
        assert all(91 <= n <= 100 for n in sizes[:-1]), sizes  # the last one is what close() found
        assert sum(sizes) == log.end_offsets()[b]


def test_a_segment_of_several_sends_reads_back_in_send_order(segments_log: Log, store: ObjectStore) -> None:
    """Sends gathered into one append become one segment per bucket, holding the sends' parts in order."""
    log = segments_log
    sends = [rows(range(i * 10, i * 10 + 10), v=f"s{i}-") for i in range(5)]
    with log.producer(batch_rows=1000, linger=10) as p:
        for send in sends:
            p.send(send, "upsert")
    assert len(p.results) == 1 and p.rows_appended == 50
    bucket = log.bucket_of(list(range(50))).to_pylist()
    for b in range(2):
        got = log.read(b)
        expected = [f"s{k // 10}-{k}" for k in range(50) if bucket[k] == b]
        assert got.column("v").to_pylist() == expected
        assert got.column("_offset").to_pylist() == list(range(len(expected)))
        (segment,) = store.list(log.name.segment_key(b, 0).rsplit("/", 1)[0] + "/")
        assert int(store.head(segment.key).metadata["lakestream-count"]) == len(expected)


def test_small_sends_make_segments_of_few_large_batches(segments_log: Log, store: ObjectStore) -> None:
    """A segment gathered from 10-row sends held ~1,000 record batches: 3x the bytes of one, slow to read."""
    log = segments_log
    with log.producer(batch_rows=5000, linger=10) as p:
        for i in range(1000):
            p.send(rows(range(i * 10, i * 10 + 10)), "upsert")
    for result in p.results:
        for b, (first, last) in result.ranges.items():
            body = store.get(log.name.segment_key(b, first)).data
            assert len(list(pa.ipc.open_stream(pa.py_buffer(body)))) == 1, (b, first, last)
    assert sorted(r["k"] for r in all_rows(log)) == list(range(10_000))


def test_full_and_key_only_deletes_share_a_segment(lakehouse: Lakehouse) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", pa.string(), False)])
    lakehouse.create_table("ods.required", schema, primary_key=["k"], buckets=1)
    log = lakehouse.log("ods.required")
    with log.producer(batch_rows=1000, linger=10) as p:
        p.send(pa.table({"k": [1, 2], "v": ["a", "b"]}), "delete")
        p.send(pa.table({"k": [3]}), "delete")  # key only: null in a NOT NULL column
        p.send(pa.table({"k": [4], "v": ["d"]}), "delete")
    assert len(p.results) == 1
    got = log.read(0)
    assert got.column("k").to_pylist() == [1, 2, 3, 4] and got.column("v").to_pylist() == ["a", "b", None, "d"]


@pytest.mark.parametrize(
    "options", [{"batch_rows": 0}, {"batch_rows": 100, "max_buffer_rows": 99}, {"max_buffer_bytes": 0}]
)
def test_bad_settings_are_refused_before_a_thread_starts(log: Log, options: dict) -> None:
    threads = threading.active_count()
    with pytest.raises(InvalidArgument, match="need batch_rows >= 1, max_buffer_rows >= batch_rows and max_buffer_b"):
        log.producer(**options)
    assert threading.active_count() == threads


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"producer_id": "a b"}, "invalid producer id 'a b'"),
        ({"first_sequence": -1}, "got -1"),
        ({"max_retries": -1}, "max_retries must be a number >= 0, got -1"),  # its thread died, close() hung
        ({"linger": "1"}, "linger must be a number >= 0, got '1'"),
        ({"retry_backoff": -0.5}, "retry_backoff must be a number >= 0"),
    ],
)
def test_bad_options_are_refused_before_a_thread_starts(log: Log, options: dict, message: str) -> None:
    threads = threading.active_count()
    with pytest.raises(InvalidArgument, match=message):
        log.producer(**options)
    assert threading.active_count() == threads


def test_closing_the_lakehouse_delivers_what_its_open_producers_hold(log: Log, store, store_spec) -> None:
    """A caller that closes the `Lakehouse` (or the `Log`) before its `Producer`: the rows still arrive. Before,
    the producer's thread died on the stopped pool, the rows were lost and `Producer.close` waited forever."""
    url, options = store_spec
    lakehouse = Lakehouse.open(url, **options)  # its own store: closing it leaves the fixture's open
    own = lakehouse.log("ods.kv")
    p = own.producer(batch_rows=1000, linger=60)
    p.send(rows(range(30)), "upsert")
    lakehouse.close()
    fresh = Lakehouse(store).log("ods.kv")
    assert sorted(r["k"] for b in range(2) for r in fresh.read(b).to_pylist()) == list(range(30))
    assert p.rows_appended == 30
    p.close()  # already closed by the log: nothing more to do
    with pytest.raises(ProducerError, match="is closed"):
        p.send(rows([99]), "upsert")
    with pytest.raises(LogClosed, match="the log of ods.kv is closed"):
        own.append(rows([99]), "upsert")
    with pytest.raises(LogClosed):
        own.producer()
    with pytest.raises(LogClosed):
        own.read(0)


def run_with_an_open_producer(store_spec, then: str = "") -> subprocess.CompletedProcess:
    """Run a program that sends 40 rows through a producer it never closes, then runs ``then``."""
    url, options = store_spec
    program = (
        "import json, os, sys\n"
        "import pyarrow as pa\n"
        "from lakehouse import Lakehouse\n"
        "url, options = json.loads(sys.argv[1])\n"
        "p = Lakehouse.open(url, **options).log('ods.kv').producer(batch_rows=1000, linger=60)\n"
        "p.send(pa.table({'k': pa.array(range(40), pa.int64()), 'v': ['x'] * 40}), 'upsert')\n"
    ) + then
    return subprocess.run(
        [sys.executable, "-c", program, json.dumps([url, options])], capture_output=True, text=True, timeout=120
    )


@pytest.mark.backends("local", "s3")
@pytest.mark.subprocess
def test_a_producer_left_open_when_the_program_exits_still_appends_its_rows(log: Log, store_spec) -> None:
    """Its thread is a daemon: at exit the buffered rows vanished with it, silently."""
    done = run_with_an_open_producer(store_spec)
    assert done.returncode == 0, done.stderr
    assert "was never closed; closing it at exit" in done.stderr
    assert sorted(r["k"] for r in all_rows(log)) == list(range(40))


@pytest.mark.backends("local", "s3")
@pytest.mark.subprocess
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_leaves_the_parents_producers_to_the_parent(log: Log, store_spec) -> None:
    """The child inherited the producer but not its thread: closing it at the child's exit waited forever."""
    done = run_with_an_open_producer(
        store_spec, "pid = os.fork()\nif pid == 0:\n    sys.exit(0)\nprint(os.waitpid(pid, 0)[1])\n"
    )
    assert (done.returncode, done.stdout.strip()) == (0, "0"), done.stderr
    assert sorted(r["k"] for r in all_rows(log)) == list(range(40))  # appended once, by the parent


def test_a_closed_log_is_replaced_by_the_next_lakehouse_log_call(lakehouse: Lakehouse, log: Log) -> None:
    log.close()
    again = lakehouse.log("ods.kv")
    assert again is not log and again.append(rows([1, 2]), "upsert").rows == 2


def test_an_unexpected_error_in_the_producers_thread_is_raised_not_waited_on(log: Log, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise TypeError("a bug")  # not a LakestreamError: the thread used to die and leave flush() waiting

    monkeypatch.setattr(log, "_append_parts", broken)
    p = log.producer(linger=0)
    p.send(rows(range(5)), "upsert")
    with pytest.raises(ProducerError, match="unexpected error; 5 rows were not delivered: a bug"):
        p.close(timeout=30)  # the code before: "flush timed out"


def test_a_long_running_producer_keeps_only_its_latest_results(log: Log, monkeypatch) -> None:
    """Every append's result was kept: a producer streaming for weeks grew without bound."""
    monkeypatch.setattr("lakehouse.log.producer.RESULTS_KEPT", 3, raising=False)
    with log.producer() as p:
        for i in range(5):
            p.send(rows(range(i * 10, i * 10 + 10)), "upsert")
            p.flush()
    assert [r.sequence for r in p.results] == [2, 3, 4] and p.rows_appended == 50


def test_linger_flushes_without_more_sends(log: Log) -> None:
    with log.producer(batch_rows=10_000, linger=0.05) as p:
        p.send(rows([1, 2, 3]), "upsert")
        deadline = time.monotonic() + 10
        while p.rows_appended < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert p.rows_appended == 3  # appended by linger, before close


def test_flush_returns_while_other_threads_keep_sending(log: Log) -> None:
    """flush() waited for an empty buffer, which a steady stream of sends from another thread never leaves:
    a caller flushing before it records its source position waited for good. It waits for the rows sent
    before it, and they are in the log when it returns."""
    stop = threading.Event()
    with log.producer(linger=5, batch_rows=500) as p:

        def stream() -> None:
            k = 0
            while not stop.is_set():
                p.send(rows(range(k, k + 200)), "upsert")
                k += 200

        sender = threading.Thread(target=stream)
        sender.start()
        try:
            for i in range(3):
                time.sleep(0.2)
                p.send(rows([-1 - i], v="mine"), "upsert")
                p.flush(timeout=30)  # was: ProducerError, flush timed out
                mine = {r["k"] for r in all_rows(log) if r["v"].startswith("mine")}
                assert mine == {-1 - j for j in range(i + 1)}
        finally:
            stop.set()
            sender.join()


def test_order_across_operations_is_kept(log: Log) -> None:
    with log.producer(batch_rows=1000, linger=10) as p:
        p.send(rows([7], "a"), "upsert")
        p.send(rows([7]), "delete")
        p.send(rows([7], "b"), "upsert")
    b = log.bucket_of([7]).to_pylist()[0]
    got = log.read(b)
    assert list(zip(got.column("_op").to_pylist(), got.column("v").to_pylist(), strict=True)) == [
        ("upsert", "a7"),
        ("delete", "x7"),
        ("upsert", "b7"),
    ]


def test_small_sends_that_wait_together_are_split_together_in_order(log: Log, store, monkeypatch) -> None:
    """Each send was split on its own (~0.2 ms of hashing and takes): 10-row sends ran at ~30,000 rows/s.
    Sends that queue up while an append is in flight are now split as groups of one operation."""
    from lakehouse.log import producer as producer_module

    calls = []
    real = producer_module.split_by_bucket
    monkeypatch.setattr(producer_module, "split_by_bucket", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    gated = GatedPuts(store)
    expected = []
    with log.producer(batch_rows=1000, linger=0.0) as p:
        p.send(rows([0]), "upsert")  # its append waits on the gate; the sends below queue up meanwhile
        time.sleep(0.2)
        for i in range(300):
            keys, op = [i % 7, 100 + i], "delete" if i % 50 == 49 else "upsert"
            p.send(rows(keys, v=f"s{i}-"), op)
            expected += [(k, op, f"s{i}-{k}" if op == "upsert" else None) for k in keys]
        gated.gate.set()
    assert len(calls) <= 20, len(calls)  # 1 + groups of consecutive upserts (and the 6 deletes), not 301
    bucket = log.bucket_of([k for k, _, _ in expected]).to_pylist()
    for b in range(2):
        got = [(r["k"], r["_op"], r["v"] if r["_op"] == "upsert" else None) for r in log.read(b).to_pylist()]
        want = [e for e, eb in zip(expected, bucket, strict=True) if eb == b]
        assert got[-len(want) :] == want


def test_group_sends_keeps_order_operations_and_bounds() -> None:
    from lakehouse.log.producer import _Pending, group_sends

    def send(op, n=10, nbytes=100):
        return _Pending(rows(range(n)), op, 0.0, nbytes)

    sends = [send("upsert"), send("upsert"), send("upsert"), send("delete"), send("upsert", 40), send("upsert")]
    groups = group_sends(sends, max_rows=25, max_bytes=10_000)
    assert [[(s.op, s.table.num_rows) for s in g] for g in groups] == [
        [("upsert", 10), ("upsert", 10)],
        [("upsert", 10)],
        [("delete", 10)],
        [("upsert", 40)],  # larger than a group: alone
        [("upsert", 10)],
    ]
    assert len(group_sends(sends[:3], max_rows=1000, max_bytes=250)) == 2  # bytes bound too


def test_bad_rows_raise_at_send_and_nothing_is_queued(log: Log) -> None:
    with log.producer() as p:
        with pytest.raises(SchemaError):
            p.send(pa.table({"k": [1]}), "upsert")
        p.send(rows([1]), "upsert")
    assert p.rows_appended == 1


def test_back_pressure_blocks_send_when_the_buffer_is_full(log: Log, store: ObjectStore) -> None:
    gated = GatedPuts(store)
    p = log.producer(batch_rows=10, max_buffer_rows=30, linger=0.0)
    for i in range(3):
        p.send(rows(range(i * 10, i * 10 + 10)))  # fills the buffer: 30 rows waiting on the gate
    returned = threading.Event()
    t = threading.Thread(target=lambda: (p.send(rows(range(30, 40))), returned.set()))
    t.start()
    time.sleep(0.5)
    assert not returned.is_set(), "send should block while the buffer is full"
    gated.gate.set()
    t.join(30)
    assert returned.is_set()
    p.close()
    assert p.rows_appended == 40 and len(all_rows(log)) == 40


def test_back_pressure_on_bytes_holds_wide_rows_to_the_byte_limit(log: Log, store: ObjectStore) -> None:
    """Rows of 100 kB: the buffer fills by bytes (``max_buffer_bytes``) long before it does by rows."""
    gated = GatedPuts(store)
    wide = [rows(range(i * 4, i * 4 + 4), v="x" * 100_000) for i in range(4)]  # ~400 kB each
    p = log.producer(batch_rows=1000, max_buffer_bytes=1_000_000, linger=0.0)
    p.send(wide[0])
    p.send(wide[1])  # 800 kB waiting on the gate
    returned = threading.Event()
    t = threading.Thread(target=lambda: (p.send(wide[2]), returned.set()))
    t.start()
    time.sleep(0.5)
    assert not returned.is_set(), "a send past max_buffer_bytes should block"
    assert p._buffered == 8 and 800_000 < p._buffered_bytes <= 1_000_000
    gated.gate.set()
    t.join(30)
    assert returned.is_set()
    p.send(wide[3])
    p.close()
    assert p.rows_appended == 16 and len(all_rows(log)) == 16
    assert (p._buffered, p._buffered_bytes) == (0, 0)  # the accounting returns to zero


def test_a_send_larger_than_the_buffer_goes_through_when_it_is_empty(log: Log) -> None:
    with log.producer(max_buffer_bytes=1000) as p:
        p.send(rows(range(100), v="y" * 100))  # ~10 kB
    assert p.rows_appended == 100 and (p._buffered, p._buffered_bytes) == (0, 0)


@pytest.mark.backends("local", "s3")
def test_transient_failures_are_retried_without_duplicates(log: Log, store: ObjectStore) -> None:
    FailingPuts(store, "/log/", times=3)
    with log.producer(batch_rows=100, retry_backoff=0.01) as p:
        p.send(rows(range(100)), "upsert")
    assert Counter(r["k"] for r in all_rows(log)) == Counter(range(100))


def test_a_bucket_part_holds_only_its_own_rows(log: Log) -> None:
    """A send's rows are queued per bucket, and one bucket's part may wait longer than the others. Each part
    owns its buffers, so a one-row part does not keep its whole send in memory: the buffer, which counts
    rows, stays an honest bound on memory."""
    bucket = log.bucket_of(list(range(3000))).to_pylist()
    zero, one = [k for k in range(3000) if bucket[k] == 0], [k for k in range(3000) if bucket[k] == 1]
    p = log.producer(batch_rows=1000, linger=60)
    p.send(rows([*zero[:999], one[0]]), "upsert")  # neither bucket is ready: 999 and 1 rows
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with p._cond:
            part = p._queues[1][0].table if p._queues.get(1) else None
        if part is not None:
            break
        time.sleep(0.01)
    assert part is not None and part.num_rows == 1
    assert part.get_total_buffer_size() < 100  # its own row, not the 1,000-row send's buffers (~16 kB)
    p.close()
    assert Counter(r["k"] for r in all_rows(log)) == Counter([*zero[:999], one[0]])


def test_keyless_table_rotates_appends_and_a_retry_stays_in_its_bucket(lakehouse: Lakehouse, store) -> None:
    """A keyless table has one queue; each append goes to the next bucket. A retried append goes to the
    bucket of its first attempt (here: that attempt landed and its answer was lost), so nothing doubles."""
    lakehouse.create_table("ods.clicks", SCHEMA, buckets=3, log_format="segments")
    log = lakehouse.log("ods.clicks")
    lost = FailingPuts(store, "/log/", apply=True).failed  # applied, then the answer is lost
    with log.producer(batch_rows=10, linger=10, retry_backoff=0.01) as p:
        for i in range(9):
            p.send(rows(range(i * 10, i * 10 + 10)))
    assert lost and p.results[0].already_appended  # the retry found its first attempt
    assert [len(r.ranges) for r in p.results] == [1] * 9
    assert sorted(Counter(b for r in p.results for b in r.ranges).values()) == [3, 3, 3]  # round-robin
    keys = [k for b in range(3) for k in log.read(b).column("k").to_pylist()]
    assert Counter(keys) == Counter(range(90))  # every row exactly once


def test_a_new_producers_first_append_reads_no_earlier_segments(log: Log, store: ObjectStore) -> None:
    """A `Producer` with a generated id cannot have an earlier attempt in the log, so its first append does
    not look back for one (that look-back HEADs up to `dedup_window` segments per bucket)."""
    for i in range(20):
        log.append(rows(range(i * 10, i * 10 + 10)), "upsert")
    reads = CountingReads(store)
    with log.producer(batch_rows=100, linger=10) as p:
        p.send(rows(range(1000, 1010)), "upsert")
    assert p.rows_appended == 10
    assert (reads.heads, reads.lists) == (0, 0)


@pytest.mark.backends("local", "s3")
def test_a_producer_restarted_with_its_id_skips_what_already_landed(
    lakehouse: Lakehouse, log: Log, store: ObjectStore
) -> None:
    """A process appended (producer "p1", sequence 0) and died before it learnt the answer. Restarted with
    the same id and first sequence, its `Producer` looks back on its first append and finds it there."""
    first = log.append(rows(range(10)), "upsert", producer_id="p1", sequence=0)
    log.append(rows(range(100, 110)), "upsert")  # others append after it
    restarted = Log(store, lakehouse.table("ods.kv"))  # the new process
    with restarted.producer(producer_id="p1", first_sequence=0, batch_rows=100, linger=10) as p:
        p.send(rows(range(10)), "upsert")  # the same rows again: what the caller replays after a crash
        p.flush()
        p.send(rows(range(10, 20)), "upsert")  # then new ones
    assert p.results[0].already_appended == frozenset(first.ranges) and p.results[0].ranges == first.ranges
    assert Counter(r["k"] for r in all_rows(log)) == Counter([*range(20), *range(100, 110)])
    restarted.close()


def _sends(log: Log, keys_per_send: list[list[int]], start: int = 0, **options):
    """A producer that sends ``keys_per_send[start:]``; returns it open (the caller closes or abandons it)."""
    p = log.producer(**options)
    for keys in keys_per_send[start:]:
        p.send(rows(keys, v=f"s{keys[0]}-"), "upsert")
    return p


def test_a_producer_resumed_from_its_checkpoint_skips_what_landed_however_it_batches(
    lakehouse: Lakehouse, log: Log, store: ObjectStore
) -> None:
    """Issue 22: a resumed Producer lost rows. Its batches depend on timing, so after a crash the rows under
    sequence n were not the rows the crashed process wrote under n; a resumed batch (chunks 20-23) was taken
    as the old segment (chunks 20-22) and 23's rows vanished. Resume now works per send and bucket."""
    plan = [list(range(i * 10, i * 10 + 10)) for i in range(12)]
    crashed = log.producer(batch_rows=1000, linger=60)
    for keys in plan[:3]:
        crashed.send(rows(keys, v=f"s{keys[0]}-"), "upsert")
    checkpoint = crashed.checkpoint()  # sends 1-3 are in the log; the caller stores this with position 3
    assert json.loads(checkpoint.to_json())["sends"] == 3
    for keys in plan[3:8]:  # then sends 4-8 are appended as one batch per bucket, and the process dies
        crashed.send(rows(keys, v=f"s{keys[0]}-"), "upsert")
    crashed.flush()
    crashed._closing = True  # (its thread stops without the rows a real crash would lose: there are none)
    restarted = Log(store, lakehouse.table("ods.kv"))  # the new process batches sends 4-12 one by one
    resumed = restarted.producer(resume=checkpoint.to_json(), batch_rows=5, linger=0)
    for keys in plan[3:]:
        resumed.send(rows(keys, v=f"s{keys[0]}-"), "upsert")
    resumed.close()
    assert resumed.rows_skipped == 50 and resumed.rows_appended == 40
    assert Counter(r["k"] for r in all_rows(log)) == Counter(range(120))  # each row exactly once
    assert {r.sequence for r in resumed.results}.isdisjoint({r.sequence for r in crashed.results})
    restarted.close()


def test_a_replay_that_is_not_what_followed_the_checkpoint_is_an_error(lakehouse: Lakehouse, log: Log) -> None:
    plan = [list(range(i * 10, i * 10 + 10)) for i in range(6)]
    crashed = log.producer(batch_rows=1000, linger=60)
    checkpoint = crashed.checkpoint()
    for keys in plan[:4]:
        crashed.send(rows(keys), "upsert")
    crashed.flush()
    resumed = log.producer(resume=checkpoint)
    resumed.send(rows(plan[0]), "upsert")
    resumed.send(rows(plan[2]), "upsert")  # send 2 replayed with other rows
    resumed.send(rows(plan[2]), "upsert")
    resumed.send(rows(plan[3]), "upsert")
    with pytest.raises(ProducerError, match="not the ones it appended before it stopped"):
        resumed.close()
    crashed.close()
    assert Counter(r["k"] for r in all_rows(log)) == Counter(range(40))  # nothing written twice


def test_a_checkpoint_resumes_only_its_own_table_and_is_checked(lakehouse: Lakehouse, log: Log) -> None:
    lakehouse.create_table("ods.other", SCHEMA, primary_key=["k"], buckets=2)
    with log.producer() as p:
        checkpoint = p.checkpoint()
    with pytest.raises(InvalidArgument, match="cannot resume a producer on ods.other"):
        lakehouse.log("ods.other").producer(resume=checkpoint)
    with pytest.raises(InvalidArgument, match="not a producer checkpoint"):
        log.producer(resume='{"table": "ods.kv"}')
    with pytest.raises(InvalidArgument, match="give neither"):
        log.producer(resume=checkpoint, producer_id="other")


@pytest.mark.backends("local", "s3")
@pytest.mark.slow
@pytest.mark.parametrize("keyed", [True, False], ids=["bucketed", "keyless"])
def test_kill_9_then_resume_from_the_checkpoint_appends_every_row_exactly_once(
    lakehouse: Lakehouse, store_spec, tmp_path, keyed: bool
) -> None:
    """Crash and resume with random linger and batch sizes: a producer program checkpoints as it streams and
    is killed with SIGKILL at a random moment, three times; each rerun resumes its stored checkpoint and
    replays the source from the stored position. Every row is in the log exactly once."""
    import random
    import signal

    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    lakehouse.create_table("ods.stream", schema, buckets=4, **({"bucket_key": "id"} if keyed else {}))
    url, options = store_spec
    state, chunks, rng = str(tmp_path / "state.json"), 1500, random.Random()

    def program(seed: int) -> subprocess.Popen:
        args = json.dumps([url, options, "ods.stream", state, chunks, seed])
        return start_worker("tests.lakehouse._resume_worker", args, capture_stderr=False)

    def position() -> int:
        with open(state) as f:
            return json.load(f)["position"]

    killed_at = []
    for _ in range(4):  # each run resumes what the one before stored, then is killed mid-stream
        proc = program(rng.randrange(10**6))
        start = position() if os.path.exists(state) else 0
        # at most ~200 chunks a run and a margin of 400 at the end: a kill lands after the target by up to
        # ~100 chunks (the poll and the random sleep), and the last kill must still interrupt the stream
        target = min(chunks - 400, start + rng.randrange(20, 200))
        while proc.poll() is None and (not os.path.exists(state) or position() < target):
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.05))  # mid-batch: some sends after the checkpoint have landed, some not
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at.append(position())
    done = program(rng.randrange(10**6))
    out, _ = done.communicate(timeout=300)
    assert done.returncode == 0
    print(f"killed after chunks {killed_at}; the last run skipped {json.loads(out)['skipped']} landed rows")
    assert killed_at[-1] < chunks  # the kills interrupted the stream (else this tested no crash)
    log = lakehouse.log("ods.stream")
    ids = Counter(i for b in range(4) for i in log.read(b).column("id").to_pylist())
    expected = Counter(i * 1000 + j for i in range(chunks) for j in range(37))
    assert ids == expected, (sum((ids - expected).values()), sum((expected - ids).values()))


def test_permanent_failure_is_reported_with_the_undelivered_count(log: Log, store: ObjectStore) -> None:
    FailingPuts(store, "/log/", times=10**9)
    p = log.producer(batch_rows=10, linger=0.0, max_retries=2, retry_backoff=0.01)
    p.send(rows(range(10)))
    with pytest.raises(ProducerError, match=r"10 rows were not delivered") as info:
        p.flush(timeout=30)
    assert isinstance(info.value.__cause__, Exception)
    with pytest.raises(ProducerError):
        p.send(rows(range(10, 20)))  # refused after a failure: the caller must notice
    with pytest.raises(ProducerError):
        p.close()
    assert all_rows(log) == []
