"""What the log costs on an object store: requests counted at the S3 server, priced at AWS S3 list prices;
append latency with an S3-like delay; racing producers against apart (issue 59's benchmark).

    python bench/log_cost.py                 # full run (about 10 minutes)
    python bench/log_cost.py --quick         # a smoke run
    python bench/log_cost.py --only cost     # one part: cost, reads, latency or contention
    python bench/log_cost.py --log-format F  # a log layout, where the installed code has more than one

Every part runs on a fresh SeaweedFS (``weed mini``) started with its metrics port: requests are the S3
server's own counters (``SeaweedFS_s3_request_total`` by type, before and after; a HEAD counts as a GET),
whatever the client did. Producers are processes (multiprocessing, spawn), each with its own `Lakehouse`,
`Log` and `Producer` (default settings), as separate applications would be.

**cost**: 4 producers send ~200-byte upserts over a 10 M-key space at ``--rate`` MB/s together (one send
every 20 ms each) into a primary-key table of ``--buckets`` buckets (16 and 64 by default) for
``--seconds``; printed per second: write-class requests (PUT, POST, COPY, LIST, billed $0.005 per 1,000),
read-class (GET, HEAD, $0.0004 per 1,000), objects created under the table's folder and their mean size;
and their price: requests per GB ingested, per day at 1 MB/s and at 10 MB/s (requests/s held at what was
measured, bytes x10: the log flushes on time, not on size, at these rates), plus a day's bytes stored a month
($0.023 per GB-month). WarpStream's design figure is priced the same way: one object per producer per 250 ms,
4 producers = 16 PUT/s, nothing read back.

**reads**: GETs (and LISTs) per GB of log read, counted at the server: one tiering round of what the cost
part produced at the first bucket count, and a union read of a ``--tail`` record tail with nothing tiered,
its segments shaped like the cost part's (its mean rows per object per bucket).

**latency**: through a proxy adding a uniform 20-40 ms to every request (bench/_delay_proxy.py), 4 producers
at ``--rate`` MB/s; a thread of each calls `Producer.flush()` every 250 ms (p50/p99 of its return), one sends a
marker row every second, and a reader process polls `Lakehouse.union_read` for markers: append -> visible
p50/p99 (a marker counts as seen at the end of the first poll that returns it, so half a poll is in it).

**contention**: 4 and 8 producer processes sending as fast as they can (sends of 2,000 rows) for
``--contention-seconds``, on one table (racing) and each on a table of its own (apart), in the same run,
alternating who goes first: rows/s of each, and racing/apart.
"""

from __future__ import annotations

import argparse
import inspect
import multiprocessing
import sys
import tempfile
import threading
import time
import typing
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import pct  # noqa: E402
from _delay_proxy import DelayProxy  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402
from lakehouse.table.bucketing import bucket_ids  # noqa: E402
from object_store import ObjectStore, open_store  # noqa: E402
from object_store.seaweedfs import SeaweedFS  # noqa: E402

KEY_SPACE = 10_000_000
NOTE = "x" * 170  # with the key, a timestamp and an amount: ~200 bytes of Arrow per row
SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("sent_at", pa.float64()),
        pa.field("amount", pa.float64()),
        pa.field("note", pa.string()),
    ]
)
PRODUCERS = 4
SEND_INTERVAL = 0.020
FLUSH_INTERVAL = 0.250
MARKER_INTERVAL = 1.0
CONTENTION_SEND_ROWS = 2_000

# AWS S3 Standard list prices (us-east-1)
WRITE_CLASS = ("PUT", "POST", "COPY", "LIST")
READ_CLASS = ("GET", "HEAD")
WRITE_PRICE = 0.005 / 1000
READ_PRICE = 0.0004 / 1000
STORAGE_PRICE = 0.023  # per GB-month
#: WarpStream's design: each agent writes one object per 250 ms holding every partition's batches.
WARPSTREAM_PUTS_PER_PRODUCER = 4.0


def rows_of(rng: np.random.Generator, n: int, keys: np.ndarray | None = None) -> pa.Table:
    keys = rng.integers(0, KEY_SPACE, n) if keys is None else keys
    return pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "sent_at": pa.array(np.full(len(keys), time.time())),
            "amount": pa.array(rng.random(len(keys)) * 1000),
            "note": pa.array([NOTE] * len(keys), pa.string()),
        },
        schema=SCHEMA,
    )


