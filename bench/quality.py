"""Reconciliation of the lake against the log (issue 26), against raw reads measured in the same run.

TPC-H-like orders (the generator of bench/tiering.py) in ``BUCKETS`` buckets:

(i)   **incremental check of one tiering commit of ``--commit`` (1 M) records**, against reading the same new data
      raw (the commit's log range with ``Log.read`` and its added data files with pyarrow): a log table, and a
      primary-key table (1 M upserts, 90 % of existing keys, into 1 M rows: its commit rewrites the buckets'
      files, which the check reads too). Target: >= 0.5x the raw read's throughput.
(ii)  **cost of checking one commit when the table grows 10x**: one commit of ``--small`` (100 k) records into log
      tables of ``--rows`` / 10 and ``--rows`` rows, each checked incrementally. Target: <= 1.2x.
(iii) **full reconciliation** of the ``--rows`` (10 M) table against a raw read of its lake (every live data file)
      and its log (every bucket). Target: >= 0.5x.

Each timing is the median of ``--repeats`` runs; before each incremental run the recorded result is put back,
so every run checks the same commit.

    .venv/bin/python bench/quality.py [--rows N] [--commit N] [--small N] [--quick] [--only local|s3]
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import median_of, on_both_backends, parser  # noqa: E402
from tiering import KEY, SCHEMA, append_all, make_dataset, orders  # noqa: E402

# this file is bench/quality.py: the repository's quality package must come first on the path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakehouse import Lakehouse  # noqa: E402
from lakehouse.iceberg.datafiles import LakeContext  # noqa: E402
from quality.reconcile import reconcile, state_key  # noqa: E402

BUCKETS = 4
failures: list[str] = []


def rows_of(n: int, first: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    clerks = pa.array([f"Clerk#{i:09d}" for i in range(1, 1_001)])
    keys = np.arange(first, first + n, dtype=np.int64) * 4 + 1
    return orders(keys, rng, max(1_000, n // 10), clerks)


def load(lh: Lakehouse, name: str, rows: int, *, pk: bool = False, first: int = 0, seed: int = 1) -> None:
    if pk:
        lh.create_table(name, SCHEMA, primary_key=[KEY], buckets=BUCKETS)
    else:
        lh.create_table(name, SCHEMA, bucket_key=KEY, buckets=BUCKETS)
    step = 1_000_000
    for lo in range(0, rows, step):
        append_all(lh, name, rows_of(min(step, rows - lo), first + lo, seed + lo), "upsert" if pk else "insert")
    lh.tier(name)


def checked_commit(lh: Lakehouse, name: str, data: pa.Table, op: str) -> tuple[Callable[[], None], Any]:
    """Check ``name`` up to now, append ``data``, tier it (one commit); return how to put the recorded result back
    to before that commit, and the commit's snapshot."""
    result = reconcile(lh, name)
    if not result.ok:
        failures.append(f"{name}: {[str(v) for v in result.violations]}")
    saved = lh.store.get(state_key(name)).data
    start = lh.lake_offsets(name)
    append_all(lh, name, data, op)
    lh.tier(name)
    snapshot = lh.lake_table(name).current_snapshot()

    def reset() -> None:
        lh.store.put(state_key(name), saved)

    return reset, (start, lh.lake_offsets(name), snapshot)


def raw_commit_read(lh: Lakehouse, name: str, commit: Any, *, removed: bool = True) -> int:
    """What the commit consists of, read raw: its log range, and the data files it added (and, unless
    ``removed=False``, those it replaced: a primary-key commit rewrites files) with pyarrow."""
    start, end, snapshot = commit
    log = lh.log(name)
    rows = sum(log.read(b, start[b], end[b]).num_rows for b in range(BUCKETS))
    table = lh.lake_table(name)
    ctx = LakeContext.of(lh.store, table)
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=not removed):
            if entry.snapshot_id == snapshot.snapshot_id:
                rows += ctx.read(entry.data_file.file_path).num_rows
    return rows


def raw_full_read(lh: Lakehouse, name: str) -> int:
    log = lh.log(name)
    table = lh.lake_table(name)
    ctx = LakeContext.of(lh.store, table)
    rows = sum(log.read(b).num_rows for b in range(BUCKETS))
    for task in table.scan().plan_files():
        rows += ctx.read(task.file.file_path).num_rows
    return rows


def incremental(lh: Lakehouse, name: str, reset: Callable[[], None], repeats: int) -> tuple[float, Any]:
    seconds, result = median_of(repeats, lambda: reconcile(lh, name), before=reset)
    if not result.ok or result.details.get("mode") != "incremental" or result.details.get("commits_checked") != 1:
        failures.append(f"{name}: incremental check {result.details} {[str(v) for v in result.violations]}")
    return seconds, result


