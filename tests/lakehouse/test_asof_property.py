"""The as-of and changes contract as a property (issue 24): for random appends, upserts and deletes interleaved
with tiering rounds, compactions, snapshot expiry and log retention,

- ``union_read(as_of=X)`` equals replaying the log to X for every X recorded along the way, or raises
  `AsOfUnavailable` (never a wrong state); X at or after the lake's offsets is always servable;
- ``lookup(keys, as_of=X)`` of a primary-key table gives the rows of those keys in that state;
- ``changes(X, Y, before_images=True)`` applied to the state at X gives the state at Y, or raises
  `AsOfUnavailable`;
- the lake at its offsets, as lakestream's lake read, pyiceberg's scan and DuckDB's ``iceberg_scan`` read it,
  equals the log replayed to those offsets, and a full reconciliation finds nothing: for merge-on-read tables
  (their position deletes applied by every reader, folded by compaction) and copy-on-write ones alike.

The oracle replays a copy of every appended batch kept by the test (the log itself loses records to retention).
"""

from __future__ import annotations

import contextlib
import tempfile
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lakehouse import Lakehouse
from lakehouse.errors import AsOfUnavailable
from lakehouse.iceberg import offsets as protocol
from lakehouse.iceberg.offsets import OFFSETS_PROPERTY, offsets_files
from lakehouse.read.changes import apply_changes
from quality.reconcile import reconcile
from tests.conftest import duckdb_connection
from tests.support.profiles import examples

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])
NAME = "ods.p"
BUCKETS = 2
COLS = ["k", "v", "__bucket", "__offset"]

step = st.one_of(
    st.tuples(st.just("upsert"), st.lists(st.integers(0, 30), min_size=1, max_size=12, unique=True)),
    st.tuples(st.just("delete"), st.lists(st.integers(0, 30), min_size=1, max_size=6, unique=True)),
    st.tuples(st.just("tier"), st.sampled_from([None, 3])),
    st.tuples(st.just("compact"), st.sampled_from([None, 0.0])),  # 0.0: fold every file's deletes
    st.tuples(st.just("expire"), st.integers(1, 3)),
    st.tuples(st.just("retain"), st.just(None)),
)


def rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in COLS), strict=True))


class Replay:
    """Every record ever appended, per bucket, in offset order (from the log right after each append)."""

    def __init__(self, pk: bool) -> None:
        self.pk = pk
        self.records: dict[int, list[dict]] = {b: [] for b in range(BUCKETS)}

    def catch_up(self, lh: Lakehouse) -> None:
        log = lh.log(NAME)
        for b, end in log.end_offsets().items():
            if end > len(self.records[b]):
                self.records[b] += log.read(b, len(self.records[b]), end).to_pylist()

    def state(self, m: dict[int, int]) -> list[tuple]:
        if not self.pk:
            return sorted((r["k"], r["v"], b, r["_offset"]) for b in range(BUCKETS) for r in self.records[b][: m[b]])
        state = {}
        for b in range(BUCKETS):
            for r in self.records[b][: m[b]]:
                if r["_op"] == "delete":
                    state.pop(r["k"], None)
                else:
                    state[r["k"]] = (r["k"], r["v"], b, r["_offset"])
        return sorted(state.values())


