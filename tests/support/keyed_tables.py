"""A keyed table ``ods.t`` (k int64, v string, n int32; 3 buckets) built by six rounds of changes with tiering and
a compaction in between (`build`), the rows of one round (`batch`), and the oracle of its reads as of log offsets
computed from the log alone (`oracle`). Used by the as-of, change-feed, file-scan and reconciliation tests."""

from __future__ import annotations

import random

import pyarrow as pa

from lakehouse import Lakehouse

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("n", pa.int32())])
USER = SCHEMA.names
BUCKETS = 3
NAME = "ods.t"


def batch(keys, tag: str) -> pa.Table:
    keys = list(keys)
    return pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "v": pa.array([f"{tag}-{k}" for k in keys]),
            "n": pa.array([k % 7 for k in keys], pa.int32()),
        }
    )


def build(lh: Lakehouse, kind: str, log_format: str | None = None) -> list[dict[int, int]]:
    """Six rounds of changes with tiering (and one compaction) in between; the log's end offsets after each.

    Tiered after rounds 1, 2, 4 and 5 (round 5 in splits of 7 records: several snapshots), compacted after
    round 2; rounds 3 and 6 stay in the log, so the lake ends behind the last map and ahead of the others.
    ``log_format``: the log's layout (default: a new table's)."""
    pk = kind == "pk"
    if pk:
        lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=BUCKETS, log_format=log_format)
    else:
        lh.create_table(NAME, SCHEMA, bucket_key="k", buckets=BUCKETS, log_format=log_format)
    log = lh.log(NAME)
    rng = random.Random(24)
    ends = []
    for r in range(6):
        log.append(batch(rng.sample(range(60), 25), f"r{r}a"), op="upsert" if pk else "insert")
        log.append(batch(rng.sample(range(60), 10), f"r{r}b"), op="upsert" if pk else "insert")
        if pk and r:
            log.append(batch(rng.sample(range(60), 8), f"r{r}d"), op="delete")
        ends.append(log.end_offsets())
        if r in (0, 1, 3):
            lh.tier(NAME)
        if r == 4:
            lh.tier(NAME, max_split_rows=7)
        if r == 1:
            lh.compact(NAME, min_input_files=2)
    return ends


def oracle(lh: Lakehouse, kind: str):
    """A function m -> the expected rows as of m, computed from the log alone (every bucket read once)."""
    log = lh.log(NAME)
    records = {b: log.read(b, 0).to_pylist() for b in range(BUCKETS)}

    def expected(m: dict[int, int]) -> list[tuple]:
        if kind == "log":
            return sorted((*(r[c] for c in USER), b, r["_offset"]) for b in range(BUCKETS) for r in records[b][: m[b]])
        state = {}
        for b in range(BUCKETS):
            for r in records[b][: m[b]]:
                if r["_op"] == "delete":
                    state.pop(r["k"], None)
                else:
                    state[r["k"]] = (*(r[c] for c in USER), b, r["_offset"])
        return sorted(state.values())

    return expected
