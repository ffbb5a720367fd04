"""The demo's last step: the storage guarantees everything stands on, shown on the warehouse's own store (the
capability probe, a create-only race, compare-and-swap counting, a multipart upload and an aborted one)."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from lakestream.demo.common import check as _check
from object_store import MiB, ObjectStore, PreconditionFailed

__all__ = ["storage_step"]


def storage_step(store: ObjectStore, run: str, big_mib: int, console: Console) -> str:
    parts = [
        _probe(store),
        _race(store, f"{run}/race"),
        _counter(store, f"{run}/counter"),
        _multipart(store, f"{run}/big.bin", big_mib, console),
        _aborted(store, f"{run}/aborted.bin"),
    ]
    console.print("     " + "; ".join(parts))
    return "probe, create-only race, CAS, multipart, abort: all hold"


def _probe(store: ObjectStore) -> str:
    store.ensure_conditional_writes()
    return "conditional writes enforced"


def _race(store: ObjectStore, prefix: str, writers: int = 8, rounds: int = 5) -> str:
    # 8 x 5, not 16 x 20: SeaweedFS makes a writer that meets another's conditional write sleep a whole
    # second, so a larger race takes a minute there; the test suite races far harder on every backend.
    barrier = threading.Barrier(writers)
    wins: list[int] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        for r in range(rounds):
            barrier.wait()
            try:
                store.put(f"{prefix}/{r:03d}", f"w{w}".encode(), if_none_match=True)
                with lock:
                    wins.append(r)
            except PreconditionFailed:
                pass

    _run_threads(writer, writers)
    _check(sorted(wins) == list(range(rounds)), f"expected one winner per round, got {sorted(wins)}")
    return f"create-only: 1 winner/round ({writers} writers x {rounds})"


def _counter(store: ObjectStore, key: str, writers: int = 8, times: int = 25) -> str:
    store.put(key, b"0")
    conflicts = [0] * writers

    def writer(w: int) -> None:
        for _ in range(times):
            while True:
                obj = store.get(key)
                try:
                    store.put(key, str(int(obj.data) + 1).encode(), if_match=obj.etag)
                    break
                except PreconditionFailed:
                    conflicts[w] += 1

    _run_threads(writer, writers)
    value = int(store.get(key).data)
    _check(value == writers * times, f"counter is {value}, expected {writers * times}: an increment was lost")
    return f"CAS: {value} increments, none lost"


def _multipart(store: ObjectStore, key: str, mib: int, console: Console) -> str:
    block = os.urandom(MiB)
    digest = hashlib.sha256()
    with Progress(BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("upload", total=mib * MiB)
        with store.open_writer(key, if_none_match=True, part_size=8 * MiB) as w:
            for _ in range(mib):
                w.write(block)
                digest.update(block)
                bar.advance(task, MiB)
    info = store.head(key)
    _check(info.size == mib * MiB, f"{key} has {info.size} bytes, expected {mib * MiB}")
    _check(hashlib.sha256(store.get(key).data).digest() == digest.digest(), f"{key} does not read back")
    return f"multipart {mib} MiB byte-identical"


def _aborted(store: ObjectStore, key: str) -> str:
    try:
        with store.open_writer(key, part_size=5 * MiB) as w:
            w.write(os.urandom(11 * MiB))
            raise RuntimeError("simulated crash inside the writer")
    except RuntimeError:
        pass
    _check(not store.exists(key), f"{key} became visible after an aborted write")
    uploads: list[Any] = getattr(store, "open_uploads", lambda: [])()
    _check(not uploads, f"multipart uploads left open: {uploads}")
    return "aborted upload leaves nothing"


def _run_threads(fn: Callable[[int], None], n: int) -> None:
    with ThreadPoolExecutor(n) as pool:
        for f in [pool.submit(fn, i) for i in range(n)]:
            f.result()
