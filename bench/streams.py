"""Streams in Spark: ``spark.readStream.format("lakestream")`` against the batch read of the same ranges, and the
end-to-end latency from a producer's append to a running query's ``foreachBatch`` (file:// warehouse in a
temporary directory, Spark ``local[2]``).

    .venv/bin/python bench/streams.py             # 2 M records a table
    .venv/bin/python bench/streams.py --quick     # 200,000

Measured in one Spark session:

* source throughput: a log table and a primary-key table of ``--rows`` TPC-H-shaped orders in 8 buckets (the
  primary-key table's log holds the rows and then 10 % of them upserted again), read once as a stream
  (``startingOffsets`` every bucket's 0, ``trigger(availableNow=True)``, ``maxRecordsPerTrigger`` a fifth of
  the records: five micro-batches) and once as the batch read of the same range
  (``option("changes", "true")``, ``start`` 0, ``end`` the log's end); both written to Spark's ``noop`` sink, so
  every row crosses into the JVM and nothing is collected. Goal: stream >= 0.8x the batch read (rows/s), the
  stream's time being its micro-batches' (Spark's ``triggerExecution``); the wall time with the query's start
  (about 1 s: Spark starts the Python source's process) is printed beside it;
* sink throughput: the same ``--rows`` orders as Parquet files, written to a log table by a streaming query
  (``readStream.parquet`` -> ``writeStream.format("lakestream")``, availableNow) against ``df.write`` of the
  same files (goal: stream >= 0.8x), and ``df.write`` against the Python ``Producer`` sending the rows (report);
* latency: a query with ``trigger(processingTime="0 seconds")`` on a log table while a producer appends one row
  every 50 ms for ``--seconds``; each row carries the time it was sent, ``foreachBatch`` notes when it sees it.
  p50 and p99 (goal p99 < 1 s).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from _common import finish, parser, pct  # noqa: E402
from tiering import KEY, SCHEMA, machine, make_dataset, say  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402

BUCKETS = 8
CHUNK = 250_000


def load(lh: Lakehouse, name: str, rows: pa.Table, pk: bool) -> int:
    """A table of ``rows`` (and 10 % of them upserted again if ``pk``), left in the log; its record count."""
    if pk:
        lh.create_table(name, SCHEMA, primary_key=[KEY], buckets=BUCKETS)
    else:
        lh.create_table(name, SCHEMA, bucket_key=KEY, buckets=BUCKETS)
    log, op = lh.log(name), "upsert" if pk else "insert"
    for start in range(0, rows.num_rows, CHUNK):
        log.append(rows.slice(start, CHUNK), op)
    if pk:
        again = rows.take(pa.array(np.arange(0, rows.num_rows, 10)))
        log.append(again, op)
    return sum(log.end_offsets().values())


def stream_seconds(spark, lh: Lakehouse, name: str, per_batch: int, checkpoint: Path) -> tuple[float, float]:
    """(wall time from start() to the end, the micro-batches' own time: Spark's ``triggerExecution`` summed). The
    difference is the query's start: Spark's Python streaming source runs in a process of its own, which starts
    and imports lakestream once per query (about 1 s here)."""
    zeros = ",".join(f"{b}:0" for b in range(BUCKETS))
    t0 = time.perf_counter()
    query = (
        spark.readStream.format("lakestream")
        .option("warehouse", lh.url)
        .option("startingOffsets", zeros)
        .option("maxRecordsPerTrigger", per_batch)
        .load(name)
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    wall = time.perf_counter() - t0
    return wall, sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress) / 1000


def batch_seconds(spark, lh: Lakehouse, name: str) -> float:
    zeros = ",".join(f"{b}:0" for b in range(BUCKETS))
    ends = ",".join(f"{b}:{o}" for b, o in sorted(lh.log(name).end_offsets().items()))
    t0 = time.perf_counter()
    (
        spark.read.format("lakestream")
        .option("warehouse", lh.url)
        .option("changes", "true")
        .option("start", zeros)
        .option("end", ends)
        .load(name)
        .write.format("noop")
        .mode("overwrite")
        .save()
    )
    return time.perf_counter() - t0


def throughput(spark, lh: Lakehouse, tmp: Path, base: pa.Table, repeats: int) -> list[str]:
    out = [
        "| table | records | batch read of the range | stream, 1 micro-batch: its time / with the query's start "
        "| ratio (goal >= 0.8) | stream, 5 micro-batches | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind, pk in (("log table", False), ("primary-key table", True)):
        name = f"bench.{'pk' if pk else 'log'}"
        records = load(lh, name, base, pk)
        batch_seconds(spark, lh, name)  # untimed: the JVM's and the Python workers' first run
        ones, fives, batches = [], [], []
        for i in range(repeats):  # interleaved
            batches.append(batch_seconds(spark, lh, name))
            ones.append(stream_seconds(spark, lh, name, records, tmp / f"{name}-1-{i}"))
            fives.append(stream_seconds(spark, lh, name, -(-records // 5), tmp / f"{name}-5-{i}"))
        b = statistics.median(batches)
        one_wall, one = (statistics.median(x) for x in zip(*ones, strict=True))
        five_wall, five = (statistics.median(x) for x in zip(*fives, strict=True))
        say(f"{kind}: batch {b:.2f} s, stream {one:.2f} s / {one_wall:.2f} s (1 micro-batch), {five:.2f} s (5)")
        out.append(
            f"| {kind} | {records:,} | {b:.2f} s | {one:.2f} s / {one_wall:.2f} s | **{b / one:.2f}** "
            f"({b / one_wall:.2f} with the start) | {five:.2f} s / {five_wall:.2f} s | {b / five:.2f} "
            f"({b / five_wall:.2f}) |"
        )
    return out


def sink(spark, lh: Lakehouse, tmp: Path, base: pa.Table, repeats: int) -> list[str]:
    import pyarrow.parquet as pq

    files = tmp / "orders-parquet"
    files.mkdir()
    for i, start in enumerate(range(0, base.num_rows, CHUNK)):
        pq.write_table(base.slice(start, CHUNK), files / f"part-{i:04d}.parquet")
    schema = spark.read.parquet(str(files)).schema
    streams, writes, producers = [], [], []
    for i in range(repeats):  # interleaved, a fresh table each
        for kind, times in (("stream", streams), ("write", writes), ("producer", producers)):
            name = f"bench.sink_{kind}_{i}"
            lh.create_table(name, SCHEMA, bucket_key=KEY, buckets=BUCKETS)
            t0 = time.perf_counter()
            if kind == "stream":
                query = (
                    spark.readStream.schema(schema)
                    .parquet(str(files))
                    .writeStream.format("lakestream")
                    .option("warehouse", lh.url)
                    .option("checkpointLocation", str(tmp / f"sink-{i}"))
                    .trigger(availableNow=True)
                    .start(name)
                )
                query.awaitTermination()
                assert query.exception() is None, query.exception()
            elif kind == "write":
                spark.read.parquet(str(files)).write.format("lakestream").option("warehouse", lh.url).mode(
                    "append"
                ).save(name)
            else:
                with lh.log(name).producer() as producer:
                    for path in sorted(files.iterdir()):
                        producer.send(pq.read_table(path))
            times.append(time.perf_counter() - t0)
            assert sum(lh.log(name).end_offsets().values()) == base.num_rows, kind
    s, w, p = (statistics.median(x) for x in (streams, writes, producers))
    say(f"sink: stream {s:.2f} s, df.write {w:.2f} s, Producer {p:.2f} s")
    return [
        "| rows | writeStream | df.write | stream / write (rows/s; goal >= 0.8) | Python Producer | write / Producer |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {base.num_rows:,} | {s:.2f} s | {w:.2f} s | **{w / s:.2f}** | {p:.2f} s | {p / w:.2f} |",
    ]


def latency(spark, lh: Lakehouse, tmp: Path, seconds: float) -> list[str]:
    name = "bench.latency"
    schema = pa.schema([("id", pa.int64()), ("sent", pa.float64())])
    lh.create_table(name, schema, bucket_key="id", buckets=BUCKETS)
    seen: list[float] = []

    def handle(df, batch_id: int) -> None:
        rows = df.select("sent").toArrow()
        now = time.time()
        seen.extend(now - s for s in rows.column("sent").to_pylist())

    query = (
        spark.readStream.format("lakestream")
        .option("warehouse", lh.url)
        .option("startingOffsets", "latest")
        .load(name)
        .writeStream.foreachBatch(handle)
        .option("checkpointLocation", str(tmp / "latency"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        time.sleep(15)  # the first micro-batches (Python workers starting) are not what is measured
        log, sent, stop = lh.log(name), 0, time.time() + seconds
        warm = len(seen)
        while time.time() < stop:
            log.append(pa.table({"id": [sent], "sent": [time.time()]}, schema=schema))
            sent += 1
            time.sleep(0.05)
        deadline = time.time() + 30
        while len(seen) - warm < sent and time.time() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
    got = seen[warm:]
    assert len(got) == sent, f"{sent} rows sent, {len(got)} seen"
    p50, p99 = pct(got, 0.5), pct(got, 0.99)
    say(f"latency: {sent} rows, p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms")
    return [
        "| rows appended (one every 50 ms) | p50 | p99 (goal < 1 s) | max |",
        "| --- | --- | --- | --- |",
        f"| {sent} | {p50 * 1000:.0f} ms | **{p99 * 1000:.0f} ms** | {max(got) * 1000:.0f} ms |",
    ]


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path)
    args, _ = p.parse_known_args()
    rows = 200_000 if args.quick else args.rows
    seconds = 10.0 if args.quick else args.seconds
    from lakehouse.spark import spark_session

    spark = spark_session(master="local[2]", app_name="bench-streams", scheduler_only=True)
    failures: list[str] = []
    out = [f"## Streams in Spark (`bench/streams.py`, {time.strftime('%Y-%m-%d %H:%M')})", "", machine(), ""]
    with tempfile.TemporaryDirectory(prefix="lakestream-streams-") as tmp:
        lh = Lakehouse.open(Path(tmp, "warehouse").as_uri())
        base = make_dataset(rows, 10, seed=21).base
        for part in (
            lambda: throughput(spark, lh, Path(tmp), base, args.repeats),
            lambda: sink(spark, lh, Path(tmp), base, args.repeats),
            lambda: latency(spark, lh, Path(tmp), seconds),
        ):
            try:
                out += [*part(), ""]
            except Exception as exc:  # report the others
                failures.append(repr(exc))
                out += [f"failed: {exc!r}", ""]
    spark.stop()
    finish("\n".join(out), args.out, failures)


if __name__ == "__main__":
    main()
