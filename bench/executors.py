"""Where the work runs as the data grows: driver against executors, on a Spark cluster of separate processes.

Issue 40's measure: the driver plans and commits, the executors do the work that grows with the data. A primary-key
table of ``--orders`` N orders (TPC-H-shaped, 8 buckets, merge-on-read, one round of 1 % changes not compacted) and
one of 5N are checked in full (`quality.reconcile(full=True)`: every row of the lake against the log) on
``local-cluster[2,1,2048]``: two executors of one core, separate JVMs with their own Python workers, so driver and
executors can be told apart with psutil. Each size runs in a fresh process; per size:

* the driver's CPU seconds (this process' Python and its JVM) and the executors' (the
  ``CoarseGrainedExecutorBackend`` processes and their Python workers), sampled every 50 ms;
* the driver's peak RSS (Python and JVM) during the check, against before it.

Goals (issue 40): from N to 5N, driver CPU grows <= 1.5x and the driver's peak RSS by <= 25 MiB; executors do
>= 60 % of the CPU at 5N. The same check with the driver's threads (no Spark: `executor=None`) is printed beside
it, as the baseline the rule replaces (its driver grows with the data).

    .venv/bin/python bench/executors.py              # N = 400,000 orders (about 10 minutes on 2 cores)
    .venv/bin/python bench/executors.py --quick      # N = 100,000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from tiering import KEY, SCHEMA, make_dataset, orders  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402

NAME = "bench.orders"
BUCKETS = 8
MASTER = "local-cluster[2,1,2048]"


def say(message: str) -> None:
    print(message, flush=True)


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


_CHILD = r"""
import json, sys, threading, time
sys.path.insert(0, sys.argv[1])
import psutil
from lakehouse import Lakehouse
from lakehouse.executor import SparkExecutor
from lakehouse.spark import spark_session
from quality.reconcile import reconcile

url, name, master, mode = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
me = psutil.Process()

def executors():
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        executor = "org.apache.spark.executor." + "CoarseGrainedExecutorBackend"  # not this script's own text
        if p.info["name"] == "java" and executor in (p.info["cmdline"] or []):
            out.append(p)
            out.extend(p.children(recursive=True))
    return out

def driver():
    # this process and its JVM (whose children, in local-cluster mode, are the executors: left out)
    out = [me]
    skip = {p.pid for p in executors()}
    for c in me.children(recursive=False):
        if c.pid not in skip:
            out.append(c)
    return out

cpu = {}  # pid -> (role, last seen CPU seconds)
def sample(base=None):
    rss = 0
    for role, procs in (("driver", driver()), ("executors", executors())):
        for p in procs:
            try:
                t = p.cpu_times()
                cpu[p.pid] = (role, t.user + t.system)
                if role == "driver":
                    rss += p.memory_info().rss
            except psutil.Error:
                pass
    return rss

spark = None
if mode == "spark":
    spark = spark_session(master, app_name="bench-executors", scheduler_only=True)
    spark.range(0, 4, 1, 4).count()  # executors up and their Python workers started before the clock
lh = Lakehouse.open(url)
reconcile(lh, name, full=True, executor=SparkExecutor(spark) if spark else None)  # warm: imports, caches
sample()
start = dict(cpu)
rss_before = sample()
peak, done = rss_before, threading.Event()
def watch():
    global peak
    while not done.is_set():
        peak = max(peak, sample())
        done.wait(0.05)
t = threading.Thread(target=watch, daemon=True)
t.start()
t0 = time.perf_counter()
result = reconcile(lh, name, full=True, executor=SparkExecutor(spark) if spark else None)
seconds = time.perf_counter() - t0
done.set()
t.join()
sample()
spent = {"driver": 0.0, "executors": 0.0}
for pid, (role, seconds_now) in cpu.items():
    spent[role] += seconds_now - start.get(pid, (role, 0.0))[1]
assert result.ok, [str(v) for v in result.violations]
print(json.dumps({"seconds": seconds, "rows": result.rows, "driver_cpu": spent["driver"],
                  "executor_cpu": spent["executors"], "rss_before": rss_before, "rss_peak": peak}))
if spark is not None:
    spark.stop()
"""


def child(path: Path, mode: str) -> dict:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(ROOT), path.as_uri(), NAME, MASTER, mode],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} check failed ({proc.returncode}): {proc.stderr.strip()[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--orders", type=int, default=400_000)
    p.add_argument("--quick", action="store_true", help="N = 100,000 orders")
    args, _ = p.parse_known_args()  # make bench passes every benchmark the same arguments
    n = 100_000 if args.quick else args.orders
    tmp = Path(tempfile.mkdtemp(prefix="lakestream-executors-"))
    try:
        results: dict[tuple[str, int], dict] = {}
        for size in (n, 5 * n):
            path = tmp / f"n{size}"
            t0 = time.perf_counter()
            build(path, size)
            say(f"{size:,} orders built in {time.perf_counter() - t0:.0f} s")
            for mode in ("spark", "driver"):
                r = results[(mode, size)] = child(path, mode)
                say(
                    f"  {mode:>7}: {r['seconds']:.2f} s, {r['rows']:,} rows read; CPU driver {r['driver_cpu']:.2f} s, "
                    f"executors {r['executor_cpu']:.2f} s; driver RSS {r['rss_before'] / 2**20:.0f} -> "
                    f"{r['rss_peak'] / 2**20:.0f} MiB"
                )
        say("")
        say(f"Full reconciliation, {MASTER}, N = {n:,} orders, {time.strftime('%Y-%m-%d %H:%M')}:")
        say("")
        say(
            "| where the buckets' checks run | driver CPU, 5N / N | driver peak RSS, 5N - N "
            "| executors' CPU share at 5N |"
        )
        say("| --- | ---: | ---: | ---: |")
        for mode, label in (("spark", "Spark's executors (goal)"), ("driver", "the driver's threads (before)")):
            a, b = results[(mode, n)], results[(mode, 5 * n)]
            share = b["executor_cpu"] / (b["executor_cpu"] + b["driver_cpu"]) if b["executor_cpu"] else 0.0
            say(
                f"| {label} | {b['driver_cpu'] / max(a['driver_cpu'], 1e-9):.2f}x | "
                f"{(b['rss_peak'] - a['rss_peak']) / 2**20:+.0f} MiB | {100 * share:.0f} % |"
            )
        say("Goals: driver CPU <= 1.5x, driver peak RSS <= +25 MiB, executors >= 60 % of the CPU.")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
