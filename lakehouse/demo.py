"""`make demo`: the whole pipeline on embedded defaults (a file:// warehouse, Spark local[2], no server).

TPC-H-shaped tables (orders and customers with primary keys, a keyless event log) receive a few million
changes through Producers, including updates and deletes; Spark tiers them into Iceberg exactly once;
union read serves the fresh state before the lake catches up; then the storage guarantees everything
stands on. Every step checks its own result against state the demo tracked independently, and the demo
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
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from lakehouse.console import OutputConsole, new_table
from lakehouse.errors import LakestreamError
from object_store import MiB, ObjectStore, PreconditionFailed


class DemoCheckFailed(LakestreamError):
    """A demo step's own check did not hold: a bug, please report it with the demo's output."""


@dataclass
class Step:
    name: str
    result: str
    seconds: float


@dataclass
class DemoResult:
    """What `run_demo` did: its steps, and where to read the orders table it built."""

    steps: list[Step]
    namespace: str
    #: the orders table's offsets per bucket: the log's end and the lake's (equal: the lake caught up)
    log_end: dict[int, int]
    lake_offsets: dict[int, int]
    metadata_location: str

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)


@dataclass
class _Expected:
    """What the demo sent, tracked without lakestream: the live orders and their last status."""

    keyspace: int
    alive: np.ndarray = field(init=False)
    status: np.ndarray = field(init=False)
    events: int = 0
    changes: int = 0

    def __post_init__(self) -> None:
        self.alive = np.zeros(self.keyspace, dtype=bool)
        self.status = np.zeros(self.keyspace, dtype="<U1")


#: Steps packages above `lakehouse` add to the demo (``quality`` adds its checks): ``(name, step)``, each step
#: called as ``step(lh, ns, state, console)`` after the warehouse layers and returning a one-line result; it
#: raises if its check fails. ``state`` holds ``spark`` (None with --local) and ``layers_url``, the layers'
#: warehouse.
EXTRA_STEPS: list[tuple[str, Callable[..., str]]] = []


def run_demo(
    store: ObjectStore,
    console: Console | None = None,
    *,
    big_mib: int = 16,
    changes: int = 4_000_000,
    spark_master: str | None = "local[2]",
    on_step: Callable[[Step], None] | None = None,
) -> DemoResult:
    """Run every step against ``store`` (under a fresh namespace / prefix) and print a summary; ``on_step`` is
    called with each step as it completes."""
    from lakehouse.lakehouse import Lakehouse

    console = console or OutputConsole()
    stamp = f"{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}"
    ns, run = f"demo_{stamp}", f"demo/{stamp}"
    where = f"Spark {spark_master}" if spark_master else "the local executor"
    console.print(f"[bold]lakestream demo[/] on {store.url} (namespace {ns}); tiering on {where}")
    lh = Lakehouse(store)
    expected = _Expected(keyspace=max(10, changes // 2))
    state: dict = {}
    steps = []
    half = changes // 2
    for name, fn in (
        ("create tables", lambda: _create(lh, ns)),
        (f"produce {half:,} changes", lambda: _produce(lh, ns, expected, half, 0, console)),
        ("start Spark", lambda: _spark(state, spark_master)),
        ("tier round 1", lambda: _tier(lh, ns, state, console)),
        (f"produce {changes - half:,} more", lambda: _produce(lh, ns, expected, changes - half, 1, console)),
        ("union read (fresh)", lambda: _union(lh, ns, expected, console, lake_behind=True)),
        ("tier round 2", lambda: _tier(lh, ns, state, console)),
        ("lake == log", lambda: _union(lh, ns, expected, console, lake_behind=False)),
        ("warehouse layers", lambda: _layers(store, stamp, state, console)),
        *((name, lambda step=step: step(lh, ns, state, console)) for name, step in EXTRA_STEPS),
        ("storage guarantees", lambda: _storage(store, run, big_mib, console)),
    ):
        t0 = time.perf_counter()
        with console.status(name):
            result = fn()
        steps.append(Step(name, result, time.perf_counter() - t0))
        console.print(f"  [green]ok[/] {name} ({steps[-1].seconds:.1f} s): {result}")
        if on_step is not None:
            on_step(steps[-1])
    orders = f"{ns}.orders"
    done = DemoResult(
        steps, ns, lh.log(orders).end_offsets(), lh.lake_offsets(orders), lh.catalog.table_location(orders)
    )
    _offsets_table(orders, done, console)
    table = new_table("step", "result", "seconds", title=f"lakestream demo: all checks passed ({done.seconds:.0f} s)")
    for s in steps:
        table.add_row(s.name, s.result, f"{s.seconds:.1f}")
    console.print(table)
    console.print(f"Read the lake with any Iceberg engine: {done.metadata_location}")
    if state.get("spark") is not None:
        state["spark"].stop()
    lh.close()
    return done


def _create(lh, ns: str) -> str:
    lh.create_table(f"{ns}.orders", ORDERS_SCHEMA, primary_key=["o_orderkey"], buckets=8)
    lh.create_table(f"{ns}.customers", CUSTOMER_SCHEMA, primary_key=["c_custkey"], buckets=4)
    lh.create_table(f"{ns}.events", EVENTS_SCHEMA, buckets=4)
    return "orders (pk, 8 buckets), customers (pk, 4), events (keyless, 4), each with its Iceberg table"


def _produce(lh, ns: str, expected: _Expected, changes: int, phase: int, console: Console) -> str:
    """Phase 0 inserts most orders; phase 1 updates and deletes them (and inserts a few more)."""
    rng = np.random.default_rng(7 + phase)
    sent = {"upsert": 0, "delete": 0, "events": 0, "customers": 0}
    chunk = 50_000
    with Progress(*Progress.get_default_columns(), console=console, transient=True) as bar:
        task = bar.add_task(f"producing (phase {phase + 1})", total=changes)
        with (
            lh.log(f"{ns}.orders").producer(batch_rows=100_000) as p_orders,
            lh.log(f"{ns}.events").producer(batch_rows=50_000) as p_events,
            lh.log(f"{ns}.customers").producer(batch_rows=50_000) as p_customers,
        ):
            done = 0
            while done < changes:
                n = min(chunk, changes - done)
                keys = rng.integers(0, expected.keyspace, n)
                deleting = (rng.random(n) < 0.08) if phase else np.zeros(n, dtype=bool)
                batch = _orders_batch(keys[~deleting], rng)
                p_orders.send(batch, "upsert")
                expected.alive[keys[~deleting]] = True
                expected.status[keys[~deleting]] = batch.column("o_orderstatus").to_numpy(zero_copy_only=False)
                if deleting.any():
                    p_orders.send(pa.table({"o_orderkey": pa.array(keys[deleting], pa.int64())}), "delete")
                    expected.alive[keys[deleting]] = False
                p_events.send(_events_batch(keys[: n // 5], rng))
                custs = np.unique(keys[: n // 20] % 15_000)
                p_customers.send(_customers_batch(custs, rng), "upsert")
                sent["upsert"] += int((~deleting).sum())
                sent["delete"] += int(deleting.sum())
                sent["events"] += n // 5
                sent["customers"] += len(custs)
                done += n
                bar.advance(task, n)
    expected.events += sent["events"]
    expected.changes += sent["upsert"] + sent["delete"]
    ends = lh.log(f"{ns}.orders").end_offsets()
    _check(
        sum(ends.values()) == expected.changes, f"orders log has {sum(ends.values())} records, sent {expected.changes}"
    )
    return (
        f"orders {sent['upsert']:,} upserts and {sent['delete']:,} deletes; events {sent['events']:,} appends; "
        f"customers {sent['customers']:,} upserts"
    )


def _spark(state: dict, master: str | None) -> str:
    if not master:
        state["spark"] = None
        return "skipped (--local): tiering runs on the local in-process executor"
    from lakehouse.spark import spark_session

    state["spark"] = spark_session(master=master, app_name="lakestream-demo")
    return f"{master}, no jars (tasks do their IO with pyarrow in mapInArrow)"


def _tier(lh, ns: str, state: dict, console: Console) -> str:
    parts = []
    rows = 0
    for table in ("orders", "customers", "events"):
        result = lh.tier(f"{ns}.{table}", spark=state.get("spark"))
        _check(result.offsets == lh.log(f"{ns}.{table}").end_offsets(), f"{ns}.{table}: lake offsets != log end")
        rows += result.rows
        parts.append(f"{table} {result.rows:,} records, files +{result.files_added}/-{result.files_removed}")
    console.print("     " + "; ".join(parts))
    return f"{rows:,} log records, exactly once; lake offsets == log end"


def _union(lh, ns: str, expected: _Expected, console: Console, *, lake_behind: bool) -> str:
    name = f"{ns}.orders"
    t0 = time.perf_counter()
    union = lh.union_read(name, columns=["o_orderkey", "o_orderstatus"])
    seconds = time.perf_counter() - t0
    lake = lh.lake_read(name, columns=["o_orderkey"])
    live = np.flatnonzero(expected.alive)
    keys = union.column("o_orderkey").to_numpy()
    _check(len(keys) == len(np.unique(keys)), "union read returned a key twice")
    _check(np.array_equal(np.sort(keys), live), f"union read has {len(keys):,} orders, expected {len(live):,}")
    status = expected.status[keys]
    _check(
        bool(np.all(union.column("o_orderstatus").to_numpy(zero_copy_only=False) == status)),
        "union read shows a stale version of an order",
    )
    events = lh.union_read(f"{ns}.events", columns=["user_id"]).num_rows
    _check(events == expected.events, f"events: union read {events:,}, sent {expected.events:,}")
    if lake_behind:
        _check(lake.num_rows != len(live), "the lake should be behind the log before round 2")
        return f"{len(keys):,} live orders at their latest version in {seconds:.1f} s (lake alone: {lake.num_rows:,})"
    _check(lake.num_rows == len(live), f"lake has {lake.num_rows:,} orders, expected {len(live):,}")
    dup = pc.count_distinct(lake.column("o_orderkey")).as_py()
    _check(dup == lake.num_rows, "the lake holds a key twice")
    return f"lake == union read == what was sent: {lake.num_rows:,} orders, {events:,} events"


def _layers(store: ObjectStore, stamp: str, state: dict, console: Console) -> str:
    """The example project's ODS -> DWD -> ADS layers, in a warehouse of their own next to this one."""
    if state.get("spark") is None:
        return "skipped (--local): layer rounds run Spark SQL"
    from lakehouse.lakehouse import Lakehouse
    from lakehouse.layers.demo import run_layers_demo
    from object_store import open_store

    url = f"{store.url.rstrip('/')}/layers_{stamp}"
    state["layers_url"] = url
    lh = Lakehouse(open_store(url, **store.connection_options()))
    try:
        return run_layers_demo(lh, state["spark"], console)
    finally:
        lh.close()


