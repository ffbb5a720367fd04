"""Maintenance benchmark: compaction of many small tiered files against a physical baseline, full scans before
and after, and the cost of snapshot expiry, orphan removal and log retention (local file:// warehouse in a
temporary directory).

    python bench/maintenance.py                  # 1,000 files of 10,000 rows (~350 MB of Parquet; a few minutes)
    python bench/maintenance.py --quick          # = --files 80 --buckets 4 --rows-per-file 2000
    python bench/maintenance.py --files 200 --buckets 4 --rows-per-file 5000 --skip-duckdb

Small files: a keyless log table (``--buckets`` buckets, TPC-H-orders-shaped rows from bench/tiering.py's
generator) gets ``--files / --buckets`` rounds of ``lh.log(name).append(batch)`` + ``lh.tier(name)``, each
batch ``--rows-per-file x --buckets`` rows, so every round adds one data file of about ``--rows-per-file`` rows
per bucket, as a table tiered every few minutes does. Why not one bucket and 1,000 rounds: a tiering commit's
cost grows with the table's snapshot count (pyiceberg rewrites and copies the whole metadata: 0.03 s at the first
snapshot, 0.3-0.8 s at the 300th), so 1,000 rounds of one table would take 15-20 minutes here (300 took 98 s),
while 125 rounds of 8 buckets build 1,000 files of the same kind in one or two.

Measured, in one run:

* Baseline: pyarrow reads the table's data files (``pq.read_table`` of each, concatenated) and writes one
  zstd Parquet file, nothing else. MB/s of input Parquet files.
* Ours: ``lh.compact(name, target_file_size=..., min_input_files=2)`` of the same files, local executor with
  its default parallelism (one thread per core, 2 here); and, on a second table built the same way, with
  ``workers=1`` (skip with ``--skip-single-thread``). Ratio = baseline seconds / our seconds; per thread =
  ratio / threads (the executor's parallelism, capped by the cores and the number of groups). Goal: >= 0.7.
  Compared per core with the issue's public reference: a Spark rewrite of 193 GB in 17,358 files at about
  126 MB/s on a 16-vCPU machine.
* Full scans of the table before and after compaction, median of ``--read-repeats``: ``lh.lake_read`` (the
  pyiceberg scan) and DuckDB's ``iceberg_scan`` of the current metadata file (skip with ``--skip-duckdb``).
* After compaction, as information: ``lh.expire_snapshots(older_than=0, retain_last=1)``,
  ``lh.remove_orphans(older_than=0)``, ``lh.apply_log_retention(retention=0)``, then one more small tiering
  round and ``lh.expire_snapshots`` again (the newest tiering snapshot is never expired, so the files compaction
  replaced are only freed once a later tiering snapshot exists).

Prints a Markdown section (also written to ``--out``); exits non-zero if a measurement failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _common import finish, parser  # noqa: E402
from tiering import SCHEMA, Results, Timed, check, machine, order_key, orders, say, timed  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402
from lakehouse.duckdb_reader import duckdb_connection  # noqa: E402

MB = 1e6
MiB = 1 << 20
TABLE = "bench.events"
TABLE_1 = "bench.events_1thread"
POOL_ROWS = 2_000_000  # distinct generated rows; rounds cycle through them (a log table: keys may repeat)
# The public reference: a Spark rewrite of 193 GB in 17,358 files at about 126 MB/s on 16 vCPUs.
REF_GB, REF_FILES, REF_MBS, REF_VCPUS = 193, 17_358, 126, 16

# ---- data ------------------------------------------------------------------------------------------------


def make_pool(rows: int, seed: int) -> pa.Table:
    """``rows`` TPC-H-orders-shaped rows (bench/tiering.py's generator)."""
    rng = np.random.default_rng(seed)
    customers = max(1_000, rows // 10)
    clerks = pa.array([f"Clerk#{i:09d}" for i in range(1, max(1_000, rows // 1_500) + 1)])
    parts = []
    for lo in range(0, rows, 1_000_000):
        hi = min(rows, lo + 1_000_000)
        parts.append(orders(order_key(np.arange(lo, hi)), rng, customers, clerks))
    return pa.concat_tables(parts)


def build_small_files(lh: Lakehouse, name: str, pool: pa.Table, args: argparse.Namespace) -> dict[str, Any]:
    """``rounds`` x (append one batch to the log, tier it): one small data file per bucket and round."""
    lh.create_table(name, SCHEMA, bucket_key="o_orderkey", buckets=args.buckets)
    log = lh.log(name)
    batch_rows = args.rows_per_file * args.buckets
    rounds = args.files // args.buckets
    t0 = time.perf_counter()
    first = last = None
    for i in range(rounds):
        lo = (i * batch_rows) % (pool.num_rows - batch_rows + 1)
        log.append(pool.slice(lo, batch_rows), "insert")
        tiered = lh.tier(name)
        check(tiered.rows == batch_rows, f"{name}: round {i} tiered {tiered.rows} rows, expected {batch_rows}")
        if i == 0:
            first = tiered
        last = tiered
        if (i + 1) % max(1, rounds // 10) == 0:
            elapsed = time.perf_counter() - t0
            say(f"{name}: {i + 1}/{rounds} rounds, {elapsed:.1f} s (last round {tiered.seconds:.2f} s)")
    files = data_files(lh, name)
    check(len(files) == rounds * args.buckets, f"{name}: {len(files)} data files, expected {rounds * args.buckets}")
    return {
        "seconds": time.perf_counter() - t0,
        "rounds": rounds,
        "rows": rounds * batch_rows,
        "files": len(files),
        "bytes": sum(size for _, size in files),
        "first_round": first,
        "last_round": last,
    }


def data_files(lh: Lakehouse, name: str) -> list[tuple[str, int]]:
    """(local path, size) of the live data files of the table's current snapshot."""
    out = []
    for task in lh.lake_table(name).scan().plan_files():
        location = task.file.file_path
        check(location.startswith("file://"), f"not a local file: {location}")
        out.append((unquote(urlparse(location).path), task.file.file_size_in_bytes))
    return out


# ---- baseline and ours -----------------------------------------------------------------------------------


def baseline(files: list[tuple[str, int]], tmp: Path, rows: int) -> Timed:
    """pyarrow: read each Parquet file, concatenate, write one zstd Parquet file; nothing else."""
    out = tmp / "baseline.parquet"
    pq.write_table(pq.read_table(files[0][0]), out, compression="zstd")  # warm-up (first-use costs), untimed

    def run() -> int:
        table = pa.concat_tables([pq.read_table(path) for path, _ in files])
        pq.write_table(table, out, compression="zstd")
        return table.num_rows

    result = timed(run)
    check(result.value == rows, f"baseline wrote {result.value} rows, expected {rows}")
    result.value = out.stat().st_size
    out.unlink()
    return result


def compact(lh: Lakehouse, name: str, args: argparse.Namespace, workers: int | None) -> Timed:
    before = len(data_files(lh, name))
    result = timed(
        lambda: lh.compact(name, target_file_size=args.target_file_size * MiB, min_input_files=2, workers=workers)
    )
    c = result.value
    check(c.snapshot_id is not None, f"{name}: compaction did nothing ({c})")
    check(c.files_before == before, f"{name}: files_before {c.files_before}, the table had {before}")
    after = len(data_files(lh, name))
    check(c.files_after == after, f"{name}: files_after {c.files_after}, the table has {after}")
    say(
        f"lh.compact({name}, workers={workers}): {c.files_rewritten} files ({c.bytes_read / MB:.1f} MB) -> "
        f"{c.files_after} files ({c.bytes_written / MB:.1f} MB) in {result.seconds:.2f} s "
        f"({c.groups} groups; {result.cores:.2f} CPU cores busy)"
    )
    return result


def threads_of(c: Any, workers: int | None) -> int:
    """Threads the compaction could use: the executor's workers, capped by the cores and the groups."""
    cores = os.cpu_count() or 1
    return max(1, min(workers or cores, cores, c.groups or 1))


# ---- scans -----------------------------------------------------------------------------------------------


def median_of(runs: list[Timed]) -> Timed:
    return sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]


def lake_scan(lh: Lakehouse, name: str, rows: int, repeats: int) -> Timed:
    runs = []
    for _ in range(repeats):
        run = timed(lambda: lh.lake_read(name))
        check(run.value.num_rows == rows, f"lake_read({name}) returned {run.value.num_rows} rows, expected {rows}")
        run.value = None
        runs.append(run)
    return median_of(runs)


def duckdb_scan(con: Any, lh: Lakehouse, name: str, rows: int, repeats: int) -> Timed:
    """``SELECT * FROM iceberg_scan(<current metadata file>)`` into an Arrow table, like ``lake_read``."""
    metadata = lh.catalog.table_location(name)
    runs = []
    for _ in range(repeats):
        run = timed(lambda: con.execute("SELECT * FROM iceberg_scan(?)", [metadata]).to_arrow_table())
        check(run.value.num_rows == rows, f"iceberg_scan returned {run.value.num_rows} rows, expected {rows}")
        run.value = None
        runs.append(run)
    return median_of(runs)


def scans(lh: Lakehouse, con: Any, rows: int, repeats: int, when: str, res: Results) -> None:
    res.values[f"lake_{when}"] = t = lake_scan(lh, TABLE, rows, repeats)
    say(f"lake_read {when} compaction: {t.seconds:.2f} s (median of {repeats})")
    if con is not None:
        res.values[f"duckdb_{when}"] = t = duckdb_scan(con, lh, TABLE, rows, repeats)
        say(f"DuckDB iceberg_scan {when} compaction: {t.seconds:.2f} s (median of {repeats})")


# ---- maintenance after compaction ------------------------------------------------------------------------


def cleanup(lh: Lakehouse, pool: pa.Table, res: Results) -> None:
    zero = timedelta(0)
    res.values["expire"] = timed(lambda: lh.expire_snapshots(TABLE, older_than=zero, retain_last=1))
    res.values["orphans"] = timed(lambda: lh.remove_orphans(TABLE, older_than=zero, unsafe_orphan_age=True))
    res.values["retention"] = timed(lambda: lh.apply_log_retention(TABLE, retention=zero))
    lh.log(TABLE).append(pool.slice(0, 1_000), "insert")
    res.values["extra_round"] = timed(lambda: lh.tier(TABLE))
    res.values["expire_2"] = timed(lambda: lh.expire_snapshots(TABLE, older_than=zero, retain_last=1))
    res.values["orphans_2"] = timed(lambda: lh.remove_orphans(TABLE, older_than=zero, unsafe_orphan_age=True))
    for key in ("expire", "orphans", "retention", "expire_2", "orphans_2"):
        say(f"{key}: {res.values[key].seconds:.2f} s, {res.values[key].value}"[:400])


# ---- report ----------------------------------------------------------------------------------------------


def _met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def report(args: argparse.Namespace, res: Results, started: str) -> str:
    v = res.values
    out = [
        f"## Maintenance (`bench/maintenance.py`, {time.strftime('%Y-%m-%d')})",
        "",
        f"`{' '.join(['bench/maintenance.py', *sys.argv[1:]])}`, started {started}. {v['machine']} Load average at "
        f"the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
    ]
    build = v.get("build")
    if build:
        first, last = build["first_round"], build["last_round"]
        out += [
            f"Table: a keyless log table of {args.buckets} buckets, {build['rounds']:,} rounds of append + `lh.tier` "
            f"of {args.rows_per_file * args.buckets:,} TPC-H-orders-shaped rows: {build['files']:,} data files of "
            f"about {args.rows_per_file:,} rows ({build['bytes'] / build['files'] / 1e3:,.0f} kB each, "
            f"{build['bytes'] / MB:,.1f} MB in all, {build['rows']:,} rows); local disk (file:// warehouse, "
            f"temporary directory, files in the page cache). Building it took {build['seconds']:.1f} s (not timed "
            f"below); a tiering round took {first.seconds:.2f} s at the first snapshot and {last.seconds:.2f} s at "
            f"the {build['rounds']:,}th (commit {first.phases.get('commit', 0):.2f} -> "
            f"{last.phases.get('commit', 0):.2f} s). Compaction: `target_file_size={args.target_file_size} MiB, "
            "min_input_files=2`. CPU cores busy = CPU seconds of this process / wall seconds.",
            "",
        ]
    base = v.get("baseline")
    out += [
        "| compaction | files in -> out | input MB | output MB | seconds | MB/s (input) | threads | CPU cores busy "
        "| ratio to baseline | ratio per thread | MB/s per thread |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    goals = []
    if base and build:
        mbs = build["bytes"] / MB / base.seconds
        out.append(
            "| baseline: pyarrow `pq.read_table` of each file, concat, one zstd Parquet file "
            f"| {build['files']:,} -> 1 "
            f"| {build['bytes'] / MB:,.1f} | {base.value / MB:,.1f} | {base.seconds:.2f} | {mbs:,.1f} | 1 "
            f"| {base.cores:.2f} | 1.00 | 1.00 | {mbs:,.1f} |"
        )
    per_thread_mbs = {}
    for label, key, workers in (
        ("**ours, `lh.compact`, local executor (default parallelism)**", "compact", None),
        ("ours, `lh.compact(workers=1)`, a second table built the same way", "compact_1", 1),
    ):
        t = v.get(key)
        if t is None:
            continue
        c = t.value
        threads = threads_of(c, workers)
        mbs = c.bytes_read / MB / t.seconds
        per_thread_mbs[key] = mbs / threads
        ratio = base.seconds / t.seconds * c.bytes_read / build["bytes"] if base and build else float("nan")
        out.append(
            f"| {label} | {c.files_before:,} -> {c.files_after:,} | {c.bytes_read / MB:,.1f} | "
            f"{c.bytes_written / MB:,.1f} | {t.seconds:.2f} | {mbs:,.1f} | {threads} | {t.cores:.2f} | {ratio:.2f} "
            f"| {ratio / threads:.2f} | {mbs / threads:,.1f} |"
        )
        if base:
            goals.append(
                f"compaction throughput per thread >= 0.7x the baseline, {threads} thread{'s' if threads > 1 else ''}: "
                f"{_met(ratio / threads >= 0.7)} ({ratio / threads:.2f}; ratio {ratio:.2f})"
            )
    ref_per_vcpu = REF_MBS / REF_VCPUS
    out += [
        f"| reference (the issue): Spark rewrite of {REF_GB} GB in {REF_FILES:,} files, 16 vCPUs "
        f"| {REF_FILES:,} -> ? | {REF_GB * 1000:,} | | ~{REF_GB * 1000 / REF_MBS:,.0f} | ~{REF_MBS} | {REF_VCPUS} | "
        f"| | | {ref_per_vcpu:.1f} |",
        "",
    ]
    if per_thread_mbs:
        parts = [
            f"{'one thread' if key == 'compact_1' else 'default parallelism'}: {mbs:,.1f} MB/s per thread = "
            f"{mbs / ref_per_vcpu:.1f}x the reference's {ref_per_vcpu:.1f} MB/s per vCPU"
            for key, mbs in per_thread_mbs.items()
        ]
        out += [
            "Per core against the public reference (a Spark rewrite of 193 GB in 17,358 files ran at about 126 MB/s "
            f"on a 16-vCPU machine, so ~{ref_per_vcpu:.1f} MB/s per vCPU): ours {'; '.join(parts)}. Not like for "
            f"like: the reference read ~{REF_GB * 1000 / REF_FILES:.0f} MB files from remote storage on a cluster; "
            "ours reads small files from the page cache.",
            "",
        ]

    if "lake_before" in v:
        rows = build["rows"] if build else 0
        files_after = v["compact"].value.files_after if "compact" in v else "?"
        out += [
            f"| full scan of {rows:,} rows (median of {args.read_repeats}) | before: {build['files']:,} files "
            f"| after: {files_after} files | before / after |",
            "| --- | --- | --- | --- |",
        ]
        for label, key in (("`lh.lake_read` (pyiceberg scan)", "lake"), ("DuckDB `iceberg_scan` -> Arrow", "duckdb")):
            before, after = v.get(f"{key}_before"), v.get(f"{key}_after")
            if before is None:
                continue
            out.append(
                f"| {label} | {before.seconds:.2f} s | {after.seconds:.2f} s | {before.seconds / after.seconds:.2f}x |"
                if after
                else f"| {label} | {before.seconds:.2f} s | n/a | |"
            )
        out.append("")

    if "expire" in v:
        e, o, r = v["expire"], v["orphans"], v["retention"]
        e2, o2, x = v["expire_2"], v["orphans_2"], v["extra_round"]
        out += [
            "| after compaction (information) | seconds | files deleted | bytes freed | what |",
            "| --- | --- | --- | --- | --- |",
            f"| `lh.expire_snapshots(older_than=0, retain_last=1)` | {e.seconds:.2f} | {e.value.files_deleted:,} "
            f"| {e.value.bytes_freed / MB:,.2f} MB | {len(e.value.expired):,} snapshots expired, "
            f"{e.value.snapshots_left} left |",
            f"| `lh.remove_orphans(older_than=0)` | {o.seconds:.2f} | {len(o.value.files):,} "
            f"| {o.value.bytes / MB:,.2f} MB | |",
            f"| `lh.apply_log_retention(retention=0)` | {r.seconds:.2f} | {r.value.segments_deleted:,} segments "
            f"| {r.value.bytes_freed / MB:,.2f} MB | {r.value.records_deleted:,} records |",
            f"| one more tiering round (1,000 rows), then `lh.expire_snapshots` again | {e2.seconds:.2f} "
            f"| {e2.value.files_deleted:,} | {e2.value.bytes_freed / MB:,.2f} MB | {len(e2.value.expired):,} snapshots "
            f"expired, {e2.value.snapshots_left} left (the round: {x.seconds:.2f} s) |",
            f"| then `lh.remove_orphans(older_than=0)` again | {o2.seconds:.2f} | {len(o2.value.files):,} "
            f"| {o2.value.bytes / MB:,.2f} MB | |",
            "",
        ]
        if e2.value.bytes_freed > e.value.bytes_freed:
            out += [
                "Expiry right after compaction cannot free the replaced data files: the newest tiering snapshot (which "
                "holds the offsets) is never expired and still references them. They are freed by the first expiry "
                "after the next tiering round.",
                "",
            ]
    if goals:
        out += ["Goals:", "", *[f"* {g}" for g in goals], ""]
    if res.notes:
        out += [" ".join(res.notes), ""]
    if res.failures:
        out += ["Failed measurements:", "", *[f"* {f}" for f in res.failures], ""]
    return "\n".join(out)


# ---- main ------------------------------------------------------------------------------------------------


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--files", type=int, default=1_000, help="small data files in the table (default 1,000)")
    p.add_argument("--buckets", type=int, default=8, help="log buckets: data files per tiering round (default 8)")
    p.add_argument("--rows-per-file", type=int, default=10_000, help="rows per bucket and round (default 10,000)")
    p.add_argument("--target-file-size", type=int, default=128, help="compaction target file size, MiB (default 128)")
    p.add_argument("--read-repeats", type=int, default=3)
    p.add_argument("--skip-duckdb", action="store_true", help="no DuckDB iceberg_scan")
    p.add_argument("--skip-single-thread", action="store_true", help="no second table compacted with workers=1")
    p.add_argument("--out", type=Path, help="also write the Markdown here")
    p.add_argument("--seed", type=int, default=20261122)
    args = p.parse_args()
    if args.quick:
        args.files, args.buckets, args.rows_per_file = 80, 4, 2_000
    if args.only == "s3":
        print("bench/maintenance.py runs on the local backend only; nothing to do for --only s3")
        return
    if args.files < 2 * args.buckets or args.files % args.buckets:
        p.error("--files must be a multiple of --buckets, at least two rounds")
    if not all(callable(getattr(Lakehouse, m, None)) for m in ("compact", "expire_snapshots", "remove_orphans")):
        print("lakestream maintenance API (Lakehouse.compact, ...) not available yet", flush=True)
        sys.exit(1)

    started = time.strftime("%Y-%m-%d %H:%M")
    res = Results()
    res.values["machine"] = machine(("pyarrow", "pyiceberg", "duckdb"))
    batch_rows = args.rows_per_file * args.buckets
    pool_rows = min(args.files // args.buckets, max(1, POOL_ROWS // batch_rows)) * batch_rows
    gen = timed(lambda: make_pool(pool_rows, args.seed))
    pool = gen.value
    say(f"generated {pool_rows:,} rows in {gen.seconds:.1f} s ({pool.nbytes / MB:,.0f} MB as Arrow)")
    con = None
    if not args.skip_duckdb:
        con = res.attempt("DuckDB with the iceberg extension", duckdb_connection)

    with tempfile.TemporaryDirectory(prefix="lakestream-bench-maintenance-") as tmp_dir:
        tmp = Path(tmp_dir)
        warehouse = tmp / "warehouse"
        warehouse.mkdir()
        lh = Lakehouse.open(warehouse.as_uri())
        build = res.attempt("building the small files", lambda: build_small_files(lh, TABLE, pool, args))
        if build:
            res.values["build"] = build
            say(f"{build['files']:,} files, {build['bytes'] / MB:,.1f} MB, built in {build['seconds']:.1f} s")
            second = None
            if not args.skip_single_thread:
                second = res.attempt("building the second table", lambda: build_small_files(lh, TABLE_1, pool, args))
            rows = build["rows"]
            res.attempt("scans before compaction", lambda: scans(lh, con, rows, args.read_repeats, "before", res))
            files = data_files(lh, TABLE)
            b = res.attempt("baseline", lambda: baseline(files, tmp, rows))
            if b:
                res.values["baseline"] = b
                say(f"baseline: {len(files):,} files -> one zstd Parquet file in {b.seconds:.2f} s")
            c = res.attempt("ours: lh.compact", lambda: compact(lh, TABLE, args, None))
            if c:
                res.values["compact"] = c
                res.attempt("scans after compaction", lambda: scans(lh, con, rows, args.read_repeats, "after", res))
                res.attempt("expiry, orphans, retention", lambda: cleanup(lh, pool, res))
            if second:
                c1 = res.attempt("ours: lh.compact(workers=1)", lambda: compact(lh, TABLE_1, args, 1))
                if c1:
                    res.values["compact_1"] = c1
        lh.close()
    finish(report(args, res, started), args.out, res.failures)


if __name__ == "__main__":
    main()
