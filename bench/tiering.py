"""Tiering benchmark: log -> Iceberg tiering against a physical baseline and two primary-key change anchors,
all on the same TPC-H-orders-shaped rows, in one run (local file:// warehouse in a temporary directory).

    python bench/tiering.py                       # 10 M rows, 1 M changes (long; ~15 GB of temporary files)
    python bench/tiering.py --quick               # = --rows 200000 --changes 20000 --upsert-changes 5000
    python bench/tiering.py --rows 200000 --changes 20000 --upsert-changes 5000 --skip-spark

Data: ``--rows`` orders (o_orderkey int64 primary key, o_totalprice decimal(12,2), o_comment 40-80 chars of
TPC-H-like words, ...), generated with numpy from a fixed seed. Changes: ``--changes`` rows, 10 % new keys,
90 % updates of existing keys (new o_totalprice, o_orderstatus, o_comment), in random order.

Measured, each against a baseline run in the same process on the same rows:

* Physical baselines: pyarrow reads the rows from an uncompressed Arrow IPC stream file
  and writes one zstd Parquet file (pyarrow's writer is single-threaded), nothing else: (a) with pyarrow's
  default writer options, (b) "same bytes": the rows with the lake's three system columns already in the
  IPC file, written with our writer options (`lakehouse.iceberg.datafiles.parquet_writer_options`), i.e. the
  Parquet we write. The goal is judged against the faster of the two. Rows/s and MB/s of Arrow data.
  Baselines and our log-table rounds (local, Spark) run interleaved, ``--repeats`` times; medians.
* Anchors for primary-key changes: delta-rs ``DeltaTable.merge`` (update all / insert all) of all changes
  into a Delta table of ``--rows`` rows; pyiceberg ``Table.upsert`` of ``--upsert-changes`` of them into an
  Iceberg table (SqlCatalog on sqlite), extrapolated linearly to ``--changes``.
* Ours (lakestream, skipped with a note when ``Lakehouse.tier`` does not exist yet):
  (i) ``lh.tier`` of a keyless log table of ``--rows`` rows, local executor and Spark local[2];
  ratio = our rows/s / baseline rows/s, and per core = ratio / CPU cores busy (CPU seconds of this
  process tree / wall seconds; the baseline uses one);
  (ii) ``lh.tier`` of the changes appended as upserts to a primary-key table already holding ``--rows``
  rows, against delta-rs (goal: at least as fast) and pyiceberg extrapolated (goal >= 20x);
  (iii) append -> visible in ``union_read`` latency, p50/p99, small table, a separate reader;
  (iv) ``union_read`` of the primary-key table with ``--changes`` untiered upserts in its log, against
  the same read after those are tiered (lake only, same rows);
  (v) peak RSS of a fresh process running ``lh.tier(max_split_rows=K)`` on one bucket of ``--mem-rows`` and
  of 4x ``--mem-rows`` rows: it should not grow with the bucket. Peak = the child's VmHWM, reset through
  /proc/self/clear_refs right before ``lh.tier`` (getrusage's ru_maxrss is useless here: a child starts
  with its parent's high-water mark, several GB in this benchmark).

Prints a Markdown section (also written to ``--out``); exits non-zero if a measurement failed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Spark (Python workers, loopback driver) needs these before pyspark is imported anywhere.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")  # "pandas >= 3.0.0 not fully supported"

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _common import finish, parser, pct  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402

APPEND_ROWS = 100_000  # rows per log append (well under the log's batch limits)
BUCKETS = 8
KEY = "o_orderkey"

# ---- data ------------------------------------------------------------------------------------------------

SCHEMA = pa.schema(
    [
        ("o_orderkey", pa.int64()),
        ("o_custkey", pa.int64()),
        ("o_orderstatus", pa.string()),
        ("o_totalprice", pa.decimal128(12, 2)),
        ("o_orderdate", pa.date32()),
        ("o_orderpriority", pa.string()),
        ("o_clerk", pa.string()),
        ("o_shippriority", pa.int32()),
        ("o_comment", pa.string()),
    ]
)
# TPC-H's text grammar draws o_comment from words like these.
WORDS = pa.array(
    """furious sly careful blithe quick fluffy slow quiet ruthless thin close dogged daring brave stealthy
    permanent enticing idle busy regular final ironic even bold silent sometimes always never furiously slyly
    carefully blithely quickly fluffily slowly quietly ruthlessly thinly closely doggedly daringly bravely
    stealthily permanently enticingly idly busily regularly finally ironically evenly boldly silently foxes
    ideas theodolites pinto beans instructions dependencies excuses platelets asymptotes courts dolphins
    multipliers sauternes warthogs frets dinos attainments somas Tiresias patterns forges braids hockey
    players frays warhorses dugouts notornis epitaphs pearls tithes waters orbits gifts sheaves depths
    sentiments decoys realms pains grouches escapades packages requests accounts deposits sleep wake are
    cajole haggle nag use boost affix detect integrate maintain nod was lose sublate solve thrash promise
    engage hinder print x-ray breach eat grow impress mold poach serve run dazzle snooze doze unwind kindle
    play hang believe about above according to across after against along alongside among around at atop
    before behind beneath beside besides between beyond by despite during except for from in inside
    instead of into near of on outside over past since through throughout toward under until up upon""".split()
)
MIN_WORDS, MAX_WORDS = 7, 12  # then cut to 80 characters: 40-80, mean ~64
STATUS = pa.array(["F", "O", "P"])
STATUS_P = [0.49, 0.49, 0.02]
PRIORITIES = pa.array(["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"])
GEN_CHUNK = 1_000_000


def order_key(i: np.ndarray) -> np.ndarray:
    """Row i's o_orderkey: sparse and increasing, like TPC-H's."""
    return i.astype(np.int64) * 4 + 1


def _decimal_cents(cents: np.ndarray) -> pa.Array:
    """decimal(12,2) from non-negative int64 cents, built from its 16-byte little-endian buffer."""
    buf = np.zeros((len(cents), 2), np.int64)
    buf[:, 0] = cents
    return pa.Array.from_buffers(pa.decimal128(12, 2), len(cents), [None, pa.py_buffer(buf)])


def _comments(rng: np.random.Generator, n: int) -> pa.Array:
    counts = rng.integers(MIN_WORDS, MAX_WORDS + 1, n)
    words = []
    for i in range(MAX_WORDS):
        idx = pa.array(rng.integers(0, len(WORDS), n), mask=counts <= i)  # masked index -> null word, skipped
        words.append(WORDS.take(idx))
    comments = pc.binary_join_element_wise(*words, " ", null_handling="skip")
    return pc.utf8_rtrim_whitespace(pc.utf8_slice_codeunits(comments, 0, 80))


def _pick(values: pa.Array, rng: np.random.Generator, n: int, p: list[float] | None = None) -> pa.Array:
    idx = rng.choice(len(values), n, p=p) if p else rng.integers(0, len(values), n)
    return values.take(pa.array(idx))


def orders(keys: np.ndarray, rng: np.random.Generator, customers: int, clerks: pa.Array) -> pa.Table:
    n = len(keys)
    return pa.Table.from_arrays(
        [
            pa.array(keys, pa.int64()),
            pa.array(rng.integers(1, customers + 1, n), pa.int64()),
            _pick(STATUS, rng, n, STATUS_P),
            _decimal_cents(rng.integers(90_000, 55_000_000, n)),
            pa.array(rng.integers(8035, 10441, n).astype(np.int32)).cast(pa.date32()),  # 1992-01-01..1998-08-02
            _pick(PRIORITIES, rng, n),
            _pick(clerks, rng, n),
            pa.array(np.zeros(n, np.int32)),
            _comments(rng, n),
        ],
        schema=SCHEMA,
    )


@dataclass
class Dataset:
    base: pa.Table  # rows 0..n-1, keys order_key(i)
    changes: pa.Table  # the change set measured by every engine
    tail: pa.Table  # a second change set (union-read tail)
    new_per_set: int
    customers: int
    clerks: pa.Array

    def fresh(self, n: int, seed: int) -> pa.Table:
        """n rows with keys no other set uses (negative keys), for the small tables."""
        rng = np.random.default_rng(seed)
        return orders(-order_key(np.arange(n) + seed * 10_000_000), rng, self.customers, self.clerks)


def make_dataset(rows: int, changes: int, seed: int) -> Dataset:
    customers = max(1_000, rows // 10)
    clerks = pa.array([f"Clerk#{i:09d}" for i in range(1, max(1_000, rows // 1_500) + 1)])
    seeds = np.random.SeedSequence(seed).spawn(rows // GEN_CHUNK + 3)
    parts = []
    for c, lo in enumerate(range(0, rows, GEN_CHUNK)):
        hi = min(rows, lo + GEN_CHUNK)
        parts.append(orders(order_key(np.arange(lo, hi)), np.random.default_rng(seeds[c]), customers, clerks))
    base = pa.concat_tables(parts)
    new = changes // 10

    def change_set(rng: np.random.Generator, first_new: int) -> pa.Table:
        updated = base.take(pa.array(np.sort(rng.choice(rows, changes - new, replace=False))))
        values = orders(np.zeros(len(updated), np.int64), rng, customers, clerks)  # new price, status, comment
        for name in ("o_orderstatus", "o_totalprice", "o_comment"):
            i = SCHEMA.get_field_index(name)
            updated = updated.set_column(i, SCHEMA.field(i), values.column(i))
        fresh = orders(order_key(np.arange(first_new, first_new + new)), rng, customers, clerks)
        both = pa.concat_tables([updated, fresh])
        return both.take(pa.array(rng.permutation(len(both))))

    rng_c, rng_t = (np.random.default_rng(s) for s in seeds[-2:])
    return Dataset(
        base=base,
        changes=change_set(rng_c, rows),
        tail=change_set(rng_t, rows + new),
        new_per_set=new,
        customers=customers,
        clerks=clerks,
    )


# ---- measuring ---------------------------------------------------------------------------------------------


def cpu_seconds() -> float:
    """CPU seconds of this process and its descendants (Spark's JVM and Python workers included)."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


@dataclass
class Timed:
    seconds: float
    cpu: float
    value: Any = None

    @property
    def cores(self) -> float:
        return self.cpu / self.seconds


def timed(fn: Callable[[], Any]) -> Timed:
    """Time ``fn``, starting clean: garbage collected and no dirty pages left by earlier steps (the kernel's
    writeback of earlier gigabytes would otherwise run during, and slow, whatever is measured next)."""
    gc.collect()
    os.sync()
    c0, t0 = cpu_seconds(), time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - t0
    return Timed(seconds, cpu_seconds() - c0, value)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


@dataclass
class Results:
    """Every figure of the run, by name; failures are kept and reported instead of stopping the run."""

    values: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def attempt(self, label: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - one failed measurement must not lose the others
            traceback.print_exc()
            self.failures.append(f"{label}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            say(f"FAILED {label}: {type(exc).__name__}: {exc}")
            return None


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- baseline and anchors ----------------------------------------------------------------------------------


def lake_shaped(data: pa.Table) -> pa.Table:
    """``data`` with the lake's system columns, as one bucket's file holds them."""
    n = data.num_rows
    stamps = 1_700_000_000_000_000 + (np.arange(n) // APPEND_ROWS) * 1_000
    return (
        data.append_column("__bucket", pa.array(np.zeros(n, np.int32)))
        .append_column("__offset", pa.array(np.arange(n, dtype=np.int64)))
        .append_column("__timestamp", pa.array(stamps).cast(pa.timestamp("us", "UTC")))
    )


def physical_baseline(data: pa.Table, tmp: Path, same_bytes: bool = False) -> Timed:
    """pyarrow: read the rows from an Arrow IPC stream file, write zstd Parquet; nothing else (one timed
    run). ``same_bytes``: the lake's columns and our writer options (the files we write)."""
    from lakehouse.iceberg.datafiles import ROW_GROUP_ROWS, parquet_writer_options

    ipc, out = tmp / "orders.arrows", tmp / "orders.parquet"
    if same_bytes:
        data = lake_shaped(data)
        options = {**parquet_writer_options(data, data.schema, {}), "row_group_size": ROW_GROUP_ROWS}
    else:
        options = {"compression": "zstd"}
    with pa.OSFile(str(ipc), "wb") as f, pa.ipc.new_stream(f, data.schema) as writer:
        writer.write_table(data, max_chunksize=APPEND_ROWS)
    pq.write_table(data.slice(0, 10_000), out, **options)  # warm-up (first-use costs), untimed

    def run() -> int:
        with pa.OSFile(str(ipc), "rb") as f:
            table = pa.ipc.open_stream(f).read_all()
        pq.write_table(table, out, **options)
        return table.num_rows

    result = timed(run)
    check(result.value == data.num_rows, f"baseline wrote {result.value} rows")
    result.value = out.stat().st_size
    ipc.unlink()
    out.unlink()
    return result


def delta_anchor(ds: Dataset, tmp: Path, res: Results, codec: str | None = None) -> None:
    """delta-rs: write the base rows, then merge the change set and the second change set (the same two
    sets ours tiers), each timed. ``codec`` None = delta-rs's default (snappy), else WriterProperties."""
    from deltalake import DeltaTable, WriterProperties, write_deltalake

    suffix = f"_{codec.lower()}" if codec else ""
    props = WriterProperties(compression=codec) if codec else None
    path = tmp / f"delta{suffix}"
    res.values[f"delta_write{suffix}"] = timed(lambda: write_deltalake(str(path), ds.base, writer_properties=props))
    say(
        f"delta-rs write_deltalake of {ds.base.num_rows:,} rows ({codec or 'default codec'}): "
        f"{res.values[f'delta_write{suffix}'].seconds:.2f} s"
    )
    table = DeltaTable(str(path))
    merges = []
    for changes in (ds.changes, ds.tail):
        merge = timed(
            lambda changes=changes: (
                table.merge(
                    source=changes,
                    predicate=f"t.{KEY} = s.{KEY}",
                    source_alias="s",
                    target_alias="t",
                    writer_properties=props,
                )
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
        )
        metrics = merge.value
        check(
            (metrics["num_target_rows_updated"], metrics["num_target_rows_inserted"])
            == (changes.num_rows - ds.new_per_set, ds.new_per_set),
            f"delta-rs merge metrics {metrics}",
        )
        merges.append(merge)
        say(f"delta-rs merge of {changes.num_rows:,} changes ({codec or 'default codec'}): {merge.seconds:.2f} s")
    res.values[f"delta_merge{suffix}"] = merges
    shutil.rmtree(path)


def iceberg_anchor(ds: Dataset, tmp: Path, upsert_changes: int, res: Results) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    (tmp / "iceberg").mkdir()
    catalog = SqlCatalog(
        "bench", uri=f"sqlite:///{tmp / 'iceberg' / 'catalog.db'}", warehouse=(tmp / "iceberg").as_uri()
    )
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.orders", schema=ds.base.schema)
    res.values["iceberg_append"] = timed(lambda: table.append(ds.base))
    say(f"pyiceberg append of {ds.base.num_rows:,} rows: {res.values['iceberg_append'].seconds:.2f} s")
    subset = ds.changes.slice(0, upsert_changes)
    upsert = timed(lambda: table.upsert(subset, join_cols=[KEY]))
    done = upsert.value.rows_updated + upsert.value.rows_inserted
    check(done == subset.num_rows, f"pyiceberg upsert: {upsert.value} for {subset.num_rows} changes")
    res.values["iceberg_upsert"] = upsert
    res.values["iceberg_upsert_rows"] = subset.num_rows
    say(f"pyiceberg upsert of {subset.num_rows:,} changes: {upsert.seconds:.2f} s ({upsert.value})")
    shutil.rmtree(tmp / "iceberg")


# ---- ours ------------------------------------------------------------------------------------------------


def tiering_available() -> bool:
    try:
        import lakehouse.tiering.round  # noqa: F401
    except ImportError:
        return False
    return callable(getattr(Lakehouse, "tier", None))


def append_all(lh: Lakehouse, name: str, data: pa.Table, op: str) -> float:
    """Append ``data`` in APPEND_ROWS-row batches; return seconds (untimed setup, reported for context)."""
    log = lh.log(name)
    t0 = time.perf_counter()
    for lo in range(0, data.num_rows, APPEND_ROWS):
        log.append(data.slice(lo, APPEND_ROWS), op)
    return time.perf_counter() - t0


def tier(lh: Lakehouse, name: str, expect_rows: int | None = None, **kwargs: Any) -> Timed:
    result = timed(lambda: lh.tier(name, **kwargs))
    tiered = result.value
    if expect_rows is not None:
        check(tiered.rows == expect_rows, f"{name}: tiered {tiered.rows} rows, expected {expect_rows}")
    ends = lh.log(name).end_offsets()
    lake = lh.lake_offsets(name)
    check(lake == ends, f"{name}: lake offsets {lake} != log end offsets {ends} after tiering")
    say(
        f"lh.tier({name}{', spark' if 'spark' in kwargs else ''}): {tiered.rows:,} rows, {files_of(tiered)} files, "
        f"{bytes_of(tiered) / 1e6:.1f} MB in {result.seconds:.2f} s ({tiered.executor} x {tiered.parallelism}; "
        f"phases {', '.join(f'{k} {v:.2f} s' for k, v in tiered.phases.items())})"
    )
    return result


def files_of(tiered: Any) -> int:
    """Data files a round wrote (`TieringResult.files_added`; the issue's sketch called it ``files``)."""
    return getattr(tiered, "files_added", getattr(tiered, "files", 0))


def bytes_of(tiered: Any) -> int:
    return getattr(tiered, "bytes_written", getattr(tiered, "bytes", 0))


def cores_used(tiered: Any) -> int:
    """Threads / Spark task slots the round had, capped by the machine's cores."""
    return max(1, min(getattr(tiered, "parallelism", 1), os.cpu_count() or 1))


def ours_log_round(lh: Lakehouse, ds: Dataset, res: Results, key: str, i: int, **kwargs: Any) -> Timed:
    """(i) one round: tier a fresh keyless log table holding every row of the data set."""
    name = f"bench.orders_log_{key}_{i}"
    lh.create_table(name, SCHEMA, bucket_key=KEY, buckets=BUCKETS)
    res.values[f"{key}_append_s"] = append_all(lh, name, ds.base, "insert")
    return tier(lh, name, ds.base.num_rows, **kwargs)


def start_spark(lh: Lakehouse, ds: Dataset, res: Results) -> Any:
    """A Spark local[2] session, warmed up by a 1,000-row round (neither is in the Spark row)."""
    from lakehouse.spark import spark_session

    started = timed(lambda: spark_session(master="local[2]", scheduler_only=True))
    spark = started.value
    res.values["spark_start_s"] = started.seconds
    say(f"Spark local[2] session: {started.seconds:.1f} s")
    lh.create_table("bench.spark_warmup", SCHEMA, bucket_key=KEY, buckets=2)
    lh.log("bench.spark_warmup").append(ds.fresh(1_000, seed=3), "insert")
    res.values["spark_warmup_s"] = tier(lh, "bench.spark_warmup", 1_000, spark=spark).seconds
    return spark


def throughput_rounds(lh: Lakehouse | None, ds: Dataset, tmp: Path, res: Results, args: argparse.Namespace) -> None:
    """Baselines and our log-table rounds, interleaved (baseline a, baseline b, local, Spark; ``--repeats``
    times) so that all of them meet the same machine state (this machine drifts within a run: measured one
    after the other, whichever came later was slower); the median of each is reported."""
    spark = None
    if lh is not None and not args.skip_spark:
        spark = res.attempt("ours: Spark local[2] session", lambda: start_spark(lh, ds, res))
    steps: list[tuple[str, Callable[[int], Any]]] = [
        ("baseline_default", lambda i: physical_baseline(ds.base, tmp)),
        ("baseline_same", lambda i: physical_baseline(ds.base, tmp, same_bytes=True)),
    ]
    if lh is not None:
        steps.append(("local", lambda i: ours_log_round(lh, ds, res, "local", i)))
        if spark is not None:
            steps.append(("spark", lambda i: ours_log_round(lh, ds, res, "spark", i, spark=spark)))
    rounds: dict[str, list[Timed]] = {key: [] for key, _ in steps}
    try:
        for i in range(args.repeats):
            for key, step in steps:
                measured = res.attempt(f"{key} round {i}", lambda step=step, i=i: step(i))
                if measured:
                    rounds[key].append(measured)
                    if key.startswith("baseline"):
                        say(f"{key}: IPC -> zstd Parquet of {args.rows:,} rows in {measured.seconds:.2f} s")
    finally:
        if spark is not None:
            spark.stop()
    for key, timings in rounds.items():
        if timings:
            res.values[f"{key}_rounds"] = [t.seconds for t in timings]
            res.values[key] = sorted(timings, key=lambda t: t.seconds)[len(timings) // 2]
    baselines = [res.values[k] for k in ("baseline_default", "baseline_same") if k in res.values]
    if baselines:
        res.values["baseline"] = min(baselines, key=lambda t: t.seconds)


def ours_primary_key(lh: Lakehouse, ds: Dataset, res: Results, read_repeats: int) -> None:
    """(ii) tier changes into a primary-key table; (iv) union read with an untiered tail vs lake only."""
    name = "bench.orders"
    lh.create_table(name, SCHEMA, primary_key=[KEY], buckets=BUCKETS, write_mode="copy-on-write")
    res.values["pk_base_append_s"] = append_all(lh, name, ds.base, "upsert")
    res.values["pk_base"] = tier(lh, name, ds.base.num_rows)
    append_all(lh, name, ds.changes, "upsert")
    res.values["pk_changes"] = tier(lh, name, ds.changes.num_rows)

    expected = ds.base.num_rows + 2 * ds.new_per_set
    append_all(lh, name, ds.tail, "upsert")
    check(sum(lh.lake_offsets(name).values()) < sum(lh.log(name).end_offsets().values()), "tail was tiered")
    res.values["read_tail"] = read_median(lh, name, expected, read_repeats)
    say(f"union_read with a {ds.tail.num_rows:,}-row tail: {res.values['read_tail'].seconds:.2f} s")
    res.values["pk_tail"] = tier(lh, name, ds.tail.num_rows)
    res.values["read_no_tail"] = read_median(lh, name, expected, read_repeats)
    say(f"union_read, empty tail: {res.values['read_no_tail'].seconds:.2f} s")
    res.values["read_lake_only"] = read_median(lh, name, expected, read_repeats, lake_only=True)
    say(f"lake_read: {res.values['read_lake_only'].seconds:.2f} s")


def ours_primary_key_codec(lh: Lakehouse, ds: Dataset, res: Results, codec: str) -> None:
    """The two change sets again, into a primary-key table whose ``write.parquet.compression-codec`` is
    ``codec`` (codec-for-codec comparison with delta-rs, whose default is snappy)."""
    name = f"bench.orders_{codec}"
    lh.create_table(name, SCHEMA, primary_key=[KEY], buckets=BUCKETS, write_mode="copy-on-write")
    with lh.lake_table(name).transaction() as tx:
        tx.set_properties({"write.parquet.compression-codec": codec})
    append_all(lh, name, ds.base, "upsert")
    tier(lh, name, ds.base.num_rows)
    for key, changes in (("pk_changes", ds.changes), ("pk_tail", ds.tail)):
        append_all(lh, name, changes, "upsert")
        res.values[f"{key}_{codec}"] = tier(lh, name, changes.num_rows)


def read_median(lh: Lakehouse, name: str, expected: int, repeats: int, lake_only: bool = False) -> Timed:
    read = lh.lake_read if lake_only else lh.union_read
    runs = []
    for _ in range(repeats):
        run = timed(lambda: read(name))
        check(
            run.value.num_rows == expected,
            f"{read.__name__}({name}) returned {run.value.num_rows} rows, expected {expected}",
        )
        check(pc.count_distinct(run.value[KEY]).as_py() == expected, f"{read.__name__}({name}) returned duplicate keys")
        run.value = None
        runs.append(run)
    return sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]


def ours_latency(lh: Lakehouse, ds: Dataset, res: Results, samples: int, batch_rows: int) -> None:
    """(iii) append -> visible in a union read by another Lakehouse (as another process would)."""
    name = "bench.latency"
    lh.create_table(name, SCHEMA, primary_key=[KEY], buckets=4)
    lh.log(name).append(ds.fresh(10_000, seed=1), "upsert")
    tier(lh, name, 10_000)
    reader = Lakehouse.open(lh.url)
    batches = ds.fresh(samples * batch_rows, seed=2)
    visible, appends = [], []
    for i in range(samples):
        batch = batches.slice(i * batch_rows, batch_rows)
        t0 = time.perf_counter()
        lh.log(name).append(batch, "upsert")
        appends.append(time.perf_counter() - t0)
        while True:
            seen = reader.union_read(name)
            if pc.sum(pc.is_in(seen[KEY], value_set=batch[KEY])).as_py() == batch_rows:
                break
            check(time.perf_counter() - t0 < 60, f"batch {i} not visible after 60 s")
        visible.append(time.perf_counter() - t0)
    check(seen.num_rows == 10_000 + samples * batch_rows, f"latency table has {seen.num_rows} rows")
    res.values["latency"] = {"visible": visible, "append": appends, "rows": seen.num_rows}
    say(f"append -> visible: p50 {pct(visible, 0.5) * 1e3:.1f} ms, p99 {pct(visible, 0.99) * 1e3:.1f} ms")


_MEMORY_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from lakehouse import Lakehouse

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

lh = Lakehouse.open(sys.argv[2])
lh.lake_offsets(sys.argv[3])  # catalog loaded, imports done
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset VmHWM (the peak RSS) to the current RSS
t0 = time.perf_counter()
result = lh.tier(sys.argv[3], max_split_rows=int(sys.argv[4]))
seconds = time.perf_counter() - t0
print(json.dumps({"rows": result.rows, "seconds": seconds, "rss_before": before, "peak": status("VmHWM")}))
"""


def ours_memory(lh: Lakehouse, ds: Dataset, res: Results, mem_rows: int, split_rows: int) -> None:
    """(v) peak RSS of a fresh process tiering one bucket of mem_rows and of 4 x mem_rows rows."""
    out = []
    for factor in (1, 4):
        name = f"bench.memory_{factor}x"
        lh.create_table(name, SCHEMA, bucket_key=KEY, buckets=1)
        rows = factor * mem_rows
        for lo in range(0, rows, ds.base.num_rows):  # reuse the data set's rows (keys repeat: a log table)
            append_all(lh, name, ds.base.slice(0, min(ds.base.num_rows, rows - lo)), "insert")
        proc = subprocess.run(
            [sys.executable, "-c", _MEMORY_CHILD, str(ROOT), lh.url, name, str(split_rows)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"tiering subprocess failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        check(got["rows"] == rows, f"{name}: tiered {got['rows']} rows, expected {rows}")
        got["bucket_rows"] = rows
        out.append(got)
        say(
            f"memory: bucket of {rows:,} rows, max_split_rows={split_rows:,}: peak RSS {got['peak'] / 2**20:.0f} MiB "
            f"(before tiering {got['rss_before'] / 2**20:.0f} MiB), {got['seconds']:.2f} s"
        )
    res.values["memory"] = out
    res.values["split_rows"] = split_rows


# ---- report ----------------------------------------------------------------------------------------------


def machine(packages: tuple[str, ...] = ("pyarrow", "deltalake", "pyiceberg", "pyspark")) -> str:
    """One line describing this machine, its load and the versions of ``packages``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    versions = []
    for package in packages:
        try:
            versions.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            versions.append(f"{package} not installed")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"Machine: {model}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; {', '.join(versions)}. "
        f"Load average at start: {load}."
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def _met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def report(args: argparse.Namespace, ds: Dataset, res: Results, started: str, ours: bool) -> str:
    v = res.values
    n, changes = ds.base.num_rows, ds.changes.num_rows
    arrow_mb = ds.base.nbytes / 1e6
    out = [
        f"## Tiering (`bench/tiering.py`, {time.strftime('%Y-%m-%d')})",
        "",
        f"`{' '.join(['bench/tiering.py', *sys.argv[1:]])}`, started {started}. {v['machine']} Load average at "
        f"the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
        f"Data: {n:,} TPC-H-orders-shaped rows (9 columns, o_totalprice decimal(12,2), o_comment 40-80 characters; "
        f"{arrow_mb:,.0f} MB as Arrow), generated from seed {args.seed}. Changes: {changes:,} rows, "
        f"{ds.new_per_set:,} new keys and {changes - ds.new_per_set:,} updates (o_totalprice, o_orderstatus, "
        "o_comment), in random order. Local disk (file:// warehouse, temporary directory). CPU cores busy = CPU "
        "seconds of this process and its children (Spark's JVM and workers) / wall seconds; threads = the baseline's "
        "one, or the executor's parallelism (capped by the cores); ratio per thread = ratio to baseline / threads.",
        "",
    ]
    base = v.get("baseline")
    out += [
        "| rows -> Parquet | seconds | rows/s | MB/s (Arrow) | threads | CPU cores busy | ratio to the faster baseline "
        "| ratio per thread |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    throughput = [
        ("baseline (a): pyarrow defaults, IPC stream file -> one zstd Parquet file", "baseline_default"),
        ("baseline (b): same bytes (lake columns, our writer options)", "baseline_same"),
        ("**ours, `lh.tier`, log table, local executor** (goal per core >= 0.6)", "local"),
        ("**ours, `lh.tier`, log table, Spark local[2]** (goal per core >= 0.6)", "spark"),
        ("ours, `lh.tier` of the same rows as upserts into an empty primary-key table", "pk_base"),
        ("delta-rs `write_deltalake` (new table)", "delta_write"),
        ("pyiceberg `Table.append` (new table)", "iceberg_append"),
    ]
    for label, key in throughput:
        t = v.get(key)
        if t is None:
            continue
        ratio = base.seconds / t.seconds if base else float("nan")
        ours_key = key in ("local", "spark", "pk_base")
        threads = 1 if key.startswith("baseline") else cores_used(t.value) if ours_key else None
        out.append(
            f"| {label} | {t.seconds:.2f} | {n / t.seconds:,.0f} | {arrow_mb / t.seconds:,.1f} | {threads or ''} "
            f"| {t.cores:.2f} | {ratio:.2f} | {f'{ratio / threads:.2f}' if threads else ''} |"
        )
    out.append("")

    out += [
        f"Primary-key changes: two change sets of {changes:,} changes each (the second is the union-read tail "
        f"below), one after the other, into a table of {n:,} rows. Every engine rewrites the files holding changed "
        "keys (copy-on-write), so the Parquet codec weighs: delta-rs writes snappy by default, Iceberg (and ours) "
        "zstd; both are measured with both codecs.",
        "",
        "| engine | codec | change set | seconds | changes/s | CPU cores busy |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    samples: dict[str, list[Timed]] = {}
    for label, key, codec in (
        ("delta-rs `merge` (update all / insert all)", "delta_merge", "snappy (default)"),
        ("delta-rs `merge` (update all / insert all)", "delta_merge_zstd", "zstd"),
        ("**ours, `lh.tier`** (local executor)", "pk", "zstd (default)"),
        ("ours, `lh.tier` (local executor)", "pk_snappy", "snappy"),
    ):
        timings = (
            v.get(key)
            if key.startswith("delta")
            else [t for t in (v.get(f"pk_changes{key[2:]}"), v.get(f"pk_tail{key[2:]}")) if t is not None]
        )
        if not timings:
            continue
        samples[key] = timings
        for i, t in enumerate(timings, 1):
            out.append(f"| {label} | {codec} | {i} | {t.seconds:.2f} | {changes / t.seconds:,.0f} | {t.cores:.2f} |")
    if "iceberg_upsert" in v:
        t, k = v["iceberg_upsert"], v["iceberg_upsert_rows"]
        extrapolated = t.seconds * changes / k
        out += [
            f"| pyiceberg `Table.upsert`, measured on {k:,} changes | zstd (default) | 1 | {t.seconds:.2f} "
            f"| {k / t.seconds:,.0f} | {t.cores:.2f} |",
            f"| pyiceberg `Table.upsert`, **extrapolated** linearly to {changes:,} | zstd (default) | 1 "
            f"| {extrapolated:.1f} | {changes / extrapolated:,.0f} | |",
        ]
    out.append("")

    def mean(key: str) -> float | None:
        return sum(t.seconds for t in samples[key]) / len(samples[key]) if key in samples else None

    speedups: dict[str, float | None] = {}
    comparisons = (
        ("each engine's default codec (ours zstd, delta-rs snappy)", "delta", "pk", "delta_merge"),
        ("zstd, both", "delta_zstd", "pk", "delta_merge_zstd"),
        ("snappy, both", "delta_snappy", "pk_snappy", "delta_merge"),
    )
    rows = []
    for label, name, ours_key, theirs_key in comparisons:
        ours_m, theirs_m = mean(ours_key), mean(theirs_key)
        if ours_m and theirs_m:
            speedups[name] = theirs_m / ours_m
            rows.append(f"| {label} | {ours_m:.2f} | {theirs_m:.2f} | {_x(speedups[name])} |")
    if "iceberg_upsert" in v and mean("pk"):
        speedups["iceberg"] = v["iceberg_upsert"].seconds * changes / v["iceberg_upsert_rows"] / mean("pk")
        rows.append(
            f"| pyiceberg upsert (extrapolated), zstd both | {mean('pk'):.2f} | "
            f"{mean('pk') * speedups['iceberg']:.1f} | {_x(speedups['iceberg'])} |"
        )
    if rows:
        out += [
            "| comparison (mean seconds per change set) | ours | other | ours faster by |",
            "| --- | --- | --- | --- |",
            *rows,
            "",
        ]

    goals = []
    for key, name in (("local", "local executor"), ("spark", "Spark local[2]")):
        if key in v and base:
            per_core = base.seconds / v[key].seconds / cores_used(v[key].value)
            goals.append(
                f"tiering throughput per core >= 0.6x the faster baseline, {name}: {_met(per_core >= 0.6)} "
                f"({per_core:.2f})"
            )
    for name, how in (
        ("delta", "each with its default codec"),
        ("delta_zstd", "both zstd"),
        ("delta_snappy", "both snappy"),
    ):
        if speedups.get(name) is not None:
            goals.append(
                f"primary-key changes at least as fast as delta-rs, {how}: {_met(speedups[name] >= 1)} "
                f"({_x(speedups[name])})"
            )
    if speedups.get("iceberg") is not None:
        goals.append(
            f">= 20x pyiceberg upsert (extrapolated): {_met(speedups['iceberg'] >= 20)} ({_x(speedups['iceberg'])})"
        )

    if "latency" in v:
        lat = v["latency"]
        out += [
            "| append -> visible in `union_read` (another Lakehouse) | samples | append p50 | visible p50 "
            "| visible p99 |",
            "| --- | --- | --- | --- | --- |",
            f"| {args.latency_rows}-row upsert batches, table of {lat['rows']:,} rows (4 buckets) "
            f"| {len(lat['visible'])} | {_ms(pct(lat['append'], 0.5))} | {_ms(pct(lat['visible'], 0.5))} "
            f"| {_ms(pct(lat['visible'], 0.99))} |",
            "",
        ]
    if "read_tail" in v:
        rows = n + 2 * ds.new_per_set
        lake = v.get("read_lake_only")
        out += [
            f"| read {rows:,} rows, primary-key table (median of {args.read_repeats}) | seconds | rows/s "
            "| ratio to lake-only read |",
            "| --- | --- | --- | --- |",
        ]
        for label, key in (
            (f"`union_read`: lake + {ds.tail.num_rows:,} untiered upserts in the log", "read_tail"),
            ("`union_read` after those upserts are tiered (empty tail)", "read_no_tail"),
            ("`lake_read` (lake only, pyiceberg scan) of the same table", "read_lake_only"),
        ):
            if key in v:
                t = v[key]
                ratio = f"{lake.seconds / t.seconds:.2f}" if lake else "n/a"
                out.append(f"| {label} | {t.seconds:.2f} | {rows / t.seconds:,.0f} | {ratio} |")
        out.append("")
    if "memory" in v:
        mem = v["memory"]
        out += [
            f"| one bucket, `lh.tier(max_split_rows={v['split_rows']:,})`, fresh process | bucket as Arrow | seconds "
            "| RSS before | peak RSS | peak - before |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        row_bytes = ds.base.nbytes / n
        for m in mem:
            out.append(
                f"| {m['bucket_rows']:,} rows | {m['bucket_rows'] * row_bytes / 2**20:,.0f} MiB | {m['seconds']:.2f} "
                f"| {m['rss_before'] / 2**20:,.0f} MiB | {m['peak'] / 2**20:,.0f} MiB "
                f"| {(m['peak'] - m['rss_before']) / 2**20:,.0f} MiB |"
            )
        if len(mem) == 2:
            grew = (mem[1]["peak"] - mem[1]["rss_before"]) - (mem[0]["peak"] - mem[0]["rss_before"])
            more = (mem[1]["bucket_rows"] - mem[0]["bucket_rows"]) * row_bytes
            goals.append(
                f"peak memory does not grow with the bucket: {_met(grew < more / 2)} (for {more / 2**20:,.0f} MiB "
                f"more Arrow data in the bucket the peak grew {grew / 2**20:,.0f} MiB; met below half of it)"
            )
        out.append("")

    if goals:
        out += ["Goals:", "", *[f"* {g}" for g in goals], ""]
    context = []
    if not ours:
        context.append("lakestream tiering API not available yet: only the baseline and the anchors were measured.")
    if "local_append_s" in v:
        context.append(
            f"Setup, not timed above: appending the {n:,} rows to the log in {APPEND_ROWS:,}-row batches "
            f"took {v['local_append_s']:.1f} s (log table) and {v.get('pk_base_append_s', 0):.1f} s "
            "(primary-key table)."
        )
    rounds = [
        f"{name} {', '.join(f'{x:.2f}' for x in v[f'{key}_rounds'])} s"
        for key, name in (
            ("baseline_default", "baseline (a)"),
            ("baseline_same", "baseline (b)"),
            ("local", "local executor"),
            ("spark", "Spark local[2]"),
        )
        if len(v.get(f"{key}_rounds", ())) > 1
    ]
    if rounds:
        context.append(f"Interleaved rounds (median in the table): {'; '.join(rounds)}.")
    if "spark_start_s" in v:
        context.append(
            f"Spark: session start {v['spark_start_s']:.1f} s and a warm-up `lh.tier` of 1,000 rows "
            f"({v.get('spark_warmup_s', float('nan')):.1f} s) are not in the Spark row."
        )
    context.append(
        "The issue's anchors on this machine: pyarrow IPC -> zstd Parquet of 10 M rows 3.1-3.6 s; delta-rs merge "
        "of 1 M changes 4.7 s; pyiceberg upsert of 50 k changes 26 s."
    )
    context += res.notes
    out += [" ".join(context), ""]
    if res.failures:
        out += ["Failed measurements:", "", *[f"* {f}" for f in res.failures], ""]
    return "\n".join(out)


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


# ---- main ------------------------------------------------------------------------------------------------


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=10_000_000, help="rows in the tables (default 10 M)")
    p.add_argument("--changes", type=int, default=1_000_000, help="primary-key changes (10 %% new keys)")
    p.add_argument("--upsert-changes", type=int, default=50_000, help="changes pyiceberg upserts (extrapolated)")
    p.add_argument("--skip-spark", action="store_true", help="no Spark local[2] tiering")
    p.add_argument("--skip-anchors", action="store_true", help="no delta-rs / pyiceberg anchors")
    p.add_argument("--out", type=Path, help="also write the Markdown here")
    p.add_argument("--mem-rows", type=int, help="rows of the small bucket in the memory test (default rows/10)")
    p.add_argument("--split-rows", type=int, help="max_split_rows in the memory test (default mem-rows/4)")
    p.add_argument("--latency-samples", type=int, default=50)
    p.add_argument("--latency-rows", type=int, default=100, help="rows per append in the latency test")
    p.add_argument("--read-repeats", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3, help="rounds of log-table tiering per executor (median)")
    p.add_argument("--seed", type=int, default=20261122)
    args = p.parse_args()
    if args.quick:
        args.rows, args.changes, args.upsert_changes, args.repeats = 200_000, 20_000, 5_000, 1
    if args.only == "s3":
        print("bench/tiering.py runs on the local backend only; nothing to do for --only s3")
        return
    args.upsert_changes = min(args.upsert_changes, args.changes)
    args.mem_rows = args.mem_rows or max(1_000, args.rows // 10)
    args.split_rows = args.split_rows or max(1, args.mem_rows // 4)

    started = time.strftime("%Y-%m-%d %H:%M")
    res = Results()
    res.values["machine"] = machine()
    gen = timed(lambda: make_dataset(args.rows, args.changes, args.seed))
    ds = gen.value
    say(
        f"generated {args.rows:,} rows + 2 x {args.changes:,} changes in {gen.seconds:.1f} s "
        f"({ds.base.nbytes / 1e6:,.0f} MB as Arrow)"
    )
    ours = tiering_available()
    with tempfile.TemporaryDirectory(prefix="lakestream-bench-tiering-") as tmp_dir:
        tmp = Path(tmp_dir)
        lh = None
        if ours:
            warehouse = tmp / "warehouse"
            warehouse.mkdir()
            lh = Lakehouse.open(warehouse.as_uri())
        else:
            print("lakestream tiering API not available yet", flush=True)
        throughput_rounds(lh, ds, tmp, res, args)
        if not args.skip_anchors:
            res.attempt("delta-rs merge", lambda: delta_anchor(ds, tmp, res))
            res.attempt("delta-rs merge, zstd", lambda: delta_anchor(ds, tmp, res, "ZSTD"))
            res.attempt("pyiceberg upsert", lambda: iceberg_anchor(ds, tmp, args.upsert_changes, res))
        if lh is not None:
            res.attempt(
                "ours: primary-key changes and union read", lambda: ours_primary_key(lh, ds, res, args.read_repeats)
            )
            res.attempt("ours: primary-key changes, snappy", lambda: ours_primary_key_codec(lh, ds, res, "snappy"))
            res.attempt("ours: latency", lambda: ours_latency(lh, ds, res, args.latency_samples, args.latency_rows))
            res.attempt("ours: memory", lambda: ours_memory(lh, ds, res, args.mem_rows, args.split_rows))
            lh.close()
    finish(report(args, ds, res, started, ours), args.out, res.failures)


if __name__ == "__main__":
    main()
