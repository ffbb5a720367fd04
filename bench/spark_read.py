"""Spark read benchmark: ``spark.read.format("lakestream")`` against the ``read_table`` it replaced, and the
Python union read on the one read plan against the union read it replaced (local file:// warehouse in a
temporary directory, Spark local[2]).

    python bench/spark_read.py                    # 10 M rows, 1 M untiered upserts (a few minutes)
    python bench/spark_read.py --quick            # = --rows 1000000 --tail 100000
    python bench/spark_read.py --driver-java-options="-XX:+UseSerialGC -XX:TieredStopAtLevel=1"  # C1 only

Data: ``--rows`` TPC-H-orders-shaped rows (bench/tiering.py's generator) tiered into a primary-key table of
``--buckets`` buckets, then ``--tail`` upserts of existing keys left in the log: every read merges a tail.

Measured, interleaved, ``--repeats`` times each (medians), in one Spark session:

* new: ``spark.read.format("lakestream").load(name)`` (`lakehouse.spark.source`: a Python data source, the
  read plan's buckets as input partitions);
* old: the ``read_table`` of before (kept below as `old_read_table`: ``spark.range(n).mapInArrow`` with one
  task per bucket, its own copy of the planning);
* each read is forced by ``df.write.format("noop")``: every row crosses from the Python workers into the JVM,
  nothing is collected. Goal: new >= 0.9x old (rows/s).
* Python: ``lh.union_read(name)`` (the read plan, executed in place) against the union read of before (kept
  below as `old_union_read`: ``table.scan().to_arrow()`` + the merge). Goal: no slower.

Prints a Markdown section (also written to ``--out``); exits non-zero if a measurement failed.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _common import finish, parser  # noqa: E402
from tiering import SCHEMA, machine, order_key, orders, say  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402

NAME = "bench.orders"
KEY = "o_orderkey"


# ---- the implementations replaced (baselines) ---------------------------------------------------------------


def old_read_table(spark: Any, lh: Lakehouse, name: str) -> Any:
    """``lakehouse.spark.read_table(spark, lh, name, union=True)`` as it was before the data source."""
    from pyiceberg.expressions.visitors import bind
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import ArrowScan, expression_to_pyarrow
    from pyspark.sql.pandas.types import from_arrow_schema

    from lakehouse.iceberg.layout import check_lake_layout
    from lakehouse.iceberg.offsets import lake_offsets
    from lakehouse.read.union import merge_batches, output_columns, parse_filter, read_tail

    definition = lh.table(name)
    table = lh.lake_table(name)
    check_lake_layout(table.metadata, definition)
    pk = definition.primary_key
    out = output_columns(table, None)
    scan_cols = out + [c for c in pk if c not in out]
    expr = parse_filter(None, table.schema())
    scan = table.scan(row_filter=expr, selected_fields=tuple(scan_cols))
    projected = scan.projection()
    arrow_out = projected.as_arrow()
    target = pa.schema([arrow_out.field(c) for c in out])
    by_bucket: dict[int, list] = {b: [] for b in range(definition.buckets)}
    for task in scan.plan_files():
        partition = task.file.partition
        by_bucket[partition[len(partition) - 1]].append(task)
    offsets = lake_offsets(table.metadata, definition.buckets, name=str(definition.name))
    metadata = table.metadata
    io_props = dict(lh.catalog_properties())
    store_url, store_options = lh.store.url, lh.store.connection_options()
    definition_json = definition.to_json()
    items = [(b, tuple(tasks)) for b, tasks in sorted(by_bucket.items())]

    def run(batches):
        from lakehouse.iceberg.datafiles import shared_store
        from lakehouse.log import Log
        from lakehouse.table.definition import TableDefinition

        for batch in batches:
            for i in batch.column(0).to_pylist():
                bucket, tasks = items[i]
                io = load_file_io(io_props, metadata.location)
                lake = ArrowScan(metadata, io, projected, expr).to_record_batches(tasks) if tasks else iter(())
                tail_filter = expression_to_pyarrow(bind(metadata.schema(), expr, case_sensitive=True))
                log_ = Log(shared_store(store_url, store_options), TableDefinition.from_json(definition_json))
                try:
                    tail = read_tail(log_, {bucket: offsets[bucket]}, primary_key=pk)
                finally:
                    log_.close()
                yield from merge_batches(
                    lake, tail, primary_key=pk, columns=out, tail_filter=tail_filter, schema=arrow_out
                )

    n = len(items)
    return spark.range(0, n, 1, numPartitions=n).mapInArrow(run, from_arrow_schema(target))


def old_union_read(lh: Lakehouse, name: str) -> pa.Table:
    """``lh.union_read(name)`` as it was before the read plan (no columns, no filter, no as_of)."""
    from pyiceberg.expressions.visitors import bind
    from pyiceberg.io.pyarrow import expression_to_pyarrow

    from lakehouse.iceberg.layout import check_lake_layout
    from lakehouse.iceberg.offsets import lake_offsets
    from lakehouse.read.union import merge_batches, output_columns, parse_filter, read_tail

    table, log_ = lh.lake_table(name), lh.log(name)
    definition = log_.definition
    check_lake_layout(table.metadata, definition)
    pk = definition.primary_key
    out = output_columns(table, None)
    expr = parse_filter(None, table.schema())
    offsets = lake_offsets(table.metadata, definition.buckets, name=str(definition.name))
    tail = read_tail(log_, offsets, primary_key=pk)
    tail_filter = expression_to_pyarrow(bind(table.schema(), expr, case_sensitive=True))
    data = table.scan(row_filter=expr, selected_fields=tuple(out + [c for c in pk if c not in out])).to_arrow()
    merged = merge_batches(
        iter(data.to_batches()), tail, primary_key=pk, columns=out, tail_filter=tail_filter, schema=data.schema
    )
    return pa.Table.from_batches(list(merged))


# ---- run ---------------------------------------------------------------------------------------------------


def build(lh: Lakehouse, rows: int, tail: int, buckets: int, seed: int) -> int:
    customers, clerks = max(1_000, rows // 10), pa.array([f"Clerk#{i:09d}" for i in range(1, 1_001)])
    lh.create_table(NAME, SCHEMA, primary_key=[KEY], buckets=buckets)
    log = lh.log(NAME)
    t0 = time.perf_counter()
    for lo in range(0, rows, 1_000_000):
        hi = min(rows, lo + 1_000_000)
        log.append(orders(order_key(np.arange(lo, hi)), np.random.default_rng(seed + lo), customers, clerks), "upsert")
    say(f"appended {rows:,} rows in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    lh.tier(NAME)
    say(f"tiered in {time.perf_counter() - t0:.1f} s")
    rng = np.random.default_rng(seed + 1)
    keys = order_key(np.sort(rng.choice(rows, tail, replace=False)))
    log.append(orders(keys, rng, customers, clerks), "upsert")
    return rows


def median_seconds(fn: Any, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--tail", type=int, default=1_000_000, help="untiered upserts of existing keys")
    p.add_argument("--buckets", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--python-repeats", type=int, default=3)
    p.add_argument("--skip-python", action="store_true", help="no Python union read comparison")
    p.add_argument("--seed", type=int, default=20261125)
    p.add_argument(
        "--driver-java-options",
        help="spark.driver.extraJavaOptions (default: spark_session's, serial GC + C1 only for local masters)",
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if args.quick:
        args.rows, args.tail = 1_000_000, 100_000
    started = time.strftime("%Y-%m-%d %H:%M")
    failures: list[str] = []
    lines = [f"## Spark read (`bench/spark_read.py`, {started})", "", machine(("pyarrow", "pyiceberg", "pyspark")), ""]
    with tempfile.TemporaryDirectory(prefix="lakestream-bench-") as tmp:
        lh = Lakehouse.open(Path(tmp, "wh").as_uri())
        rows = build(lh, args.rows, args.tail, args.buckets, args.seed)
        from lakehouse.spark import spark_session
        from lakehouse.spark.source import register

        conf = {"spark.driver.extraJavaOptions": args.driver_java_options} if args.driver_java_options else {}
        spark = spark_session(master="local[2]", **conf)
        jvm = args.driver_java_options or "-XX:+UseG1GC (spark_session's default)"
        register(spark, lh)

        def new() -> None:
            spark.read.format("lakestream").option("warehouse", lh.url).load(NAME).write.format("noop").mode(
                "overwrite"
            ).save()

        def old() -> None:
            old_read_table(spark, lh, NAME).write.format("noop").mode("overwrite").save()

        want = lh.union_read(NAME, columns=[KEY]).num_rows
        got_new = spark.read.format("lakestream").option("warehouse", lh.url).load(NAME).count()
        got_old = old_read_table(spark, lh, NAME).count()
        if not got_new == got_old == want:
            failures.append(f"row counts differ: new {got_new:,}, old {got_old:,}, Python {want:,}")
        times: dict[str, list[float]] = {"new": [], "old": []}
        for i in range(args.repeats):  # interleaved: both see the same machine state
            for key, fn in (("old", old), ("new", new)) if i % 2 else (("new", new), ("old", old)):
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
                say(f"{key}: {times[key][-1]:.2f} s")
        spark.stop()
        med = {k: statistics.median(v) for k, v in times.items()}
        ratio = med["old"] / med["new"]
        lines += [
            f"Table: {rows:,} rows tiered into a primary-key table of {args.buckets} buckets, plus {args.tail:,} "
            f"untiered upserts of existing keys (every bucket merges a tail); result {want:,} rows. Spark local[2], "
            f'each read forced by `df.write.format("noop")`; {args.repeats} interleaved repeats, medians. '
            f"Driver JVM options: `{jvm}`.",
            "",
            "| read | median | rows/s | all runs |",
            "|---|---|---|---|",
        ]
        for key, label in (("old", "old `read_table` (mapInArrow)"), ("new", '`spark.read.format("lakestream")`')):
            runs = ", ".join(f"{t:.2f}" for t in times[key])
            lines.append(f"| {label} | {med[key]:.2f} s | {want / med[key] / 1e6:.2f} M | {runs} |")
        lines += ["", f"new / old (rows/s): **{ratio:.2f}x** (goal >= 0.9x: {'met' if ratio >= 0.9 else 'not met'})."]
        if ratio < 0.9:
            failures.append(f"spark.read.format('lakestream') at {ratio:.2f}x of the old read_table")
        if not args.skip_python:
            old_py, old_runs = median_seconds(lambda: old_union_read(lh, NAME), args.python_repeats)
            new_py, new_runs = median_seconds(lambda: lh.union_read(NAME), args.python_repeats)
            old_py2, old_runs2 = median_seconds(lambda: old_union_read(lh, NAME), args.python_repeats)
            old_py = statistics.median(old_runs + old_runs2)
            lines += [
                "",
                f"Python `lh.union_read` of the same table ({args.python_repeats} runs, the old one before and after): "
                f"old (scan + merge) {old_py:.2f} s, the read plan {new_py:.2f} s: **{old_py / new_py:.2f}x** "
                f"(runs: old {', '.join(f'{t:.2f}' for t in old_runs + old_runs2)}; "
                f"new {', '.join(f'{t:.2f}' for t in new_runs)}).",
            ]
        lh.close()
    finish("\n".join(lines), args.out, failures)


if __name__ == "__main__":
    main()
