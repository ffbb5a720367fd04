"""Airflow for tests/dags, always in subprocesses: importing Airflow reads its config once and reconfigures
logging (an INFO handler on the root logger), which must not leak into the rest of the pytest session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.dags.airflow_probe import RESULT_PREFIX

REPO = Path(__file__).resolve().parents[2]
DAGS_FOLDER = REPO / "dags"
PROBE = Path(__file__).with_name("airflow_probe.py")
VENV_BIN = Path(sys.executable).parent  # airflow, spark-submit

LOCAL_2 = "spark://local%5B2%5D"  # AIRFLOW_CONN_LAKESTREAM_SPARK as dags/README.md documents it
# Connection values (as AIRFLOW_CONN_LAKESTREAM_SPARK) and the --master each one gives.
MASTERS = {
    LOCAL_2: "local[2]",
    '{"conn_type": "spark", "host": "local[2]"}': "local[2]",
    "spark://spark-master:7077": "spark://spark-master:7077",
    # Unencoded, the brackets read as an IPv6 host: the connection fails to parse and the provider
    # silently falls back to YARN. This is why the README insists on %5B / %5D.
    "spark://local[2]": "yarn",
}
# The environment the per-table DAG tests parse with: a worker's credentials must not reach the DAG.
PER_TABLE_ENV = {
    "LAKESTREAM_TIERED_TABLES": " ods.orders, ods.clicks,,ods.orders ",
    "PYSPARK_PYTHON": "/opt/python/bin/python3",
    "LAKESTREAM_WAREHOUSE": "s3://lake/wh",
    "AWS_SECRET_ACCESS_KEY": "not-in-the-dag",
}

# What every SparkSubmitOperator gets without LAKESTREAM_TASK_* / LAKESTREAM_SPARK_* set (dags/README.md).
DEFAULT_ROBUSTNESS = {"retries": 2, "retry_delay": 30.0, "execution_timeout": 1800.0, "conf": {"spark.cores.max": "1"}}


def assert_default_robustness(task: dict) -> None:
    """``task`` has the default retries, retry delay, execution timeout and Spark conf, and its spark-submit
    command lines (every connection probed) pass the conf."""
    assert {k: task[k] for k in DEFAULT_ROBUSTNESS} == DEFAULT_ROBUSTNESS
    for command in task["spark_submit"].values():
        assert command[3:5] == ["--conf", "spark.cores.max=1"], command


def assert_per_table_tasks(dag: dict, job: str, options: list[str]) -> None:
    """``dag`` (parsed with PER_TABLE_ENV) has one SparkSubmitOperator per table running ``jobs/<job>``
    with ``--table T`` plus ``options``, under every connection in MASTERS."""
    application = str(REPO / "jobs" / job)
    for table, task in zip(["ods.orders", "ods.clicks"], dag["tasks"].values(), strict=True):
        assert task["operator"] == "SparkSubmitOperator"
        assert task["conn_id"] == "lakestream_spark"
        assert task["application"] == application
        assert task["application_args"] == ["--table", table, *options]
        assert_default_robustness(task)
        for conn, master in MASTERS.items():
            command = task["spark_submit"][conn]
            assert command[:3] == ["spark-submit", "--master", master], conn
            assert command[-(len(options) + 3) :] == [application, "--table", table, *options], conn
        # Parsed (and serialized): no credentials, only what the DAG sets itself.
        assert task["env_vars"] == {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": "/opt/python/bin/python3"}
        # Just before execute(): plus the worker's LAKESTREAM_* / AWS_* variables.
        forwarded = {k: PER_TABLE_ENV[k] for k in ("LAKESTREAM_WAREHOUSE", "AWS_SECRET_ACCESS_KEY")}
        assert task["env_vars_at_run_time"].items() >= {**task["env_vars"], **forwarded}.items()


def assert_one_task_for_all_tables(result: dict, dag_id: str, task_id: str, jobs_dir: Path, job: str) -> dict:
    """Without a table list, ``dag_id`` has the single task ``task_id`` running ``<jobs_dir>/<job>`` with no
    arguments (under LOCAL_2); returns the task."""
    assert result["import_errors"] == {}, result["output"]
    tasks = result["dags"][dag_id]["tasks"]
    assert list(tasks) == [task_id]
    task = tasks[task_id]
    assert task["application"] == str(jobs_dir / job)
    assert task["application_args"] == []
    assert task["spark_submit"][LOCAL_2] == [
        "spark-submit",
        "--master",
        "local[2]",
        "--conf",
        "spark.cores.max=1",
        "--name",
        f"lakestream-{task_id}",
        str(jobs_dir / job),
    ]
    return task


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private AIRFLOW_HOME (SQLite metadata DB, logs) for the whole session; nothing under ~/airflow."""
    return tmp_path_factory.mktemp("airflow_home")


def airflow_environment(airflow_home: Path, extra: dict[str, str]) -> dict[str, str]:
    """This process' environment without the variables the DAG reads (so a developer's own settings, or the
    Makefile's PYSPARK_PYTHON, cannot leak in), plus Airflow's settings for the tests, plus ``extra``."""
    dropped = ("AIRFLOW", "LAKESTREAM_", "PYSPARK_PYTHON", "SPARK_LOCAL_IP")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(
        AIRFLOW_HOME=str(airflow_home),
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS_FOLDER),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def airflow_db(airflow_home: Path) -> Path:
    """`airflow db migrate` once per session (~7 s). `dag.test()` syncs the DAG into the DB itself (3.3)."""
    proc = subprocess.run(
        [str(VENV_BIN / "airflow"), "db", "migrate"],
        env=airflow_environment(airflow_home, {}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"airflow db migrate failed:\n{proc.stdout}\n{proc.stderr}"
    return airflow_home


ProbeRunner = Callable[..., dict]


@pytest.fixture
def run_probe(airflow_home: Path) -> ProbeRunner:
    """``run_probe(command, *args, env={...}, timeout=...)``: run tests/dags/airflow_probe.py, return its result.

    On failure (no result line), the assertion message carries Airflow's whole output.
    """

    def run(command: str, *args: str, env: dict[str, str], timeout: float = 120) -> dict:
        proc = subprocess.run(
            [sys.executable, str(PROBE), command, str(DAGS_FOLDER), *args],
            env=airflow_environment(airflow_home, env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        results = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
        output = f"exit code {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
        assert proc.returncode == 0 and results, output
        result = json.loads(results[-1][len(RESULT_PREFIX) :])
        result["output"] = output
        return result

    return run
