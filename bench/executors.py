"""Where the work runs as the data grows: driver against executors, on a Spark cluster of separate processes.

Issue 40's measure: the driver plans and commits, the executors do the work that grows with the data. The Spark
runs are on ``local-cluster[2,1,2048]``: two executors of one core, separate JVMs with their own Python workers,
so driver and executors can be told apart with psutil. Every measurement runs in a fresh process (this script,
``--child``), whose Spark session, if any, has run a first Python action (executors and their Python workers up)
and then a warm-up of the measured call, before the clock. During the measured call only (`Sampler`):

* the driver's CPU seconds (that process' Python and its JVM) and the executors' (the
  ``CoarseGrainedExecutorBackend`` processes and their Python workers), sampled every 50 ms;
* the driver's peak RSS (Python and JVM), against before the call.

Three scenarios, each at N (``--orders``) and 5N orders; ``--only reconcile``, ``--only round`` or ``--only check``
runs one:

``reconcile``: a primary-key table of N orders (TPC-H-shaped, 8 buckets, merge-on-read, one round of 1 % changes
not compacted) is checked in full (`quality.reconcile(full=True)`: every row of the lake against the log; the
warm-up is the same check). On Spark's executors, and beside it with the driver's threads (no Spark:
``executor=None``), the baseline the rule replaces (its driver grows with the data).

``round``: the ODS of ``examples/tpch`` at N orders (N/10 customers; bench/layers.py's ``build``) is tiered, the
project deployed, a first (full) round of both models run and the layers tiered; then 1 % of the orders and of
the customers change (bench/layers.py's ``change``) and the ODS is tiered again. That is built in a process of
its own (Spark ``local[2]``), as is a small warehouse of `WARM_ORDERS` orders whose incremental round is the
warm-up (imports, the JVMs' JIT, Spark SQL's first plans). Measured: one ``Runner.run_once()``, the incremental
round of both models, given the cluster's session; once with ``LAKESTREAM_LAYERS_DRIVER_BUDGET_ROWS=0`` (a
round whose changed input rows exceed the budget runs its work in executor tasks) and once with ``1000000000``
(the round runs in the driver: the path before the setting). Each mode runs on its own copy of the warehouses
as built, put back at their path (the lake's metadata holds absolute paths). Afterwards the child hashes each
model's union read sorted by its key; the two modes must give the same tables, else the benchmark fails.

``check``: a full quality check of the ``round`` warehouse as built (the ODS at N orders, 1 % changed and tiered;
the models after their first round, tiered): `quality.check.run_checks(full=True, project=examples/tpch,
publish=False)` as ``jobs/check.py --full`` runs it: the reconciliation of the five tables, the GX suites of
``examples/tpch/expectations`` and the layer checks of both models (every row). The warm-up is the same check of
the small warehouse. Two modes, each on its own copy of the warehouses as built:
``spark``, with ``LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS=0`` and the cluster's session: the reconciliation's
buckets, every suite (GX's Spark datasource) and the layer checks on the executors; ``driver``, the path before
the settings, with the budget at ``1000000000``: the reconciliation in the driver's threads (``executor=None``)
and every suite and its references read by pyiceberg into the driver and validated by GX's pandas engine. Layer
checks have no driver path (they run the models' SQL): in both modes they run on the same cluster session, so
the ``driver`` mode passes the session to `run_checks` with the reconciliation's `SparkExecutor` replaced by
none. (The models need no round after the ODS changed: a layer check compares a model's table after its newest
round with its SQL over that round's inputs, and a suite's references read the inputs at the same positions.)
Reported per mode: the figures above, the check's wall time and each check's verdict, rows and seconds. Every
check must pass at both sizes (a failing check measures nothing), else the benchmark fails.

``limited`` (only with ``--only limited``: its build takes minutes): the ``round`` warehouse at
``--limited-orders`` (10,000,000; ``--quick``: 1,000,000) orders, one incremental round of both models on the
executors with the driver's JVM heap at 512 MiB; goal: the driver (JVM and Python) within 1 GiB.

Goals (issue 40), for the work on the executors: from N to 5N, driver CPU grows <= 1.5x and the driver's peak RSS
by <= 25 MiB; executors do >= 60 % of the CPU at 5N.

    .venv/bin/python bench/executors.py                    # N = 400,000 orders (about 35 minutes on 2 cores)
    .venv/bin/python bench/executors.py --quick            # N = 100,000 (about 15 minutes)
    .venv/bin/python bench/executors.py --only round [--orders N]
    .venv/bin/python bench/executors.py --only check [--orders N]
    .venv/bin/python bench/executors.py --only limited [--limited-orders N]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import psutil
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from tiering import KEY, SCHEMA, make_dataset, orders  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402

NAME = "bench.orders"
BUCKETS = 8
MASTER = "local-cluster[2,1,2048]"
BUDGET_ENV = "LAKESTREAM_LAYERS_DRIVER_BUDGET_ROWS"
#: The round's modes: the budget each runs with, and its label in the table.
ROUND_MODES = {
    "spark": ("0", "Spark's executors (budget 0)"),
    "driver": ("1000000000", "the driver (budget 10^9)"),
}
QUALITY_BUDGET_ENV = "LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS"
#: The check's modes: the quality budget each runs with, and its label in the table.
CHECK_MODES = {
    "spark": ("0", "Spark's executors (budget 0; goal)"),
    "driver": ("1000000000", "the driver (budget 10^9; layer checks on Spark: before)"),
}


def say(message: str) -> None:
    print(message, flush=True)


# ---- measuring, in the child processes ---------------------------------------------------------------------


class Sampler:
    """CPU seconds of the driver (this process and its JVM) and of the executors (their JVMs and Python
    workers), and the driver's peak RSS, over a ``with`` block: every process sampled every 50 ms. ``figures``
    holds them once the block is left."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.cpu: dict[int, tuple[str, float]] = {}  # pid -> (role, last seen CPU seconds)
        self.figures: dict[str, float] = {}
        self._done = threading.Event()

    def executors(self) -> list[psutil.Process]:
        """This cluster's executors and their Python workers: in local-cluster mode the executors' JVMs descend
        from this process' JVM, so another process' cluster on the machine (a test, another benchmark) is not
        counted."""
        out = []
        for p in self.me.children(recursive=True):
            try:
                if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in p.cmdline():
                    out.append(p)
                    out.extend(p.children(recursive=True))
            except psutil.Error:
                pass
        return out

    def driver(self) -> list[psutil.Process]:
        # this process and its JVM (whose children, in local-cluster mode, are the executors: left out)
        skip = {p.pid for p in self.executors()}
        return [self.me, *(c for c in self.me.children(recursive=False) if c.pid not in skip)]

    def sample(self) -> tuple[int, int]:
        """Record every process' CPU seconds; the driver's RSS now, in all and of its Python process."""
        rss = python = 0
        for role, procs in (("driver", self.driver()), ("executors", self.executors())):
            for p in procs:
                try:
                    t = p.cpu_times()
                    self.cpu[p.pid] = (role, t.user + t.system)
                    if role == "driver":
                        mem = p.memory_info().rss
                        rss += mem
                        python = mem if p.pid == self.me.pid else python
                except psutil.Error:
                    pass
        return rss, python

    def _watch(self) -> None:
        while not self._done.is_set():
            rss, python = self.sample()
            self.peak, self.python_peak = max(self.peak, rss), max(self.python_peak, python)
            self._done.wait(0.05)

    def __enter__(self) -> Sampler:
        self.sample()
        self.start = dict(self.cpu)
        self.rss_before, self.python_before = self.sample()
        self.peak, self.python_peak = self.rss_before, self.python_before
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        seconds = time.perf_counter() - self.t0
        self._done.set()
        self._thread.join()
        self.sample()
        spent = {"driver": 0.0, "executors": 0.0}
        for pid, (role, now) in self.cpu.items():  # a process started meanwhile counts from 0
            spent[role] += now - self.start.get(pid, (role, 0.0))[1]
        python_cpu = self.cpu[self.me.pid][1] - self.start[self.me.pid][1]
        self.figures = {
            "seconds": seconds,
            "driver_cpu": spent["driver"],
            "executor_cpu": spent["executors"],
            "python_cpu": python_cpu,  # the driver's Python process alone (the rest of driver_cpu is its JVM)
            "rss_before": self.rss_before,
            "rss_peak": self.peak,
            # the JVM's part of the driver's RSS follows its heap's growth, which a single run makes noisy
            "python_before": self.python_before,
            "python_peak": self.python_peak,
        }


