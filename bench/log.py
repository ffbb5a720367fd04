"""Log benchmark: appends and reads against raw object-store calls on the same bytes, in the same run.

    python bench/log.py            # full run (a few minutes)
    python bench/log.py --quick    # a smoke run

Append: a TPC-H-orders-shaped primary-key table with 4 buckets; each append is one batch of
``--rows`` rows (4 segments). Ours = `Log.append` (validation, bucketing, IPC encoding, create-only PUTs,
offset bookkeeping). Baseline = the already-encoded segment bodies of the same batches PUT to fresh keys
with the same parallelism (one thread per bucket), no conditions. With 4 producers, 4 threads append at
once, each through its own `Log` (as separate processes would): to the same table (ours race for the same
next offsets; the baseline's keys never collide), and to a table each (no races: what 4 producers cost
the client and the store). A third case has the 4 threads share one `Log` on one table, as threads of
one process should: they take turns per bucket instead of racing. Bucket-aligned writers: 4 producers on
one table of 16 buckets, each producer's rows in 4 buckets of its own (what an ingest gets by routing rows
by `bucket_of`): one table, no races. A last case appends
to a keyless log table (each append is one segment in one bucket); its baseline PUTs the
one body on the caller's thread, as the log does.

    python bench/log.py --only s3 --cases aligned racing    # some append cases, one backend

Streaming: threads each stream batches through a `Producer` (its defaults), against raw PUTs of the
segment bodies such a `Producer` writes (from an untimed pass over the same sends), one append at a time
per thread and its buckets in parallel, as the `Producer` commits them.

Read: one bucket, ours = `Log.read` (checksums, headers, system columns, 4 segments prefetched) against
raw GETs of the same segments with the same prefetch depth plus Arrow IPC decoding.

Ratios are baseline_time / our_time (1.0 = no overhead); goal >= 0.8. Appends run in rounds of
``ROUND`` appends per producer, ours and the baseline alternating (who goes first swaps each round);
the ratio is the median of the rounds' ratios, because a single stalled request on this machine (a
round of 5 appends taking several times its neighbours, on either side) would otherwise decide a ratio
of totals. rows/s and MB/s are totals. Reads alternate which side goes first and compare medians.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import on_both_backends, parser, pct, run_threads, timed_each  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402
from lakehouse.log import Log, segment  # noqa: E402
from lakehouse.log.batch import split_by_bucket  # noqa: E402
from lakehouse.table.bucketing import bucket_ids  # noqa: E402
from lakestream.demo.pipeline import ORDERS_SCHEMA, orders_batch  # noqa: E402
from object_store import ObjectStore  # noqa: E402

BUCKETS = 4
#: Appends per producer in one round; rounds of ours and of the baseline alternate.
ROUND = 5
#: Sends per `Producer` in one round.
PRODUCER_ROUND = 10


def make_batches(n: int, rows: int, seed: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    return [orders_batch(rng.integers(0, 10**9, rows), rng) for _ in range(n)]


def aligned_batches(producers: int, n: int, rows: int, buckets: int, seed: int) -> list[pa.Table]:
    """``n`` batches per producer, producer ``i``'s keys all in the buckets ``b`` with ``b % producers == i``
    (its own), interleaved so that ``batches[i::producers]`` are producer ``i``'s."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 10**9, n * rows * producers * 2)
    owner = bucket_ids(pa.array(pool), buckets).to_numpy() % producers
    own = [pool[owner == i] for i in range(producers)]
    assert all(len(keys) >= n * rows for keys in own)
    return [orders_batch(own[i][j * rows : (j + 1) * rows], rng) for j in range(n) for i in range(producers)]


