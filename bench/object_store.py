"""Object-store benchmark: our layer against the raw client in the same run, on SeaweedFS and local disk.

    python bench/object_store.py            # full run (~2-3 minutes)
    python bench/object_store.py --quick    # smaller sizes, for a smoke run

Prints Markdown tables (paste into BENCHMARKS.md). Ratios compare our API with a baseline measured in
the same process a moment earlier, because this machine is noisy and absolute numbers drift:

* latency: `store.put`/`store.get` vs raw boto3 `put_object`/`get_object` (S3) or raw file
  write+rename/read (local), for 4 KiB and 1 MiB objects, p50 and p99;
* multipart: `open_writer` of N MiB (8 MiB parts, 4 in flight) vs one PUT of the same bytes;
* CAS: successful compare-and-swap commits per second on one key with 1, 4 and 16 writers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import on_both_backends, parser, pct  # noqa: E402

from object_store import MiB, ObjectStore, PreconditionFailed  # noqa: E402
from object_store.s3 import S3Store  # noqa: E402


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def raw_ops(store: ObjectStore) -> tuple[Callable[[str, bytes], None], Callable[[str], bytes]]:
    """The baseline: the same operation without our layer (no validation, no metadata, no mapping)."""
    if isinstance(store, S3Store):
        client, bucket, prefix = store.client, store.bucket, store.prefix

        def put(key: str, data: bytes) -> None:
            client.put_object(Bucket=bucket, Key=prefix + key, Body=data)

        def get(key: str) -> bytes:
            return client.get_object(Bucket=bucket, Key=prefix + key)["Body"].read()

        return put, get
    root = Path(store.url.removeprefix("file://"))

    def put_local(key: str, data: bytes) -> None:
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def get_local(key: str) -> bytes:
        return (root / key).read_bytes()

    return put_local, get_local


def bench_latency(store: ObjectStore, size: int, n: int) -> dict[str, float]:
    """Ours and the raw baseline alternate call by call, so drift on a noisy machine hits both alike."""
    data = os.urandom(size)
    raw_put, raw_get = raw_ops(store)
    tag = uuid.uuid4().hex[:6]
    for i in range(5):  # warm connections and caches
        store.put(f"warm/{tag}/{i}", data)
        raw_put(f"warm/{tag}/r{i}", data)
    ours_put, base_put, ours_get, base_get = [], [], [], []
    for i in range(n):
        ours_put += timed(lambda i=i: store.put(f"lat/{tag}/o{i}", data), 1)
        base_put += timed(lambda i=i: raw_put(f"lat/{tag}/r{i}", data), 1)
    for i in range(n):
        ours_get += timed(lambda i=i: store.get(f"lat/{tag}/o{i}"), 1)
        base_get += timed(lambda i=i: raw_get(f"lat/{tag}/o{i}"), 1)
    return {
        "put_p50": pct(ours_put, 0.5),
        "put_p99": pct(ours_put, 0.99),
        "put_base_p50": pct(base_put, 0.5),
        "get_p50": pct(ours_get, 0.5),
        "get_p99": pct(ours_get, 0.99),
        "get_base_p50": pct(base_get, 0.5),
    }


def bench_multipart(store: ObjectStore, mib: int, repeats: int = 3) -> dict[str, float]:
    """Median of ``repeats`` alternating runs: one raw PUT of the bytes, then our streamed writer."""
    data = os.urandom(MiB) * mib
    raw_put, _ = raw_ops(store)
    single, multi = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        raw_put(f"mpu/single-{uuid.uuid4().hex}", data)
        single.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with store.open_writer(f"mpu/multi-{uuid.uuid4().hex}", part_size=8 * MiB, max_concurrency=4) as w:
            for i in range(0, len(data), MiB):
                w.write(data[i : i + MiB])
        multi.append(time.perf_counter() - t0)
    return {"single_mb_s": mib / statistics.median(single), "multi_mb_s": mib / statistics.median(multi)}


def bench_cas(store: ObjectStore, writers: int, seconds: float) -> dict[str, float]:
    key = f"cas/{uuid.uuid4().hex}"
    store.put(key, b"0")
    stop = time.monotonic() + seconds
    ok = [0] * writers
    lost = [0] * writers
    barrier = threading.Barrier(writers)

    def writer(w: int) -> None:
        barrier.wait()
        while time.monotonic() < stop:
            obj = store.get(key)
            try:
                store.put(key, str(int(obj.data) + 1).encode(), if_match=obj.etag)
                ok[w] += 1
            except PreconditionFailed:
                lost[w] += 1

    t0 = time.perf_counter()
    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(writer, range(writers)))
    elapsed = time.perf_counter() - t0
    final = int(store.get(key).data)
    assert final == sum(ok), f"CAS lost increments: {final} != {sum(ok)}"
    return {"commits_s": sum(ok) / elapsed, "lost_per_commit": sum(lost) / max(1, sum(ok))}


def run(name: str, store: ObjectStore, args: argparse.Namespace) -> list[str]:
    store.ensure_conditional_writes()
    rows = [f"### {name}", ""]
    rows += [
        "| object | PUT p50 | PUT p99 | raw PUT p50 | PUT ratio (raw/ours) | GET p50 | GET p99 | raw GET p50 "
        "| GET ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, size, n in (("4 KiB", 4096, args.n_small), ("1 MiB", MiB, args.n_large)):
        r = bench_latency(store, size, n)
        rows.append(
            f"| {label} | {r['put_p50'] * 1e3:.2f} ms | {r['put_p99'] * 1e3:.2f} ms | "
            f"{r['put_base_p50'] * 1e3:.2f} ms | {r['put_base_p50'] / r['put_p50']:.2f} | "
            f"{r['get_p50'] * 1e3:.2f} ms | {r['get_p99'] * 1e3:.2f} ms | {r['get_base_p50'] * 1e3:.2f} ms | "
            f"{r['get_base_p50'] / r['get_p50']:.2f} |"
        )
        print(rows[-1], flush=True)
    m = bench_multipart(store, args.mpu_mib)
    rows += [
        "",
        f"| {args.mpu_mib} MiB write | MB/s | ratio to one PUT |",
        "| --- | --- | --- |",
        f"| one PUT (raw client, median of 3) | {m['single_mb_s']:.0f} | 1.00 |",
        f"| open_writer, 8 MiB parts, 4 in flight (median of 3) | {m['multi_mb_s']:.0f} | "
        f"{m['multi_mb_s'] / m['single_mb_s']:.2f} |",
        "",
        "| CAS writers on one key | commits/s | lost CAS per commit |",
        "| --- | --- | --- |",
    ]
    print("\n".join(rows[-7:]), flush=True)
    for w in (1, 4, 16):
        c = bench_cas(store, w, args.cas_seconds)
        rows.append(f"| {w} | {c['commits_s']:.1f} | {c['lost_per_commit']:.2f} |")
        print(rows[-1], flush=True)
    return rows + [""]


def main() -> None:
    args = parser(__doc__).parse_args()
    args.n_small, args.n_large = (50, 10) if args.quick else (400, 60)
    args.mpu_mib = 32 if args.quick else 256
    args.cas_seconds = 2.0 if args.quick else 8.0
    on_both_backends("Object store benchmark", args, run)


if __name__ == "__main__":
    main()
