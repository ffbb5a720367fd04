"""The native stack, measured (issue 27): time from ``python -m stack up`` to ready; trigger -> success of each DAG
under the real scheduler; ODS append -> ADS visible under the scheduler; tiering throughput on the standalone
cluster against ``local[2]``, in the same run.

    python bench/stack.py [--orders 20000] [--tier-rows 1000000] [--samples 2]

It starts its own stack on free ports in a temporary directory and stops it at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# First, before bench/: there this file, stack.py, would hide the repository's `stack` package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from object_store.seaweedfs import free_ports  # noqa: E402
from stack import scenario, services  # noqa: E402
from stack.airflow_api import AirflowApi  # noqa: E402


def _seconds(run: dict, start: str = "queued_at", end: str = "end_date") -> float:
    def parse(value: str) -> datetime.datetime:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))

    return (parse(run[end]) - parse(run[start])).total_seconds()


def _ads_orders(lh) -> int:
    table = lh.union_read("ads.revenue_by_nation_month", columns=["order_count"])
    return int(sum(v.as_py() or 0 for v in table.column("order_count")))


def _tier_with(cfg: services.Config, env: dict, master: str, table: str) -> dict:
    """``spark-submit --master M jobs/tiering.py --table T``: wall seconds and the job's own result line."""
    command = [
        str(cfg.bin_dir / "spark-submit"),
        "--master",
        master,
        "--conf",
        "spark.cores.max=2",
        str(services.REPO / "jobs" / "tiering.py"),
        "--table",
        table,
    ]
    started = time.monotonic()
    result = subprocess.run(command, env=scenario.user_env(cfg, env), capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if result.returncode:
        raise SystemExit(f"tiering {table} on {master} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    line = next(json.loads(x) for x in result.stdout.splitlines() if x.startswith("{") and '"table"' in x)
    return {"wall": wall, "rows": line["rows"], "seconds": line["seconds"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orders", type=int, default=20_000, help="orders produced before the scheduled runs")
    ap.add_argument("--tier-rows", type=int, default=1_000_000, help="rows per table for the throughput comparison")
    ap.add_argument("--samples", type=int, default=2, help="ODS append -> ADS visible samples")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="lakestream-bench-stack-")) / ".stack"
    env = scenario.environment(
        {var: str(p) for var, p in zip(services.PORT_ENV, free_ports(len(services.PORT_ENV)), strict=True)}
    )
    cfg, ready, _ = scenario.stack_up(root, env)
    print(f"stack: make stack -> ready {ready:.1f} s (SeaweedFS, Spark master + worker, Airflow x4)")
    try:
        api = AirflowApi.for_home(cfg.airflow_url, cfg.airflow_home)
        lh = scenario.open_lakehouse(cfg)
        scenario.deploy_example(cfg, env)
        producer = scenario.Producer(lh)
        producer.orders(args.orders)
        produced = scenario.airflow_now()
        for dag_id in ("lake_tiering", "warehouse_layers", "lake_quality"):
            api.set_paused(dag_id, False)
        layers = scenario.next_success(api, "warehouse_layers", produced, 900)
        tiering = scenario.next_success(api, "lake_tiering", layers["end_date"], 900)
        quality = scenario.next_success(api, "lake_quality", tiering["end_date"], 900)
        maintenance, _ = scenario.trigger_and_wait(api, "lake_maintenance", 900)
        print(f"stack: trigger -> success under the scheduler ({args.orders:,} orders; queued -> end):")
        for dag_id, run in (
            ("lake_tiering", tiering),
            ("warehouse_layers", layers),
            ("lake_quality", quality),
            ("lake_maintenance", maintenance),
        ):
            print(f"  {dag_id:18} {_seconds(run):6.1f} s  (running {_seconds(run, 'start_date'):5.1f} s)")

        fresh = []
        for _ in range(args.samples):
            before = _ads_orders(lh)
            producer.orders(1_000)
            t0 = time.monotonic()
            while _ads_orders(lh) < before + 1_000:
                if time.monotonic() - t0 > 600:
                    raise SystemExit("ADS did not show the new orders within 600 s")
                time.sleep(1)
            fresh.append(time.monotonic() - t0)
        print(
            f"stack: ODS append -> ADS visible (union read) under the scheduler, every-minute DAGs: "
            f"{', '.join(f'{s:.0f}' for s in fresh)} s (median {statistics.median(fresh):.0f} s)"
        )
        for dag_id in ("lake_tiering", "warehouse_layers", "lake_quality", "lake_maintenance"):
            api.set_paused(dag_id, True)  # a paused DAG's running run stalls: wait for its running tasks only
        scenario.wait_tasks_idle(api, 900)

        rng = np.random.default_rng(27)
        schema = pa.schema([("id", pa.int64()), ("user", pa.int64()), ("amount", pa.float64()), ("note", pa.string())])
        results = {}
        have = {str(t) for t in lh.list_tables()}
        for name in ("bench.tier_local", "bench.tier_standalone"):
            if name not in have:
                lh.create_table(name, schema, buckets=4)
            for start in range(0, args.tier_rows, 250_000):
                n = min(250_000, args.tier_rows - start)
                lh.log(name).append(
                    pa.table(
                        {
                            "id": np.arange(start, start + n),
                            "user": rng.integers(0, 10_000, n),
                            "amount": rng.random(n),
                            "note": pa.array(["x" * 16] * n),
                        },
                        schema=schema,
                    )
                )
        for name, master in (("bench.tier_local", "local[2]"), ("bench.tier_standalone", cfg.spark_master)):
            results[master] = _tier_with(cfg, env, master, name)
        local, standalone = results["local[2]"], results[cfg.spark_master]
        print(f"stack: tiering {args.tier_rows:,} rows (log table, 4 buckets), spark-submit wall / tiering round:")
        for label, r in (("local[2]", local), ("standalone (1 worker, 2 cores)", standalone)):
            print(
                f"  {label:31} {r['wall']:6.1f} s / {r['seconds']:5.1f} s  "
                f"{r['rows'] / r['seconds'] / 1e6:5.2f} M rows/s"
            )
        print(
            f"  standalone vs local[2]: {local['seconds'] / standalone['seconds']:.2f}x throughput, "
            f"{local['wall'] / standalone['wall']:.2f}x wall"
        )
        lh.close()
    finally:
        print(scenario.stack_down(root, env).strip().splitlines()[-1])


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    main()