def bench_append(
    store: ObjectStore,
    producers: int,
    batches: int,
    rows: int,
    *,
    same_table: bool = True,
    shared_log: bool = False,
    keyless: bool = False,
    aligned: bool = False,
) -> dict[str, float]:
    lh = Lakehouse(store)
    names = [f"bench.orders_{uuid.uuid4().hex[:8]}" for _ in range(1 if same_table else producers)]
    key = {} if keyless else {"primary_key": ["o_orderkey"]}  # keyless: a log table, one segment per append
    op = "insert" if keyless else "upsert"
    buckets = BUCKETS * producers if aligned else BUCKETS  # aligned: each producer owns BUCKETS of them
    definition = [lh.create_table(n, ORDERS_SCHEMA, buckets=buckets, **key) for n in names][0]
    if aligned:
        data = aligned_batches(producers, batches, rows, buckets, seed=producers)
    else:
        data = make_batches(batches * producers, rows, seed=producers)
    shares = [data[i::producers] for i in range(producers)]
    if shared_log:  # threads of one process sharing its Log: they take turns per bucket
        logs = [Lakehouse(store).log(names[0])] * producers
    else:
        logs = [Lakehouse(store).log(names[i % len(names)]) for i in range(producers)]
    for log in logs:
        log.end_offsets()
    # baseline input: the same segment bodies, encoded ahead of time (not timed)
    bodies = [[segment.encode(part) for part in split_by_bucket(definition, t, 0).values()] for t in data]
    body_shares = [bodies[i::producers] for i in range(producers)]
    pool = ThreadPoolExecutor(BUCKETS * producers)
    tag = uuid.uuid4().hex[:8]

    def raw_append(segment_bodies: list[bytes]) -> None:
        if len(segment_bodies) == 1:  # one segment: PUT it here, as the log does
            store.put(f"raw/{tag}/{uuid.uuid4().hex}", segment_bodies[0])
            return
        list(pool.map(lambda b: store.put(f"raw/{tag}/{uuid.uuid4().hex}", b), segment_bodies))

    ours_wall, base_wall, ours_lat, base_lat = [], [], [], []
    step = max(1, min(ROUND, batches))
    starts = range(0, batches - step + 1, step)

    def base_round(lo: int) -> tuple[float, list[float]]:
        return run_threads(lambda i: timed_each(raw_append, body_shares[i][lo : lo + step]), producers)

    def ours_round(lo: int) -> tuple[float, list[float]]:  # a Log per thread, as separate processes would have
        return run_threads(lambda i: timed_each(lambda t: logs[i].append(t, op), shares[i][lo : lo + step]), producers)

    # Short rounds of each side alternate (the machine's speed drifts within seconds); who goes first swaps.
    for n, lo in enumerate(starts):
        sides = [(base_round, base_wall, base_lat), (ours_round, ours_wall, ours_lat)]
        for run_round, walls, lats in sides if n % 2 == 0 else sides[::-1]:
            wall, lat = run_round(lo)
            walls.append(wall)
            lats += lat
    pool.shutdown()
    done = len(starts) * step
    total_rows = done * producers * rows
    total_bytes = sum(len(b) for bs in bodies[: done * producers] for b in bs)
    ours, base = sum(ours_wall), sum(base_wall)
    held = sum(sum(log.end_offsets().values()) for log in logs[: len(names)])
    assert held == total_rows, f"the log holds {held} records, {total_rows} were appended"
    return {
        "rows_s": total_rows / ours,
        "mb_s": total_bytes / ours / 1e6,
        "base_rows_s": total_rows / base,
        "ratio": statistics.median(b / o for b, o in zip(base_wall, ours_wall, strict=True)),
        "p50": pct(ours_lat, 0.5),
        "p99": pct(ours_lat, 0.99),
        "base_p50": pct(base_lat, 0.5),
        "base_p99": pct(base_lat, 0.99),
    }


