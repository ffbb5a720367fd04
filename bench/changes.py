"""Reads as of offsets and net changelogs (issue 24), against baselines measured in the same run.

A primary-key table of ``--rows`` TPC-H-like orders (10 M by default; the generator of bench/tiering.py) in
``BUCKETS`` buckets, tiered; then:

(i)  **as-of read behind a lake that is ahead of it**: ``--changes`` (1 M) upserts are appended (offsets X), the
     baseline ``union_read`` (the lake at the base, a 1 M-change tail) is timed; another 1 M are appended and
     tiered, so the lake is ahead of X; then ``union_read(as_of=X)`` (time travel to the base snapshot plus the
     same 1 M-change log range) is timed. Target: <= 1.5x the baseline.
(ii) **changes(before_images=True) of 1 % of the keys** (existing keys, new values), against diffing two full
     states (``union_read(as_of=start)``, ``union_read(as_of=end)``, a join on the key comparing ``__offset``,
     then the old and new rows of the changed keys): target >= 10x. Two key distributions: uniform over all
     keys (every data file holds changed keys: the old rows cost a scan of the key column and a read of the
     files) and recent (the newest 5 % of keys, as order updates are: key statistics prune the other files).

    .venv/bin/python bench/changes.py [--rows N] [--changes N] [--quick] [--only local|s3] [--out FILE]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import median_of, on_both_backends, parser  # noqa: E402
from tiering import KEY, SCHEMA, append_all, make_dataset, orders  # noqa: E402

from lakehouse import Lakehouse  # noqa: E402
from lakehouse.read.changes import UPDATE_BEFORE  # noqa: E402

BUCKETS = 4
NAME = "bench.orders"


def diff_states(lh: Lakehouse, start: dict[int, int], end: dict[int, int]) -> tuple[int, int]:
    """The baseline: two full states and a diff on the key (``__offset`` tells a changed row); returns (changed
    keys, before-image rows)."""
    old = lh.union_read(NAME, as_of=start)
    new = lh.union_read(NAME, as_of=end)
    joined = old.select([KEY, "__offset"]).join(
        new.select([KEY, "__offset"]), KEY, join_type="full outer", left_suffix="_old", right_suffix="_new"
    )
    same = pc.fill_null(pc.equal(joined["__offset_old"], joined["__offset_new"]), False)
    changed = joined.filter(pc.invert(same)).column(KEY)
    before = old.filter(pc.is_in(old[KEY], value_set=changed))
    after = new.filter(pc.is_in(new[KEY], value_set=changed))
    return len(changed), before.num_rows + after.num_rows


def run(label: str, store: Any, args: Any) -> list[str]:
    rows, changes = (200_000, 20_000) if args.quick else (args.rows, args.changes)
    repeats = 1 if args.quick else 3
    print(f"[{label}] generating {rows:,} orders and two sets of {changes:,} changes", flush=True)
    ds = make_dataset(rows, changes, seed=24)
    lh = Lakehouse(store)
    lh.create_table(NAME, SCHEMA, primary_key=[KEY], buckets=BUCKETS)
    log = lh.log(NAME)
    append_all(lh, NAME, ds.base, "upsert")
    lh.tier(NAME)
    append_all(lh, NAME, ds.changes, "upsert")
    x = log.end_offsets()
    base_s, base_rows = median_of(repeats, lambda: lh.union_read(NAME).num_rows)
    print(f"[{label}] union_read, lake + {changes:,}-change tail: {base_s:.2f} s", flush=True)
    append_all(lh, NAME, ds.tail, "upsert")
    lh.tier(NAME)
    assert all(lh.lake_offsets(NAME)[b] > x[b] for b in x), "the lake must be ahead of X"
    asof_s, asof_rows = median_of(repeats, lambda: lh.union_read(NAME, as_of=x).num_rows)
    assert asof_rows == base_rows, (asof_rows, base_rows)
    print(f"[{label}] union_read(as_of=X), lake ahead: {asof_s:.2f} s", flush=True)

    out = [f"### {label}", "", f"{rows:,} rows, {BUCKETS} buckets, median of {repeats}.", ""]
    out += [
        "| read | seconds | ratio to baseline | target |",
        "| --- | --- | --- | --- |",
        f"| baseline: `union_read`, lake + {changes:,}-change tail | {base_s:.2f} | 1.00 | |",
        f"| `union_read(as_of=X)`: snapshot of the base + the same {changes:,} changes, the lake ahead of X "
        f"| {asof_s:.2f} | {asof_s / base_s:.2f}x | <= 1.5x: {'met' if asof_s <= 1.5 * base_s else 'NOT met'} |",
        "",
        "| changes of 1 % of the keys | changes rows | `changes(before_images=True)` | diff of two states "
        "| speed-up | target | `changes()` (no before-images) | speed-up |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    rng = np.random.default_rng(7)
    n = rows // 100
    for kind, pool in (
        ("uniform", np.arange(rows)),
        ("recent (newest 5 % of keys)", np.arange(rows - rows // 20, rows)),
    ):
        picked = np.sort(rng.choice(pool, n, replace=False))
        updated = ds.base.take(pa.array(picked))
        fresh = orders(updated[KEY].to_numpy(), rng, ds.customers, ds.clerks)
        start = log.end_offsets()
        append_all(lh, NAME, fresh, "upsert")
        end = log.end_offsets()
        ch_s, got = median_of(repeats, lambda s=start, e=end: lh.changes(NAME, s, e, before_images=True))
        diff_s, (changed, images) = median_of(repeats, lambda s=start, e=end: diff_states(lh, s, e))
        ub = pc.sum(pc.equal(got["_op"], UPDATE_BEFORE)).as_py()
        assert changed == n == ub and got.num_rows == images, (changed, n, ub, got.num_rows, images)
        plain_s, plain = median_of(repeats, lambda s=start, e=end: lh.changes(NAME, s, e))
        assert plain.num_rows == n, plain.num_rows
        speed = diff_s / ch_s
        out.append(
            f"| {kind} | {got.num_rows:,} | {ch_s:.2f} s | {diff_s:.2f} s | {speed:.1f}x "
            f"| >= 10x: {'met' if speed >= 10 else 'NOT met'} | {plain_s:.2f} s | {diff_s / plain_s:.1f}x |"
        )
        print(f"[{label}] changes ({kind}): {ch_s:.2f} s vs diff {diff_s:.2f} s = {speed:.1f}x", flush=True)
        lh.tier(NAME)
    lh.close()
    return [*out, ""]


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--changes", type=int, default=1_000_000)
    args = p.parse_args()
    on_both_backends("Reads as of offsets and net changelogs", args, run)


if __name__ == "__main__":
    main()
