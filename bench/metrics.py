"""Metrics per commit (issue 44), against reading the commit's changes raw, measured in the same run.

TPC-H-like orders (the generator of bench/tiering.py) in ``BUCKETS`` buckets, primary-key tables:

(i)  **metrics of one tiering commit of ``--commit`` changes** (upserts of existing keys, 10 % new keys, and
     deletes), against reading the same commit's net changelog raw (`Lakehouse.changes` between its parent's
     offsets and its own: the log range and the old state of the changed keys, nothing aggregated). Target:
     >= 0.5x the raw read's throughput.
(ii) **cost of one commit's metrics when the table grows 10x**: the same ``--small`` changes committed into
     tables of ``--rows`` / 10 and ``--rows`` rows: new keys (ii), and updates and deletes of keys spread over
     the whole table (ii'), with the raw changes read's own growth for comparison (it looks up the changed
     keys' old state: key columns of every row group whose statistics may hold one). Target: <= 1.2x.

Both in the driver (the budget is raised over the commit; Spark's executors run the same per-bucket function).
Each timing is the median of ``--repeats`` runs; before each the metrics table is dropped and its record put
back to the parent commit, so every run computes exactly the commit measured (and appends its metrics).

    .venv/bin/python bench/metrics.py [--rows N] [--commit N] [--small N] [--quick] [--only local|s3]
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
from tiering import KEY, SCHEMA, append_all, make_dataset  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakehouse import Lakehouse  # noqa: E402
from quality.metrics import collect_metrics, is_new_for  # noqa: E402
from quality.metrics.table import METRICS_TABLE, append_metrics, metrics_table  # noqa: E402

BUCKETS = 4
failures: list[str] = []


def committed(
    lh: Lakehouse, name: str, rows: int, changes: int, seed: int, *, new_keys: bool = False
) -> tuple[Callable[[], None], dict, dict]:
    """A primary-key table of ``rows`` rows, then one tiering commit of ``changes`` upserts (10 % new keys) and
    ``changes`` / 20 deletes (``new_keys``: ``changes`` rows of keys after the table's, e.g. new orders); returns
    how to put the metrics table back to before that commit, and the commit's start and end offsets."""
    ds = make_dataset(rows, changes, seed=seed)
    lh.create_table(name, SCHEMA, primary_key=[KEY], buckets=BUCKETS)
    append_all(lh, name, ds.base, "upsert")
    lh.tier(name)
    parent = lh.lake_table(name).current_snapshot()
    start = lh.lake_offsets(name)
    if new_keys:
        first = pa.compute.max(ds.base.column(KEY)).as_py() + 1
        keys = pa.array(np.arange(first, first + changes, dtype=np.int64))
        append_all(lh, name, ds.changes.set_column(0, KEY, keys), "upsert")
    else:
        append_all(lh, name, ds.changes, "upsert")
        append_all(lh, name, ds.base.take(pa.array(np.arange(0, rows, 20)[: changes // 20])), "delete")
    lh.tier(name)
    end = lh.lake_offsets(name)

    def reset() -> None:
        if metrics_table(lh) is not None:
            lh.catalog.drop_table(METRICS_TABLE)
        append_metrics(lh, [], {name: (parent.snapshot_id, parent.timestamp_ms)}, is_new_for(lh))

    return reset, start, end


def run(label: str, store: Any, args: Any) -> list[str]:
    lh = Lakehouse(store)
    out = [f"### {label}", "", "| measurement | ours | baseline | ratio | target |", "|---|---|---|---|---|"]

    def line(what: str, ours: float, base: float, ratio: float, target: str, ok: bool) -> None:
        met = "met" if ok else "NOT met"
        out.append(f"| {what} | {ours:.2f} s | {base:.2f} s | {ratio:.2f}x | {target} {met} |")
        print(out[-1], flush=True)

    def metrics(name: str) -> int:
        written = collect_metrics(lh, tables=[name], driver_budget_rows=10 * args.commit)
        if not written:
            failures.append(f"{name}: no metrics written")
        return written

    t0 = time.perf_counter()
    # (i) one commit of --commit changes into a table of as many rows
    reset, start, end = committed(lh, "bench.m1", args.commit, args.commit, seed=3)
    raw, raw_rows = median_of(args.repeats, lambda: lh.changes("bench.m1", start, end).num_rows)
    ours, written = median_of(args.repeats, lambda: metrics("bench.m1"), before=reset)
    line(
        f"(i) metrics of a {args.commit:,}-change commit ({written} metric rows) vs reading its changes raw "
        f"({raw_rows:,} rows)",
        ours,
        raw,
        raw / ours,
        ">= 0.5x",
        raw / ours >= 0.5,
    )
    # (ii) the same --small changes into a table of rows/10 and one of rows: new keys (ii), and updates and
    # deletes of keys spread over the whole table (ii'), whose old state the changes read looks up by key
    for label, new_keys, suffix in (("(ii) new keys", True, "n"), ("(ii') updates and deletes", False, "u")):
        small, big = f"bench.small{suffix}", f"bench.big{suffix}"
        resets, ranges = {}, {}
        for name, rows in ((small, args.rows // 10), (big, args.rows)):
            resets[name], *ranges[name] = committed(lh, name, rows, args.small, seed=5, new_keys=new_keys)
        samples: dict[str, list[float]] = {name: [] for name in resets}
        raws: dict[str, list[float]] = {name: [] for name in resets}
        for _ in range(max(5, args.repeats)):  # alternating between the tables so drift hits both alike
            for name, reset in resets.items():
                seconds, _ = median_of(1, lambda name=name: metrics(name), before=reset)
                samples[name].append(seconds)
                seconds, _ = median_of(1, lambda name=name, r=ranges[name]: lh.changes(name, *r).num_rows)
                raws[name].append(seconds)
        times = {name: statistics.median(values) for name, values in samples.items()}
        raw = {name: statistics.median(values) for name, values in raws.items()}
        ratio = times[big] / times[small]
        line(
            f"{label}: metrics of a {args.small:,}-change commit, table of {args.rows:,} rows (ours) vs "
            f"{args.rows // 10:,} (baseline); its raw changes read {raw[big]:.2f} s vs {raw[small]:.2f} s: "
            f"{raw[big] / raw[small]:.2f}x",
            times[big],
            times[small],
            ratio,
            "<= 1.2x",
            ratio <= 1.2,
        )
    out += ["", f"({time.perf_counter() - t0:.0f} s including setup)", ""]
    return out


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=2_000_000, help="rows of the big table (ii); rows/10 the small")
    p.add_argument("--commit", type=int, default=500_000, help="changes of the commit of (i)")
    p.add_argument("--small", type=int, default=50_000, help="changes of the commit of (ii)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.rows, args.commit, args.small, args.repeats = 200_000, 50_000, 5_000, 2
    on_both_backends("Quality: metrics per commit (bench/metrics.py)", args, run)
    if failures:
        print("\nFAILED:\n" + "\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