def bench_producers(
    store: ObjectStore, producers: int, sends: int, rows: int, *, same_table: bool = True
) -> dict[str, float]:
    """``producers`` threads each stream ``sends`` batches of ``rows`` rows through a `Producer` (its
    defaults: 10,000 rows per bucket per append, linger 50 ms), in rounds of ``PRODUCER_ROUND`` sends, a
    fresh `Producer` per round (closed at its end, so a round's time covers every row appended).

    Baseline: the segment bodies the `Producer`s write, PUT raw with the same parallelism (per thread, one
    append at a time, its buckets in parallel). They come from an untimed pass over the same sends on a
    scratch table, so both sides can alternate who goes first; the timed pass's segments are counted to show
    the two wrote alike."""
    lh = Lakehouse(store)
    data = make_batches(sends * producers, rows, seed=7)
    shares = [data[i::producers] for i in range(producers)]
    step = max(1, min(PRODUCER_ROUND, sends))
    starts = range(0, sends - step + 1, step)

    def tables() -> list[Log]:
        names = [f"bench.stream_{uuid.uuid4().hex[:8]}" for _ in range(1 if same_table else producers)]
        for name in names:
            lh.create_table(name, ORDERS_SCHEMA, primary_key=["o_orderkey"], buckets=BUCKETS)
        return [Lakehouse(store).log(names[i % len(names)]) for i in range(producers)]

    def stream(logs: list[Log], lo: int, appends: list[list[list[tuple[int, int]]]]) -> float:
        def worker(i: int) -> list[float]:
            with logs[i].producer() as p:
                for t in shares[i][lo : lo + step]:
                    p.send(t, "upsert")
            appends[i] += [[(b, first) for b, (first, _) in r.ranges.items()] for r in p.results]
            return []

        return run_threads(worker, producers)[0]

    # untimed pass: the segment bodies, per thread, grouped by append
    scratch = tables()
    bodies: list[list[list[list[bytes]]]] = []  # [round][thread][append] -> segment bodies
    for lo in starts:
        appends: list[list[list[tuple[int, int]]]] = [[] for _ in range(producers)]
        stream(scratch, lo, appends)
        bodies.append(
            [
                [[store.get(lg.name.segment_key(b, first)).data for b, first in append] for append in per_thread]
                for lg, per_thread in zip(scratch, appends, strict=True)
            ]
        )
    logs = tables()
    pool = ThreadPoolExecutor(BUCKETS * producers)
    tag = uuid.uuid4().hex[:8]

    def raw_put(body: bytes) -> None:
        store.put(f"raw/{tag}/{uuid.uuid4().hex}", body)

    def base_round(n: int) -> float:
        def worker(i: int) -> list[float]:
            for append in bodies[n][i]:
                if len(append) == 1:  # one segment: PUT it here, as the log does
                    raw_put(append[0])
                else:
                    list(pool.map(raw_put, append))
            return []

        return run_threads(worker, producers)[0]

    ours_wall, base_wall = [], []
    segments = [[] for _ in range(producers)]
    for n, lo in enumerate(starts):
        sides = [
            (functools.partial(base_round, n), base_wall),
            (functools.partial(stream, logs, lo, segments), ours_wall),
        ]
        for run_round, walls in sides if n % 2 == 0 else sides[::-1]:
            walls.append(run_round())
    pool.shutdown()
    total_rows = len(starts) * step * producers * rows
    held = sum(sum(log.end_offsets().values()) for log in logs[: 1 if same_table else producers])
    assert held == total_rows, f"the log holds {held} records, {total_rows} were sent"
    ours = sum(ours_wall)
    nbytes = sum(
        store.head(lg.name.segment_key(b, first)).size
        for lg, t in zip(logs, segments, strict=True)
        for a in t
        for b, first in a
    )
    return {
        "rows_s": total_rows / ours,
        "mb_s": nbytes / ours / 1e6,
        "base_rows_s": total_rows / sum(base_wall),
        "ratio": statistics.median(b / o for b, o in zip(base_wall, ours_wall, strict=True)),
        "segments": sum(len(a) for t in segments for a in t),
        "base_segments": sum(len(a) for r in bodies for t in r for a in t),
    }


def bench_read(store: ObjectStore, batches: int, rows: int, repeats: int = 6) -> dict[str, float]:
    lh = Lakehouse(store)
    name = f"bench.read_{uuid.uuid4().hex[:8]}"
    lh.create_table(name, ORDERS_SCHEMA, primary_key=["o_orderkey"], buckets=1)
    log = lh.log(name)
    for t in make_batches(batches, rows, seed=99):
        log.append(t, "upsert")
    keys = [f"{log.name.bucket_prefix(0)}{b:020d}.arrow" for b in log._indexes[0].bases]
    nbytes = sum(store.head(k).size for k in keys)
    pool = ThreadPoolExecutor(4)

    def raw_read() -> int:
        tables = pool.map(lambda k: pa.ipc.open_stream(pa.py_buffer(store.get(k).data)).read_all(), keys)
        return sum(t.num_rows for t in tables)

    ours_t, base_t = [], []
    for n in range(repeats):  # alternate which side reads first (the second may find warmer caches)
        for side in ("base", "ours") if n % 2 == 0 else ("ours", "base"):
            t0 = time.perf_counter()
            got = raw_read() if side == "base" else log.read(0).num_rows
            (base_t if side == "base" else ours_t).append(time.perf_counter() - t0)
            assert got == batches * rows
    pool.shutdown()
    ours, base = statistics.median(ours_t), statistics.median(base_t)
    return {"rows_s": batches * rows / ours, "mb_s": nbytes / ours / 1e6, "ratio": base / ours}