def cluster(scheduler_only: bool = False, **conf: str) -> Any:
    """A session on `MASTER` whose executors and their Python workers are up."""
    from lakehouse.spark import spark_session

    spark = spark_session(MASTER, app_name="bench-executors", scheduler_only=scheduler_only, **conf)
    spark.range(0, 4, 1, 4).count()
    spark.range(0, 8, 1, 4).mapInArrow(lambda batches: batches, "id long").count()  # Python workers started
    return spark


def reconcile_child(url: str, mode: str) -> dict:
    from lakehouse.executor import SparkExecutor
    from quality.reconcile import reconcile

    spark = cluster(scheduler_only=True) if mode == "spark" else None
    lh = Lakehouse.open(url)
    reconcile(lh, NAME, full=True, executor=SparkExecutor(spark) if spark else None)  # warm: imports, caches
    with Sampler() as s:
        result = reconcile(lh, NAME, full=True, executor=SparkExecutor(spark) if spark else None)
    assert result.ok, [str(v) for v in result.violations]
    if spark is not None:
        spark.stop()
    return {**s.figures, "rows": result.rows}


def round_child(url: str, mode: str, warm_url: str) -> dict:
    """One incremental round of both models (the budget is in the environment, set by the parent), then a digest
    of each model's table. A round over the small warehouse at ``warm_url`` runs first, untimed: what every
    round costs once per process (imports, the JVMs' JIT, Spark SQL's first plans) is not measured."""
    from layers.project import load_project
    from layers.runner import Runner

    # from the parent, so it is in place before lakestream reads its settings, however early that is
    assert os.environ.get(BUDGET_ENV) == ROUND_MODES[mode][0], (mode, os.environ.get(BUDGET_ENV))
    tpch = bench_layers()
    project = load_project(tpch.EXAMPLE)
    spark = cluster()
    warm = Lakehouse.open(warm_url)
    Runner(warm, project, spark).run_once()
    warm.close()
    lh = Lakehouse.open(url)
    runner = Runner(lh, project, spark)
    runner.sql  # the lake's Spark source registered before the clock  # noqa: B018
    with Sampler() as s:
        reports = runner.run_once()
    rounds = [[r.model, r.strategy, r.input_changes, r.affected, r.upserts, r.deletes, r.seconds] for r in reports]
    ran = [r.model for r in reports if not r.idle and not r.resumed]
    assert ran == list(tpch.MODELS), f"one round of each model expected, got {rounds}"
    digests = {m: digest(lh.union_read(m), list(project.models[m].primary_key)) for m in tpch.MODELS}
    spark.stop()
    return {**s.figures, "rounds": rounds, "digests": digests}


