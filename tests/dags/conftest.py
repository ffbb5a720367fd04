"""Airflow for tests/dags, always in subprocesses: importing Airflow reads its config once and reconfigures
logging (an INFO handler on the root logger), which must not leak into the rest of the pytest session."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.dags.airflow_probe import RESULT_PREFIX, SERVED_COMMANDS, static_environment, without_call_time

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

#: ``LAKESTREAM_TEST_PROBE=oneshot``: every probe call in a fresh subprocess, the server bypassed (tests/README.md).
PROBE_MODE_ENV = "LAKESTREAM_TEST_PROBE"


class ProbeServer:
    """``airflow_probe.py serve``: one long-lived probe process answering `SERVED_COMMANDS` requests, started on
    first use and again after it died, timed out or was started with another static environment (AIRFLOW_HOME,
    AIRFLOW__*, ...: what Airflow reads once at import; `airflow_probe.static_environment`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder  # the server's stderr log and each request's output
        self.proc: subprocess.Popen | None = None
        self.static: dict[str, str] | None = None
        self.requests = 0
        self.log: Path | None = None

    def _start(self, env: dict[str, str], deadline: float) -> None:
        self.close()
        self.log = self.folder / f"server-{self.requests}.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(PROBE), "serve", str(DAGS_FOLDER)],
                env=without_call_time(env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self.static = static_environment(env)
        self._buffer = b""
        self._response(deadline, "starting")

    def _failed(self, what: str, output: Path | None = None) -> AssertionError:
        """Stops the server (the next request starts a new one); the error carries what it wrote."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
        code = proc.wait() if proc is not None else None
        text = f"probe server {what} (pid {getattr(proc, 'pid', None)}, exit code {code})"
        for name, path in (("server log", self.log), ("request output", output)):
            if path is not None and path.exists():
                text += f"\n--- {name} ---\n{path.read_text(errors='replace')}"
        return AssertionError(text)

    def _response(self, deadline: float, what: str, output: Path | None = None) -> dict:
        """The next line the server writes, as JSON, by ``deadline`` (time.monotonic())."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise self._failed(f"timed out {what}", output)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._failed(f"died {what}", output)
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        response = json.loads(line)
        if "error" in response:
            raise self._failed(f"failed {what}: {response['error']}", output)
        return response

    def request(self, command: str, args: list[str], env: dict[str, str], timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        if self.proc is None or self.proc.poll() is not None or static_environment(env) != self.static:
            self._start(env, deadline)
        self.requests += 1
        output = self.folder / f"request-{self.requests}.out"
        line = json.dumps({"command": command, "args": args, "env": env, "output": str(output)})
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            raise self._failed(f"died before request {self.requests} ({command})", output) from None
        result = self._response(deadline, f"in request {self.requests} ({command})", output)["result"]
        text = output.read_text(errors="replace") if output.exists() else ""
        result["output"] = f"probe server pid {self.proc.pid}, request {self.requests}\n--- output ---\n{text}"
        return result

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # the server ends at the end of its input
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()


@pytest.fixture(scope="session")
def probe_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProbeServer]:
    """The session's (the xdist worker's) probe server, stopped at its end."""
    server = ProbeServer(tmp_path_factory.mktemp("probe_server"))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def run_probe(airflow_home: Path, probe_server: ProbeServer) -> ProbeRunner:
    """``run_probe(command, *args, env={...}, timeout=...)``: run tests/dags/airflow_probe.py, return its result.

    `SERVED_COMMANDS` (parsing the DAG folder, a model's lineage) go to the session's `ProbeServer`, each in exactly
    the environment a fresh process would get; `test` (dag.test()) runs in a fresh subprocess, and so does every
    call under ``LAKESTREAM_TEST_PROBE=oneshot``. On failure (no result), the assertion message carries Airflow's
    whole output.
    """

    def run(command: str, *args: str, env: dict[str, str], timeout: float = 120) -> dict:
        environment = airflow_environment(airflow_home, env)
        if command in SERVED_COMMANDS and os.environ.get(PROBE_MODE_ENV) != "oneshot":
            return probe_server.request(command, list(args), environment, timeout)
        proc = subprocess.run(
            [sys.executable, str(PROBE), command, str(DAGS_FOLDER), *args],
            env=environment,
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
