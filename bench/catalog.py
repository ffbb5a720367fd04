"""Catalog benchmark: our ObjectStoreCatalog against pyiceberg's SqlCatalog on PostgreSQL, same work.

    python bench/catalog.py            # W = 1, 4, 8, 16 writers (several minutes)
    python bench/catalog.py --quick    # W = 1, 4
    python bench/catalog.py --identifiers   # ours on a nested, encoded identifier against a plain one

W writer processes each append 25 one-row batches to one table through pyiceberg, all at once. Each
catalog runs with its shipped defaults (SqlCatalog: pyiceberg's 4 commit retries; ours: the table
defaults our catalog sets, see lakehouse.iceberg.catalog.DEFAULT_TABLE_PROPERTIES, and the FileIO it ships,
lakehouse.iceberg.fileio.LakeFileIO; SqlCatalog: pyiceberg's PyArrowFileIO). Both keep data and metadata files
on the same SeaweedFS server. PostgreSQL (Debian's
package) is started on loopback by the benchmark in a temporary directory and stopped at the end.

Reported per W: successful commits/s (wall clock), appends that failed to the caller, p50/p99 latency
of successful appends, pyiceberg retries per successful commit. Then five 1-writer / 8-writer pairs of
ours, each back to back, for the contention ratio (8 writers / 1 writer, goal >= 0.8): a 1-writer run is
25 commits in 1-2 s, so a single one moves with the machine's drift; every pair and the median are printed.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import parser, pct  # noqa: E402

from object_store.seaweedfs import SeaweedFS  # noqa: E402

APPENDS = 25
#: 1-writer / 8-writer pairs of our catalog, each back to back, measured for the contention ratio.
PAIRS = 5
OURS = "ours (SeaweedFS If-Match)"


class _RetryCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.count += 1


def writer(props: dict, table: tuple[str, ...], worker: int, barrier) -> tuple[int, list[str], list[float], int]:
    """Append APPENDS one-row batches; return (ok, failure kinds, latencies of ok appends, retries)."""
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    counter = _RetryCounter()
    logging.getLogger("pyiceberg.table").addHandler(counter)
    catalog = load_catalog("bench", **props)
    tbl = catalog.load_table(table)
    barrier.wait()
    ok, failed, latencies = 0, [], []
    for i in range(APPENDS):
        t0 = time.perf_counter()
        try:
            tbl.append(pa.table({"worker": pa.array([worker], pa.int32()), "seq": pa.array([i], pa.int32())}))
            ok += 1
            latencies.append(time.perf_counter() - t0)
        except Exception as exc:  # noqa: BLE001 - a failure reaching the caller is what we count
            failed.append(type(exc).__name__)
            tbl = catalog.load_table(table)
    return ok, failed, latencies, counter.count


#: The identifier shape of `--identifiers`: a nested namespace and parts that are percent-encoded in keys.
NESTED = ("org-1", "销售 部", "a/b#1")


def run_writers(props: dict, writers: int, nested: bool = False) -> dict[str, float]:
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("bench", **props)
    ns = (f"b{uuid.uuid4().hex[:8]}", *(NESTED[:2] if nested else ()))
    catalog.create_namespace(ns)
    table = (*ns, NESTED[2] if nested else "t")
    catalog.create_table(table, pa.schema([("worker", pa.int32()), ("seq", pa.int32())]))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(writers + 1)
        with ProcessPoolExecutor(writers, mp_context=ctx) as pool:
            futures = [pool.submit(writer, props, table, w, barrier) for w in range(writers)]
            barrier.wait()
            t0 = time.perf_counter()
            results = [f.result() for f in futures]
            wall = time.perf_counter() - t0
    ok = sum(r[0] for r in results)
    kinds = Counter(k for r in results for k in r[1])
    failed = sum(kinds.values())
    latencies = [x for r in results for x in r[2]]
    retries = sum(r[3] for r in results)
    rows = catalog.load_table(table).scan().to_arrow().num_rows
    assert rows == ok, f"table holds {rows} rows but {ok} appends succeeded"
    return {
        "commits_s": ok / wall,
        "failed": failed,
        "kinds": ", ".join(f"{k} x{n}" for k, n in kinds.items()),
        "p50": pct(latencies, 0.5) if latencies else float("nan"),
        "p99": pct(latencies, 0.99) if latencies else float("nan"),
        "retries": retries / max(1, ok),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """PostgreSQL from Debian's package, in a temporary directory, on a loopback port."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / "pg"
        self.port = free_port()
        self.as_user: list[str] = []

    def _bin(self, name: str) -> str:
        found = shutil.which(name) or next(iter(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))), None)
        if not found:
            raise SystemExit("PostgreSQL is not installed: apt-get install -y postgresql (Debian's package)")
        return str(found)

    def __enter__(self) -> Postgres:
        self.dir.mkdir(parents=True)
        if os.geteuid() == 0:  # the server refuses to run as root
            shutil.chown(self.dir, "postgres")
            shutil.chown(self.dir.parent, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        data = self.dir / "data"
        subprocess.run(
            [*self.as_user, self._bin("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                *self.as_user,
                self._bin("pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(self.dir / "log"),
                "-w",
                "-o",
                f"-h 127.0.0.1 -p {self.port} -k {self.dir} -c max_connections=200",
                "start",
            ],
            check=True,
            capture_output=True,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(
            [*self.as_user, self._bin("pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "stop"],
            capture_output=True,
        )

    @property
    def uri(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"


def compare_identifiers(ours: dict) -> None:
    """``--identifiers``: commits/s of ours on a nested, encoded identifier against a plain ``ns.t``, 1 and 8
    writers, PAIRS alternating pairs (who goes first swaps)."""
    for writers in (1, 8):
        ratios = []
        for i in range(PAIRS):
            order = (False, True) if i % 2 == 0 else (True, False)
            runs = {nested: run_writers(ours, writers, nested) for nested in order}
            ratios.append(runs[True]["commits_s"] / runs[False]["commits_s"])
            print(
                f"{writers} writer(s): plain {runs[False]['commits_s']:.1f}, nested {runs[True]['commits_s']:.1f} "
                f"commits/s, failed {runs[False]['failed']} / {runs[True]['failed']}",
                flush=True,
            )
        print(
            f"{writers} writer(s): nested / plain commits/s, {PAIRS} pairs: {', '.join(f'{r:.2f}' for r in ratios)}; "
            f"median {statistics.median(ratios):.2f}",
            flush=True,
        )


def main() -> None:
    p = parser(__doc__)
    p.add_argument(
        "--identifiers",
        action="store_true",
        help=f"only compare ours on a nested, encoded identifier {NESTED} with a plain one",
    )
    args = p.parse_args()
    sizes = (1, 4) if args.quick else (1, 4, 8, 16)
    with tempfile.TemporaryDirectory(prefix="lakestream-bench-") as tmp:
        os.chmod(tmp, 0o755)
        with SeaweedFS(Path(tmp) / "seaweedfs") as server, Postgres(Path(tmp)) as pg:
            s3 = {
                "s3.endpoint": server.endpoint_url,
                "s3.access-key-id": server.store_options()["access_key_id"],
                "s3.secret-access-key": server.store_options()["secret_access_key"],
                "s3.region": "us-east-1",
            }
            ours = {
                "py-catalog-impl": "lakehouse.iceberg.catalog.ObjectStoreCatalog",
                "warehouse": f"s3://{server.bucket}/ours",
                **s3,
            }
            theirs = {"type": "sql", "uri": pg.uri, "warehouse": f"s3://{server.bucket}/sql", **s3}
            if args.identifiers:
                compare_identifiers(ours)
                return
            rows = [
                f"Catalog benchmark, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores; "
                f"{APPENDS} one-row appends per writer",
                "",
                "| writers | catalog | commits/s | failed to caller | p50 | p99 | retries per commit |",
                "| --- | --- | --- | --- | --- | --- | --- |",
            ]
            results = {}
            for w in sizes:
                for label, props in ((OURS, ours), ("SqlCatalog (PostgreSQL)", theirs)):
                    r = run_writers(props, w)
                    results[(label, w)] = r
                    rows.append(
                        f"| {w} | {label} | {r['commits_s']:.1f} | {r['failed']} of {w * APPENDS} {r['kinds']} | "
                        f"{r['p50'] * 1e3:.0f} ms | {r['p99'] * 1e3:.0f} ms | {r['retries']:.2f} |"
                    )
                    print(rows[-1], flush=True)
            one = results.get((OURS, 1))
            eight = results.get((OURS, 8))
            pairs = []
            if one and eight:
                # A 1-writer run is 25 commits in 1-2 s, so one draw moves with the machine's drift: the
                # contention ratio comes from PAIRS 1-writer / 8-writer runs of ours, each pair back to back.
                for _ in range(PAIRS):
                    a, b = run_writers(ours, 1), run_writers(ours, 8)
                    pairs.append(b["commits_s"] / a["commits_s"])
                    print(f"pair: 1 writer {a['commits_s']:.1f}, 8 writers {b['commits_s']:.1f} commits/s", flush=True)
    print("\n" + "\n".join(rows))
    if pairs:
        print(
            f"\nours: 8-writer / 1-writer throughput, {len(pairs)} pairs: "
            f"{', '.join(f'{r:.2f}' for r in pairs)}; median {statistics.median(pairs):.2f} (goal >= 0.8)"
        )
    anchor = results.get(("SqlCatalog (PostgreSQL)", 8))
    if eight and anchor:
        print(f"ours / SqlCatalog at 8 writers = {eight['commits_s'] / anchor['commits_s']:.2f} (goal >= 2)")


if __name__ == "__main__":
    main()
