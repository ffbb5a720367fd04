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