ROW_BYTES = rows_of(np.random.default_rng(0), 1000).nbytes / 1000


def log_formats() -> tuple[str, ...] | None:
    """The layouts `Lakehouse.create_table` offers (``log_format=``), or None when it has only one (segments)."""
    try:
        signature = inspect.signature(Lakehouse.create_table, eval_str=True)
    except NameError:  # an annotation only a type checker imports
        signature = inspect.signature(Lakehouse.create_table)
    parameter = signature.parameters.get("log_format")
    if parameter is None:
        return None
    choices = typing.get_args(parameter.annotation) if not isinstance(parameter.annotation, str) else ()
    return tuple(c for c in choices if isinstance(c, str)) or ("(any the code accepts)",)


def create_table(lh: Lakehouse, name: str, buckets: int, log_format: str | None) -> None:
    options = {"log_format": log_format} if log_format is not None else {}
    lh.create_table(name, SCHEMA, primary_key=["k"], buckets=buckets, **options)


# ---- producer and reader processes ------------------------------------------------------------------


@dataclass
class ProducerSpec:
    url: str
    options: dict[str, str]
    table: str
    seconds: float
    seed: int
    rate: float | None  # bytes/s of this producer; None: as fast as it can
    flush_every: float | None = None
    markers: bool = False


@dataclass
class ProducerReport:
    rows: int = 0
    nbytes: int = 0
    started: float = 0.0
    finished: float = 0.0
    flushes: list[float] = field(default_factory=list)


def produce(spec: ProducerSpec, ready: Any, go: Any, out: Any) -> None:
    """One producer process: a `Producer` of its own, paced sends (or unpaced), optional timed flushes and
    markers; puts its `ProducerReport` on ``out``."""
    rng = np.random.default_rng(spec.seed)
    lh = Lakehouse(open_store(spec.url, probe=False, **spec.options))
    log = lh.log(spec.table)
    log.end_offsets()  # learn every bucket's end before the clock starts, as a running producer has
    report = ProducerReport()
    per_send = max(1, round(spec.rate * SEND_INTERVAL / ROW_BYTES)) if spec.rate else CONTENTION_SEND_ROWS
    template = rows_of(rng, per_send)
    with log.producer() as producer:
        stop = threading.Event()

        def flush_regularly() -> None:
            while not stop.wait(spec.flush_every):
                t0 = time.perf_counter()
                producer.flush()
                report.flushes.append(time.perf_counter() - t0)

        ready.wait()
        go.wait()
        report.started = time.time()
        flusher = threading.Thread(target=flush_regularly, daemon=True) if spec.flush_every else None
        if flusher:
            flusher.start()
        end, sends, markers = report.started + spec.seconds, 0, 0
        while (now := time.time()) < end:
            if spec.rate:
                wait = report.started + sends * SEND_INTERVAL - now
                if wait > 0:
                    time.sleep(wait)
            batch = template.set_column(0, "k", pa.array(rng.integers(0, KEY_SPACE, per_send), pa.int64()))
            producer.send(batch, "upsert")
            sends += 1
            report.rows += batch.num_rows
            report.nbytes += batch.nbytes
            if spec.markers and now >= report.started + markers * MARKER_INTERVAL:
                producer.send(rows_of(rng, 1, np.array([KEY_SPACE + markers])), "upsert")
                markers += 1
        stop.set()
        if flusher:
            flusher.join()
    report.finished = time.time()  # closed: every row sent is in the log
    out.put(report)


def read_markers(url: str, options: dict[str, str], table: str, seconds: float, ready: Any, go: Any, out: Any) -> None:
    """Poll a union read for marker rows until a poll starts 5 s after the producers' ``seconds``; put
    ([append -> seen], [poll durations]) on ``out``."""
    lh = Lakehouse(open_store(url, probe=False, **options))
    seen: dict[int, float] = {}
    polls: list[float] = []
    ready.wait()
    go.wait()
    end = time.time() + seconds + 5  # the producers close meanwhile: a last poll starting after it sees every marker
    while True:
        t0 = time.time()
        found = lh.union_read(table, ["k", "sent_at"], f"k >= {KEY_SPACE}")
        t1 = time.time()
        polls.append(t1 - t0)
        for k, sent_at in zip(found["k"].to_pylist(), found["sent_at"].to_pylist(), strict=True):
            seen.setdefault(k, t1 - sent_at)
        if t0 > end:
            break
    out.put((list(seen.values()), polls))


