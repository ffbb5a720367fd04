"""Union read of a table evolved 10 times against the same rows in a table never evolved (issue 42).

The evolved table is created with six columns and altered 10 times (columns added, widened, renamed, dropped);
``--rows`` rows (2 M by default) are appended in 11 chunks, each with the schema of its time, and each chunk but
the last is tiered before the next alter: the lake holds data files of 10 schema versions and the log tail
segments of the newest. The baseline table is created with the final schema and gets the same rows (as the
evolved table reads them) in the same 11 chunks with the same tiering, so both have the same files and segments.
Timed: ``union_read`` of each (alternating, median of ``--repeats``). Goal: evolved / baseline throughput >= 0.9.

    .venv/bin/python bench/evolution.py [--rows N] [--repeats N] [--quick] [--only local|s3]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import on_both_backends, parser  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402

BUCKETS = 4
SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), False),
        pa.field("a", pa.int32()),
        pa.field("b", pa.float32()),
        pa.field("s", pa.string()),
        pa.field("t", pa.string()),
        pa.field("u", pa.int64()),
    ]
)
ALTERS = [
    {"add_columns": "x1:string"},
    {"widen": "a:int64"},
    {"rename": "s:s2"},
    {"add_columns": "x2:int64"},
    {"widen": "b:float64"},
    {"drop_columns": "t"},
    {"add_columns": "x3:string"},
    {"rename": "u:u2"},
    {"add_columns": "x4:int64"},
    {"add_columns": "x5:string"},
]


def chunk(schema: pa.Schema, keys: np.ndarray, rng: np.random.Generator) -> pa.Table:
    """Rows of ``keys`` with a value in every column of ``schema``."""
    n = len(keys)
    columns = []
    for f in schema:
        if f.name == "k":
            columns.append(pa.array(keys, pa.int64()))
        elif pa.types.is_integer(f.type):
            columns.append(pa.array(rng.integers(0, 1_000_000, n), pa.int64()).cast(f.type))
        elif pa.types.is_floating(f.type):
            columns.append(pa.array(rng.random(n)).cast(f.type))
        else:
            columns.append(pa.array([f"v{i % 9973:05d}-{f.name}" for i in range(n)], pa.string()))
    return pa.Table.from_arrays(columns, schema=schema)


def append(lh: Lakehouse, name: str, rows: pa.Table, step: int = 200_000) -> None:
    log = lh.log(name)
    for start in range(0, rows.num_rows, step):
        log.append(rows.slice(start, step), op="upsert")


def median_read(lh: Lakehouse, name: str, times: list[float]) -> int:
    t0 = time.perf_counter()
    n = lh.union_read(name).num_rows
    times.append(time.perf_counter() - t0)
    return n


def run(label: str, store: Any, args: Any) -> list[str]:
    rows = 200_000 if args.quick else args.rows
    repeats = 3 if args.quick else args.repeats
    rng = np.random.default_rng(42)
    lh = Lakehouse(store)
    evolved, baseline = "bench.evolved", "bench.baseline"
    lh.create_table(evolved, SCHEMA, primary_key=["k"], buckets=BUCKETS)
    parts = np.array_split(np.arange(rows), len(ALTERS) + 1)
    print(f"[{label}] {rows:,} rows in {len(parts)} chunks, {len(ALTERS)} alters", flush=True)
    for i, keys in enumerate(parts):
        append(lh, evolved, chunk(lh.table(evolved).schema, keys, rng))
        if i < len(ALTERS):
            lh.tier(evolved)
            lh.alter_table(evolved, **ALTERS[i])
    final = lh.table(evolved)
    assert final.schema_version == len(ALTERS)
    state = lh.union_read(evolved, final.schema.names).sort_by("k")
    lh.create_table(baseline, final.schema, primary_key=["k"], buckets=BUCKETS)
    at = 0
    for i, keys in enumerate(parts):
        append(lh, baseline, state.slice(at, len(keys)))
        at += len(keys)
        if i < len(ALTERS):
            lh.tier(baseline)
    ours, theirs = [], []
    for _ in range(repeats):
        n_ours = median_read(lh, evolved, ours)
        n_theirs = median_read(lh, baseline, theirs)
        assert n_ours == n_theirs == rows, (n_ours, n_theirs, rows)
    assert (
        lh.union_read(evolved, final.schema.names)
        .sort_by("k")
        .equals(lh.union_read(baseline, final.schema.names).sort_by("k"))
    )
    ours_s, base_s = statistics.median(ours), statistics.median(theirs)
    ratio = base_s / ours_s  # throughput of the evolved read / the baseline's
    files = len(list(lh.lake_table(evolved).scan().plan_files()))
    print(f"[{label}] union_read evolved {ours_s:.2f} s, never evolved {base_s:.2f} s: {ratio:.2f}", flush=True)
    lh.close()
    return [
        f"### {label}",
        "",
        f"{rows:,} rows, {BUCKETS} buckets, {files} data files of {len(ALTERS)} schema versions plus a "
        f"{len(parts[-1]):,}-row log tail; median of {repeats}.",
        "",
        "| read | seconds | rows/s | throughput vs never evolved | goal |",
        "| --- | --- | --- | --- | --- |",
        f"| `union_read`, never evolved (baseline) | {base_s:.2f} | {rows / base_s:,.0f} | 1.00 | |",
        f"| `union_read`, evolved 10 times | {ours_s:.2f} | {rows / ours_s:,.0f} | {ratio:.2f} "
        f"| >= 0.9: {'met' if ratio >= 0.9 else 'NOT met'} |",
        "",
    ]


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    on_both_backends("Union read of an evolved table", args, run)


if __name__ == "__main__":
    main()
