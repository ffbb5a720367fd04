"""stack/services.py: configuration, env file, status/down on nothing, and a real SeaweedFS-only up/down."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from object_store.seaweedfs import ACCESS_KEY, SECRET_KEY, free_ports
from stack import services


def test_ports_default_and_from_env(tmp_path: Path) -> None:
    cfg = services.Config.from_env(tmp_path, env={})
    assert cfg.ports["s3.port"] == 8333
    assert cfg.ports["spark.master"] == 7077
    assert cfg.ports["spark.master.ui"] == 8090
    assert cfg.ports["spark.worker.ui"] == 8091
    assert cfg.ports["airflow.api"] == 8080
    assert len(set(cfg.ports.values())) == len(cfg.ports), "default ports clash"

    cfg = services.Config.from_env(
        tmp_path,
        env={
            "LAKESTREAM_STACK_S3_PORT": "18000",
            "LAKESTREAM_STACK_SPARK_MASTER_UI_PORT": "18001",
            "LAKESTREAM_STACK_AIRFLOW_PORT": "18002",
            "LAKESTREAM_STACK_WORKER_CORES": "3",
        },
    )
    assert cfg.s3_endpoint == "http://127.0.0.1:18000"
    assert cfg.ports["spark.master.ui"] == 18001
    assert cfg.airflow_url == "http://127.0.0.1:18002"
    assert cfg.worker_cores == 3
    for bad in ("x", "0", "70000"):
        with pytest.raises(services.StackError, match="LAKESTREAM_STACK_S3_PORT"):
            services.Config.from_env(tmp_path, env={"LAKESTREAM_STACK_S3_PORT": bad})


@pytest.mark.subprocess
def test_env_file_sources_to_the_stack(tmp_path: Path) -> None:
    cfg = services.Config.from_env(
        tmp_path / "st ack",
        env={
            "LAKESTREAM_STACK_S3_PORT": "18333",
            "LAKESTREAM_STACK_SPARK_MASTER_PORT": "17077",
            "LAKESTREAM_STACK_AIRFLOW_PORT": "18080",
        },
    )
    env_file = tmp_path / "env"
    env_file.write_text(cfg.env_file_text())
    out = subprocess.run(
        ["bash", "-c", f"source '{env_file}' && env -0"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout
    env = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    assert env["LAKESTREAM_WAREHOUSE"] == "s3://lakestream/warehouse"
    assert env["LAKESTREAM_S3_ENDPOINT"] == "http://127.0.0.1:18333"
    assert env["AWS_ACCESS_KEY_ID"] == ACCESS_KEY
    assert env["AWS_SECRET_ACCESS_KEY"] == SECRET_KEY
    assert env["AIRFLOW_CONN_LAKESTREAM_SPARK"] == "spark://127.0.0.1:17077"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18080/execution/"
    assert env["AIRFLOW_HOME"] == str(tmp_path / "st ack" / "airflow")
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["PYSPARK_PYTHON"] == sys.executable
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert env["PATH"].endswith("/usr/bin:/bin")
    assert env["AIRFLOW__API_AUTH__JWT_SECRET"], "Airflow's components need one shared JWT secret"
    assert cfg.env_file_text() == cfg.env_file_text(), "the JWT secret must be stable across calls"


def test_status_of_an_empty_dir(tmp_path: Path) -> None:
    cfg = services.Config.from_env(tmp_path, env={})
    lines: list[str] = []
    assert services.status(cfg, lines.append) == {s: None for s in services.SERVICES}
    assert len(lines) == len(services.SERVICES)
    assert all("stopped" in line for line in lines)


@pytest.mark.subprocess
def test_down_on_nothing_is_a_no_op_and_drops_stale_pid_files(tmp_path: Path) -> None:
    cfg = services.Config.from_env(tmp_path, env={})
    assert services.down(cfg, lambda _: None) == []
    dead = subprocess.Popen(["true"], start_new_session=True)
    dead.wait()
    cfg.pid_file("spark-master").write_text(f"{dead.pid}\n")
    lines: list[str] = []
    assert services.status(cfg, lines.append)["spark-master"] is None
    assert any("stale" in line for line in lines)
    assert services.down(cfg, lambda _: None) == []
    assert not cfg.pid_file("spark-master").exists()


@pytest.mark.subprocess
def test_up_seaweedfs_only_then_down_leaves_no_process(tmp_path: Path) -> None:
    ports = free_ports(len(services.PORT_ENV))
    env = {var: str(port) for var, port in zip(services.PORT_ENV, ports, strict=True)}
    cfg = services.Config.from_env(tmp_path / ".stack", env=env)
    cfg.timeout = 60
    try:
        assert services.up(cfg, services=("seaweedfs",), out=lambda _: None) is True
        pid = services.running(cfg, "seaweedfs")
        assert pid is not None
        assert (cfg.root / "env").read_text() == cfg.env_file_text()
        assert services.up(cfg, services=("seaweedfs",), out=lambda _: None) is False, "started twice"
        assert services.running(cfg, "seaweedfs") == pid

        from object_store import open_store

        store = open_store(
            "s3://lakestream/warehouse",
            endpoint_url=cfg.s3_endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            region="us-east-1",
        )
        store.put("probe/x", b"1")
        assert store.get("probe/x").data == b"1"
    finally:
        pid_started = services.read_pid(cfg, "seaweedfs")
        stopped = services.down(cfg, lambda _: None)
        if pid_started is not None and services._alive(pid_started):  # down failed: leave nothing behind anyway
            os.killpg(pid_started, 9)
    assert stopped == ["seaweedfs"]
    assert not cfg.pid_file("seaweedfs").exists()
    time.sleep(0.2)
    assert not services._group_members(pid), "a process of the stopped group is left"
    deadline = time.monotonic() + 5  # the group is gone once its leader (our child here) is reaped
    while True:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "the stopped group is still there"
        time.sleep(0.05)


def test_one_up_or_down_at_a_time(tmp_path: Path) -> None:
    """Two `make stack` at once would both find nothing running and start everything twice: the second one is
    refused, naming the directory, and starts nothing."""
    cfg = services.Config.from_env(tmp_path / ".stack", env={})
    with services.exclusive(cfg):
        for command in (lambda: services.up(cfg, out=lambda _: None), lambda: services.down(cfg, out=lambda _: None)):
            with pytest.raises(services.StackError, match="another `python -m stack up` or `down` is running on"):
                command()
    assert not any(cfg.root.glob("*.pid"))
    assert services.down(cfg, out=lambda _: None) == []  # free again