def check_child(url: str, mode: str, warm_url: str) -> dict:
    """A full quality check of the warehouse at ``url`` (the budget is in the environment, set by the parent),
    after the same check of the small warehouse at ``warm_url``, untimed. In ``driver`` mode the reconciliation
    runs in the driver's threads: `run_checks` still gets the session, for the layer checks alone."""
    from quality import check

    assert os.environ.get(QUALITY_BUDGET_ENV) == CHECK_MODES[mode][0], (mode, os.environ.get(QUALITY_BUDGET_ENV))
    if mode == "driver":
        check.SparkExecutor = lambda spark: None  # type: ignore[assignment,misc]  # reconcile(executor=None)
    tpch = bench_layers()
    spark = cluster()

    def run(lh: Lakehouse) -> Any:
        return check.run_checks(lh, full=True, project=tpch.EXAMPLE, spark=spark, publish=False)

    warm = Lakehouse.open(warm_url)
    ran = run(warm)
    assert ran.ok, [(r.check, r.table, r.status, r.error, [str(v) for v in r.violations]) for r in ran.results]
    warm.close()
    lh = Lakehouse.open(url)
    with Sampler() as s:
        ran = run(lh)
    results = [
        [r.check, r.table, r.status, r.rows, round(r.seconds, 2), r.details.get("engine"), r.error]
        + [[str(v) for v in r.violations[:3]]]
        for r in ran.results
    ]
    spark.stop()
    return {**s.figures, "ok": ran.ok, "results": results}