def run_processes(
    specs: list[ProducerSpec], before_go: Callable[[], None], reader: tuple | None = None
) -> tuple[list[ProducerReport], Any]:
    """Start a process per spec (and the reader, if given), call ``before_go`` once all are ready, start them
    at once, wait for all; return their reports (and the reader's result)."""
    ctx = multiprocessing.get_context("spawn")
    parties = len(specs) + (1 if reader else 0)
    ready, go, out, read_out = ctx.Barrier(parties + 1), ctx.Event(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=produce, args=(s, ready, go, out)) for s in specs]
    if reader:
        procs.append(ctx.Process(target=read_markers, args=(*reader, ready, go, read_out)))
    for p in procs:
        p.start()
    ready.wait(timeout=300)
    before_go()
    go.set()
    reports = [out.get(timeout=600) for _ in specs]
    read = read_out.get(timeout=600) if reader else None
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise RuntimeError(f"a benchmark process exited with {p.exitcode}")
    return reports, read


# ---- measurements -------------------------------------------------------------------------------------


def objects_under(store: ObjectStore, prefix: str) -> dict[str, int]:
    return {item.key: item.size for item in store.list(prefix)}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {kind: after.get(kind, 0) - before.get(kind, 0) for kind in set(before) | set(after)}


def write_class(counts: dict[str, int]) -> int:
    return sum(counts.get(kind, 0) for kind in WRITE_CLASS)


def read_class(counts: dict[str, int]) -> int:
    return sum(counts.get(kind, 0) for kind in READ_CLASS)


@dataclass
class Cost:
    buckets: int
    seconds: float
    ingested: int  # bytes sent (Arrow)
    rows: int
    requests: dict[str, int]
    objects: int
    stored: int  # bytes of the objects created

    @property
    def writes_s(self) -> float:
        return write_class(self.requests) / self.seconds

    @property
    def reads_s(self) -> float:
        return read_class(self.requests) / self.seconds

    @property
    def mb_s(self) -> float:
        return self.ingested / self.seconds / 1e6


def price(writes_s: float, reads_s: float, mb_s: float, stored_per_ingested: float) -> dict[str, float]:
    """Dollars: requests per GB ingested; per day at 1 and 10 MB/s (requests/s held, bytes scaled); a day's
    bytes stored for a month at each rate."""
    per_s = writes_s * WRITE_PRICE + reads_s * READ_PRICE
    day = per_s * 86_400
    stored_gb_day = 86.4 * stored_per_ingested  # 1 MB/s for a day
    return {
        "per_gb": per_s / (mb_s / 1000),
        "day_1": day,
        "day_10": day,
        "store_1": stored_gb_day * STORAGE_PRICE,
        "store_10": 10 * stored_gb_day * STORAGE_PRICE,
    }


def measure_cost(server: SeaweedFS, url: str, args: argparse.Namespace, buckets: int) -> tuple[Cost, str]:
    store = open_store(url, **server.store_options())
    lh = Lakehouse(store)
    name = f"bench.cost_{buckets}_{uuid.uuid4().hex[:6]}"
    create_table(lh, name, buckets, args.log_format)
    folder = lh.table(name).name.prefix
    existing = objects_under(store, folder)
    rate = args.rate * 1e6 / PRODUCERS
    specs = [ProducerSpec(url, server.store_options(), name, args.seconds, seed=i, rate=rate) for i in range(PRODUCERS)]
    counts: dict[str, dict[str, int]] = {}
    reports, _ = run_processes(specs, lambda: counts.setdefault("before", server.s3_requests()))
    after = server.s3_requests()
    created = {k: v for k, v in objects_under(store, folder).items() if k not in existing}
    elapsed = max(r.finished for r in reports) - min(r.started for r in reports)
    cost = Cost(
        buckets=buckets,
        seconds=elapsed,
        ingested=sum(r.nbytes for r in reports),
        rows=sum(r.rows for r in reports),
        requests=delta(counts["before"], after),
        objects=len(created),
        stored=sum(created.values()),
    )
    return cost, name


