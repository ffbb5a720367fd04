"""Merge engines through the log, tiering and every reader (issue 42): for random rows (nulls, versions out of
order, deletes where the engine takes them, partial rows) with tiering rounds, compactions, snapshot expiry and
log retention in between,

- ``union_read(as_of=X)`` equals the oracle's fold of the log in offset order up to X (or raises
  `AsOfUnavailable`), and so does ``lookup`` of some keys;
- ``changes(X, Y)`` applied to the state at X gives the state at Y (the changelog carries merged rows);
- the lake at its offsets, as lakestream's lake read, pyiceberg's scan and DuckDB's ``iceberg_scan`` read it,
  equals the fold to those offsets, and a full reconciliation finds nothing.
"""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lakehouse import Lakehouse
from lakehouse.errors import AsOfUnavailable, BatchError
from lakehouse.read.changes import apply_changes
from quality.reconcile import reconcile
from tests.conftest import duckdb_connection
from tests.lakehouse.merge_oracle import fold
from tests.support.profiles import examples

SCHEMA = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("b", pa.string()), ("v", pa.int64())])
COLS = ["k", "a", "b", "v"]
NAME = "ods.m"
BUCKETS = 2
ENGINES = {
    "partial-update": {},
    "versioned": {"version_column": "v"},
    "first-row": {},
    "aggregate": {"aggregates": {"a": "sum", "v": "count", "b": "max"}},
}
DELETES = {"partial-update", "versioned"}

value = st.one_of(st.none(), st.integers(-9, 9))
rows_ = st.lists(
    st.fixed_dictionaries(
        {"k": st.integers(0, 6), "a": value, "b": st.one_of(st.none(), st.sampled_from("xyz")), "v": st.integers(0, 4)}
    ),
    min_size=1,
    max_size=8,
    unique_by=lambda r: r["k"],
)
step = st.one_of(
    st.tuples(st.just("upsert"), rows_),
    st.tuples(st.just("partial"), rows_),  # a stream writing only k and a (partial-update: the others kept)
    st.tuples(st.just("delete"), rows_),
    st.tuples(st.just("tier"), st.sampled_from([None, 3])),
    st.tuples(st.just("compact"), st.sampled_from([None, 0.0])),
    st.tuples(st.just("expire"), st.integers(1, 3)),
    st.tuples(st.just("retain"), st.just(None)),
)


def as_rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in COLS), strict=True))