def run(label: str, store: Any, args: Any) -> list[str]:
    lh = Lakehouse(store)
    out = [f"### {label}", "", "| measurement | ours | baseline | ratio | target |", "|---|---|---|---|---|"]

    def line(what: str, ours: float, base: float, ratio: float, target: str, ok: bool, unit: str = "s") -> None:
        met = "met" if ok else "NOT met"
        out.append(f"| {what} | {ours:.2f} {unit} | {base:.2f} {unit} | {ratio:.2f}x | {target} {met} |")
        print(out[-1], flush=True)

    t0 = time.perf_counter()
    # (i) one commit of --commit records, log table and primary-key table
    load(lh, "bench.log1", args.commit)
    reset, commit = checked_commit(lh, "bench.log1", rows_of(args.commit, args.commit * 3, 7), "insert")
    raw, raw_rows = median_of(args.repeats, lambda: raw_commit_read(lh, "bench.log1", commit))
    ours, result = incremental(lh, "bench.log1", reset, args.repeats)
    line(
        f"(i) check of a {args.commit:,}-record commit, log table ({result.rows:,} rows read; raw {raw_rows:,})",
        ours,
        raw,
        raw / ours,
        ">= 0.5x",
        raw / ours >= 0.5,
    )
    ds = make_dataset(args.commit, args.commit, seed=3)
    lh.create_table("bench.pk1", SCHEMA, primary_key=[KEY], buckets=BUCKETS)
    append_all(lh, "bench.pk1", ds.base, "upsert")
    lh.tier("bench.pk1")
    reset, commit = checked_commit(lh, "bench.pk1", ds.changes, "upsert")
    raw, raw_rows = median_of(args.repeats, lambda: raw_commit_read(lh, "bench.pk1", commit))
    new, new_rows = median_of(args.repeats, lambda: raw_commit_read(lh, "bench.pk1", commit, removed=False))
    ours, result = incremental(lh, "bench.pk1", reset, args.repeats)
    line(
        f"(i) check of a {args.commit:,}-change commit, primary-key table ({result.rows:,} rows read; raw: the "
        f"commit's log range, added and replaced files, {raw_rows:,})",
        ours,
        raw,
        raw / ours,
        ">= 0.5x",
        raw / ours >= 0.5,
    )
    line(
        f"(i') the same, baseline without the replaced files ({new_rows:,} rows: the log range and added files)",
        ours,
        new,
        new / ours,
        "(stricter)",
        new / ours >= 0.5,
    )
    # (ii) one commit of --small records into a table of rows/10 and one of rows
    resets = {}
    for name, rows in (("bench.small", args.rows // 10), ("bench.big", args.rows)):
        load(lh, name, rows, seed=11)
        if name == "bench.big":  # (iii) full reconciliation of the big table, before its small commit
            raw, raw_rows = median_of(max(1, args.repeats - 1), lambda: raw_full_read(lh, "bench.big"))
            ours, result = median_of(max(1, args.repeats - 1), lambda: reconcile(lh, "bench.big", full=True))
            if not result.ok:
                failures.append(f"bench.big full: {[str(v) for v in result.violations]}")
            line(
                f"(iii) full reconciliation of {rows:,} rows ({result.rows:,} rows read; raw {raw_rows:,})",
                ours,
                raw,
                raw / ours,
                ">= 0.5x",
                raw / ours >= 0.5,
            )
        resets[name], _ = checked_commit(lh, name, rows_of(args.small, rows * 2, 5), "insert")
    # tens of milliseconds each: many runs, alternating between the tables so drift hits both alike
    samples: dict[str, list[float]] = {name: [] for name in resets}
    for _ in range(max(9, args.repeats)):
        for name, reset in resets.items():
            seconds, _ = incremental(lh, name, reset, 1)
            samples[name].append(seconds)
    times = {name: statistics.median(values) for name, values in samples.items()}
    ratio = times["bench.big"] / times["bench.small"]
    line(
        f"(ii) check of a {args.small:,}-record commit: table of {args.rows:,} rows (ours) vs {args.rows // 10:,} "
        "(baseline)",
        times["bench.big"],
        times["bench.small"],
        ratio,
        "<= 1.2x",
        ratio <= 1.2,
    )
    out += ["", f"({time.perf_counter() - t0:.0f} s including setup)", ""]
    return out


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=10_000_000, help="rows of the big table (iii); rows/10 the small (ii)")
    p.add_argument("--commit", type=int, default=1_000_000, help="records of the commit of (i)")
    p.add_argument("--small", type=int, default=100_000, help="records of the commit of (ii)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.rows, args.commit, args.small, args.repeats = 500_000, 100_000, 10_000, 2
    on_both_backends("Quality: reconciliation (bench/quality.py)", args, run)
    if failures:
        print("\nFAILED:\n" + "\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