def cost_rows(costs: list[Cost], rate: float) -> list[str]:
    out = [
        f"4 `Producer`s (defaults), ~{ROW_BYTES:.0f}-byte upserts over {KEY_SPACE:,} keys, {rate:g} MB/s together; "
        "requests counted at the S3 server. Write-class = PUT + POST + COPY + LIST, read-class = GET + HEAD.",
        "",
        "| buckets | MB/s sent | write req/s (goal <= 40 at 16) | of which PUT | LIST | read req/s | objects/s "
        "| mean object | requests $/GB | $/day at 1 MB/s: requests + storage | $/day at 10 MB/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in costs:
        stored_ratio = c.stored / max(1, c.ingested)
        p = price(c.writes_s, c.reads_s, c.mb_s, stored_ratio)
        put_s = c.requests.get("PUT", 0) / c.seconds
        list_s = c.requests.get("LIST", 0) / c.seconds
        # requests at 1 MB/s scale with the measured rate's requests/s held
        out.append(
            f"| {c.buckets} | {c.mb_s:.2f} | {c.writes_s:.1f} | {put_s:.1f} | {list_s:.1f} | {c.reads_s:.1f} "
            f"| {c.objects / c.seconds:.1f} | {c.stored / max(1, c.objects) / 1e3:.1f} KB | {p['per_gb']:.3f} "
            f"| {p['day_1']:.2f} + {p['store_1']:.2f} | {p['day_10']:.2f} + {p['store_10']:.2f} |"
        )
    w = PRODUCERS * WARPSTREAM_PUTS_PER_PRODUCER
    p = price(w, 0.0, rate, 1.0)
    out.append(
        f"| WarpStream's design (1 object per producer per 250 ms) | {rate:.2f} | {w:.1f} | {w:.1f} | 0.0 | 0.0 "
        f"| {w:.1f} | {rate * 1e3 / w:.1f} KB | {p['per_gb']:.3f} | {p['day_1']:.2f} + {p['store_1']:.2f} "
        f"| {p['day_10']:.2f} + {p['store_10']:.2f} |"
    )
    if len(costs) > 1:
        out += [
            "",
            f"{costs[-1].buckets} buckets against {costs[0].buckets}: write req/s "
            f"{costs[-1].writes_s / costs[0].writes_s:.2f}x (goal <= 1.25x)",
        ]
    return out


def measure_reads(server: SeaweedFS, url: str, args: argparse.Namespace, produced: Cost, name: str) -> list[str]:
    store = open_store(url, **server.store_options())
    lh = Lakehouse(store)
    before = server.s3_requests()
    t0 = time.perf_counter()
    result = lh.tier(name)
    tier_s = time.perf_counter() - t0
    tiered = delta(before, server.s3_requests())
    # a tail shaped like the produced log: each append puts its mean rows per object into each of its buckets
    buckets = produced.buckets
    per_object = max(1, round(produced.rows / max(1, produced.objects)))
    tail = f"bench.tail_{uuid.uuid4().hex[:6]}"
    create_table(lh, tail, buckets, args.log_format)
    folder = lh.table(tail).name.prefix
    existing = objects_under(store, folder)
    rng = np.random.default_rng(5)
    pool = rng.integers(0, KEY_SPACE, args.tail * 2)
    owner = bucket_ids(pa.array(pool), buckets).to_numpy() % PRODUCERS
    appends = max(1, args.tail // (per_object * buckets))

    def write(i: int) -> None:  # 4 writers, each owning a quarter of the buckets: no races
        own = pool[owner == i]
        log = Lakehouse(store).log(tail)
        step = per_object * (buckets // PRODUCERS)
        for j in range(i, appends * PRODUCERS, PRODUCERS):
            lo = (j // PRODUCERS) * step
            log.append(rows_of(rng, step, own[lo : lo + step]), "upsert")

    with ThreadPoolExecutor(PRODUCERS) as threads:
        list(threads.map(write, range(PRODUCERS)))
    created = {k: v for k, v in objects_under(store, folder).items() if k not in existing}
    records = appends * PRODUCERS * per_object * (buckets // PRODUCERS)
    before = server.s3_requests()
    t0 = time.perf_counter()
    lh.union_read(tail)
    read_s = time.perf_counter() - t0
    read = delta(before, server.s3_requests())
    tail_gb = sum(created.values()) / 1e9
    return [
        f"GETs per GB of log read, counted at the S3 server (a HEAD counts as a GET). Tiering: one round of the "
        f"cost part's {produced.buckets}-bucket table; union read: a tail of {records:,} records, nothing tiered, "
        f"in {len(created):,} objects of {per_object} rows each (the cost part's mean).",
        "",
        "| read | records | objects | log bytes | GET | LIST | GETs per GB | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| tiering round | {result.rows:,} | {produced.objects:,} | {produced.stored / 1e6:.1f} MB "
        f"| {tiered.get('GET', 0):,} | {tiered.get('LIST', 0):,} "
        f"| {tiered.get('GET', 0) / (produced.stored / 1e9):,.0f} | {tier_s:.1f} |",
        f"| union read of the tail | {records:,} | {len(created):,} | {tail_gb * 1e3:.1f} MB | {read.get('GET', 0):,} "
        f"| {read.get('LIST', 0):,} | {read.get('GET', 0) / tail_gb:,.0f} | {read_s:.1f} |",
    ]


def measure_latency(server: SeaweedFS, args: argparse.Namespace) -> list[str]:
    with DelayProxy(server.endpoint_url, seed=1) as proxy:
        options = {**server.store_options(), "endpoint_url": proxy.url}
        url = f"s3://{server.bucket}/latency"
        lh = Lakehouse(open_store(url, **options))
        name = f"bench.latency_{uuid.uuid4().hex[:6]}"
        create_table(lh, name, args.buckets[0], args.log_format)
        rate = args.rate * 1e6 / PRODUCERS
        specs = [
            ProducerSpec(
                url, options, name, args.seconds, seed=i, rate=rate, flush_every=FLUSH_INTERVAL, markers=i == 0
            )
            for i in range(PRODUCERS)
        ]
        reports, (visible, polls) = run_processes(specs, lambda: None, reader=(url, options, name, args.seconds))
    flushes = [f for r in reports for f in r.flushes]
    ms = 1e3
    return [
        f"Through a proxy adding 20-40 ms to every request: 4 producers at {args.rate:g} MB/s into "
        f"{args.buckets[0]} buckets for {args.seconds:g} s; each calls `flush()` every {FLUSH_INTERVAL * ms:.0f} ms; "
        "a reader polls `union_read` for a marker row sent every second.",
        "",
        "| measure | count | p50 | p99 (goal <= 500 ms) | max |",
        "| --- | --- | --- | --- | --- |",
        f"| append: `flush()` returning | {len(flushes)} | {pct(flushes, 0.5) * ms:.0f} ms "
        f"| {pct(flushes, 0.99) * ms:.0f} ms | {max(flushes) * ms:.0f} ms |",
        f"| append -> visible in `union_read` | {len(visible)} | {pct(visible, 0.5) * ms:.0f} ms "
        f"| {pct(visible, 0.99) * ms:.0f} ms | {max(visible) * ms:.0f} ms |",
        f"| (a `union_read` poll) | {len(polls)} | {pct(polls, 0.5) * ms:.0f} ms | {pct(polls, 0.99) * ms:.0f} ms "
        f"| {max(polls) * ms:.0f} ms |",
    ]


def measure_contention(server: SeaweedFS, url: str, args: argparse.Namespace) -> list[str]:
    lh = Lakehouse(open_store(url, **server.store_options()))
    out = [
        f"Producers sending {CONTENTION_SEND_ROWS:,}-row batches as fast as they can for {args.contention_seconds:g} s "
        f"into {args.buckets[0]}-bucket tables: all on one table (racing) against each on a table of its own (apart).",
        "",
        "| producers | racing rows/s | apart rows/s | racing / apart (goal >= 0.8) |",
        "| --- | --- | --- | --- |",
    ]
    for n, producers in enumerate(args.contenders):
        rows_s = {}
        for racing in (True, False) if n % 2 == 0 else (False, True):
            names = [f"bench.race_{uuid.uuid4().hex[:6]}" for _ in range(1 if racing else producers)]
            for name in names:
                create_table(lh, name, args.buckets[0], args.log_format)
            specs = [
                ProducerSpec(url, server.store_options(), names[i % len(names)], args.contention_seconds, 100 + i, None)
                for i in range(producers)
            ]
            reports, _ = run_processes(specs, lambda: None)
            elapsed = max(r.finished for r in reports) - min(r.started for r in reports)
            rows_s[racing] = sum(r.rows for r in reports) / elapsed
        out.append(f"| {producers} | {rows_s[True]:,.0f} | {rows_s[False]:,.0f} | {rows_s[True] / rows_s[False]:.2f} |")
        print(out[-1], flush=True)
    return out


def main() -> None:
    formats = log_formats()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short runs: a smoke run")
    p.add_argument(
        "--only",
        choices=["cost", "reads", "latency", "contention", "s3", "local"],
        help="one part (reads runs cost at the first bucket count); s3: all (make bench's backend option); local: none",
    )
    p.add_argument("--seconds", type=float, help="how long producers send (default 30; quick 6)")
    p.add_argument("--rate", type=float, default=1.0, help="MB/s the 4 producers send together (default 1)")
    p.add_argument("--buckets", type=int, nargs="+", default=[16, 64], help="bucket counts of the cost part")
    p.add_argument("--tail", type=int, help="records of the union read's tail (default 1,000,000; quick 50,000)")
    p.add_argument("--contention-seconds", type=float, help="default 15; quick 4")
    p.add_argument(
        "--log-format",
        help=(
            f"the log layout of the tables created; this checkout offers: {', '.join(formats)}"
            if formats
            else "the log layout: this checkout has one, segments (create_table takes no log_format)"
        ),
    )
    args = p.parse_args()
    if args.only == "local":
        print("bench/log_cost.py counts requests at an S3 server (SeaweedFS): nothing to run on the local backend")
        return
    if args.only == "s3":
        args.only = None
    if formats is None and args.log_format not in (None, "segments"):
        p.error(f"--log-format {args.log_format}: this checkout's log has one layout, segments")
    if formats is None:
        args.log_format = None  # nothing to pass
    args.seconds = args.seconds or (6.0 if args.quick else 30.0)
    args.tail = args.tail or (50_000 if args.quick else 1_000_000)
    args.contention_seconds = args.contention_seconds or (4.0 if args.quick else 15.0)
    args.contenders = [4] if args.quick else [4, 8]
    layout = args.log_format or ("default" if formats else "segments (the only layout)")
    out = [f"Log cost benchmark, {time.strftime('%Y-%m-%d %H:%M')}, log layout: {layout}", ""]
    with (
        tempfile.TemporaryDirectory(prefix="lakestream-bench-") as tmp,
        SeaweedFS(Path(tmp) / "seaweedfs", metrics=True) as server,
    ):
        url = f"s3://{server.bucket}/bench"
        parts: list[list[str]] = []
        if args.only in (None, "cost", "reads"):
            costs, names = [], []
            for buckets in args.buckets if args.only != "reads" else args.buckets[:1]:
                cost, name = measure_cost(server, url, args, buckets)
                costs.append(cost)
                names.append(name)
                print(
                    f"cost at {buckets} buckets: {cost.writes_s:.1f} write req/s, {cost.reads_s:.1f} read", flush=True
                )
            parts.append(cost_rows(costs, args.rate))
            if args.only != "cost":
                parts.append(measure_reads(server, url, args, costs[0], names[0]))
                print("\n".join(parts[-1]), flush=True)
        if args.only in (None, "latency"):
            parts.append(measure_latency(server, args))
            print("\n".join(parts[-1]), flush=True)
        if args.only in (None, "contention"):
            parts.append(measure_contention(server, url, args))
    for part in parts:
        out += [*part, ""]
    print("\n" + "\n".join(out))


if __name__ == "__main__":
    main()