def run(name: str, store: ObjectStore, args: argparse.Namespace) -> list[str]:
    rows = [
        f"### {name}",
        "",
        f"Appends of {args.rows:,}-row batches into a 4-bucket primary-key table "
        f"({args.batches} appends per producer).",
        "",
        "| producers | rows/s | MB/s | p50 | p99 | raw PUT rows/s | raw p50 | raw p99 "
        "| ratio, median of rounds (goal >= 0.8) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    # producers, one table, sharing one Log, keyless, bucket-aligned (a table of 4 buckets per producer,
    # each producer's rows in its own 4), label
    cases = (
        (1, True, False, False, False, "1"),
        (4, True, False, False, False, "4, one table (racing)"),
        (4, True, True, False, False, "4 threads, one table, one shared `Log`"),
        (4, False, False, False, False, "4, a table each"),
        (4, True, False, False, True, "4, one table of 16 buckets, 4 each (bucket-aligned writers)"),
        (1, True, False, True, False, "1, keyless log table (one segment per append)"),
    )
    for producers, same, shared, keyless, aligned, label in cases:
        if args.cases and not any(word in label for word in args.cases):
            continue
        r = bench_append(
            store,
            producers,
            args.batches,
            args.rows,
            same_table=same,
            shared_log=shared,
            keyless=keyless,
            aligned=aligned,
        )
        rows.append(
            f"| {label} | {r['rows_s']:,.0f} | {r['mb_s']:.1f} | {r['p50'] * 1e3:.1f} ms | {r['p99'] * 1e3:.1f} ms "
            f"| {r['base_rows_s']:,.0f} | {r['base_p50'] * 1e3:.1f} ms | {r['base_p99'] * 1e3:.1f} ms "
            f"| {r['ratio']:.2f} |"
        )
        print(rows[-1], flush=True)
    if args.cases:
        return rows
    rows += [
        "",
        f"Streaming: each producer sends {args.batches} batches of {args.rows:,} rows through a `Producer` "
        "(defaults: 10,000 rows per bucket per append, linger 50 ms), in rounds of "
        f"{PRODUCER_ROUND} sends. Raw PUT: the segment bodies such a `Producer` writes, one append at a time "
        "per producer.",
        "",
        "| `Producer`s | rows/s | MB/s | segments (raw: same bodies) | raw PUT rows/s "
        "| ratio, median of rounds (goal >= 0.8) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for producers, same, label in ((1, True, "1"), (4, False, "4, a table each"), (4, True, "4, one table (racing)")):
        r = bench_producers(store, producers, args.batches, args.rows, same_table=same)
        rows.append(
            f"| {label} | {r['rows_s']:,.0f} | {r['mb_s']:.1f} | {r['segments']} ({r['base_segments']}) "
            f"| {r['base_rows_s']:,.0f} | {r['ratio']:.2f} |"
        )
        print(rows[-1], flush=True)
    r = bench_read(store, args.read_segments, args.rows)
    rows += [
        "",
        "| read one bucket | rows/s | MB/s | ratio to raw GET + IPC decode (goal >= 0.8) |",
        "| --- | --- | --- | --- |",
        f"| {args.read_segments} segments x {args.rows:,} rows | {r['rows_s']:,.0f} | {r['mb_s']:.1f} "
        f"| {r['ratio']:.2f} |",
        "",
    ]
    print("\n".join(rows[-4:]), flush=True)
    return rows


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=10_000, help="rows per append")
    p.add_argument("--cases", nargs="*", help="only the append cases whose label has one of these words")
    args = p.parse_args()
    args.batches = 10 if args.quick else 60
    args.read_segments = 10 if args.quick else 100
    on_both_backends("Log benchmark", args, run)


if __name__ == "__main__":
    main()
