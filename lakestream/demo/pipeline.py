"""The demo's pipeline steps: TPC-H-shaped tables, a few million changes through Producers, tiering rounds on
Spark (or the local executor), union read while the lake is behind, and lake == log once it caught up. Every
step checks its result against what the demo tracked itself (`Expected`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.progress import Progress

from lakestream.console import new_table
from lakestream.demo.common import DemoResult
from lakestream.demo.common import check as _check

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

__all__ = ["Expected", "create_tables", "offsets_table", "produce", "start_spark", "tier", "union"]


@dataclass
class Expected:
    """What the demo sent, tracked without lakestream: the live orders and their last status."""

    keyspace: int
    alive: np.ndarray = field(init=False)
    status: np.ndarray = field(init=False)
    events: int = 0
    changes: int = 0

    def __post_init__(self) -> None:
        self.alive = np.zeros(self.keyspace, dtype=bool)
        self.status = np.zeros(self.keyspace, dtype="<U1")


def create_tables(lh: Lakehouse, ns: str) -> str:
    lh.create_table(f"{ns}.orders", ORDERS_SCHEMA, primary_key=["o_orderkey"], buckets=8)
    lh.create_table(f"{ns}.customers", CUSTOMER_SCHEMA, primary_key=["c_custkey"], buckets=4)
    lh.create_table(f"{ns}.events", EVENTS_SCHEMA, buckets=4)
    return "orders (pk, 8 buckets), customers (pk, 4), events (keyless, 4), each with its Iceberg table"


def produce(lh: Lakehouse, ns: str, expected: Expected, changes: int, phase: int, console: Console) -> str:
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
                batch = orders_batch(keys[~deleting], rng)
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


def start_spark(state: dict, master: str | None) -> str:
    if not master:
        state["spark"] = None
        return "skipped (--local): tiering runs on the local in-process executor"
    from lakehouse.spark import spark_session

    state["spark"] = spark_session(master=master, app_name="lakestream-demo")
    return f"{master}, no jars (tasks do their IO with pyarrow in mapInArrow)"


def tier(lh: Lakehouse, ns: str, state: dict, console: Console) -> str:
    parts = []
    rows = 0
    for table in ("orders", "customers", "events"):
        result = lh.tier(f"{ns}.{table}", spark=state.get("spark"))
        _check(result.offsets == lh.log(f"{ns}.{table}").end_offsets(), f"{ns}.{table}: lake offsets != log end")
        rows += result.rows
        parts.append(f"{table} {result.rows:,} records, files +{result.files_added}/-{result.files_removed}")
    console.print("     " + "; ".join(parts))
    return f"{rows:,} log records, exactly once; lake offsets == log end"


def union(lh: Lakehouse, ns: str, expected: Expected, console: Console, *, lake_behind: bool) -> str:
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


def offsets_table(name: str, done: DemoResult, console: Console) -> None:
    table = new_table("", title=f"{name}: offsets per bucket (bucket[8](o_orderkey))")
    for b in done.log_end:
        table.add_column(str(b), justify="right", overflow="fold")
    table.add_row("log end", *(str(e) for e in done.log_end.values()))
    table.add_row("lake", *(str(o) for o in done.lake_offsets.values()))
    console.print(table)


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


def orders_batch(keys: np.ndarray, rng: np.random.Generator) -> pa.Table:
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
