"""The warehouse-layers step of ``make demo``: the example project (examples/tpch) deployed in a warehouse of
its own, loaded, built, then kept fresh by ``follow`` while changes arrive; prints how long each change took to
show in each layer, and checks every layer against its SQL computed in full."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from rich.console import Console

from lakestream.console import new_table
from lakestream.demo.common import check as _check
from object_store import ObjectStore, open_store

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tpch"
NATIONS = ["ALGERIA", "ARGENTINA", "BRAZIL", "CANADA", "EGYPT", "ETHIOPIA", "FRANCE", "GERMANY", "INDIA", "JAPAN"]


def nations(keys: np.ndarray, suffix: str = "") -> pa.Table:
    return pa.table(
        {
            "n_nationkey": pa.array(keys, pa.int64()),
            "n_name": pa.array([NATIONS[k % len(NATIONS)] + suffix for k in keys]),
            "n_regionkey": pa.array(keys % 5, pa.int64()),
        }
    )


def customers(keys: np.ndarray, rng: np.random.Generator, n_nations: int) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "c_custkey": pa.array(keys, pa.int64()),
            "c_name": pa.array([f"Customer#{k:09d}" for k in keys]),
            "c_nationkey": pa.array(rng.integers(0, n_nations, n), pa.int64()),
            "c_mktsegment": pa.array(rng.choice(["AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY"], n)),
            "c_acctbal": pa.array(rng.integers(-999, 9_999, n), pa.int32()).cast(pa.decimal128(12, 2)),
        }
    )


def orders(keys: np.ndarray, rng: np.random.Generator, n_customers: int) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "o_orderkey": pa.array(keys, pa.int64()),
            "o_custkey": pa.array(rng.integers(0, n_customers, n), pa.int64()),
            "o_orderstatus": pa.array(rng.choice(["O", "F", "P"], n)),
            "o_totalprice": pa.array(rng.integers(1, 500_000, n), pa.int32()).cast(pa.decimal128(12, 2)),
            "o_orderdate": pa.array(rng.integers(8035, 10591, n).astype("int32")).cast(pa.date32()),
            "o_orderpriority": pa.array(rng.choice(["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"], n)),
        }
    )


def run_layers_demo(lh: Lakehouse, spark: Any, console: Console, *, n_orders: int = 200_000, batches: int = 8) -> str:
    """Deploy, load and build the example's layers in ``lh``, then time ``batches`` change batches through
    them with ``follow``; raises `DemoCheckFailed` if a layer differs from its SQL."""
    from layers.project import load_project
    from layers.runner import Runner, consumer_of

    project = load_project(EXAMPLE)
    layers = Runner(lh, project, spark)
    layers.deploy()
    rng = np.random.default_rng(20261125)
    n_nations, n_customers = 25, max(10, n_orders // 10)
    lh.log("ods.nation").append(nations(np.arange(n_nations)), "upsert")
    lh.log("ods.customer").append(customers(np.arange(n_customers), rng, n_nations), "upsert")
    for start in range(0, n_orders, 100_000):
        keys = np.arange(start, min(n_orders, start + 100_000))
        lh.log("ods.orders").append(orders(keys, rng, n_customers), "upsert")
    t0 = time.perf_counter()
    layers.run_once()
    built = time.perf_counter() - t0
    dwd, ads = project.order
    ads_consumer = consumer_of(ads)

    stop = threading.Event()
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            layers.follow(poll_seconds=0.05, stop=stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failure.append(exc)
            stop.set()

    follower = threading.Thread(target=follow, name="layers-follow", daemon=True)
    follower.start()
    fresh: dict[str, list[float]] = {dwd: [], ads: []}
    next_key = n_orders
    try:
        for i in range(batches):
            new = np.arange(next_key, next_key + 500)
            next_key += 500
            sent = time.perf_counter()
            lh.log("ods.orders").append(orders(new, rng, n_customers), "upsert")
            lh.log("ods.orders").append(orders(rng.integers(0, n_orders, 500), rng, n_customers), "upsert")
            lh.log("ods.customer").append(customers(rng.integers(0, n_customers, 20), rng, n_nations), "upsert")
            if i % 3 == 2:
                lh.log("ods.nation").append(nations(np.array([i % n_nations]), suffix=f" ({i})"), "upsert")
            if i % 4 == 3:
                lh.log("ods.orders").append(pa.table({"o_orderkey": pa.array(new[:50], pa.int64())}), "delete")
            target = lh.log("ods.orders").end_offsets()
            seen_dwd = None
            while seen_dwd is None or len(fresh[ads]) <= i:
                _check(not failure, f"follow failed: {failure[0] if failure else ''}")
                _check(time.perf_counter() - sent < 120, f"batch {i} did not reach the layers in 120 s")
                if seen_dwd is None:
                    position = lh.subscription("ods.orders", consumer_of(dwd), create=False).position
                    if all(position[b] >= o for b, o in target.items()):
                        seen_dwd = time.perf_counter()
                        fresh[dwd].append(seen_dwd - sent)
                        dwd_end = lh.log(dwd).end_offsets()
                else:
                    position = lh.subscription(dwd, ads_consumer, create=False).position
                    if all(position[b] >= o for b, o in dwd_end.items()):
                        fresh[ads].append(time.perf_counter() - sent)
                time.sleep(0.02)
    finally:
        stop.set()
        follower.join(60)
    layers.run_once()  # whatever arrived after the last batch
    from quality.layers import check_layers

    for result in check_layers(lh, project, spark=spark, full=True):
        problems = [str(v) for v in result.violations[:3]] or [result.error or result.not_evaluated or ""]
        _check(result.ok, f"{result.table} differs from its SQL computed in full: {'; '.join(problems)}")
        ends = {t: {str(b): o for b, o in lh.log(t).end_offsets().items()} for t in project.models[result.table].inputs}
        _check(result.details.get("positions") == ends, f"{result.table} is not caught up with its inputs")
    table = new_table(
        "layer",
        "strategy",
        "rows",
        "p50",
        "max",
        title="warehouse layers: append to ods.orders -> visible in the layer (follow)",
    )
    plans = {s.model: s.strategy for s in layers.status()}
    for model in project.order:
        times = fresh[model]
        rows = lh.union_read(model, columns=list(project.models[model].primary_key)).num_rows
        table.add_row(model, plans[model], f"{rows:,}", f"{statistics.median(times):.2f} s", f"{max(times):.2f} s")
    console.print(table)
    return (
        f"{n_orders:,} orders built in {built:.1f} s; {batches} change batches reached "
        f"{ads} in {statistics.median(fresh[ads]):.2f} s (median); every layer == its SQL in full"
    )


def layers_step(store: ObjectStore, stamp: str, state: dict, console: Console) -> str:
    """The example project's ODS -> DWD -> ADS layers, in a warehouse of their own next to this one."""
    if state.get("spark") is None:
        return "skipped (--local): layer rounds run Spark SQL"
    from lakehouse.lakehouse import Lakehouse

    url = f"{store.url.rstrip('/')}/layers_{stamp}"
    state["layers_url"] = url
    lh = Lakehouse(open_store(url, **store.connection_options()))
    try:
        return run_layers_demo(lh, state["spark"], console)
    finally:
        lh.close()