def limited_round_child(url: str) -> dict:
    """One incremental round of both models on the executors with the driver's JVM heap at 512 MiB (what a 1 GiB
    driver leaves it beside the Python process): the driver's peak RSS, JVM and Python."""
    from layers.project import load_project
    from layers.runner import Runner

    assert os.environ.get(BUDGET_ENV) == "0"
    tpch = bench_layers()
    spark = cluster(**{"spark.driver.memory": "512m"})
    lh = Lakehouse.open(url)
    runner = Runner(lh, load_project(tpch.EXAMPLE), spark)
    runner.sql  # noqa: B018
    with Sampler() as s:
        reports = runner.run_once()
    rounds = [[r.model, r.strategy, r.input_changes, r.affected, r.upserts, r.deletes, r.seconds] for r in reports]
    assert all("on Spark's executors" in r.reason for r in reports), rounds
    spark.stop()
    return {**s.figures, "rounds": rounds}


def digest(table: pa.Table, key: list[str]) -> list:
    """Rows and a SHA-256 of the rows sorted by ``key`` (as CSV; the log's own columns left out)."""
    import pyarrow.csv as csv

    columns = [c for c in table.column_names if not c.startswith("__") and c != "_op"]
    table = table.select(columns).sort_by([(k, "ascending") for k in key])
    sink = _Hasher()
    csv.write_csv(table, pa.PythonFile(sink, mode="w"))
    return [table.num_rows, sink.sha.hexdigest()]


