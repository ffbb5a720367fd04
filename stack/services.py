"""The native stack (no Docker): SeaweedFS, a Spark standalone master and worker, Airflow, on loopback.

    python -m stack up|down|status [--dir .stack]     (make stack / stack-down / stack-status)

Everything lives under one directory (default ``.stack/``): per service a PID file (``<name>.pid``), a log
file (``logs/<name>.log``) and its state and work dirs, plus ``env``, a file a shell can ``source`` so that
``lakestream``, ``spark-submit`` and ``airflow`` reach the stack. Each service runs in its own process group
(``start_new_session``); ``down`` stops the groups by PID in reverse order (SIGTERM, then SIGKILL).

Ports are fixed, so a restart keeps its URLs; each is configurable by an environment variable (see
``PORT_ENV``). The S3 credentials are fixed, local-only ones (``object_store.seaweedfs``): the servers bind to
127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from object_store.seaweedfs import ACCESS_KEY, PORT_FLAGS, SECRET_KEY, weed_binary
from stack.errors import StackError

REPO = Path(__file__).resolve().parent.parent
BUCKET = "lakestream"
SERVICES = (
    "seaweedfs",
    "spark-master",
    "spark-worker",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
AIRFLOW_SERVICES = SERVICES[3:]

# Environment variable -> (what, default). weed mini's gRPC ports default to +10000 of each HTTP port.
PORT_ENV: dict[str, tuple[str, int]] = {
    "LAKESTREAM_STACK_S3_PORT": ("s3.port", 8333),
    "LAKESTREAM_STACK_S3_GRPC_PORT": ("s3.port.grpc", 18333),
    "LAKESTREAM_STACK_S3_ICEBERG_PORT": ("s3.port.iceberg", 8181),
    "LAKESTREAM_STACK_S3_LANCE_PORT": ("s3.port.lance", 8182),
    "LAKESTREAM_STACK_WEED_MASTER_PORT": ("master.port", 9333),
    "LAKESTREAM_STACK_WEED_MASTER_GRPC_PORT": ("master.port.grpc", 19333),
    "LAKESTREAM_STACK_WEED_VOLUME_PORT": ("volume.port", 8334),
    "LAKESTREAM_STACK_WEED_VOLUME_GRPC_PORT": ("volume.port.grpc", 18334),
    "LAKESTREAM_STACK_WEED_FILER_PORT": ("filer.port", 8888),
    "LAKESTREAM_STACK_WEED_FILER_GRPC_PORT": ("filer.port.grpc", 18888),
    "LAKESTREAM_STACK_WEED_ADMIN_PORT": ("admin.port", 23646),
    "LAKESTREAM_STACK_WEED_ADMIN_GRPC_PORT": ("admin.port.grpc", 33646),
    "LAKESTREAM_STACK_SPARK_MASTER_PORT": ("spark.master", 7077),
    "LAKESTREAM_STACK_SPARK_MASTER_UI_PORT": ("spark.master.ui", 8090),
    "LAKESTREAM_STACK_SPARK_WORKER_UI_PORT": ("spark.worker.ui", 8091),
    "LAKESTREAM_STACK_AIRFLOW_PORT": ("airflow.api", 8080),
}
assert set(PORT_FLAGS) <= {name for name, _ in PORT_ENV.values()}


@dataclass
class Config:
    root: Path
    ports: dict[str, int]
    worker_cores: int = 2
    worker_memory: str = "2g"
    with_airflow: bool = True
    timeout: float = 120.0
    python: str = sys.executable

    @classmethod
    def from_env(cls, root: Path | str, env: Mapping[str, str] | None = None) -> Config:
        env = os.environ if env is None else env
        ports = {}
        for var, (name, default) in PORT_ENV.items():
            raw = env.get(var, "")
            try:
                ports[name] = int(raw) if raw else default
            except ValueError:
                raise StackError(f"{var}={raw!r} is not a port number") from None
            if not 0 < ports[name] < 65536:
                raise StackError(f"{var}={raw!r} is not a port number")
        return cls(
            root=Path(root).resolve(),
            ports=ports,
            worker_cores=int(env.get("LAKESTREAM_STACK_WORKER_CORES") or 2),
            worker_memory=env.get("LAKESTREAM_STACK_WORKER_MEMORY") or "2g",
            with_airflow=(env.get("LAKESTREAM_STACK_AIRFLOW") or "1") not in ("0", "false", "no"),
            timeout=float(env.get("LAKESTREAM_STACK_TIMEOUT") or 120),
        )

    # URLs
    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @property
    def spark_master(self) -> str:
        return f"spark://127.0.0.1:{self.ports['spark.master']}"

    @property
    def airflow_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['airflow.api']}"

    def url(self, service: str) -> str:
        return {
            "seaweedfs": f"S3 {self.s3_endpoint}",
            "spark-master": f"{self.spark_master}, UI http://127.0.0.1:{self.ports['spark.master.ui']}",
            "spark-worker": f"UI http://127.0.0.1:{self.ports['spark.worker.ui']}",
            "airflow-api-server": f"{self.airflow_url} (user admin, password in {self.airflow_password_file})",
        }.get(service, "")

    @property
    def bin_dir(self) -> Path:
        return Path(self.python).parent

    @property
    def airflow_home(self) -> Path:
        return self.root / "airflow"

    @property
    def airflow_password_file(self) -> Path:
        """Where Airflow's simple auth manager keeps the generated password of user ``admin``."""
        return self.airflow_home / "simple_auth_manager_passwords.json.generated"

    def pid_file(self, service: str) -> Path:
        return self.root / f"{service}.pid"

    def log_file(self, service: str) -> Path:
        return self.root / "logs" / f"{service}.log"

    def jwt_secret(self) -> str:
        """One secret for every Airflow component (they must agree); made once, kept under the stack dir."""
        path = self.root / "airflow-jwt-secret"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(32))
            path.chmod(0o600)
        return path.read_text().strip()

    def stack_env(self) -> dict[str, str]:
        """The variables that make ``lakestream``, ``spark-submit`` and ``airflow`` use the stack."""
        return {
            "LAKESTREAM_WAREHOUSE": f"s3://{BUCKET}/warehouse",
            "LAKESTREAM_S3_ENDPOINT": self.s3_endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": self.python,
            "AIRFLOW_HOME": str(self.airflow_home),
            "AIRFLOW_CONN_LAKESTREAM_SPARK": f"spark://127.0.0.1:{self.ports['spark.master']}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.airflow_url}/execution/",
            "AIRFLOW__API__BASE_URL": self.airflow_url,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.ports["airflow.api"]),
            "AIRFLOW__API_AUTH__JWT_SECRET": self.jwt_secret(),
            "LAKESTREAM_JOBS_DIR": str(REPO / "jobs"),
        }

    def env_file_text(self) -> str:
        lines = [
            "# The lakestream native stack (python -m stack): `source` this file.",
            "# The S3 credentials are fixed, local-only ones: the stack listens on 127.0.0.1 only.",
        ]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in self.stack_env().items()]
        lines.append(f'export PATH={shlex.quote(str(self.bin_dir))}:"$PATH"')
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- processes


