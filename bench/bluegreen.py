"""Blue/green rebuild of the DWD model (issue 43): readers by name see no gap.

``examples/tpch`` at ``--orders`` N (bench/layers.py's ``build``: the ODS appended and tiered, a first full round
of both models, the layer tables tiered). Version 2 of the project changes ``dwd.orders_enriched``'s SQL (a column
added at its end), so the green set is the DWD model and the ADS that reads it. While ``build_green`` builds the
green set beside the live tables and ``cutover`` switches to it, a reader thread polls by name, back to back:

* the DWD's lake table as readers by name resolve it (``lh.lake_table``): its rows from the current snapshot's
  summary, and its columns;
* ``union_read`` of 100 sampled order keys (pushed as a filter), as an application reads fresh rows.

A poll is *complete* when the lake holds every row of the version it resolves to and the 100 keys all come back
with that version's columns (the old ones, or the old ones plus the new column): never a missing row, an empty
table or a mix. Recorded: polls, errors (goal: 0), incomplete polls (goal: 0), the version each poll saw (the
switch must be one step: old polls, then new ones), the build's and the cutover's wall time.

    .venv/bin/python bench/bluegreen.py [--quick] [--orders N] [--out FILE]

File:// warehouse in a temporary directory; Spark local[2], one session. Prints Markdown.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from tiering import machine, order_key  # noqa: E402

from layers.bluegreen import build_green, cutover  # noqa: E402
from layers.project import load_project  # noqa: E402

# bench/layers.py's data (loaded by path: its module name is the `layers` package's)
_spec = importlib.util.spec_from_file_location("bench_layers", ROOT / "bench" / "layers.py")
bench_layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_layers)  # type: ignore[union-attr]

DWD = "dwd.orders_enriched"
NEW_COLUMN = "price_x2"


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def version_2(root: Path) -> Path:
    """examples/tpch with dwd.orders_enriched's SELECT gaining a column at its end."""
    shutil.copytree(ROOT / "examples" / "tpch", root)
    path = root / "models" / f"{DWD}.sql"
    sql = path.read_text()
    head, sep, tail = sql.partition("\nFROM ")
    assert sep, f"{path}: no FROM line to add a column before"
    path.write_text(f"{head},\n  o.o_totalprice * 2 AS {NEW_COLUMN}{sep}{tail}")
    return root


class Reader(threading.Thread):
    """Polls ``DWD`` by name until stopped; keeps one line per poll: (seconds, version or None, complete, error)."""

    def __init__(self, lh, keys, rows: int, old_columns: list[str]) -> None:
        super().__init__(daemon=True)
        self.lh, self.keys, self.rows, self.old = lh, keys, rows, old_columns
        self.stop = threading.Event()
        self.polls: list[tuple[float, int | None, bool, str | None]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                version, complete = self.poll()
                self.polls.append((time.perf_counter() - t0, version, complete, None))
            except Exception as exc:  # noqa: BLE001 - every failure of a reader is what this measures
                self.polls.append((time.perf_counter() - t0, None, False, f"{type(exc).__name__}: {exc}"))

    def poll(self) -> tuple[int, bool]:
        lake = self.lh.lake_table(DWD)
        summary = lake.current_snapshot().summary
        lake_rows = int(summary.get("total-records", 0)) - int(summary.get("total-position-deletes", 0) or 0)
        columns = [f.name for f in lake.schema().fields if not f.name.startswith("__")]
        version = 2 if NEW_COLUMN in columns else 1
        got = self.lh.union_read(DWD, row_filter=bench_layers._in("o_orderkey", self.keys))
        want = [*self.old, NEW_COLUMN] if version == 2 else self.old
        complete = (
            lake_rows == self.rows
            and got.num_rows == len(self.keys)
            and [c for c in got.column_names if not c.startswith("__")] == want
        )
        return version, complete


def measure(tmp: Path, n_orders: int, spark) -> dict:
    v1 = load_project(ROOT / "examples" / "tpch")
    v2 = load_project(version_2(tmp / "v2"))
    lh, _, info = bench_layers.build((tmp / "wh").as_uri(), n_orders, spark, v1)
    rows = lh.lake_table(DWD).scan().count()
    old_columns = [
        c
        for c in lh.union_read(DWD, row_filter=bench_layers._in("o_orderkey", order_key(np.arange(1)))).column_names
        if not c.startswith("__")
    ]
    keys = order_key(np.random.default_rng(7).choice(n_orders, 100, replace=False))
    reader = Reader(lh, keys, rows, old_columns)
    reader.start()
    time.sleep(2)
    t0 = time.perf_counter()
    built = build_green(lh, v2, spark)
    build_s = time.perf_counter() - t0
    say(f"green set {built.tables} built in {build_s:.1f} s (behind: {built.behind})")
    t0 = time.perf_counter()
    cutover(lh, v2)
    cutover_s = time.perf_counter() - t0
    say(f"cutover in {cutover_s:.2f} s")
    time.sleep(3)
    reader.stop.set()
    reader.join()
    versions = [v for _, v, _, e in reader.polls if e is None]
    switches = sum(1 for a, b in zip(versions, versions[1:], strict=False) if a != b)
    return {
        "orders": n_orders,
        "dwd_rows": rows,
        "first_round_s": info["first_round_s"],
        "build_s": build_s,
        "cutover_s": cutover_s,
        "polls": len(reader.polls),
        "errors": [e for *_, e in reader.polls if e is not None],
        "incomplete": sum(1 for _, v, c, e in reader.polls if e is None and not c),
        "old": versions.count(1),
        "new": versions.count(2),
        "switches": switches,
        "poll_max_s": max(s for s, *_ in reader.polls),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="20,000 orders: a smoke run")
    p.add_argument("--orders", type=int, default=500_000, help="orders (default 500,000)")
    p.add_argument("--out", type=Path, help="also write the Markdown here")
    args = p.parse_args()
    n = 20_000 if args.quick else args.orders

    from lakehouse.spark import spark_session

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    spark = spark_session("local[2]")
    with tempfile.TemporaryDirectory(prefix="lakestream-bench-bluegreen-") as name:
        r = measure(Path(name), n, spark)
    ok = not r["errors"] and r["incomplete"] == 0 and r["switches"] == 1 and r["old"] and r["new"]
    out = [
        f"## Blue/green rebuild: readers by name see no gap (`bench/bluegreen.py`, {time.strftime('%Y-%m-%d')})",
        "",
        f"`{' '.join(['bench/bluegreen.py', *sys.argv[1:]])}`, started {started}. "
        f"{machine(('pyarrow', 'pyspark', 'sqlglot'))}",
        "",
        "| orders | DWD rows | green build | cutover | polls (old / new version) | errors | incomplete | "
        "switches | slowest poll | goal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| {r['orders']:,} | {r['dwd_rows']:,} | {r['build_s']:.1f} s | {r['cutover_s']:.2f} s | "
        f"{r['polls']:,} ({r['old']:,} / {r['new']:,}) | {len(r['errors'])} | {r['incomplete']} | {r['switches']} | "
        f"{r['poll_max_s']:.2f} s | no error, every poll complete, one switch: {'met' if ok else 'NOT met'} |",
    ]
    if r["errors"]:
        out += ["", "Errors seen by the reader (first 5):", *(f"- {e}" for e in r["errors"][:5])]
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