def run(steps: list[tuple], pk: bool, write_mode: str | None = None, compact_metadata: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        lh = Lakehouse.open(Path(tmp).as_uri())
        try:
            if pk:
                lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=BUCKETS, write_mode=write_mode)
            else:
                lh.create_table(NAME, SCHEMA, bucket_key="k", buckets=BUCKETS)
            if compact_metadata:  # offsets in files, manifests merged from two on: what large tables do
                stack.enter_context(mock.patch.object(protocol, "INLINE_OFFSETS_BUCKETS", 0))
                with lh.lake_table(NAME).transaction() as txn:
                    txn.set_properties({"commit.manifest.min-count-to-merge": "2"})
            log = lh.log(NAME)
            replay = Replay(pk)
            points = [dict.fromkeys(range(BUCKETS), 0)]
            for i, (kind, arg) in enumerate(steps):
                if kind == "upsert" or (kind == "delete" and pk):
                    keys = pa.array(arg, pa.int64())
                    data = pa.table({"k": keys, "v": pa.array([i * 100 + k for k in arg], pa.int64())})
                    log.append(data, op=kind if pk else "insert")
                    replay.catch_up(lh)
                    points.append(log.end_offsets())
                elif kind == "tier":
                    lh.tier(NAME, max_split_rows=arg)
                elif kind == "compact":
                    if arg is None:
                        lh.compact(NAME, min_input_files=2)
                    else:
                        lh.compact(NAME, min_input_files=2, delete_ratio=arg)
                elif kind == "expire":
                    lh.expire_snapshots(NAME, older_than=timedelta(0), retain_last=arg)
                elif kind == "retain":
                    lh.apply_log_retention(NAME, retention=timedelta(0))
            lake = lh.lake_offsets(NAME)
            served = []
            for m in points:
                try:
                    got = rows(lh.union_read(NAME, as_of=m))
                except AsOfUnavailable:
                    assert any(m[b] < lake[b] for b in range(BUCKETS)), (m, lake)  # at/after the lake: servable
                    continue
                assert got == replay.state(m), m
                served.append(m)
                if pk:  # a point lookup of some keys (present and absent) as of m: the same rows
                    chosen = {r[0] for r in got[::2]} | {31, -1}
                    found = lh.lookup(NAME, pa.table({"k": pa.array(sorted(chosen), pa.int64())}), as_of=m)
                    assert found.column_names == ["k", "v"]
                    assert sorted(zip(found["k"].to_pylist(), found["v"].to_pylist(), strict=True)) == [
                        (r[0], r[1]) for r in got if r[0] in chosen
                    ], m
            for x, y in zip(points, points[1:], strict=False):
                try:
                    changes = lh.changes(NAME, x, y, before_images=True)
                except AsOfUnavailable:
                    continue
                if pk:
                    state = pa.Table.from_pylist(
                        [dict(zip(COLS, r, strict=True)) for r in replay.state(x)],
                        schema=pa.schema(
                            [("k", pa.int64()), ("v", pa.int64()), ("__bucket", pa.int32()), ("__offset", pa.int64())]
                        ),
                    )
                    assert rows(apply_changes(state, changes, ["k"])) == replay.state(y), (x, y)
                    plain = changes.filter(pc.not_equal(changes.column("_op"), "update_before"))
                    assert rows(apply_changes(state, plain, ["k"])) == replay.state(y), (x, y)
                    old = {r[0] for r in replay.state(x)}
                    for k, op in zip(changes["k"].to_pylist(), changes["_op"].to_pylist(), strict=True):
                        assert (k in old) == (op != "insert"), (k, op, x, y)
                else:
                    assert len(replay.state(y)) - len(replay.state(x)) == changes.num_rows
            assert points[-1] in served  # the newest state is always servable
            want = replay.state(lake)
            assert rows(lh.lake_read(NAME)) == want
            table = lh.lake_table(NAME)
            if table.current_snapshot() is not None:
                assert rows(table.scan().to_arrow()) == want
                location = table.metadata_location.removeprefix("file://")
                duck = duckdb_connection().sql(f"SELECT {', '.join(COLS)} FROM iceberg_scan('{location}')").fetchall()
                assert sorted(duck) == want
            check = reconcile(lh, NAME, full=True)
            assert check.ok, [str(v) for v in check.violations]
            if compact_metadata and table.current_snapshot() is not None:
                assert len(table.current_snapshot().manifests(table.io)) <= 4  # one data + one delete, + new ones
                kept = offsets_files(table.metadata)
                on_disk = {p.as_uri() for p in Path(tmp).rglob("lakestream-offsets-*.json")}
                assert kept == on_disk  # expiry deleted the expired snapshots' files
                assert all(s.summary[OFFSETS_PROPERTY] is None for s in table.metadata.snapshots)
        finally:
            lh.close()


@pytest.mark.parametrize(
    ("pk", "write_mode", "compact_metadata"),
    [
        (True, "merge-on-read", False),
        (True, "merge-on-read", True),
        (True, "copy-on-write", False),
        (False, None, False),
    ],
    ids=["pk-merge-on-read", "pk-merge-on-read-merged-manifests-offsets-files", "pk-copy-on-write", "log"],
)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=3, max_size=14))
@example(  # rounds that each change tiered keys: delete manifests to merge, snapshots to expire
    steps=[
        ("upsert", [1, 2, 3, 4]),
        ("tier", None),
        ("upsert", [1, 2]),
        ("tier", None),
        ("delete", [3]),
        ("upsert", [2, 5]),
        ("tier", None),
        ("expire", 1),
        ("upsert", [4]),
        ("tier", None),
    ]
)
def test_as_of_and_changes_never_return_a_wrong_state(
    pk: bool, write_mode: str | None, compact_metadata: bool, steps: list[tuple]
) -> None:
    run(steps, pk, write_mode, compact_metadata)
