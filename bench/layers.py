"""Warehouse layers (issue 25): the example project's rounds against baselines measured in the same run.

The ODS of ``examples/tpch`` (``--orders`` N orders, N/10 customers, 25 nations; TPC-H-like values generated with
numpy from a fixed seed) is appended to the logs in 100,000-row batches and tiered, then a first
``layers.run_once()`` (a full round of both models) runs and the layer tables are tiered too. Then:

1. **Incremental round vs rebuild vs DuckDB.** 1 % of the orders change (80 % of them updated: new price, half a
   new date, a third a new customer; 10 % deleted; 10 % new keys) and 1 % of the customers (all renamed, half
   moving nation); the ODS is tiered. Timed: (a) ``layers.run_once()`` (the incremental round of both models,
   profiled step by step); (b) ``layers.rebuild(model)`` of both models on a copy of the warehouse at the same
   state (``shutil.copytree``, timed apart and not counted); (c) DuckDB computing the same SQL in full (the
   models' Spark SQL transpiled by sqlglot) over the same ODS Iceberg tables (``iceberg_scan``), materialized
   (``CREATE TABLE ... AS``). The three results are checked equal. Targets: (a) >= 10x faster than (b), and
   faster than (c).
2. **Freshness with ``follow``.** On a smaller warehouse (``--fresh-orders``, 1 M; ``--quick`` 50 k) a producer
   appends 100 changes to ods.orders every 100 ms (1,000/s: 50 new orders of a dedicated probe customer in a
   dedicated nation and month, keys numbered by batch, and 50 price updates of random existing orders) while
   ``layers.follow()`` runs in another thread and, every ``--tier-every`` seconds (5; 0: never), ods.orders and
   the layer tables are tiered by another process (as a deployment tiers beside the layers); a probe polls
   ``union_read`` of dwd.orders_enriched (the batch's keys) and of the ADS (the probe group's ``order_count``) and
   records when each batch became visible. p50/p99 per layer over ``--seconds`` (45 s). Goal: p99 <= 5 s end to end.
3. **Round memory grows with the changes, not the table.** Peak RSS of a fresh process running the incremental
   round (the same number of changes: 1 % of N orders, 1 % of N/10 customers) over N/4 and N orders: the Python
   driver's VmHWM (reset through /proc/self/clear_refs just before the round) and the sampled peak of the whole
   process tree (the Spark JVM and its Python workers).

    .venv/bin/python bench/layers.py [--quick] [--orders N] [--fresh-orders N] [--seconds S] [--tier-every S]
                                     [--only PART]

File:// warehouse in a temporary directory (no S3 run: the figures are compute, not storage). Rounds run in the
driver (``LAKESTREAM_LAYERS_DRIVER_BUDGET_ROWS`` raised above them unless set; bench/executors.py measures them on
Spark's executors). Spark local[2],
one session per process. Prints Markdown (also to ``--out``).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _common import pct  # noqa: E402
from tiering import PRIORITIES, STATUS, STATUS_P, _decimal_cents, _pick, machine, order_key  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402
from lakehouse.log.batch import Limits  # noqa: E402
from layers.project import load_project  # noqa: E402
from layers.runner import Runner  # noqa: E402

EXAMPLE = ROOT / "examples" / "tpch"
DWD, ADS = "dwd.orders_enriched", "ads.revenue_by_nation_month"
MODELS = (DWD, ADS)
ODS = ("ods.nation", "ods.customer", "ods.orders")
APPEND_ROWS = 100_000
NATIONS = """ALGERIA ARGENTINA BRAZIL CANADA EGYPT ETHIOPIA FRANCE GERMANY INDIA INDONESIA IRAN IRAQ JAPAN JORDAN KENYA
MOROCCO MOZAMBIQUE PERU CHINA ROMANIA SAUDI_ARABIA VIETNAM RUSSIA UNITED_KINGDOM UNITED_STATES""".split()
SEGMENTS = pa.array(["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"])
# freshness probe: a nation, a customer and a month no generated row uses; probe keys are even (generated ones odd)
PROBE_NATION, PROBE_MONTH = 25, datetime.date(2030, 1, 1)
PROBE_KEY0 = 1 << 40


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---- data ------------------------------------------------------------------------------------------------


def nations() -> pa.Table:
    return pa.table(
        {
            "n_nationkey": pa.array(range(25), pa.int64()),
            "n_name": [n.replace("_", " ") for n in NATIONS],
            "n_regionkey": pa.array([k % 5 for k in range(25)], pa.int64()),
        }
    )


def customers(keys: np.ndarray, rng: np.random.Generator, version: int = 0) -> pa.Table:
    n = len(keys)
    names = pc.binary_join_element_wise(
        "Customer#", pc.utf8_lpad(pa.array(keys).cast(pa.string()), 9, "0"), "" if not version else f"-v{version}", ""
    )
    return pa.table(
        {
            "c_custkey": pa.array(keys, pa.int64()),
            "c_name": names,
            "c_nationkey": pa.array(rng.integers(0, 25, n), pa.int64()),
            "c_mktsegment": _pick(SEGMENTS, rng, n),
            "c_acctbal": _decimal_cents(rng.integers(0, 1_000_000, n)).cast(pa.decimal128(12, 2)),
        }
    )


def orders(keys: np.ndarray, rng: np.random.Generator, n_customers: int) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "o_orderkey": pa.array(keys, pa.int64()),
            "o_custkey": pa.array(rng.integers(1, n_customers + 1, n), pa.int64()),
            "o_orderstatus": _pick(STATUS, rng, n, STATUS_P),
            "o_totalprice": _decimal_cents(rng.integers(90_000, 55_000_000, n)),
            "o_orderdate": pa.array(rng.integers(8035, 10441, n).astype(np.int32)).cast(pa.date32()),
            "o_orderpriority": _pick(PRIORITIES, rng, n),
        }
    )


def append_all(lh: Lakehouse, name: str, data: pa.Table, op: str = "upsert") -> None:
    log = lh.log(name)
    data = data.cast(lh.table(name).schema) if op == "upsert" else data
    for lo in range(0, data.num_rows, APPEND_ROWS):
        log.append(data.slice(lo, APPEND_ROWS), op)


def tier_all(lh: Lakehouse, names: tuple[str, ...]) -> float:
    t0 = time.perf_counter()
    for name in names:
        lh.tier(name)
    return time.perf_counter() - t0


def unlimited(lh: Lakehouse) -> Lakehouse:
    """Lift the log's per-append limits (1 M rows, 256 MiB) for the layer tables: `Runner` appends a round's
    upserts in one append, so a full round over more than 1 M output rows fails with BatchError otherwise."""
    for name in MODELS:
        lh.log(name).limits = Limits(max_rows=1 << 40, max_bytes=1 << 50)
    return lh


def build(url: str, n_orders: int, spark: Any, project: Any, seed: int = 25) -> tuple[Lakehouse, Runner, dict]:
    """A warehouse holding the ODS (tiered), after a first full round of both models (tiered too)."""
    lh = Lakehouse.open(url)
    layers = Runner(lh, project, spark)
    layers.deploy()
    unlimited(lh)
    n_customers = max(100, n_orders // 10)
    rng = np.random.default_rng(seed)
    info: dict[str, Any] = {"orders": n_orders, "customers": n_customers}
    t0 = time.perf_counter()
    append_all(lh, "ods.nation", nations())
    append_all(lh, "ods.customer", customers(np.arange(1, n_customers + 1), rng))
    for lo in range(0, n_orders, 1_000_000):
        keys = order_key(np.arange(lo, min(n_orders, lo + 1_000_000)))
        append_all(lh, "ods.orders", orders(keys, rng, n_customers))
    info["append_s"] = time.perf_counter() - t0
    info["tier_ods_s"] = tier_all(lh, ODS)
    say(f"{url}: ODS appended in {info['append_s']:.1f} s, tiered in {info['tier_ods_s']:.1f} s")
    t0 = time.perf_counter()
    reports = layers.run_once()
    info["first_round_s"] = time.perf_counter() - t0
    info["first_round"] = {r.model: r.seconds for r in reports}
    info["tier_layers_s"] = tier_all(lh, MODELS)
    say(
        f"first round (full) in {info['first_round_s']:.1f} s "
        f"({', '.join(f'{r.model} {r.seconds:.1f} s, {r.upserts:,} rows' for r in reports)}); layers tiered in "
        f"{info['tier_layers_s']:.1f} s"
    )
    return lh, layers, info


def change(lh: Lakehouse, n_orders: int, n_changed_orders: int, n_customers: int, n_changed_customers: int) -> dict:
    """Append the changes: orders (80 % updated, 10 % deleted, 10 % new) and customers (renamed, half of them
    moving nation); then tier the ODS."""
    rng = np.random.default_rng(2025)
    picked = order_key(rng.choice(n_orders, n_changed_orders - n_changed_orders // 10, replace=False))
    deleted, updated = picked[: n_changed_orders // 10], picked[n_changed_orders // 10 :]
    current = lh.union_read("ods.orders", row_filter=_in("o_orderkey", updated))
    current = current.select(lh.table("ods.orders").schema.names)
    fresh = orders(current["o_orderkey"].to_numpy(), rng, n_customers)
    n = current.num_rows
    cols = {name: current[name] for name in current.column_names}
    cols["o_totalprice"] = fresh["o_totalprice"]
    half, third = rng.random(n) < 0.5, rng.random(n) < 1 / 3
    cols["o_orderdate"] = pc.if_else(pa.array(half), fresh["o_orderdate"], current["o_orderdate"])
    cols["o_custkey"] = pc.if_else(pa.array(third), fresh["o_custkey"], current["o_custkey"])
    upd = pa.table(cols)
    new = orders(order_key(np.arange(n_orders, n_orders + n_changed_orders // 10)), rng, n_customers)
    both = pa.concat_tables([upd.cast(new.schema), new])
    append_all(lh, "ods.orders", both.take(pa.array(rng.permutation(both.num_rows))))
    append_all(lh, "ods.orders", pa.table({"o_orderkey": pa.array(deleted, pa.int64())}), "delete")
    ckeys = np.sort(rng.choice(np.arange(1, n_customers + 1), n_changed_customers, replace=False))
    old = lh.union_read("ods.customer", row_filter=_in("c_custkey", ckeys)).sort_by("c_custkey")
    moved = customers(ckeys, rng, version=2)
    keep = pa.array(rng.random(len(ckeys)) < 0.5)
    moved = moved.set_column(2, "c_nationkey", pc.if_else(keep, old["c_nationkey"], moved["c_nationkey"]))
    moved = moved.set_column(3, "c_mktsegment", old["c_mktsegment"]).set_column(4, "c_acctbal", old["c_acctbal"])
    append_all(lh, "ods.customer", moved)
    tier_s = tier_all(lh, ODS)
    return {
        "order_updates": upd.num_rows,
        "order_deletes": len(deleted),
        "order_inserts": new.num_rows,
        "customer_changes": len(ckeys),
        "customers_moved": len(ckeys) - pc.sum(keep).as_py(),
        "tier_s": tier_s,
    }


def _in(column: str, values: np.ndarray) -> Any:
    from pyiceberg.expressions import In

    return In(column, [int(v) for v in values])


# ---- profiling ---------------------------------------------------------------------------------------------


class Profile:
    """Exclusive wall time per (model, step) of rounds, by wrapping a `Runner`' steps on the instance (the
    library is not changed). A union_read is charged to the step that called it."""

    STEPS = {
        "_changed_keys": "changes reads (lh.changes of each input)",
        "_affected_driving_keys": "hop reads (driving keys of changed dimension rows)",
        "_restricted": "restricted reads (inputs as of start/end, affected rows only)",
        "_read_rows": "old rows of the output (as of the round's start)",
        "_full": "old rows of the output: the whole table",
        "_images": "before/after images of a one-input GROUP BY (its changelog, or handed over by the round before)",
        "_regroup": "rows of the groups recomputed, read in the driver",
        "run": "Spark SQL (views, plan, run, toArrow)",
        "_diff": "diff new/old (pyarrow join)",
        "_append": "append to the model's log",
        "_round": "other (intent, subscriptions, report, distinct, semi-joins)",
    }

    def __init__(self, layers: Runner) -> None:
        self.totals: dict[tuple[str, str], float] = defaultdict(float)
        self.stack: list[list[Any]] = []
        self.model = "?"
        for attr in (
            "_changed_keys",
            "_affected_driving_keys",
            "_restricted",
            "_read_rows",
            "_images",
            "_regroup",
            "_diff",
        ):
            self._wrap(layers.rows, attr)
        self._wrap(layers, "_full")
        self._wrap(layers, "_append")
        self._wrap(layers, "_round", model_arg=True)
        self._wrap(layers.sql, "run")

    def _wrap(self, obj: Any, attr: str, model_arg: bool = False) -> None:
        original = getattr(obj, attr)
        label = self.STEPS[attr]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if model_arg:
                self.model = args[0]
            t0 = time.perf_counter()
            self.stack.append([label, 0.0])
            try:
                return original(*args, **kwargs)
            finally:
                _, children = self.stack.pop()
                elapsed = time.perf_counter() - t0
                self.totals[(self.model, label)] += elapsed - children
                if self.stack:
                    self.stack[-1][1] += elapsed

        setattr(obj, attr, wrapper)

    def reset(self) -> None:
        self.totals.clear()

    def rows(self, model: str) -> list[tuple[str, float]]:
        return [(label, self.totals[(model, label)]) for label in self.STEPS.values() if (model, label) in self.totals]


# ---- 1. incremental vs rebuild vs DuckDB -------------------------------------------------------------------------


def duckdb_full(lh: Lakehouse, project: Any) -> tuple[float, pa.Table, int]:
    """Both models' SQL in full in DuckDB over the ODS Iceberg tables; (seconds, ADS rows, DWD rows)."""
    import sqlglot

    from lakehouse.duckdb_reader import duckdb_connection

    con = duckdb_connection()
    locations = {t: lh.lake_table(t).metadata_location.removeprefix("file://") for t in ODS}

    def sql_of(model: str) -> str:
        text = sqlglot.transpile(project.models[model].sql, read="spark", write="duckdb")[0]
        # sqlglot 27 turns Spark's trunc(d, 'MM') into DATE_TRUNC('MM', d), which DuckDB refuses
        return text.replace("DATE_TRUNC('MM'", "DATE_TRUNC('MONTH'")

    gc.collect()
    t0 = time.perf_counter()
    for schema in ("ods", "dwd", "ads"):
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    for table, location in locations.items():  # views: the scan happens in the CREATE TABLEs below
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM iceberg_scan('{location}')")
    con.execute(f"CREATE TABLE {DWD} AS {sql_of(DWD)}")
    con.execute(f"CREATE TABLE {ADS} AS {sql_of(ADS)}")
    seconds = time.perf_counter() - t0
    ads = con.execute(f"SELECT * FROM {ADS}").to_arrow_table()
    dwd_rows = con.execute(f"SELECT count(*) FROM {DWD}").fetchone()[0]
    con.close()
    return seconds, ads, dwd_rows


