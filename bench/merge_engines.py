"""Merge engines against last-row on the same changes: a tiering round and a union read of the log tail.

Three primary-key tables of ``--rows`` orders (TPC-H-shaped, 8 buckets, merge-on-read) get the same initial load
and the same ``--rounds`` rounds of changes (1 % of the keys, uniformly: every file holds one); the tables differ
only in their merge engine: ``last-row`` (the baseline, measured in the same run), ``partial-update`` and
``aggregate`` (sum of the price, max of the customer, count of the ship priority). Per round, the changes are
appended, the table is union-read with them as its tail (median of 3), then tiered. Printed: each engine's
throughput as a ratio of last-row's (baseline seconds / engine seconds; goal >= 0.8 for both), the tiering
rounds' also in this process's CPU time (the local executor's threads), steadier than wall time on a busy host.

A merge engine's round costs more than last-row's by the stored rows of the changed keys: last-row needs only
their positions (the key column of the row groups that may hold one), an engine their whole rows.

    .venv/bin/python bench/merge_engines.py            # 2 M rows
    .venv/bin/python bench/merge_engines.py --quick    # 200,000 rows
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tiering import KEY, SCHEMA, make_dataset, orders  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402

BUCKETS = 8
ENGINES = {
    "last-row": {},
    "partial-update": {},
    "aggregate": {"aggregates": {"o_totalprice": "sum", "o_custkey": "max", "o_shippriority": "count"}},
}


def say(message: str) -> None:
    print(message, flush=True)


def change_rounds(base: pa.Table, rounds: int, seed: int, clerks: pa.Array, customers: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    keys = base.column(KEY).to_numpy()
    return [
        orders(np.sort(rng.choice(keys, max(1, len(keys) // 100), replace=False)), rng, customers, clerks)
        for _ in range(rounds)
    ]


def append(lh: Lakehouse, name: str, rows: pa.Table) -> None:
    log = lh.log(name)
    for start in range(0, rows.num_rows, 500_000):
        log.append(rows.slice(start, 500_000), "upsert")


def median_seconds(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="200,000 rows")
    args, _ = p.parse_known_args()  # make bench passes every benchmark the same arguments
    rows = 200_000 if args.quick else args.rows
    tmp = Path(tempfile.mkdtemp(prefix="lakestream-engines-"))
    try:
        ds = make_dataset(rows, 10, seed=21)
        rounds = change_rounds(ds.base, args.rounds, 22, ds.clerks, ds.customers)
        say(f"{rows:,} rows, {args.rounds} rounds of {rounds[0].num_rows:,} upserts (uniform keys), {BUCKETS} buckets")
        lh = Lakehouse.open(tmp.as_uri())
        tiering: dict[str, list[float]] = {e: [] for e in ENGINES}
        tiering_cpu: dict[str, list[float]] = {e: [] for e in ENGINES}  # this process's: the local executor's threads
        reading: dict[str, list[float]] = {e: [] for e in ENGINES}
        names = {e: f"bench.{e.replace('-', '_')}" for e in ENGINES}
        for engine, options in ENGINES.items():
            lh.create_table(names[engine], SCHEMA, primary_key=[KEY], buckets=BUCKETS, merge_engine=engine, **options)
            append(lh, names[engine], ds.base)
            lh.tier(names[engine])
        for changes in rounds:  # the engines take turns each round: a busy machine slows them alike
            for engine, name in names.items():
                append(lh, name, changes)
                reading[engine].append(median_seconds(lambda name=name: lh.union_read(name)))
                t0, c0 = time.perf_counter(), time.process_time()
                lh.tier(name)
                tiering[engine].append(time.perf_counter() - t0)
                tiering_cpu[engine].append(time.process_time() - c0)
        for engine in ENGINES:
            say(
                f"{engine}: tiering round {statistics.median(tiering[engine]):.2f} s, union read with a 1 % tail "
                f"{statistics.median(reading[engine]):.2f} s (medians of {args.rounds} rounds)"
            )
        base_tier, base_read = statistics.median(tiering["last-row"]), statistics.median(reading["last-row"])
        base_cpu = statistics.median(tiering_cpu["last-row"])
        for engine in ("partial-update", "aggregate"):
            say(
                f"{engine} / last-row throughput: tiering {base_tier / statistics.median(tiering[engine]):.2f}x "
                f"(CPU time {base_cpu / statistics.median(tiering_cpu[engine]):.2f}x), "
                f"union read {base_read / statistics.median(reading[engine]):.2f}x (goal >= 0.8)"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