class _Hasher(io.RawIOBase):
    """A file that hashes what is written to it (the CSV of a big table is not held in memory)."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.sha.update(data)
        return len(data)


def build_round_child(url: str, size: str) -> dict:
    """The round's warehouse at ``size`` orders, in a process of its own (its Spark is gone before the rounds)."""
    from lakehouse.spark import spark_session
    from layers.project import load_project

    tpch = bench_layers()
    n = int(size)
    # a full round collects the model's whole output to the driver: over 2 M orders past Spark's defaults
    conf = {"spark.driver.maxResultSize": "0", "spark.driver.memory": "8g"} if n > 2_000_000 else {}
    spark = spark_session("local[2]", **conf)
    lh, _, info = tpch.build(url, n, spark, load_project(tpch.EXAMPLE))
    info["changes"] = tpch.change(lh, n, n // 100, info["customers"], info["customers"] // 100)
    lh.close()
    spark.stop()
    return info


def bench_layers() -> ModuleType:
    """bench/layers.py, loaded by path: as a module its name would be the ``layers`` package's."""
    if "bench_layers" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_layers", Path(__file__).with_name("layers.py"))
        assert spec is not None and spec.loader is not None
        module = sys.modules["bench_layers"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["bench_layers"]


CHILDREN = {
    "reconcile": reconcile_child,
    "round": round_child,
    "check": check_child,
    "limited": limited_round_child,
    "build-round": build_round_child,
}


def child(kind: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run ``CHILDREN[kind](*args)`` in a fresh process of this script; its result."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", kind, *args], capture_output=True, text=True, check=False, env=env
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- reconcile -------------------------------------------------------------------------------------------------


def build(path: Path, rows: int) -> None:
    """A merge-on-read table of ``rows`` orders, tiered, then 1 % of them updated and 0.1 % deleted (tiered,
    not compacted: the check reads position deletes too)."""
    ds = make_dataset(rows, 10, seed=21)
    lh = Lakehouse.open(path.as_uri())
    lh.create_table(NAME, SCHEMA, primary_key=[KEY], buckets=BUCKETS)
    log = lh.log(NAME)
    for start in range(0, rows, 500_000):
        log.append(ds.base.slice(start, 500_000), "upsert")
    lh.tier(NAME)
    rng = np.random.default_rng(22)
    keys = ds.base.column(KEY).to_numpy()
    changed = rng.choice(keys, max(1, rows // 100), replace=False)
    log.append(orders(np.sort(changed), rng, ds.customers, ds.clerks), "upsert")
    gone = np.setdiff1d(rng.choice(keys, max(1, rows // 1000), replace=False), changed)
    log.append(pa.table({KEY: pa.array(gone, pa.int64())}), "delete")
    lh.tier(NAME)
    lh.close()


def scenario_reconcile(tmp: Path, n: int) -> None:
    results: dict[tuple[str, int], dict] = {}
    for size in (n, 5 * n):
        path = tmp / f"n{size}"
        t0 = time.perf_counter()
        build(path, size)
        say(f"{size:,} orders built in {time.perf_counter() - t0:.0f} s")
        for mode in ("spark", "driver"):
            r = results[(mode, size)] = child("reconcile", path.as_uri(), mode)
            say(
                f"  {mode:>7}: {r['seconds']:.2f} s, {r['rows']:,} rows read; CPU driver {r['driver_cpu']:.2f} s, "
                f"executors {r['executor_cpu']:.2f} s; driver RSS {r['rss_before'] / 2**20:.0f} -> "
                f"{r['rss_peak'] / 2**20:.0f} MiB"
            )
        shutil.rmtree(path, ignore_errors=True)
    say("")
    say(f"Full reconciliation, {MASTER}, N = {n:,} orders, {time.strftime('%Y-%m-%d %H:%M')}:")
    say("")
    say("| where the buckets' checks run | driver CPU, 5N / N | driver peak RSS, 5N - N | executors' CPU share at 5N |")
    say("| --- | ---: | ---: | ---: |")
    for mode, label in (("spark", "Spark's executors (goal)"), ("driver", "the driver's threads (before)")):
        a, b = results[(mode, n)], results[(mode, 5 * n)]
        say(f"| {label} | {_growth(a, b)} |")
    say(GOALS)


# ---- round -----------------------------------------------------------------------------------------------------


#: Orders of the small warehouse whose round warms each round's process up.
WARM_ORDERS = 10_000


def scenario_round(tmp: Path, n: int) -> None:
    results: dict[tuple[str, int], dict] = {}
    warm = tmp / "round-warm"
    built = build_round(warm, WARM_ORDERS)
    for size in (n, 5 * n):
        path = tmp / f"round-{size}"
        pristine = build_round(path, size)
        for mode, (budget, _) in ROUND_MODES.items():
            restore(warm, built)
            restore(path, pristine)
            r = results[(mode, size)] = child("round", path.as_uri(), mode, warm.as_uri(), env={BUDGET_ENV: budget})
            say(
                f"  {mode:>7}: {r['seconds']:.2f} s; CPU driver {r['driver_cpu']:.2f} s, executors "
                f"{r['executor_cpu']:.2f} s; driver RSS {r['rss_before'] / 2**20:.0f} -> "
                f"{r['rss_peak'] / 2**20:.0f} MiB (Python {r['python_before'] / 2**20:.0f} -> "
                f"{r['python_peak'] / 2**20:.0f}); rounds (model, strategy, input changes, affected, upserts, "
                f"deletes, s): {r['rounds']}"
            )
        digests = {mode: results[(mode, size)]["digests"] for mode in ROUND_MODES}
        if len({json.dumps(d, sort_keys=True) for d in digests.values()}) != 1:
            raise SystemExit(f"round at {size:,} orders: the modes' model tables differ: {digests}")
        say(f"  same model tables in both modes: {digests['spark']}")
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(pristine, ignore_errors=True)
    say("")
    say(
        f"Incremental round of both models (1 % of the orders and customers changed), {MASTER}, N = {n:,} orders, "
        f"{time.strftime('%Y-%m-%d %H:%M')}:"
    )
    say("")
    say(
        "| where the round runs | round, N / 5N | driver CPU, 5N / N | driver peak RSS, 5N - N "
        "| executors' CPU share at 5N | driver RSS added by the round, N / 5N (Python's) |"
    )
    say("| --- | ---: | ---: | ---: | ---: | ---: |")
    for mode, (_, label) in ROUND_MODES.items():
        a, b = results[(mode, n)], results[(mode, 5 * n)]
        added = " / ".join(
            f"{(r['rss_peak'] - r['rss_before']) / 2**20:+.0f} ({(r['python_peak'] - r['python_before']) / 2**20:+.0f})"
            for r in (a, b)
        )
        say(f"| {label} | {a['seconds']:.2f} s / {b['seconds']:.2f} s | {_growth(a, b)} | {added} MiB |")
    say(GOALS)
    say(
        "The peak RSS of two driver processes also differs by what their JVMs' heaps held before the round "
        "(up to ~130 MiB here, run to run): the last column is what the round itself added, per size."
    )


def scenario_check(tmp: Path, n: int) -> None:
    results: dict[tuple[str, int], dict] = {}
    warm = tmp / "check-warm"
    built = build_round(warm, WARM_ORDERS)
    failed = []
    for size in (n, 5 * n):
        path = tmp / f"check-{size}"
        pristine = build_round(path, size)
        for mode, (budget, _) in CHECK_MODES.items():
            restore(warm, built)
            restore(path, pristine)
            r = results[(mode, size)] = child(
                "check", path.as_uri(), mode, warm.as_uri(), env={QUALITY_BUDGET_ENV: budget}
            )
            say(
                f"  {mode:>7}: {r['seconds']:.2f} s, {'ok' if r['ok'] else 'NOT OK'}; CPU driver "
                f"{r['driver_cpu']:.2f} s (Python {r['python_cpu']:.2f} s), executors {r['executor_cpu']:.2f} s; "
                f"driver RSS {r['rss_before'] / 2**20:.0f} -> {r['rss_peak'] / 2**20:.0f} MiB (Python "
                f"{r['python_before'] / 2**20:.0f} -> {r['python_peak'] / 2**20:.0f})"
            )
            for check, table, status, rows, seconds, engine, error, violations in r["results"]:
                say(
                    f"           {check:<34} {table:<28} {status:<13} {rows:>10,} rows {seconds:>7.2f} s"
                    + (f"  {engine}" if engine else "")
                    + (f"  {error}" if error else "")
                    + (f"  {violations}" if violations else "")
                )
            if not r["ok"]:
                failed.append(f"{mode} at {size:,} orders")
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(pristine, ignore_errors=True)
    shutil.rmtree(warm, ignore_errors=True)
    shutil.rmtree(built, ignore_errors=True)
    if failed:
        raise SystemExit(f"check: not every check passed ({', '.join(failed)}): a failing check measures nothing")
    say("")
    say(
        f"Full quality check (reconciliation, GX suites, layer checks) of the round's warehouse, {MASTER}, "
        f"N = {n:,} orders, {time.strftime('%Y-%m-%d %H:%M')}:"
    )
    say("")
    say(
        "| where the check runs | check, N / 5N | driver CPU, 5N / N | driver peak RSS, 5N - N "
        "| executors' CPU share at 5N | driver RSS added by the check, N / 5N (Python's) | verdicts, N / 5N |"
    )
    say("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for mode, (_, label) in CHECK_MODES.items():
        a, b = results[(mode, n)], results[(mode, 5 * n)]
        added = " / ".join(
            f"{(r['rss_peak'] - r['rss_before']) / 2**20:+.0f} ({(r['python_peak'] - r['python_before']) / 2**20:+.0f})"
            for r in (a, b)
        )
        verdicts = " / ".join(
            f"{sum(x[2] == 'passed' for x in r['results'])} of {len(r['results'])} passed" for r in (a, b)
        )
        say(f"| {label} | {a['seconds']:.1f} s / {b['seconds']:.1f} s | {_growth(a, b)} | {added} MiB | {verdicts} |")
    say(GOALS)


def scenario_limited(tmp: Path, n: int) -> None:
    """Issue 40: a round over ``n`` (10 M) orders succeeds with the driver limited to 1 GiB, JVM and Python."""
    path = tmp / f"limited-{n}"
    build_round(path, n)
    r = child("limited", path.as_uri(), env={BUDGET_ENV: "0"})
    say("")
    say(
        f"Incremental round of both models on the executors, {n:,} orders (1 % changed), {MASTER}, driver JVM heap "
        f"512 MiB, {time.strftime('%Y-%m-%d %H:%M')}: {r['seconds']:.1f} s; driver peak RSS "
        f"{r['rss_peak'] / 2**20:.0f} MiB (Python {r['python_peak'] / 2**20:.0f} MiB); CPU driver "
        f"{r['driver_cpu']:.1f} s, executors {r['executor_cpu']:.1f} s; rounds (model, strategy, input changes, "
        f"affected, upserts, deletes, s): {r['rounds']}"
    )
    verdict = "within" if r["rss_peak"] <= 2**30 else "ABOVE"
    say(f"Goal: the driver within 1 GiB (JVM and Python): {verdict} ({r['rss_peak'] / 2**30:.2f} GiB).")


def build_round(path: Path, size: int) -> Path:
    """The round's warehouse at ``path`` (`build_round_child`), and a copy of it as built, returned."""
    t0 = time.perf_counter()
    info = child("build-round", path.as_uri(), str(size))
    c = info["changes"]
    say(
        f"round: {size:,} orders ({info['customers']:,} customers) built in {time.perf_counter() - t0:.0f} s "
        f"(first round {info['first_round_s']:.1f} s); changes: {c['order_updates']:,} order updates, "
        f"{c['order_deletes']:,} deletes, {c['order_inserts']:,} new; {c['customer_changes']:,} customers"
    )
    copy = path.with_name(path.name + "-built")
    shutil.copytree(path, copy)
    return copy


def restore(path: Path, copy: Path) -> None:
    """The warehouse as built, back at the path its metadata names (the lake's metadata holds absolute paths)."""
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(copy, path)


# ---- main ------------------------------------------------------------------------------------------------------

GOALS = "Goals: driver CPU <= 1.5x, driver peak RSS <= +25 MiB, executors >= 60 % of the CPU."


def _growth(a: dict, b: dict) -> str:
    """Driver CPU 5N / N, driver peak RSS 5N - N and the executors' CPU share at 5N, as table cells."""
    share = b["executor_cpu"] / (b["executor_cpu"] + b["driver_cpu"]) if b["executor_cpu"] else 0.0
    return (
        f"{b['driver_cpu'] / max(a['driver_cpu'], 1e-9):.2f}x | {(b['rss_peak'] - a['rss_peak']) / 2**20:+.0f} MiB | "
        f"{100 * share:.0f} %"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--orders", type=int, default=400_000)
    p.add_argument("--quick", action="store_true", help="N = 100,000 orders")
    p.add_argument(
        "--only",
        choices=["reconcile", "round", "check", "limited", "local", "s3"],
        help="one scenario (local: reconcile, round and check; s3: none, this benchmark runs on file:// only; limited, "
        "only when asked: a round over --limited-orders with a 1 GiB driver)",
    )
    p.add_argument("--limited-orders", type=int, default=10_000_000)
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)  # KIND ARG...: a measurement's own process
    args, _ = p.parse_known_args()  # make bench passes every benchmark the same arguments
    if args.child:
        kind, *rest = args.child
        print(json.dumps(CHILDREN[kind](*rest)), flush=True)
        return
    if args.only == "s3":
        print("bench/executors.py: no S3 run (the figures are compute, not storage); nothing to do for --only s3")
        return
    n = 100_000 if args.quick else args.orders
    tmp = Path(tempfile.mkdtemp(prefix="lakestream-executors-"))
    try:
        if args.only in (None, "local", "reconcile"):
            scenario_reconcile(tmp, n)
        if args.only in (None, "local", "round"):
            if args.only in (None, "local"):
                say("")
            scenario_round(tmp, n)
        if args.only in (None, "local", "check"):
            if args.only in (None, "local"):
                say("")
            scenario_check(tmp, n)
        if args.only == "limited":
            scenario_limited(tmp, 1_000_000 if args.quick else args.limited_orders)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
