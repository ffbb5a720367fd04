"""lakehouse.spark.spark_session's log level: Spark's WARN lines stay visible (a driver with no executors says
why it waits), the known-noisy ones do not."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# A driver on a standalone master with no worker (as after a `kill -9` of the only one): its job waits for
# executors that never come.
STARVING = """
import sys, threading
sys.path.insert(0, sys.argv[1])
from lakehouse.spark import spark_session
spark = spark_session(master=sys.argv[2], **{"spark.starvation.timeout": "1s",
                                            "spark.lakestream.executorWaitSeconds": "1"})
print("SESSION", flush=True)
threading.Thread(target=lambda: spark.range(1).count(), daemon=True).start()
threading.Event().wait(120)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def master_without_workers(tmp_path: Path):
    """A Spark standalone master from the pip package (``spark-class``), with no worker: its URL."""
    import pyspark

    port = free_port()
    spark_home = str(Path(pyspark.__file__).parent)  # spark-class would look for it with the PATH's python3
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": spark_home, "SPARK_LOG_DIR": str(tmp_path)}
    spark_class = Path(spark_home) / "bin" / "spark-class"
    command = [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--webui-port", str(free_port())]
    master = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert master.poll() is None and time.monotonic() < deadline, "the Spark master did not start"
                time.sleep(0.5)
        yield f"spark://127.0.0.1:{port}"
    finally:
        master.kill()
        master.wait()


@pytest.mark.slow
def test_a_driver_without_executors_says_why_it_waits(master_without_workers: str) -> None:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", STARVING, str(REPO), master_without_workers],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if lines_after(lines, "Initial job has not accepted any resources") >= 5 or time.monotonic() > deadline:
                break
    finally:
        proc.kill()
        proc.wait()
    output = "".join(lines)
    assert "SESSION" in output, output
    after = output[output.index("SESSION") :]  # what the session's log level let through
    assert "WARN TaskSchedulerImpl: Initial job has not accepted any resources" in after, output
    assert "DataSourceManager" not in after, output  # spark_session registers `lakestream` twice: quiet
    # it never had an executor (a busy cluster, or a retry waiting for a worker): the executor watch leaves it be
    assert "no Spark executor for" not in output, output


def lines_after(lines: list[str], marker: str) -> int:
    """How many of ``lines`` come after the first one containing ``marker`` (-1: none does)."""
    for i, line in enumerate(lines):
        if marker in line:
            return len(lines) - 1 - i
    return -1


# A driver whose job runs on a worker that is then lost, with the executor watch at 3 s.
CANCELLED = """
import sys, threading, time
sys.path.insert(0, sys.argv[1])
from lakehouse.spark import spark_session
spark = spark_session(master=sys.argv[2], **{"spark.lakestream.executorWaitSeconds": "3"})
print("SESSION", flush=True)
tracker = spark.sparkContext.statusTracker()


def say_running():  # an executor registered with this driver runs a task: now the worker may go
    while True:
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        if any(s is not None and s.numActiveTasks > 0 for s in stages):
            print("RUNNING", flush=True)
            return
        time.sleep(0.2)


threading.Thread(target=say_running, daemon=True).start()
try:
    spark.sparkContext.parallelize(range(2), 2).foreach(lambda _: time.sleep(600))
except Exception as exc:
    print("FAILED", type(exc).__name__, flush=True)
    sys.exit(3)
print("FINISHED", flush=True)
"""


@pytest.mark.slow
def test_a_job_that_lost_its_worker_is_cancelled_after_the_executor_wait(tmp_path: Path) -> None:
    import signal
    import threading

    from object_store.seaweedfs import free_ports
    from stack import services

    ports = dict(zip(services.PORT_ENV, free_ports(len(services.PORT_ENV)), strict=True))
    cfg = services.Config.from_env(tmp_path / "stack", env={k: str(v) for k, v in ports.items()})
    cfg.timeout = 60
    services.up(cfg, services=("spark-master", "spark-worker"), out=lambda _: None)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(REPO)}
    proc: subprocess.Popen[str] | None = None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", CANCELLED, str(REPO), cfg.spark_master],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        # Kill the worker only once the driver runs a task on an executor: a driver that never had an
        # executor is left waiting by design, so killing earlier (an executor's JVM still starting on a slow
        # machine) tests another case.
        assert proc.stdout is not None
        lines: list[str] = []
        timer = threading.Timer(180, proc.kill)  # no RUNNING within 3 minutes: the loop below ends, and fails
        timer.start()
        try:
            for line in proc.stdout:
                lines.append(line)
                if line.strip() == "RUNNING":
                    break
        finally:
            timer.cancel()
        assert lines and lines[-1].strip() == "RUNNING", "".join(lines)
        os.killpg(services.running(cfg, "spark-worker"), signal.SIGKILL)  # the worker and its executors
        killed = time.monotonic()
        rest, _ = proc.communicate(timeout=120)
        output = "".join(lines) + rest
        waited = time.monotonic() - killed
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        services.down(cfg, out=lambda _: None)
    assert proc.returncode == 3, output
    assert "no Spark executor for 3s while a job waited, after every executor was lost" in output, output
    assert f"master {cfg.spark_master}" in output and "spark.lakestream.executorWaitSeconds" in output
    assert waited < 60, waited  # cancelled after the wait, not never


def test_local_masters_are_not_watched_and_a_bad_wait_is_refused(spark) -> None:
    from lakehouse.errors import ConfigError
    from lakehouse.spark import watch_executors

    assert watch_executors(spark) is None  # local[2]: tasks run in the driver
    spark.sparkContext._conf.set("spark.lakestream.executorWaitSeconds", "soon")
    try:
        with pytest.raises(ConfigError, match="executorWaitSeconds='soon' is not a number"):
            watch_executors(spark)
    finally:
        spark.sparkContext._conf.set("spark.lakestream.executorWaitSeconds", "")
