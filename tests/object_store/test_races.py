"""Many writers, one winner: conditional writes under real concurrency (threads and processes)."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

from object_store import ObjectStore, open_store
from tests.object_store._workers import cas_increment, race_create_only

# Races on conditional writes: each backend must resolve them, so they run on each.
pytestmark = pytest.mark.backends("local", "s3")


ROUNDS = 50
#: Rounds of the 16-thread race: SeaweedFS answers the losers of an overlapping conditional create after its lock
#: waits, in steps of 1 s (up to ~4 s a round with 16 writers), so 50 rounds took 3 minutes; each round is still a
#: 16-way race on one key.
THREAD_ROUNDS = 15


def _assert_one_winner_per_round(store: ObjectStore, wins: list[list[int]], workers: int, rounds: int = ROUNDS) -> None:
    per_round = Counter(r for won in wins for r in won)
    assert sorted(per_round) == list(range(rounds)), "some round had no winner"
    assert set(per_round.values()) == {1}, f"rounds with several winners: {per_round}"
    for worker, won in enumerate(wins):
        for r in won:  # the object holds exactly the winner's bytes
            assert store.get(f"race/{r:03d}").data == f"worker-{worker}".encode()
    assert len(list(store.list("race/"))) == rounds


@pytest.mark.slow
def test_16_threads_race_create_only_one_winner_per_round(store_spec, store: ObjectStore) -> None:
    url, options = store_spec
    workers = 16
    barrier = threading.Barrier(workers)
    with ThreadPoolExecutor(workers) as pool:
        wins = list(pool.map(lambda w: race_create_only(url, options, w, THREAD_ROUNDS, barrier), range(workers)))
    _assert_one_winner_per_round(store, wins, workers, THREAD_ROUNDS)


@pytest.mark.slow
def test_4_processes_race_create_only_one_winner_per_round(store_spec, store: ObjectStore) -> None:
    url, options = store_spec
    workers = 4
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(workers)
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            futures = [pool.submit(race_create_only, url, options, w, ROUNDS, barrier) for w in range(workers)]
            wins = [f.result(timeout=300) for f in futures]
    _assert_one_winner_per_round(store, wins, workers)


@pytest.mark.slow
def test_16_workers_cas_counter_loses_no_increment(store_spec, store: ObjectStore) -> None:
    url, options = store_spec
    store.put("counter", b"0")
    workers, times = 16, 10
    with ThreadPoolExecutor(workers) as pool:
        attempts = list(pool.map(lambda _: cas_increment(url, options, "counter", times), range(workers)))
    assert int(store.get("counter").data) == workers * times
    assert sum(attempts) >= workers * times


@pytest.mark.slow
def test_cas_counter_across_processes(store_spec, store: ObjectStore) -> None:
    url, options = store_spec
    store.put("counter", b"0")
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(4, mp_context=ctx) as pool:
        list(pool.map(cas_increment, [url] * 4, [options] * 4, ["counter"] * 4, [15] * 4))
    assert int(open_store(url, **options).get("counter").data) == 60
