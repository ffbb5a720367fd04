"""`make demo`: what lakestream guarantees, shown on embedded defaults (a file:// warehouse, no server).

Today it exercises the storage layer every later part stands on: create-only races, compare-and-swap,
streamed multipart writes that appear whole or not at all. Each step checks its own result and the demo
exits non-zero if any check fails.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

from lakehouse.errors import LakestreamError
from object_store import MiB, ObjectStore, PreconditionFailed


class DemoCheckFailed(LakestreamError):
    """A demo step's own check did not hold: a bug, please report it with the demo's output."""


@dataclass
class Step:
    name: str
    result: str
    seconds: float


def run_demo(
    store: ObjectStore, console: Console | None = None, *, big_mib: int = 64, changes: int = 1_000_000
) -> list[Step]:
    """Run every step against ``store`` (under a fresh prefix / namespace) and print a summary."""
    console = console or Console()
    stamp = f"{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}"
    run = f"demo/{stamp}"
    console.print(f"[bold]lakestream demo[/] on {store.url} (prefix {run}/, namespace demo_{stamp})")
    steps = []
    for name, fn in (
        (f"log: {changes:,} changes", lambda: _log(store, f"demo_{stamp}", changes, console)),
        ("capability probe", lambda: _probe(store)),
        ("create-only race", lambda: _race(store, f"{run}/race")),
        ("compare-and-swap counter", lambda: _counter(store, f"{run}/counter")),
        (f"multipart write {big_mib} MiB", lambda: _multipart(store, f"{run}/big.bin", big_mib, console)),
        ("aborted write leaves nothing", lambda: _aborted(store, f"{run}/aborted.bin")),
    ):
        t0 = time.perf_counter()
        with console.status(name):
            result = fn()
        steps.append(Step(name, result, time.perf_counter() - t0))
        console.print(f"  [green]ok[/] {name}: {result}")
    table = Table(title="summary")
    for col in ("step", "result", "seconds"):
        table.add_column(col)
    for s in steps:
        table.add_row(s.name, s.result, f"{s.seconds:.2f}")
    console.print(table)
    return steps


def _log(store: ObjectStore, namespace: str, changes: int, console: Console) -> str:
    """TPC-H-shaped orders (primary key) and a keyless event log, fed by Producers."""
    from lakehouse.lakehouse import Lakehouse

    lh = Lakehouse(store)
    orders = lh.create_table(f"{namespace}.orders", ORDERS_SCHEMA, primary_key=["o_orderkey"], buckets=8)
    events = lh.create_table(f"{namespace}.events", EVENTS_SCHEMA, buckets=4)
    rng = np.random.default_rng(7)
    keyspace = max(1, changes // 2)
    sent = {"upsert": 0, "delete": 0, "insert": 0}
    chunk = 10_000
    with Progress(*Progress.get_default_columns(), console=console, transient=True) as bar:
        task = bar.add_task("producing", total=changes)
        with lh.log(orders.name).producer(batch_rows=50_000) as p_orders, lh.log(events.name).producer() as p_events:
            done = 0
            while done < changes:
                n = min(chunk, changes - done)
                keys = rng.integers(0, keyspace, n)
                deleting = rng.random(n) < 0.05
                p_orders.send(_orders_batch(keys[~deleting], rng), "upsert")
                if deleting.any():
                    p_orders.send(pa.table({"o_orderkey": pa.array(keys[deleting], pa.int64())}), "delete")
                p_events.send(_events_batch(keys[: n // 5], rng))
                sent["upsert"] += int((~deleting).sum())
                sent["delete"] += int(deleting.sum())
                sent["insert"] += n // 5
                done += n
                bar.advance(task, n)
    ends = lh.log(orders.name).end_offsets()
    _check(sum(ends.values()) == sent["upsert"] + sent["delete"], f"orders log has {sum(ends.values())} records")
    read_back = sum(lh.log(orders.name).read(b).num_rows for b in ends)
    _check(read_back == sum(ends.values()), f"read back {read_back} records, log says {sum(ends.values())}")
    event_ends = lh.log(events.name).end_offsets()
    _check(sum(event_ends.values()) == sent["insert"], f"events log has {sum(event_ends.values())} records")
    table = Table(title=f"{orders.name}: end offsets per bucket (bucket = Iceberg bucket[8](o_orderkey))")
    for b in ends:
        table.add_column(str(b))
    table.add_row(*(f"{e:,}" for e in ends.values()))
    console.print(table)
    console.print(f"Iceberg table {orders.name} (empty until tiering): {lh.catalog.table_location(str(orders.name))}")
    lh.close()
    return (
        f"{sent['upsert']:,} upserts + {sent['delete']:,} deletes into {orders.name}, {sent['insert']:,} events; "
        "offsets contiguous, every record read back"
    )


ORDERS_SCHEMA = pa.schema(
    [
        ("o_orderkey", pa.int64()),
        ("o_custkey", pa.int64()),
        ("o_orderstatus", pa.string()),
        ("o_totalprice", pa.decimal128(12, 2)),
        ("o_orderdate", pa.date32()),
        ("o_comment", pa.string()),
    ]
)
EVENTS_SCHEMA = pa.schema([("user_id", pa.int64()), ("event", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))])


def _orders_batch(keys: np.ndarray, rng: np.random.Generator) -> pa.Table:
    n = len(keys)
    cents = rng.integers(100, 50_000_000, n)
    return pa.table(
        {
            "o_orderkey": pa.array(keys, pa.int64()),
            "o_custkey": pa.array(keys % 15_000, pa.int64()),
            "o_orderstatus": pa.array(rng.choice(["O", "F", "P"], n)),
            "o_totalprice": pa.array(cents // 100, pa.int32()).cast(pa.decimal128(12, 2)),
            "o_orderdate": pa.array(rng.integers(8035, 10591, n).astype("int32")).cast(pa.date32()),
            "o_comment": pa.array(rng.choice(["quick", "slyly", "furious", "pending deposits"], n)),
        }
    )


def _events_batch(users: np.ndarray, rng: np.random.Generator) -> pa.Table:
    n = len(users)
    return pa.table(
        {
            "user_id": pa.array(users, pa.int64()),
            "event": pa.array(rng.choice(["view", "click", "buy"], n)),
            "ts": pa.array(np.full(n, int(time.time() * 1e6), dtype="int64")).cast(pa.timestamp("us", tz="UTC")),
        }
    )


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise DemoCheckFailed(message)


def _probe(store: ObjectStore) -> str:
    store.ensure_conditional_writes()
    return "If-None-Match and If-Match are enforced"


def _race(store: ObjectStore, prefix: str, writers: int = 16, rounds: int = 20) -> str:
    barrier = threading.Barrier(writers)
    wins: list[int] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        for r in range(rounds):
            barrier.wait()
            try:
                store.put(f"{prefix}/{r:03d}", f"w{w}".encode(), if_none_match=True)
                with lock:
                    wins.append(r)
            except PreconditionFailed:
                pass

    _run_threads(writer, writers)
    _check(sorted(wins) == list(range(rounds)), f"expected one winner per round, got {sorted(wins)}")
    return f"{writers} writers x {rounds} rounds: exactly one winner each round"


def _counter(store: ObjectStore, key: str, writers: int = 8, times: int = 25) -> str:
    store.put(key, b"0")
    conflicts = [0] * writers

    def writer(w: int) -> None:
        for _ in range(times):
            while True:
                obj = store.get(key)
                try:
                    store.put(key, str(int(obj.data) + 1).encode(), if_match=obj.etag)
                    break
                except PreconditionFailed:
                    conflicts[w] += 1

    _run_threads(writer, writers)
    value = int(store.get(key).data)
    _check(value == writers * times, f"counter is {value}, expected {writers * times}: an increment was lost")
    return f"{value} increments by {writers} writers, {sum(conflicts)} lost CAS retried, none lost"


def _multipart(store: ObjectStore, key: str, mib: int, console: Console) -> str:
    block = os.urandom(MiB)
    digest = hashlib.sha256()
    with Progress(BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("upload", total=mib * MiB)
        with store.open_writer(key, if_none_match=True, part_size=8 * MiB) as w:
            for _ in range(mib):
                w.write(block)
                digest.update(block)
                bar.advance(task, MiB)
    info = store.head(key)
    _check(info.size == mib * MiB, f"{key} has {info.size} bytes, expected {mib * MiB}")
    _check(hashlib.sha256(store.get(key).data).digest() == digest.digest(), f"{key} does not read back")
    return f"{mib} MiB in {mib // 8 or 1} parts, read back byte-identical (ETag {info.etag})"


def _aborted(store: ObjectStore, key: str) -> str:
    try:
        with store.open_writer(key, part_size=5 * MiB) as w:
            w.write(os.urandom(11 * MiB))
            raise RuntimeError("simulated crash inside the writer")
    except RuntimeError:
        pass
    _check(not store.exists(key), f"{key} became visible after an aborted write")
    uploads = getattr(store, "open_uploads", lambda: [])()
    _check(not uploads, f"multipart uploads left open: {uploads}")
    return "no object, no open multipart upload"


def _run_threads(fn: Callable[[int], None], n: int) -> None:
    with ThreadPoolExecutor(n) as pool:
        for f in [pool.submit(fn, i) for i in range(n)]:
            f.result()