def _alive(pid: int) -> bool:
    """Is the process group ``pid`` (a service started with start_new_session) still there?"""
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own child (tests), so it does not linger as a zombie
    except ChildProcessError:
        pass
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return any(_group_members(pid) - {pid})
    except (OSError, IndexError):
        pass
    return True


def _group_members(pgid: int) -> set[int]:
    members = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.add(int(stat.parent.name))
    return members


def read_pid(cfg: Config, service: str) -> int | None:
    try:
        return int(cfg.pid_file(service).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def running(cfg: Config, service: str) -> int | None:
    pid = read_pid(cfg, service)
    return pid if pid is not None and _alive(pid) else None


def _spawn(cfg: Config, service: str, args: list[str], env: Mapping[str, str], cwd: Path | None = None) -> int:
    log = cfg.log_file(service)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(args)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            args,
            cwd=cwd or cfg.root,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    cfg.pid_file(service).write_text(f"{proc.pid}\n")
    return proc.pid


def stop_service(cfg: Config, service: str, timeout: float = 20.0) -> int | None:
    """SIGTERM the service's process group, SIGKILL after ``timeout``; remove its PID file. Returns the PID
    stopped, or None when nothing was running."""
    pid = read_pid(cfg, service)
    stopped = None
    if pid is not None and _alive(pid):
        stopped = pid
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            if not _alive(pid):
                break
    cfg.pid_file(service).unlink(missing_ok=True)
    if service == "seaweedfs":  # the gRPC unix sockets weed leaves behind for our ports
        for port in cfg.ports.values():
            for sock in Path("/tmp").glob(f"seaweedfs-*-grpc-{port}.sock"):
                sock.unlink(missing_ok=True)
    return stopped


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait(cfg: Config, service: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pid = read_pid(cfg, service)
        if pid is None or not _alive(pid):
            raise StackError(
                f"{service} exited during start-up; log {cfg.log_file(service)}:\n{_tail(cfg.log_file(service))}"
            )
        try:
            if check():
                return
        except StackError:
            raise
        except Exception:  # noqa: BLE001 (not ready yet)
            pass
        if time.monotonic() > deadline:
            raise StackError(
                f"{service} not ready within {timeout:.0f}s; log {cfg.log_file(service)}:\n"
                f"{_tail(cfg.log_file(service))}"
            )
        time.sleep(0.5)


def _http_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 (loopback URL we built)
        return json.load(resp)


# ---------------------------------------------------------------- services


def start_seaweedfs(cfg: Config) -> None:
    work = cfg.root / "seaweedfs"
    (work / "data").mkdir(parents=True, exist_ok=True)
    s3_config = work / "s3.json"
    s3_config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "lakestream",
                        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    args = [
        weed_binary(),
        "mini",
        f"-dir={work / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-s3.config={s3_config}",
        f"-filer.localSocket={work / 'filer.sock'}",
        f"-s3.localSocket={work / 's3.sock'}",
        "-master.telemetry=false",
        "-webdav=false",
        "-admin.ui=false",
        "-master.volumeSizeLimitMB=64",
        *(f"-{flag}={cfg.ports[flag]}" for flag in PORT_FLAGS),
    ]
    _spawn(cfg, "seaweedfs", args, os.environ, cwd=work)

    def ready() -> bool:
        from object_store import open_store

        store = open_store(
            f"s3://{BUCKET}/warehouse",
            endpoint_url=cfg.s3_endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            region="us-east-1",
            create_bucket=True,
            probe=False,
            max_attempts=1,
            connect_timeout=1,
            read_timeout=5,
        )
        store.ensure_conditional_writes()
        return True

    _wait(cfg, "seaweedfs", ready, cfg.timeout)


def _spark_env(cfg: Config) -> dict[str, str]:
    import pyspark

    spark = cfg.root / "spark"
    for d in ("work", "local", "logs"):
        (spark / d).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(cfg.stack_env())
    env.update(
        {
            "SPARK_HOME": str(Path(pyspark.__file__).parent),
            "SPARK_WORKER_DIR": str(spark / "work"),
            "SPARK_LOCAL_DIRS": str(spark / "local"),
            "SPARK_LOG_DIR": str(spark / "logs"),
            "PATH": f"{cfg.bin_dir}:{env.get('PATH', '')}",
            # a busy port fails the start (and so the readiness check) instead of moving to the next port
            "SPARK_MASTER_OPTS": "-Dspark.port.maxRetries=0",
            "SPARK_WORKER_OPTS": "-Dspark.port.maxRetries=0",
        }
    )
    return env


def master_json(cfg: Config) -> dict:
    data = _http_json(f"http://127.0.0.1:{cfg.ports['spark.master.ui']}/json/")
    assert isinstance(data, dict)
    return data


def start_spark_master(cfg: Config) -> None:
    args = [
        str(cfg.bin_dir / "spark-class"),
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        str(cfg.ports["spark.master"]),
        "--webui-port",
        str(cfg.ports["spark.master.ui"]),
    ]
    _spawn(cfg, "spark-master", args, _spark_env(cfg))
    _wait(cfg, "spark-master", lambda: master_json(cfg).get("status") == "ALIVE", cfg.timeout)


def start_spark_worker(cfg: Config) -> None:
    args = [
        str(cfg.bin_dir / "spark-class"),
        "org.apache.spark.deploy.worker.Worker",
        cfg.spark_master,
        "--host",
        "127.0.0.1",
        "--webui-port",
        str(cfg.ports["spark.worker.ui"]),
        "--cores",
        str(cfg.worker_cores),
        "--memory",
        cfg.worker_memory,
        "--work-dir",
        str(cfg.root / "spark" / "work"),
    ]
    # its RPC port stays random: a worker restarted after a crash must not come back at the address the master
    # still holds for the dead one (the master refuses a second worker at one address until it times out)
    _spawn(cfg, "spark-worker", args, _spark_env(cfg))
    _wait(
        cfg,
        "spark-worker",
        lambda: any(w.get("state") == "ALIVE" for w in master_json(cfg).get("workers", [])),
        cfg.timeout,
    )


def _airflow_env(cfg: Config) -> dict[str, str]:
    cfg.airflow_home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(cfg.stack_env())
    env["PATH"] = f"{cfg.bin_dir}:{env.get('PATH', '')}"
    return env


def start_airflow(cfg: Config) -> None:
    env = _airflow_env(cfg)
    airflow = str(cfg.bin_dir / "airflow")
    log = cfg.log_file("airflow-db-migrate")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        result = subprocess.run(
            [airflow, "db", "migrate"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=max(cfg.timeout, 300),
            check=False,
        )
    if result.returncode:
        raise StackError(f"airflow db migrate failed; log {log}:\n{_tail(log)}")
    commands = {
        "airflow-api-server": ["api-server", "--host", "127.0.0.1", "--port", str(cfg.ports["airflow.api"])],
        "airflow-scheduler": ["scheduler"],
        "airflow-dag-processor": ["dag-processor"],
        "airflow-triggerer": ["triggerer"],
    }
    for service, command in commands.items():
        _spawn(cfg, service, [airflow, *command], env)
    _wait(
        cfg,
        "airflow-api-server",
        lambda: _http_json(f"{cfg.airflow_url}/api/v2/monitor/health") is not None,
        cfg.timeout,
    )

    def dags_parsed() -> bool:
        for service in commands:  # any component dying fails the start
            if running(cfg, service) is None:
                raise StackError(f"{service} exited; log {cfg.log_file(service)}:\n{_tail(cfg.log_file(service))}")
        errors = subprocess.run(
            [airflow, "dags", "list-import-errors", "-o", "json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        dags = subprocess.run(
            [airflow, "dags", "list", "-o", "json"], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        if errors.returncode or dags.returncode:
            return False
        found = _cli_json(dags.stdout)
        import_errors = _cli_json(errors.stdout)
        if import_errors:
            raise StackError(f"DAG import errors: {json.dumps(import_errors, indent=1)[:3000]}")
        return len(found) > 0

    _wait(cfg, "airflow-dag-processor", dags_parsed, max(cfg.timeout, 180))


def _cli_json(stdout: str) -> list:
    """The JSON list an ``airflow ... -o json`` command prints (after any warnings on the same stream)."""
    for i, line in enumerate(stdout.splitlines()):
        if line.startswith("["):
            return json.loads("\n".join(stdout.splitlines()[i:]))
    raise ValueError(f"no JSON in {stdout[-500:]!r}")


STARTERS: list[tuple[tuple[str, ...], Callable[[Config], None]]] = [
    (("seaweedfs",), start_seaweedfs),
    (("spark-master",), start_spark_master),
    (("spark-worker",), start_spark_worker),
    (AIRFLOW_SERVICES, start_airflow),
]


# ---------------------------------------------------------------- commands


def status(cfg: Config, out: Callable[[str], None] = print) -> dict[str, int | None]:
    result = {}
    for service in SERVICES:
        pid = read_pid(cfg, service)
        alive = pid is not None and _alive(pid)
        result[service] = pid if alive else None
        state = "running" if alive else ("dead (stale PID file)" if pid is not None else "stopped")
        out(f"{service:22} {str(pid or '-'):>8}  {state:22} {cfg.url(service) if alive else ''}".rstrip())
    return result


@contextlib.contextmanager
def exclusive(cfg: Config) -> Iterator[None]:
    """Hold the stack directory's lock (``.lock``, an flock) for one ``up`` or ``down`` at a time: two at once
    would each find nothing running and start every service twice, or stop what the other starts.

    Raises:
        StackError: another ``up`` or ``down`` holds it.
    """
    cfg.root.mkdir(parents=True, exist_ok=True)
    with open(cfg.root / ".lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StackError(f"another `python -m stack up` or `down` is running on {cfg.root}; wait for it") from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def up(cfg: Config, services: tuple[str, ...] | None = None, out: Callable[[str], None] = print) -> bool:
    """Start the stack (or the given services, in order). Services already running are left as they are and
    only the others start (a lost Spark worker comes back with a second ``make stack``). Returns False if every
    wanted service was running already. One ``up`` or ``down`` at a time per directory (`exclusive`)."""
    with exclusive(cfg):
        return _up(cfg, services, out)


def _up(cfg: Config, services: tuple[str, ...] | None, out: Callable[[str], None]) -> bool:
    wanted = [
        (names, start)
        for names, start in STARTERS
        if (services is None or set(names) & set(services)) and (cfg.with_airflow or names != AIRFLOW_SERVICES)
    ]
    alive = [s for names, _ in wanted for s in names if running(cfg, s)]
    if len(alive) == sum(len(names) for names, _ in wanted):
        out(f"the stack in {cfg.root} is already running ({', '.join(alive)}):")
        status(cfg, out)
        return False
    for names, _ in wanted:
        partly = [s for s in names if s in alive]
        if partly and len(partly) < len(names):
            raise StackError(
                f"{', '.join(partly)} running but {', '.join(s for s in names if s not in alive)} not: "
                f"stop the stack (make stack-down) and start it again"
            )
    if alive:
        out(f"already running: {', '.join(alive)}; starting the rest")
    wanted = [(names, start) for names, start in wanted if names[0] not in alive]
    (cfg.root / "env").write_text(cfg.env_file_text())
    started: list[str] = []
    t0 = time.monotonic()
    try:
        for names, start in wanted:
            t = time.monotonic()
            started.extend(names)
            start(cfg)
            out(f"{'/'.join(names)} ready in {time.monotonic() - t:.1f}s  {cfg.url(names[0])}")
    except BaseException as exc:
        out(
            "start failed; stopping what was started"
            if isinstance(exc, StackError)
            else f"start interrupted ({exc!r}); stopping what was started"
        )
        for service in reversed(started):
            if stop_service(cfg, service):
                out(f"stopped {service}")
        raise
    out(
        f"stack ready in {time.monotonic() - t0:.1f}s; logs in {cfg.root / 'logs'}; use it with:\n"
        f"  source {cfg.root / 'env'}"
    )
    return True


def down(cfg: Config, out: Callable[[str], None] = print) -> list[str]:
    """Stop every service by PID, in reverse order; returns the services stopped."""
    if not cfg.root.is_dir():
        out(f"nothing running in {cfg.root}")
        return []
    with exclusive(cfg):
        return _down(cfg, out)


def _down(cfg: Config, out: Callable[[str], None]) -> list[str]:
    stopped = []
    for service in reversed(SERVICES):
        pid = stop_service(cfg, service)
        if pid is not None:
            stopped.append(service)
            out(f"stopped {service} (pid {pid})")
    if not stopped:
        out(f"nothing running in {cfg.root}")
    return stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stack", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--dir", default=".stack", help="the stack's directory (default: .stack)")
    parser.add_argument("--no-airflow", action="store_true", help="up: SeaweedFS and Spark only")
    args = parser.parse_args(argv)
    try:
        cfg = Config.from_env(args.dir)
        if args.no_airflow:
            cfg.with_airflow = False
        if args.command == "up":
            up(cfg)
        elif args.command == "down":
            down(cfg)
        else:
            status(cfg)
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