def _offsets_table(name: str, done: DemoResult, console: Console) -> None:
    table = new_table("", title=f"{name}: offsets per bucket (bucket[8](o_orderkey))")
    for b in done.log_end:
        table.add_column(str(b), justify="right", overflow="fold")
    table.add_row("log end", *(str(e) for e in done.log_end.values()))
    table.add_row("lake", *(str(o) for o in done.lake_offsets.values()))
    console.print(table)


def _storage(store: ObjectStore, run: str, big_mib: int, console: Console) -> str:
    parts = [
        _probe(store),
        _race(store, f"{run}/race"),
        _counter(store, f"{run}/counter"),
        _multipart(store, f"{run}/big.bin", big_mib, console),
        _aborted(store, f"{run}/aborted.bin"),
    ]
    console.print("     " + "; ".join(parts))
    return "probe, create-only race, CAS, multipart, abort: all hold"


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
CUSTOMER_SCHEMA = pa.schema(
    [("c_custkey", pa.int64()), ("c_name", pa.string()), ("c_mktsegment", pa.string()), ("c_acctbal", pa.float64())]
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


def _customers_batch(keys: np.ndarray, rng: np.random.Generator) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "c_custkey": pa.array(keys, pa.int64()),
            "c_name": pa.array([f"Customer#{k:09d}" for k in keys]),
            "c_mktsegment": pa.array(rng.choice(["AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY"], n)),
            "c_acctbal": pa.array(rng.uniform(-999, 9999, n).round(2)),
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
    return "conditional writes enforced"


def _race(store: ObjectStore, prefix: str, writers: int = 8, rounds: int = 5) -> str:
    # 8 x 5, not 16 x 20: SeaweedFS makes a writer that meets another's conditional write sleep a whole
    # second, so 16 x 20 took 60-76 s there (7-10 s now); the test suite races far harder on every backend.
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
    return f"create-only: 1 winner/round ({writers} writers x {rounds})"


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
    return f"CAS: {value} increments, none lost"


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
    return f"multipart {mib} MiB byte-identical"


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
    return "aborted upload leaves nothing"


def _run_threads(fn: Callable[[int], None], n: int) -> None:
    with ThreadPoolExecutor(n) as pool:
        for f in [pool.submit(fn, i) for i in range(n)]:
            f.result()
