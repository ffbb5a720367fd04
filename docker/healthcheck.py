"""Health checks of the compose stack's services (standard library only).

healthcheck.py http URL                 URL answers 2xx
healthcheck.py spark-worker MASTER_UI   the Spark master's /json/ lists this container's worker as ALIVE
"""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.request


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:  # raises on 4xx/5xx
        return response.read()


def main(argv: list[str]) -> int:
    check, url = argv
    if check == "http":
        fetch(url)
        return 0
    if check == "spark-worker":
        me = os.environ.get("SPARK_LOCAL_IP") or socket.gethostbyname(socket.gethostname())
        workers = json.loads(fetch(url.rstrip("/") + "/json/"))["workers"]
        alive = [w for w in workers if w.get("host") == me and w.get("state") == "ALIVE"]
        print(f"worker {me}: {'registered' if alive else 'not registered'} with {url}")
        return 0 if alive else 1
    raise SystemExit(f"unknown check {check!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
