"""A commit that lost its CAS waits for the table's pointer to go quiet before pyiceberg's retry reloads."""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pytest

from lakehouse.iceberg.catalog import DEFAULT_TABLE_PROPERTIES
from lakehouse.iceberg.contention import QUIET_MAX_MS, QUIET_MS, quiet_settings, wait_until_quiet
from object_store import PreconditionFailed

SCHEMA = pa.schema([("worker", pa.int32()), ("seq", pa.int32())])


class FakeTime:
    """A clock that only moves when slept on."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def test_waits_until_two_reads_a_quiet_interval_apart_agree() -> None:
    t = FakeTime()
    etags = iter(["b", "c", "c", "d"])  # the pointer moves twice, then stays
    assert wait_until_quiet(lambda: next(etags), "a", 0.1, 10, sleep=t.sleep, clock=t.clock)
    assert len(t.sleeps) == 3
    assert all(0.075 <= s <= 0.125 for s in t.sleeps)


def test_gives_up_after_the_limit_when_the_pointer_keeps_moving() -> None:
    t = FakeTime()
    counter = iter(range(10**6))
    assert not wait_until_quiet(lambda: str(next(counter)), "x", 0.1, 1.0, sleep=t.sleep, clock=t.clock)
    assert 1.0 <= t.now <= 1.0 + 1e-9  # the last sleep is cut to the deadline
    assert 7 <= len(t.sleeps) <= 14


def test_off_and_unreadable_pointer_return_at_once() -> None:
    t = FakeTime()

    def never() -> str:
        raise AssertionError("no poll when the wait is off")

    assert wait_until_quiet(never, "a", 0, 1.0, sleep=t.sleep, clock=t.clock)
    assert t.sleeps == []
    assert wait_until_quiet(lambda: None, "a", 0.1, 1.0, sleep=t.sleep, clock=t.clock)
    assert len(t.sleeps) == 1


def test_settings_from_table_properties() -> None:
    assert quiet_settings({}) == (0.1, 2.0)
    assert quiet_settings({QUIET_MS: "250", QUIET_MAX_MS: "5000"}) == (0.25, 5.0)
    assert quiet_settings({QUIET_MS: "0"})[0] == 0
    assert quiet_settings({QUIET_MS: "soon", QUIET_MAX_MS: "-3"}) == (0.1, 0.0)


def test_tables_are_created_with_the_settings(catalog) -> None:
    catalog.create_namespace("ods")
    props = catalog.create_table("ods.t", SCHEMA).metadata.properties
    assert {k: props[k] for k in DEFAULT_TABLE_PROPERTIES} == DEFAULT_TABLE_PROPERTIES


@pytest.mark.backends("local", "s3")
def test_a_losing_append_retries_only_after_the_busy_writer_stops(catalog) -> None:
    """Writer B's append loses to a busy writer that keeps moving the pointer; B's retry waits until the
    pointer has been quiet, then commits on top of everything (nothing lost, lineage linear)."""
    catalog.create_namespace("ods")
    catalog.create_table("ods.t", SCHEMA, properties={QUIET_MS: "1000", QUIET_MAX_MS: "30000"})
    a, b = catalog.load_table("ods.t"), catalog.load_table("ods.t")
    a.append(pa.table({"worker": pa.array([0], pa.int32()), "seq": pa.array([0], pa.int32())}))  # b is stale now
    key = "_lakestream/catalog/tables/ods/t.json"
    stop, last_write = threading.Event(), [0.0]

    def busy() -> None:  # a writer committing every ~0.2 s: CAS the pointer (content unchanged but a counter)
        n = 0
        while not stop.is_set():
            obj = catalog.store.get(key)
            doc = {**json.loads(obj.data), "busy": n}
            try:
                catalog.store.put(key, json.dumps(doc).encode(), if_match=obj.etag)
                last_write[0] = time.monotonic()
                n += 1
            except PreconditionFailed:
                pass  # B committed in between: read again
            time.sleep(0.2)  # far longer than B needs to commit: without the wait, B would slip in

    thread = threading.Thread(target=busy)
    thread.start()
    timer = threading.Timer(2.0, stop.set)  # the busy writer stops after 2 s, whatever B does
    timer.start()
    try:
        b.append(pa.table({"worker": pa.array([1], pa.int32()), "seq": pa.array([0], pa.int32())}))
        done = time.monotonic()
    except BaseException:
        stop.set()
        raise
    finally:
        thread.join()
        timer.cancel()
    assert done > last_write[0], "B committed while the pointer was still moving"
    table = catalog.load_table("ods.t")
    assert sorted(r["worker"] for r in table.scan().to_arrow().to_pylist()) == [0, 1]
    assert [s.parent_snapshot_id for s in table.metadata.snapshots] == [None, table.metadata.snapshots[0].snapshot_id]


def test_a_stale_note_of_a_lost_commit_does_not_delay_a_refresh(catalog) -> None:
    catalog.create_namespace("ods")
    catalog.create_table("ods.t", SCHEMA, properties={QUIET_MS: "5000", QUIET_MAX_MS: "10000"})
    t = catalog.load_table("ods.t")
    t._lost_commit = ("an etag the pointer never had", time.monotonic() - 11)  # older than the longest wait
    started = time.monotonic()
    t.refresh()
    assert time.monotonic() - started < 3.5  # no quiet wait (its first poll comes after 3.75 s at the earliest)
    assert t._lost_commit is None
