"""Shared benchmark scaffolding: percentiles, thread runners, and running one benchmark on both backends."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from object_store import ObjectStore, open_store  # noqa: E402
from object_store.seaweedfs import SeaweedFS  # noqa: E402


def median_of(repeats: int, fn: Callable[[], Any], before: Callable[[], None] | None = None) -> tuple[float, Any]:
    """The median time of ``repeats`` runs of ``fn`` (each after ``before``, untimed) and the last run's value."""
    times, value = [], None
    for _ in range(repeats):
        if before is not None:
            before()
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_threads(work: Callable[[int], list[float]], n: int) -> tuple[float, list[float]]:
    """Start ``work(i)`` in ``n`` threads at once (behind a barrier); return wall time and the latencies
    they report."""
    barrier = threading.Barrier(n)
    latencies: list[float] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        barrier.wait()
        got = work(i)
        with lock:
            latencies.extend(got)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        list(pool.map(worker, range(n)))
    return time.perf_counter() - t0, latencies


def timed_each(fn: Callable[[object], object], items: Sequence[object]) -> list[float]:
    out = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        out.append(time.perf_counter() - t0)
    return out


def on_both_backends(
    title: str, args: argparse.Namespace, run: Callable[[str, ObjectStore, argparse.Namespace], list[str]]
) -> None:
    """Run ``run`` on a fresh SeaweedFS server and on the local backend; print the Markdown it returns."""
    out = [f"{title}, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores", ""]
    with tempfile.TemporaryDirectory(prefix="lakestream-bench-") as tmp:
        if args.only in (None, "s3"):
            with SeaweedFS(Path(tmp) / "seaweedfs") as server:
                store = open_store(f"s3://{server.bucket}/bench", **server.store_options())
                out += run("SeaweedFS 4.48 (weed mini, loopback)", store, args)
        if args.only in (None, "local"):
            out += run("local backend (file://, same disk)", open_store(Path(tmp, "local").as_uri()), args)
    print("\n" + "\n".join(out))


def finish(markdown: str, out: Path | None, failures: list[str]) -> None:
    """Print the report, also write it to ``out`` if given; exit 1 if a measurement failed."""
    print("\n" + markdown)
    if out:
        out.write_text(markdown + "\n")
    if failures:
        sys.exit(1)


def parser(doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--only", choices=["s3", "local"], help="run one backend")
    return p
