"""Lake metadata as tiering rounds accumulate: a table of many buckets, a thousand rounds, every snapshot kept.

Two tables of ``--buckets`` buckets (primary-key, merge-on-read) receive the same rounds side by side: each round
upserts ``--keys`` keys spread over the buckets and tiers them; every ``--compact-every`` rounds both are
compacted (as the maintenance DAG would), the last time 10 rounds before the end, so both measurements see
as many files as 10 rounds leave (the starting table is one file per bucket) and what differs is the
metadata; no snapshot is expired (the default keeps five days of them: 7,200 at one round a minute) unless
``--keep-snapshots``. Measured after 10 rounds and after ``--rounds`` rounds:

* the metadata file's size (every commit rewrites it),
* a round's commit time (median of the last 10 rounds),
* loading the table (reading and parsing its metadata file) and planning a scan of the current snapshot (its
  manifests), each the median of 5,
* the current snapshot's manifest count.

``before``: every snapshot summary holds every bucket's offsets and manifests are not merged (lakestream before
offsets files and manifest merging); ``after``: what lakestream does now. Goal: after's commit and planning
times after 1,000 rounds within 2x of after 10 rounds.

    .venv/bin/python bench/metadata.py --only local    # 1,024 buckets, 1,000 rounds (about 20 minutes)
    .venv/bin/python bench/metadata.py --quick         # 128 buckets, 100 rounds
    .venv/bin/python bench/metadata.py --keep-snapshots 100   # expiry keeps the newest 100 at each compaction
"""

from __future__ import annotations

import contextlib
import statistics
import time
from datetime import timedelta
from unittest import mock

import pyarrow as pa
from _common import on_both_backends, parser  # noqa: I001 - puts the repository on sys.path first

from lakehouse import Lakehouse  # noqa: E402
from lakehouse.iceberg import layout as lake_layout  # noqa: E402
from object_store import ObjectStore  # noqa: E402

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
VARIANTS = ("before", "after")


def say(message: str) -> None:
    print(message, flush=True)


def variant(name: str) -> contextlib.AbstractContextManager:
    """``before``: offsets inline in every summary, however many buckets."""
    if name == "before":
        return mock.patch.object(lake_layout, "INLINE_OFFSETS_BUCKETS", 1 << 30)
    return contextlib.nullcontext()


def measure(lh: Lakehouse, table_name: str, commits: list[float]) -> dict[str, float]:
    table = lh.lake_table(table_name)
    loading, planning = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        fresh = lh.lake_table(table_name)
        t1 = time.perf_counter()
        list(fresh.scan().plan_files())
        loading.append(t1 - t0)
        planning.append(time.perf_counter() - t1)
    location = table.metadata_location
    return {
        "metadata_bytes": lh.store.head(location.removeprefix(lh.store.url.rstrip("/") + "/")).size,
        "commit_s": statistics.median(commits[-10:]),
        "loading_s": statistics.median(loading),
        "planning_s": statistics.median(planning),
        "manifests": len(table.current_snapshot().manifests(table.io)),
        "snapshots": len(table.metadata.snapshots),
    }


def run(backend: str, store: ObjectStore, args) -> list[str]:
    lh = Lakehouse(store)
    buckets, rounds = (128, 100) if args.quick else (args.buckets, args.rounds)
    names = {v: f"bench.meta_{v}" for v in VARIANTS}
    say(f"{backend}: {buckets} buckets, {rounds} rounds of {args.keys} keys, compaction every {args.compact_every}")
    for v, name in names.items():
        lh.create_table(name, SCHEMA, primary_key=["k"], buckets=buckets)
        if v == "before":
            with lh.lake_table(name).transaction() as txn:
                txn.set_properties({"commit.manifest-merge.enabled": "false"})
        # every bucket holds rows before the rounds start, compacted to a file each
        lh.log(name).append(pa.table({"k": pa.array(range(buckets * 20), pa.int64()), "v": ["base"] * (buckets * 20)}))
        with variant(v):
            lh.tier(name)
    commits: dict[str, list[float]] = {v: [] for v in VARIANTS}
    at: dict[int, dict[str, dict[str, float]]] = {}
    started = time.perf_counter()
    for r in range(1, rounds + 1):
        keys = [(r * 7919 + i * 104729) % (buckets * 20) for i in range(args.keys)]
        batch = pa.table({"k": pa.array(keys, pa.int64()), "v": [f"r{r}"] * len(keys)})
        for v, name in names.items():
            lh.log(name).append(batch, op="upsert")
            with variant(v):
                commits[v].append(lh.tier(name).phases["commit"])
                if r % args.compact_every == (rounds - 10) % args.compact_every:
                    lh.compact(name)
                    if args.keep_snapshots:
                        lh.expire_snapshots(name, older_than=timedelta(0), retain_last=args.keep_snapshots)
        if r in (10, rounds):
            at[r] = {v: measure(lh, names[v], commits[v]) for v in VARIANTS}
            say(f"  round {r} ({time.perf_counter() - started:.0f} s): {at[r]}")
        elif r % 100 == 0:
            say(f"  round {r} ({time.perf_counter() - started:.0f} s)")
    first, last = at[10], at[rounds]
    out = [
        f"### {backend}: {buckets} buckets, "
        + (f"{args.keep_snapshots} snapshots kept" if args.keep_snapshots else "every snapshot kept"),
        "",
        f"| | before, 10 rounds | before, {rounds} | after, 10 rounds | after, {rounds} | after: {rounds} vs 10 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rows = [
        ("metadata file", "metadata_bytes", lambda x: f"{x / 1024:,.0f} KiB"),
        ("commit (median of 10 rounds)", "commit_s", lambda x: f"{x * 1000:,.0f} ms"),
        ("loading the table (its metadata file)", "loading_s", lambda x: f"{x * 1000:,.0f} ms"),
        ("planning a scan (manifests)", "planning_s", lambda x: f"{x * 1000:,.0f} ms"),
        ("manifests of the current snapshot", "manifests", lambda x: f"{x:,.0f}"),
    ]
    for label, key, fmt in rows:
        ratio = last["after"][key] / first["after"][key] if first["after"][key] else float("nan")
        out.append(
            f"| {label} | {fmt(first['before'][key])} | {fmt(last['before'][key])} | {fmt(first['after'][key])} "
            f"| {fmt(last['after'][key])} | {ratio:.2f}x |"
        )
    lh.close()
    return [*out, ""]


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--buckets", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=1000)
    p.add_argument("--keys", type=int, default=16, help="keys upserted per round")
    p.add_argument("--compact-every", type=int, default=100)
    p.add_argument(
        "--keep-snapshots", type=int, default=0, help="expire all but this many snapshots at each compaction"
    )
    args = p.parse_args()
    on_both_backends("Lake metadata after many tiering rounds", args, run)


if __name__ == "__main__":
    main()
