"""Driving the native stack from outside, as a user does: ``python -m stack up``, the example project
deployed with ``lakestream``, data produced into the ODS, DAG runs through Airflow's REST API.

Shared by the end-to-end test (tests/stack/test_stack_e2e.py, ``make test-stack``) and the benchmark
(bench/stack.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from object_store.seaweedfs import ACCESS_KEY, SECRET_KEY
from stack.airflow_api import AirflowApi, AirflowApiError
from stack.errors import StackError
from stack.services import BUCKET, REPO, Config, master_json

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

EXAMPLE = REPO / "examples" / "tpch"
ODS = ("ods.nation", "ods.customer", "ods.orders")
MODELS = ("dwd.orders_enriched", "ads.revenue_by_nation_month")
N_NATIONS, N_CUSTOMERS = 25, 1_000


def _stack_command(command: str, root: Path, env: Mapping[str, str], timeout: float = 600) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "stack", command, "--dir", str(root)],
        cwd=REPO,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode:
        raise StackError(f"python -m stack {command} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result.stdout


def stack_up(root: Path, env: Mapping[str, str]) -> tuple[Config, float, str]:
    """``python -m stack up`` (what ``make stack`` runs) with ``env``: the config, seconds to ready, output."""
    started = time.monotonic()
    out = _stack_command("up", root, env)
    return Config.from_env(root, env), time.monotonic() - started, out


def stack_down(root: Path, env: Mapping[str, str]) -> str:
    return _stack_command("down", root, env, timeout=180)


def user_env(cfg: Config, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` plus what sourcing the stack's env file sets."""
    env = dict(base)
    env.update(cfg.stack_env())
    env["PATH"] = f"{cfg.bin_dir}:{env.get('PATH', '')}"
    return env


def open_lakehouse(cfg: Config) -> Any:
    from lakehouse.lakehouse import Lakehouse

    return Lakehouse.open(
        f"s3://{BUCKET}/warehouse",
        endpoint_url=cfg.s3_endpoint,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        region="us-east-1",
    )


def deploy_example(cfg: Config, env: Mapping[str, str]) -> str:
    """``lakestream layers deploy --project examples/tpch`` against the stack (idempotent)."""
    result = subprocess.run(
        [str(cfg.bin_dir / "lakestream"), "layers", "deploy", "--project", str(EXAMPLE)],
        env=user_env(cfg, env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode:
        raise StackError(f"lakestream layers deploy failed:\n{result.stdout}{result.stderr}")
    return result.stdout


@dataclass
class Producer:
    """Feeds the example's ODS: the nations and customers once, then orders with new keys."""

    lh: Lakehouse
    seed: int = 20261126
    next_order: int = 0
    dimensions_loaded: bool = False

    def orders(self, n: int) -> range:
        """Append ``n`` new orders (and the dimensions first, once); returns their keys."""
        from lakestream.demo.layers import customers, nations, orders

        rng = np.random.default_rng(self.seed + self.next_order)
        if not self.dimensions_loaded:
            self.lh.log("ods.nation").append(nations(np.arange(N_NATIONS)), "upsert")
            self.lh.log("ods.customer").append(customers(np.arange(N_CUSTOMERS), rng, N_NATIONS), "upsert")
            self.dimensions_loaded = True
        keys = range(self.next_order, self.next_order + n)
        for start in range(keys.start, keys.stop, 100_000):
            batch = np.arange(start, min(keys.stop, start + 100_000))
            self.lh.log("ods.orders").append(orders(batch, rng, N_CUSTOMERS), "upsert")
        self.next_order = keys.stop
        return keys


def wait_success(api: AirflowApi, dag_id: str, run_id: str, timeout: float) -> dict:
    """Wait for a run; raise with each failed task's log tail unless it succeeded."""
    run = api.wait_run(dag_id, run_id, timeout)
    if run["state"] != "success":
        raise AirflowApiError(f"{dag_id} run {run_id} {run['state']}:\n{api.failure_report(dag_id, run_id)}")
    return run


def trigger_and_wait(api: AirflowApi, dag_id: str, timeout: float) -> tuple[dict, float]:
    """Unpause the DAG (a paused DAG's runs stay queued), trigger a run now and wait for its success; returns the
    run and the seconds from trigger to success."""
    api.set_paused(dag_id, False)
    started = time.monotonic()
    run_id = api.trigger(dag_id)
    run = wait_success(api, dag_id, run_id, timeout)
    return run, time.monotonic() - started


def next_success(api: AirflowApi, dag_id: str, after: str, timeout: float, *, poll: float = 2.0) -> dict:
    """Wait for a run of ``dag_id`` that started after the ISO time ``after`` (so it saw everything done before) to
    succeed (a scheduled or asset-triggered run); a failed one raises with its tasks' logs."""
    deadline = time.monotonic() + timeout
    while True:
        for run in sorted(api.runs(dag_id, limit=20), key=lambda r: r.get("start_date") or "~"):
            if (run.get("start_date") or "") <= after:
                continue
            if run["state"] == "failed":
                raise AirflowApiError(
                    f"{dag_id} run {run['dag_run_id']} failed:\n{api.failure_report(dag_id, run['dag_run_id'])}"
                )
            if run["state"] == "success":
                return run
        if time.monotonic() > deadline:
            raise AirflowApiError(f"no run of {dag_id} queued after {after} succeeded within {timeout:.0f}s")
        time.sleep(poll)


def wait_tasks_idle(api: AirflowApi, timeout: float, *, poll: float = 2.0) -> None:
    """Wait until no task of any DAG is queued or running (after pausing the DAGs: their running runs stall,
    but the tasks already started finish)."""
    deadline = time.monotonic() + timeout
    while True:
        busy = [
            f"{dag_id}.{ti['task_id']}"
            for dag_id in api.dags()
            for run in api.runs(dag_id, limit=5)
            if run["state"] not in ("success", "failed")
            for ti in api.task_instances(dag_id, run["dag_run_id"])
            if ti["state"] in ("queued", "running")
        ]
        if not busy:
            return
        if time.monotonic() > deadline:
            raise AirflowApiError(f"tasks still busy after {timeout:.0f}s: {', '.join(busy)}")
        time.sleep(poll)


def airflow_now() -> str:
    """Now, in the ISO format of Airflow's run timestamps (UTC, microseconds, Z)."""
    import datetime

    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def active_apps(cfg: Config) -> list[dict]:
    """The Spark applications the master runs now (its JSON API)."""
    return list(master_json(cfg).get("activeapps", []))


def executor_log(cfg: Config, app_id: str) -> str:
    """What the stack worker's executors of application ``app_id`` wrote to stderr so far (their log)."""
    texts = []
    for path in sorted((cfg.root / "spark" / "work" / app_id).glob("*/stderr")):
        try:
            texts.append(path.read_text(errors="replace"))
        except OSError:
            continue
    return "\n".join(texts)


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without another stack's or warehouse's settings, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LAKESTREAM_", "AIRFLOW", "AWS_", "SPARK_", "PYSPARK_"))
    }
    env.update(extra or {})
    return env