class Replay:
    """Every record ever appended, per bucket, in offset order; the state = the oracle's fold."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.records: dict[int, list[dict]] = {b: [] for b in range(BUCKETS)}

    def catch_up(self, lh: Lakehouse) -> None:
        log = lh.log(NAME)
        for b, end in log.end_offsets().items():
            if end > len(self.records[b]):
                self.records[b] += log.read(b, len(self.records[b]), end).to_pylist()

    def state(self, m: dict[int, int]) -> list[tuple]:
        options = ENGINES[self.engine]
        state: dict = {}
        for b in range(BUCKETS):
            for r in self.records[b][: m[b]]:
                row = {c: r[c] for c in COLS}
                state[r["k"]] = fold(
                    self.engine,
                    state.get(r["k"]),
                    r["_op"],
                    row,
                    value_columns=COLS[1:],
                    version=options.get("version_column"),
                    aggregates=options.get("aggregates"),
                )
        return sorted(tuple(s[c] for c in COLS) for s in state.values() if s is not None)


def run(engine: str, steps: list[tuple], write_mode: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        lh = Lakehouse.open(Path(tmp).as_uri())
        try:
            lh.create_table(
                NAME,
                SCHEMA,
                primary_key=["k"],
                buckets=BUCKETS,
                write_mode=write_mode,
                merge_engine=engine,
                **ENGINES[engine],
            )
            log = lh.log(NAME)
            replay = Replay(engine)
            points = [dict.fromkeys(range(BUCKETS), 0)]
            for kind, arg in steps:
                if kind in ("upsert", "partial", "delete"):
                    data = pa.Table.from_pylist(arg, schema=SCHEMA)
                    if kind == "partial":
                        if engine != "partial-update":
                            continue
                        data = data.select(["k", "a"])
                    if kind == "delete":
                        data = data.select(["k", "v"] if engine == "versioned" else ["k"])
                        if engine not in DELETES:
                            with pytest.raises(BatchError, match="does not accept deletes"):
                                log.append(data, op="delete")
                            continue
                    log.append(data, op="delete" if kind == "delete" else "upsert")
                    replay.catch_up(lh)
                    points.append(log.end_offsets())
                elif kind == "tier":
                    lh.tier(NAME, max_split_rows=arg)
                elif kind == "compact":
                    lh.compact(NAME, min_input_files=2, **({} if arg is None else {"delete_ratio": arg}))
                elif kind == "expire":
                    lh.expire_snapshots(NAME, older_than=timedelta(0), retain_last=arg)
                elif kind == "retain":
                    lh.apply_log_retention(NAME, retention=timedelta(0))
            lake = lh.lake_offsets(NAME)
            for m in points:
                try:
                    got = as_rows(lh.union_read(NAME, as_of=m))
                except AsOfUnavailable:
                    assert any(m[b] < lake[b] for b in range(BUCKETS)), (m, lake)
                    continue
                assert got == replay.state(m), m
                # a filter and a projection: the stored rows come from a lookup, not from the lake batches
                part = lh.union_read(NAME, as_of=m, columns=["a", "k"], row_filter="k >= 3")
                assert sorted(zip(part["k"].to_pylist(), part["a"].to_pylist(), strict=True)) == [
                    (r[0], r[1]) for r in got if r[0] >= 3
                ], m
                chosen = {r[0] for r in got[::2]} | {7}
                found = lh.lookup(NAME, pa.table({"k": pa.array(sorted(chosen), pa.int64())}), as_of=m)
                assert as_rows(found) == [r for r in got if r[0] in chosen], m
            assert as_rows(lh.union_read(NAME)) == replay.state(points[-1])
            for x, y in zip(points, points[1:], strict=False):
                try:
                    changes = lh.changes(NAME, x, y, before_images=True)
                except AsOfUnavailable:
                    continue
                state = pa.Table.from_pylist([dict(zip(COLS, r, strict=True)) for r in replay.state(x)], schema=SCHEMA)
                assert as_rows(apply_changes(state, changes, ["k"])) == replay.state(y), (x, y)
            want = replay.state(lake)
            assert as_rows(lh.lake_read(NAME)) == want
            table = lh.lake_table(NAME)
            if table.current_snapshot() is not None:
                assert as_rows(table.scan().to_arrow()) == want
                location = table.metadata_location.removeprefix("file://")
                duck = duckdb_connection().sql(f"SELECT {', '.join(COLS)} FROM iceberg_scan('{location}')").fetchall()
                assert sorted(duck) == want
            check = reconcile(lh, NAME, full=True)
            assert check.ok, [str(v) for v in check.violations]
        finally:
            lh.close()


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("write_mode", ["merge-on-read", "copy-on-write"])
@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=3, max_size=12))
@example(  # a key changed in every round, with nulls: each round merges into the row the lake stores
    steps=[
        ("upsert", [{"k": 0, "a": 1, "b": "x", "v": 2}, {"k": 1, "a": 5, "b": None, "v": 1}]),
        ("tier", None),
        ("upsert", [{"k": 0, "a": None, "b": "y", "v": 1}, {"k": 1, "a": 2, "b": "z", "v": 3}]),
        ("partial", [{"k": 0, "a": 4, "b": None, "v": 0}]),
        ("tier", None),
        ("delete", [{"k": 1, "a": None, "b": None, "v": 2}]),
        ("upsert", [{"k": 0, "a": 3, "b": None, "v": 2}]),
        ("compact", 0.0),
        ("tier", None),
        ("upsert", [{"k": 1, "a": 1, "b": None, "v": 0}]),
    ]
)
def test_every_reader_agrees_with_the_fold_of_the_log(engine: str, write_mode: str, steps: list[tuple]) -> None:
    run(engine, steps, write_mode)


def test_a_merge_engine_table_evolves(tmp_path) -> None:
    """Schema evolution and merge engines together: the stored rows of files written before an alter are read by
    field id (a renamed column keeps merging, an added one is null in them), rows of the old schema still merge,
    and the engine's own columns cannot be renamed or dropped."""
    from lakehouse.errors import SchemaEvolutionError

    lh = Lakehouse.open(tmp_path.as_uri())
    try:
        lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=1, merge_engine="aggregate", aggregates={"a": "sum"})
        old = lh.log(NAME)  # a producer that will not see the alter
        old.append(pa.table({"k": [1, 2], "a": [1, 2], "b": ["x", "y"], "v": [0, 0]}))
        lh.tier(NAME)
        lh.alter_table(NAME, add_columns=["w:int64"], rename=["b:label"])
        with pytest.raises(SchemaEvolutionError, match="option of the table's 'aggregate' merge engine"):
            lh.alter_table(NAME, rename=["a:amount"])
        with pytest.raises(SchemaEvolutionError, match="option of the table's 'aggregate' merge engine"):
            lh.alter_table(NAME, drop_columns=["a"])
        lh.log(NAME).append(pa.table({"k": [1], "a": [10], "label": [None], "v": [1], "w": [7]}))
        old.append(pa.table({"k": [2], "a": [20], "b": ["z"], "v": [1]}))  # the old names, no w
        want = [(1, 11, "x", 1, 7), (2, 22, "z", 1, None)]  # sums; label kept where null; w null where never set
        names = ["k", "a", "label", "v", "w"]

        def got(table: pa.Table) -> list[tuple]:
            return sorted(zip(*(table.column(c).to_pylist() for c in names), strict=True))

        assert got(lh.union_read(NAME)) == want
        lh.tier(NAME)
        assert got(lh.lake_read(NAME)) == want
        assert got(lh.lake_table(NAME).scan().to_arrow()) == want
        assert reconcile(lh, NAME, full=True).ok
    finally:
        lh.close()