def normalized(table: pa.Table, key: list[str]) -> list[tuple]:
    cols = [c for c in table.column_names if not c.startswith("__") and c != "_op"]
    t = table.select(sorted(cols)).sort_by([(k, "ascending") for k in key])
    return [tuple(str(v) for v in row.values()) for row in t.to_pylist()]


def dwd_digest(lh: Lakehouse) -> tuple[int, int, str]:
    t = lh.union_read(DWD, columns=["o_orderkey", "o_totalprice", "n_nationkey", "c_name"])
    return (
        t.num_rows,
        pc.sum(t["o_orderkey"]).as_py(),
        f"{pc.sum(t['o_totalprice']).as_py()}/{pc.sum(t['n_nationkey']).as_py()}/{pc.sum(pc.utf8_length(t['c_name'])).as_py()}",
    )


def part_rounds(tmp: Path, args: argparse.Namespace, spark: Any, project: Any, out: list[str]) -> dict:
    n = args.orders
    lh, layers, info = build((tmp / "wh").as_uri(), n, spark, project)
    changes = change(lh, n, n // 100, info["customers"], info["customers"] // 100)
    say(f"changes appended and tiered: {changes}")
    t0 = time.perf_counter()
    shutil.copytree(tmp / "wh", tmp / "copy")
    copy_s = time.perf_counter() - t0
    pristine = None
    if args.only in (None, "memory"):  # for part 3: put back at the same path (lake metadata holds absolute paths)
        pristine = tmp / "wh-pristine"
        shutil.copytree(tmp / "wh", pristine)
    say(f"warehouse copied in {copy_s:.1f} s ({_du(tmp / 'wh') / 1e9:.2f} GB)")

    profile = Profile(layers)
    gc.collect()
    os.sync()
    t0 = time.perf_counter()
    incremental = layers.run_once()
    inc_s = time.perf_counter() - t0
    say(f"incremental run_once: {inc_s:.2f} s: " + "; ".join(_describe(r) for r in incremental))
    inc_profile = {m: profile.rows(m) for m in MODELS}

    other = unlimited(Lakehouse.open((tmp / "copy").as_uri()))
    again = Runner(other, project, spark)
    rprofile = Profile(again)
    rebuilt, rebuild_s = [], 0.0
    for model in MODELS:
        gc.collect()
        os.sync()
        t0 = time.perf_counter()
        rebuilt.append(again.rebuild(model))
        rebuild_s += time.perf_counter() - t0
    say(f"rebuild: {rebuild_s:.2f} s: " + "; ".join(_describe(r) for r in rebuilt))
    reb_profile = {m: rprofile.rows(m) for m in MODELS}

    duck_s, duck_ads, duck_dwd = duckdb_full(lh, project)
    say(f"DuckDB in full: {duck_s:.2f} s ({duck_dwd:,} DWD rows)")

    ads_key = list(project.models[ADS].primary_key)
    ours_ads = normalized(lh.union_read(ADS), ads_key)
    assert ours_ads == normalized(other.union_read(ADS), ads_key), "incremental ADS != rebuilt ADS"
    duck_cast = duck_ads.select(lh.table(ADS).schema.names).cast(lh.table(ADS).schema)
    assert ours_ads == normalized(duck_cast, ads_key), "ADS != DuckDB's"
    digest = dwd_digest(lh)
    assert digest == dwd_digest(other), "incremental DWD != rebuilt DWD"
    assert digest[0] == duck_dwd, (digest[0], duck_dwd)
    say("checked: incremental == rebuild == DuckDB (ADS row by row; DWD by count and sums)")

    speed_rebuild, speed_duck = rebuild_s / inc_s, duck_s / inc_s
    by_model = {r.model: r for r in incremental}
    rb_model = {r.model: r for r in rebuilt}
    out += [
        f"### 1. Incremental round vs rebuild vs DuckDB ({n:,} orders)",
        "",
        f"{n:,} orders, {info['customers']:,} customers, 25 nations; ODS appended in {info['append_s']:.0f} s, "
        f"tiered in {info['tier_ods_s']:.0f} s; first (full) round {info['first_round_s']:.1f} s "
        f"({', '.join(f'{m} {s:.1f} s' for m, s in info['first_round'].items())}), layers tiered in "
        f"{info['tier_layers_s']:.0f} s. Changes: {changes['order_updates']:,} order updates, "
        f"{changes['order_deletes']:,} deletes, {changes['order_inserts']:,} new orders; "
        f"{changes['customer_changes']:,} customers renamed ({changes['customers_moved']:,} moving nation); "
        f"tiered. Warehouse copy for the rebuild: {copy_s:.1f} s (not counted).",
        "",
        "| model | strategy | input changes | affected | upserts | deletes | incremental round | rebuild | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model in MODELS:
        r, b = by_model[model], rb_model[model]
        out.append(
            f"| {model} | {r.strategy} | {r.input_changes:,} | {r.affected:,} | {r.upserts:,} | {r.deletes:,} "
            f"| {r.seconds:.2f} s | {b.seconds:.2f} s | {b.seconds / r.seconds:.1f}x |"
        )
    out += [
        "",
        "| both models | seconds | incremental is | target |",
        "| --- | --- | --- | --- |",
        f"| (a) `layers.run_once()`, incremental | {inc_s:.2f} | 1.00 | |",
        f"| (b) `layers.rebuild(model)` x 2 (copy of the warehouse) | {rebuild_s:.2f} | {_faster(speed_rebuild)} "
        f"| >= 10x: {'met' if speed_rebuild >= 10 else 'NOT met'} |",
        f"| (c) DuckDB, both SQLs in full over the ODS Iceberg tables (`CREATE TABLE AS`) | {duck_s:.2f} "
        f"| {_faster(speed_duck)} | > 1x: {'met' if speed_duck > 1 else 'NOT met'} |",
        "",
        "Where the time goes (exclusive seconds per step, from wrappers around the executor's steps):",
        "",
        "| step | "
        + " | ".join(f"{m} incremental" for m in MODELS)
        + " | "
        + " | ".join(f"{m} rebuild" for m in MODELS)
        + " |",
        "| --- | --- | --- | --- | --- |",
    ]
    labels = [label for label in Profile.STEPS.values()]
    for label in labels:
        cells = [dict(inc_profile[m]).get(label) for m in MODELS] + [dict(reb_profile[m]).get(label) for m in MODELS]
        if all(c is None for c in cells):
            continue
        out.append(f"| {label} | " + " | ".join("" if c is None else f"{c:.2f}" for c in cells) + " |")
    out.append("")
    lh.close()
    other.close()
    shutil.rmtree(tmp / "copy", ignore_errors=True)
    memory_copy = None
    if pristine is not None:
        shutil.rmtree(tmp / "wh")
        pristine.rename(tmp / "wh")
        memory_copy = tmp / "wh"
    return {"memory_copy": memory_copy, "changes": (n // 100, info["customers"] // 100), "n": n}


def _faster(ratio: float) -> str:
    return f"{ratio:.1f}x faster" if ratio >= 1 else f"{ratio:.2f}x as fast ({1 / ratio:.1f}x slower)"


def _describe(r: Any) -> str:
    return (
        f"{r.model} {r.strategy} {r.seconds:.2f} s (input changes {r.input_changes:,}, affected {r.affected:,}, "
        f"+{r.upserts:,} -{r.deletes:,})"
    )


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ---- 2. freshness ---------------------------------------------------------------------------------------------


def part_freshness(tmp: Path, args: argparse.Namespace, spark: Any, project: Any, out: list[str]) -> None:
    n = args.fresh_orders
    lh, layers, info = build((tmp / "fresh").as_uri(), n, spark, project, seed=26)
    probe_customer = info["customers"] + 1
    append_all(lh, "ods.nation", pa.table({"n_nationkey": [PROBE_NATION], "n_name": ["PROBE"], "n_regionkey": [0]}))
    probe_cust = customers(np.array([probe_customer]), np.random.default_rng(1))
    append_all(lh, "ods.customer", probe_cust.set_column(2, "c_nationkey", pa.array([PROBE_NATION], pa.int64())))
    layers.run_once()  # the probe dimension rows through the layers before the clock starts
    rng = np.random.default_rng(7)
    per_batch_new, per_batch_upd, interval = 50, 50, 0.1
    stop = threading.Event()
    sent: dict[int, float] = {}
    appended: dict[int, float] = {}
    rounds: list[Any] = []
    errors: list[BaseException] = []
    ods_schema = lh.table("ods.orders").schema

    def producer() -> None:
        log = lh.log("ods.orders")
        b, t_next = 0, time.perf_counter()
        try:
            while not stop.is_set():
                keys = PROBE_KEY0 + 2 * (b * per_batch_new + np.arange(per_batch_new))
                new = orders(keys, rng, info["customers"])
                new = new.set_column(1, "o_custkey", pa.array(np.full(per_batch_new, probe_customer), pa.int64()))
                new = new.set_column(4, "o_orderdate", pa.array([PROBE_MONTH] * per_batch_new, pa.date32()))
                upd = orders(order_key(rng.integers(0, n, per_batch_upd)), rng, info["customers"])
                batch = pa.concat_tables([new, upd]).cast(ods_schema)
                sent[b] = time.perf_counter()
                log.append(batch, "upsert")
                appended[b] = time.perf_counter()
                b += 1
                t_next += interval
                stop.wait(max(0.0, t_next - time.perf_counter()))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            stop.set()

    def follower() -> None:
        try:
            layers.follow(poll_seconds=0.05, stop=stop, on_round=rounds.append)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            stop.set()

    from pyiceberg.expressions import EqualTo, GreaterThanOrEqual

    seen_dwd: dict[int, float] = {}
    seen_ads: dict[int, float] = {}
    tier_seconds: list[float] = []
    tier_proc = None
    if args.tier_every > 0:  # tiering in its own process, as a deployment runs it beside the layers
        tier_proc = subprocess.Popen(
            [sys.executable, "-c", _TIERER, str(ROOT), lh.url, str(args.tier_every), "ods.orders", *MODELS],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    threads = [threading.Thread(target=producer, daemon=True), threading.Thread(target=follower, daemon=True)]
    say(f"freshness: {args.seconds} s of 1,000 changes/s over {n:,} orders")
    load0 = os.getloadavg()
    started = time.perf_counter()
    for t in threads:
        t.start()
    polls = 0
    while time.perf_counter() - started < args.seconds and not stop.is_set():
        polls += 1
        dwd = lh.union_read(DWD, columns=["o_orderkey"], row_filter=GreaterThanOrEqual("o_orderkey", PROBE_KEY0))
        now = time.perf_counter()
        batch_of = pc.divide(pc.subtract(dwd["o_orderkey"], PROBE_KEY0), 2 * per_batch_new)
        counts = pa.table({"b": batch_of}).group_by("b").aggregate([([], "count_all")])
        for b, c in zip(counts["b"].to_pylist(), counts["count_all"].to_pylist(), strict=True):
            if c == per_batch_new and b not in seen_dwd:
                seen_dwd[b] = now
        ads = lh.union_read(
            ADS, columns=["order_month", "order_count"], row_filter=EqualTo("n_nationkey", PROBE_NATION)
        )
        now = time.perf_counter()
        ads = ads.filter(pc.equal(ads["order_month"], pa.scalar(PROBE_MONTH, pa.date32())))
        total = ads["order_count"][0].as_py() if ads.num_rows else 0
        for b in range(total // per_batch_new):  # batches are sent in order: the count covers the first ones
            seen_ads.setdefault(b, now)
        time.sleep(0.02)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    if tier_proc is not None:
        out_text, _ = tier_proc.communicate("stop\n", timeout=120)  # it stops after its current tiering
        tier_seconds = [float(x) for x in out_text.split()]
        if tier_proc.returncode:
            raise RuntimeError(f"the tiering process failed ({tier_proc.returncode})")
    if errors:
        raise errors[0]
    load1 = os.getloadavg()
    # the batches sent early enough for every layer to have had time to show them
    horizon = started + args.seconds - 10
    batches = [b for b in sorted(sent) if sent[b] <= horizon]
    missing = [b for b in batches if b not in seen_ads]

    ended = time.perf_counter()

    def lat(seen: dict[int, float]) -> list[tuple[float, bool]]:
        """Latency per batch; a batch never seen counts as (end of the run - its send, censored)."""
        return [(seen[b] - sent[b], False) if b in seen else (ended - sent[b], True) for b in batches]

    ods = [(appended[b] - sent[b], False) for b in batches if b in appended]
    dwd_lat, ads_lat = lat(seen_dwd), lat(seen_ads)
    busy = [r for r in rounds if not r.idle]
    per_model = {m: [r.seconds for r in busy if r.model == m] for m in MODELS}
    say(f"freshness: {len(batches)} batches, {len(busy)} rounds, {polls} polls, missing in ADS: {len(missing)}")
    p99_end = pct(ads_lat, 0.99) if ads_lat else (float("inf"), True)
    out += [
        "### 2. Freshness with `follow` at 1,000 changes/s",
        "",
        f"{n:,} orders ({info['customers']:,} customers), tiered, then {args.seconds:.0f} s of a producer appending "
        f"{per_batch_new} new probe orders + {per_batch_upd} updates of random orders every {interval * 1000:.0f} ms "
        f"while `layers.follow(poll_seconds=0.05)` runs in another thread"
        + (
            f", ods.orders and both layer tables are tiered every {args.tier_every:g} s by another process (as a "
            f"deployment tiers beside the layers; {len(tier_seconds)} tierings, p50 {pct(tier_seconds, 0.5):.2f} s, "
            f"max {max(tier_seconds):.2f} s)"
            if tier_seconds
            else ", nothing is tiered meanwhile (every read's log tail grows through the run)"
        )
        + f" and a probe polls the union reads "
        f"({polls} polls, about {args.seconds / max(polls, 1) * 1000:.0f} ms apart). Latency from the batch's send "
        f"to the moment a poll first saw it; batches sent in the first {args.seconds - 10:.0f} s: {len(batches)} "
        f"({len(missing)} not seen in the ADS by the end). Load average {load0[0]:.2f} before, {load1[0]:.2f} after.",
        "",
        "| layer | batches seen | p50 | p99 | max |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, values in (
        ("ods.orders (append returned)", ods),
        (f"{DWD} (union read holds the batch's keys)", dwd_lat),
        (f"{ADS} (order_count of the probe group counts it)", ads_lat),
    ):
        if values:
            seen = sum(1 for _, censored in values if not censored)
            out.append(
                f"| {label} | {seen} of {len(values)} | {_p(pct(values, 0.5))} | {_p(pct(values, 0.99))} "
                f"| {_p(max(values))} |"
            )
    out += [
        "",
        f"End to end p99 {_p(p99_end)}: goal <= 5 s {'met' if p99_end[0] <= 5 and not p99_end[1] else 'NOT met'} "
        "(a batch not seen by the end of the run counts with its age then, marked >). Rounds: "
        + "; ".join(f"{m}: {len(v)}, p50 {pct(v, 0.5):.2f} s, max {max(v):.2f} s" for m, v in per_model.items() if v)
        + ".",
        "",
    ]
    lh.close()


_TIERER = r"""
import select, sys, time
sys.path.insert(0, sys.argv[1])
from lakehouse import Lakehouse
lh = Lakehouse.open(sys.argv[2])
every, names = float(sys.argv[3]), sys.argv[4:]
while not select.select([sys.stdin], [], [], every)[0]:  # until the parent writes (or closes) stdin
    for name in names:
        t0 = time.perf_counter()
        lh.tier(name)
        print(f"{time.perf_counter() - t0:.4f}", flush=True)
lh.close()
"""


def _p(value: tuple[float, bool]) -> str:
    return f"{'> ' if value[1] else ''}{value[0]:.2f} s"


# ---- 3. memory -------------------------------------------------------------------------------------------------

_MEMORY_CHILD = r"""
import json, os, sys, threading, time
sys.path.insert(0, sys.argv[1])
import psutil
from lakehouse import Lakehouse
from layers.project import load_project
from layers.runner import Runner
from lakehouse.spark import spark_session

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

spark = spark_session("local[2]")
lh = Lakehouse.open(sys.argv[2])
layers = Runner(lh, load_project(sys.argv[3]), spark)
layers.sql  # registered before the clock starts
me = psutil.Process()
peak_tree, done = 0, threading.Event()

def tree_rss():
    total = 0
    for p in [me, *me.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total

def sample():
    global peak_tree
    while not done.is_set():
        peak_tree = max(peak_tree, tree_rss())
        done.wait(0.05)

before, tree_before = status("VmRSS"), tree_rss()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
t = threading.Thread(target=sample, daemon=True)
t.start()
t0 = time.perf_counter()
reports = layers.run_once()
seconds = time.perf_counter() - t0
done.set()
t.join()
print(json.dumps({
    "seconds": seconds, "rss_before": before, "peak": status("VmHWM"), "tree_before": tree_before,
    "tree_peak": peak_tree,
    "rounds": [[r.model, r.strategy, r.affected, r.upserts, r.deletes, r.seconds] for r in reports],
}))
"""


def memory_child(path: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, str(ROOT), path.as_uri(), str(EXAMPLE)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory subprocess failed ({proc.returncode}): {proc.stderr.strip()[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def part_memory(
    tmp: Path, args: argparse.Namespace, spark: Any, project: Any, out: list[str], full: dict | None
) -> None:
    n = args.orders
    changed_orders, changed_customers = n // 100, max(100, n // 10) // 100
    results = []
    for size in (n // 4, n):
        if size == n and full is not None and full.get("memory_copy"):
            path = full["memory_copy"]
        else:
            path = tmp / f"mem-{size}"
            lh, layers, info = build(path.as_uri(), size, spark, project, seed=27)
            change(lh, size, changed_orders, info["customers"], changed_customers)
            lh.close()
        got = memory_child(path)
        got["orders"] = size
        results.append(got)
        say(
            f"memory: {size:,} orders: driver peak {got['peak'] / 2**20:.0f} MiB "
            f"(before {got['rss_before'] / 2**20:.0f}), process tree peak {got['tree_peak'] / 2**20:.0f} MiB "
            f"(before {got['tree_before'] / 2**20:.0f}), "
            f"{got['seconds']:.1f} s, {got['rounds']}"
        )
        shutil.rmtree(path, ignore_errors=True)
    small, big = results
    out += [
        "### 3. Round memory: the same changes over two table sizes",
        "",
        f"A fresh process (its own Spark local[2]) runs the incremental round of both models after {changed_orders:,} "
        f"order changes and {changed_customers:,} customer changes (as in 1.) over two warehouses.",
        "",
        "| orders | round | driver peak RSS (VmHWM) | driver RSS before | process tree peak (JVM + workers) "
        "| tree before | affected (dwd / ads) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        out.append(
            f"| {r['orders']:,} | {r['seconds']:.1f} s | {r['peak'] / 2**20:,.0f} MiB "
            f"| {r['rss_before'] / 2**20:,.0f} MiB "
            f"| {r['tree_peak'] / 2**20:,.0f} MiB | {r['tree_before'] / 2**20:,.0f} MiB "
            f"| {' / '.join(f'{x[2]:,}' for x in r['rounds'])} |"
        )
    growth = (big["peak"] - big["rss_before"]) / max(1, small["peak"] - small["rss_before"])
    out += [
        "",
        f"4x the table, the same changes: the driver's growth during the round is {growth:.2f}x "
        f"({(small['peak'] - small['rss_before']) / 2**20:,.0f} -> "
        f"{(big['peak'] - big['rss_before']) / 2**20:,.0f} MiB).",
        "",
    ]


# ---- main ----------------------------------------------------------------------------------------------------


#: The rounds here run in the driver (`layers.incremental`), as they were measured before rounds could run on
#: Spark's executors: the 10 M-order round's 110,000 input records are above the default budget of 100,000. Its
#: runs on the executors are bench/executors.py's (with a cluster whose executors are processes of their own).
DRIVER_BUDGET = "1000000000"


def main() -> None:
    # set before any Lakehouse reads its settings; the memory part's child processes inherit it
    os.environ.setdefault("LAKESTREAM_LAYERS_DRIVER_BUDGET_ROWS", DRIVER_BUDGET)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--orders", type=int, default=None, help="orders of part 1 and 3 (10,000,000; quick 200,000)")
    p.add_argument("--fresh-orders", type=int, default=None, help="orders of part 2 (1,000,000; quick 50,000)")
    p.add_argument("--seconds", type=float, default=None, help="length of part 2 (45; quick 20)")
    p.add_argument(
        "--tier-every", type=float, default=5.0, help="part 2: tier ods.orders and the layers every S s (0: never)"
    )
    p.add_argument(
        "--only",
        choices=["rounds", "freshness", "memory", "local", "s3"],
        help="run one part (local: all of them; s3: nothing, this benchmark runs on file:// only)",
    )
    p.add_argument("--out", type=Path, help="also write the Markdown here")
    args = p.parse_args()
    if args.only == "s3":
        print("bench/layers.py: no S3 run (the figures are compute, not storage); nothing to do for --only s3")
        return
    if args.only == "local":
        args.only = None
    args.orders = args.orders or (200_000 if args.quick else 10_000_000)
    args.fresh_orders = args.fresh_orders or (50_000 if args.quick else 1_000_000)
    args.seconds = args.seconds or (20.0 if args.quick else 45.0)

    from lakehouse.spark import spark_session

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = machine(("pyarrow", "pyspark", "duckdb", "sqlglot"))
    project = load_project(EXAMPLE)
    conf = {}
    if args.orders > 2_000_000:
        # a full round (the first, and rebuild) collects the model's whole output to the driver with toArrow:
        # over 2 M orders that passes Spark's 1 GiB spark.driver.maxResultSize and the driver's default heap
        conf = {"spark.driver.maxResultSize": "0", "spark.driver.memory": "8g"}
    spark = spark_session("local[2]", **conf)
    out = [
        f"## Warehouse layers (`bench/layers.py`, {time.strftime('%Y-%m-%d')})",
        "",
        f"`{' '.join(['bench/layers.py', *sys.argv[1:]])}`, started {started}. {header}"
        + (f" Spark conf: {conf}." if conf else ""),
        "",
    ]
    full = None
    with tempfile.TemporaryDirectory(prefix="lakestream-bench-layers-") as name:
        tmp = Path(name)
        parts: list[tuple[str, Callable[[], Any]]] = [
            ("rounds", lambda: part_rounds(tmp, args, spark, project, out)),
            ("freshness", lambda: part_freshness(tmp, args, spark, project, out)),
            ("memory", lambda: part_memory(tmp, args, spark, project, out, full)),
        ]
        for part, run in parts:
            if args.only not in (None, part):
                continue
            before = len(out)
            got = run()
            if part == "rounds":
                full = got
            print("\n".join(out[before:]), flush=True)  # each part's table as soon as it is measured
    out.append(f"Load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}.")
    text = "\n".join(out)
    print("\n" + text)
    if args.out:
        args.out.write_text(text + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
