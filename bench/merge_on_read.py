"""Merge-on-read against copy-on-write for primary-key tables: what a tiering round writes, how long it takes,
and what reads cost until compaction folds the deletes.

One table of ``--rows`` orders (TPC-H-shaped, 8 buckets) is tiered, then ``--rounds`` rounds each change 1 % of
the keys (uniformly: every file holds one) and delete 0.1 %. Measured side by side in one run:

* bytes a round writes, as a share of the table's bytes (goal: <= 5 % with merge-on-read; copy-on-write
  rewrites every file holding a changed key: all of them);
* a round's wall time: merge-on-read, copy-on-write, and delta-rs's ``merge`` of the same changes (update,
  delete, insert; goal: merge-on-read <= 0.33x delta-rs);
* reads after the rounds, not compacted, against the same table compacted (goal: within 1.3x): lakestream's
  union and lake reads, Spark's ``spark.read.format("lakestream")`` and DuckDB's ``iceberg_scan`` (every column
  to Arrow, and a count and sum of one column, where decoding costs least and the deletes' share is largest).
  Each read's wall time, and for the reads in this process (not Spark's) its CPU time, steadier on a busy host.

    .venv/bin/python bench/merge_on_read.py            # 10 M rows (about 15 minutes on 2 cores)
    .venv/bin/python bench/merge_on_read.py --quick    # 400,000 rows
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tiering import KEY, SCHEMA, make_dataset, orders  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402

BUCKETS = 8


def say(message: str) -> None:
    print(message, flush=True)


def table_bytes(lh: Lakehouse, name: str) -> int:
    return sum(t.file.file_size_in_bytes for t in lh.lake_table(name).scan().plan_files())


def change_rounds(base: pa.Table, rounds: int, seed: int, clerks: pa.Array, customers: int) -> list[tuple]:
    """Per round: (upserts of 1 % of the keys with new values, key-only deletes of 0.1 %), uniform over the keys;
    a key deleted once is not touched again."""
    rng = np.random.default_rng(seed)
    keys = base.column(KEY).to_numpy()
    alive = np.ones(len(keys), dtype=bool)
    out = []
    for _ in range(rounds):
        live = np.flatnonzero(alive)
        updated = np.sort(rng.choice(live, max(1, len(keys) // 100), replace=False))
        left = np.setdiff1d(live, updated)
        deleted = np.sort(rng.choice(left, max(1, len(keys) // 1000), replace=False))
        alive[deleted] = False
        values = orders(keys[updated], rng, customers, clerks)
        out.append((values, pa.table({KEY: pa.array(keys[deleted], pa.int64())})))
    return out


def tier_round(lh: Lakehouse, name: str, upserts: pa.Table, deletes: pa.Table, spark) -> tuple[float, int]:
    log = lh.log(name)
    for start in range(0, upserts.num_rows, 500_000):
        log.append(upserts.slice(start, 500_000), "upsert")
    log.append(deletes, "delete")
    t0 = time.perf_counter()
    result = lh.tier(name, spark=spark)
    return time.perf_counter() - t0, result.bytes_written


def load(lh: Lakehouse, name: str, base: pa.Table, spark, write_mode: str) -> None:
    lh.create_table(name, SCHEMA, primary_key=[KEY], buckets=BUCKETS, write_mode=write_mode)
    log = lh.log(name)
    for start in range(0, base.num_rows, 500_000):
        log.append(base.slice(start, 500_000), "upsert")
    lh.tier(name, spark=spark)


def delta_rounds(base: pa.Table, rounds: list[tuple], tmp: Path) -> list[float]:
    """delta-rs's ``merge`` of each round's changes (a source row per change, ``_op`` saying which)."""
    from deltalake import DeltaTable, write_deltalake

    path = tmp / "delta"
    write_deltalake(str(path), base)
    table = DeltaTable(str(path))
    schema = pa.schema([f.with_nullable(True) for f in base.schema]).append(pa.field("_op", pa.string()))
    times = []
    for upserts, deletes in rounds:
        ups = upserts.cast(pa.schema([f.with_nullable(True) for f in upserts.schema]))
        ups = ups.append_column("_op", pa.array(["upsert"] * ups.num_rows))
        dels = pa.table(
            {
                f.name: deletes.column(f.name) if f.name in deletes.column_names else pa.nulls(deletes.num_rows, f.type)
                for f in schema
                if f.name != "_op"
            }
        ).append_column("_op", pa.array(["delete"] * deletes.num_rows))
        source = pa.concat_tables([ups.cast(schema), dels.cast(schema)])
        t0 = time.perf_counter()
        (
            table.merge(source=source, predicate=f"t.{KEY} = s.{KEY}", source_alias="s", target_alias="t")
            .when_matched_delete(predicate="s._op = 'delete'")
            .when_matched_update_all(predicate="s._op = 'upsert'", except_cols=["_op"])
            .when_not_matched_insert_all(predicate="s._op = 'upsert'", except_cols=["_op"])
            .execute()
        )
        times.append(time.perf_counter() - t0)
    shutil.rmtree(path)
    return times


def median_seconds(fn, repeats: int = 7) -> tuple[float, float]:
    """The medians of ``repeats`` timed calls after one untimed: wall time, and this process's CPU time (a read of
    10 M rows varies 1.2-2.9 s of wall time from one call to the next with how much of its result the allocator
    must take from the kernel again, and with what else the machine runs; its CPU time varies less)."""
    fn()
    walls, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def reads(lh: Lakehouse, name: str, spark, expected: int) -> dict[str, tuple[float, float]]:
    from lakehouse.duckdb_reader import duckdb_connection

    def union() -> None:
        assert lh.union_read(name).num_rows == expected

    def lake() -> None:
        assert lh.lake_read(name).num_rows == expected

    def spark_read() -> None:
        assert spark.read.format("lakestream").option("warehouse", lh.url).load(name).count() == expected

    location = lh.lake_table(name).metadata_location.removeprefix("file://")
    con = duckdb_connection()

    def duck() -> None:  # every column, as the other reads
        assert con.sql(f"SELECT * FROM iceberg_scan('{location}')").to_arrow_table().num_rows == expected

    def duck_aggregate() -> None:  # one column, no rows out: what is left is the deletes' cost
        assert con.sql(f"SELECT count(*), sum(o_custkey) FROM iceberg_scan('{location}')").fetchone()[0] == expected

    return {
        "union read": median_seconds(union),
        "lake read": median_seconds(lake),
        "Spark read": median_seconds(spark_read),
        "DuckDB read": median_seconds(duck),
        "DuckDB count and sum": median_seconds(duck_aggregate),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="400,000 rows")
    args, _ = p.parse_known_args()  # make bench passes every benchmark the same arguments
    rows = 400_000 if args.quick else args.rows
    from lakehouse.spark import spark_session

    tmp = Path(tempfile.mkdtemp(prefix="lakestream-mor-"))
    spark = spark_session(master="local[2]", app_name="bench-merge-on-read", scheduler_only=True)
    try:
        ds = make_dataset(rows, 10, seed=11)
        rounds = change_rounds(ds.base, args.rounds, 12, ds.clerks, ds.customers)
        say(
            f"{rows:,} rows, {args.rounds} rounds of {rounds[0][0].num_rows:,} updates + {rounds[0][1].num_rows:,} "
            "deletes (uniform keys)"
        )
        lh = Lakehouse.open(tmp.as_uri())

        results: dict[str, list] = {}
        for mode in ("merge-on-read", "copy-on-write"):
            name = f"bench.{mode.replace('-', '_')}"
            load(lh, name, ds.base, spark, mode)
            size = table_bytes(lh, name)
            times, written = [], []
            for upserts, deletes in rounds:
                seconds, bytes_ = tier_round(lh, name, upserts, deletes, spark)
                times.append(seconds)
                written.append(bytes_ / size)
            results[mode] = [times, written]
            say(
                f"{mode}: round wall {statistics.median(times):.2f} s (median of {len(times)}), writes "
                f"{100 * statistics.median(written):.2f} % of the table's bytes (max {100 * max(written):.2f} %)"
            )
        delta = delta_rounds(ds.base, rounds, tmp)
        say(f"delta-rs merge of the same changes: {statistics.median(delta):.2f} s (median)")
        mor = statistics.median(results["merge-on-read"][0])
        cow = statistics.median(results["copy-on-write"][0])
        say(
            f"merge-on-read / delta-rs: {mor / statistics.median(delta):.2f}x (goal <= 0.33x); "
            f"merge-on-read / copy-on-write: {mor / cow:.2f}x"
        )
        expected = rows - sum(d.num_rows for _, d in rounds)
        name = "bench.merge_on_read"
        before = reads(lh, name, spark, expected)
        lh.compact(name, min_input_files=2, delete_ratio=0.0)
        after = reads(lh, name, spark, expected)
        for what in before:
            (wall, cpu), (wall_after, cpu_after) = before[what], after[what]
            # Spark's work is in its JVM and Python workers, other processes: their CPU is not this process's
            spent = f"; CPU {cpu:.2f} s against {cpu_after:.2f} s: {cpu / cpu_after:.2f}x"
            spent = "" if what.startswith("Spark") else spent
            say(
                f"{what}: {wall:.2f} s with {args.rounds} rounds of deletes, {wall_after:.2f} s compacted: "
                f"{wall / wall_after:.2f}x (goal <= 1.3x){spent}"
            )
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
