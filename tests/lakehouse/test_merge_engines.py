"""Merge engines in memory: `MergeEngine.resolve` against the oracle that folds changes one at a time, and the
definitions' checks. (The engines through the log, tiering and every reader: test_merge_tables.py.)"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakehouse.errors import BatchError, SchemaError
from lakehouse.log.batch import Limits, conform
from lakehouse.log.segment import OP_TYPE, OPS
from lakehouse.merge import engine_of
from lakehouse.table.definition import TableDefinition
from tests.lakehouse.merge_oracle import fold_all
from tests.support.profiles import examples

SCHEMA = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("b", pa.string()), ("v", pa.int64())])
AGGREGATES = {"a": "sum", "v": "max", "b": "min"}
OPTIONS = {
    "last-row": {},
    "partial-update": {},
    "versioned": {"version_column": "v"},
    "first-row": {},
    "aggregate": {"aggregates": AGGREGATES},
}


def definition(engine: str, schema: pa.Schema = SCHEMA, **options) -> TableDefinition:
    return TableDefinition.build(
        "t.m", schema, buckets=1, primary_key=["k"], merge_engine=engine, **(options or OPTIONS[engine])
    )


def log_records(changes: list[tuple[str, dict]]) -> pa.Table:
    """Changes as the log reads them: user columns, ``_op``, ``_offset``, ``_timestamp``."""
    rows = [row for _, row in changes]
    user = pa.Table.from_pylist(rows, schema=SCHEMA)
    ops = pa.DictionaryArray.from_arrays(pa.array([OPS.index(op) for op, _ in changes], pa.int8()), pa.array(OPS))
    return (
        user.append_column("_op", ops.cast(OP_TYPE))
        .append_column("_offset", pa.array(range(len(rows)), pa.int64()))
        .append_column("_timestamp", pa.array([datetime(2026, 1, 1)] * len(rows), pa.timestamp("ms", "UTC")))
    )


def apply(state: dict, resolved: pa.Table) -> dict:
    """``state`` ({key: row}) with the resolved changes applied by the last-row rule."""
    out = dict(state)
    for row in resolved.to_pylist():
        op = row.pop("_op")
        row.pop("_offset"), row.pop("_timestamp")
        if op == "delete":
            out.pop(row["k"], None)
        else:
            out[row["k"]] = row
    return out


def changes_strategy(engine: str):
    value = st.one_of(st.none(), st.integers(-5, 5))
    ops = (
        ["insert", "upsert", "delete"]
        if engine in ("last-row", "partial-update", "versioned")
        else ["insert", "upsert"]
    )
    row = st.fixed_dictionaries(
        {
            "k": st.integers(0, 4),
            "a": value,
            "b": st.one_of(st.none(), st.sampled_from(["x", "y", "z"])),
            "v": st.integers(0, 3) if engine == "versioned" else value,
        }
    )
    return st.lists(st.tuples(st.sampled_from(ops), row), min_size=1, max_size=25)


@pytest.mark.parametrize("engine", list(OPTIONS))
@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_resolve_equals_the_fold_whatever_the_split(engine, data):
    """Resolving changes in two rounds (the first round's rows stored) equals the oracle's fold of all of them."""
    changes = data.draw(changes_strategy(engine))
    if engine == "versioned":  # half the deletes carry a version
        changes = [
            (op, {"k": r["k"], "a": None, "b": None, "v": r["v"] if r["k"] % 2 else None} if op == "delete" else r)
            for op, r in changes
        ]
    else:
        changes = [(op, {"k": r["k"], "a": None, "b": None, "v": None} if op == "delete" else r) for op, r in changes]
    cut = data.draw(st.integers(0, len(changes)))
    options = OPTIONS[engine]
    oracle_options = {
        "value_columns": ["a", "b", "v"],
        "version": options.get("version_column"),
        "aggregates": options.get("aggregates"),
    }
    expected = fold_all(engine, changes, "k", **oracle_options)
    engine_ = engine_of(definition(engine))
    first = apply({}, engine_.resolve(SCHEMA.empty_table(), log_records(changes[:cut])) if cut else log_records([]))
    rest = changes[cut:]
    stored = pa.Table.from_pylist(list(first.values()), schema=SCHEMA)
    if rest:  # only the columns the engine says it reads (readers look up no more)
        stored = stored.select(["k", *engine_.stored_columns(log_records(rest))])
    resolved = engine_.resolve(stored, log_records(rest)) if rest else log_records([])
    assert len(set(resolved.column("k").to_pylist())) == resolved.num_rows  # one change per key
    assert apply(first, resolved) == expected


def test_versioned_ignores_late_rows_and_ties_go_to_the_later():
    engine = engine_of(definition("versioned"))
    stored = pa.Table.from_pylist([{"k": 1, "a": 1, "b": "s", "v": 5}], schema=SCHEMA)
    late = log_records([("upsert", {"k": 1, "a": 2, "b": "late", "v": 4})])
    assert engine.resolve(stored, late).num_rows == 0  # nothing changed
    tie = engine.resolve(stored, log_records([("upsert", {"k": 1, "a": 3, "b": "tie", "v": 5})]))
    assert tie.column("b").to_pylist() == ["tie"]


def test_first_row_keeps_the_stored_row():
    engine = engine_of(definition("first-row"))
    stored = pa.Table.from_pylist([{"k": 1, "a": 1, "b": "s", "v": 5}], schema=SCHEMA)
    changes = log_records(
        [("upsert", {"k": 1, "a": 2, "b": "x", "v": 1}), ("insert", {"k": 2, "a": 7, "b": "y", "v": 1})]
    )
    out = engine.resolve(stored, changes)
    assert out.column("k").to_pylist() == [2] and out.column("a").to_pylist() == [7]


def test_aggregate_counts_and_sums_with_the_stored_row():
    engine = engine_of(definition("aggregate", aggregates={"a": "sum", "v": "count"}))
    stored = pa.Table.from_pylist([{"k": 1, "a": 10, "b": "s", "v": 3}], schema=SCHEMA)
    changes = log_records(
        [("upsert", {"k": 1, "a": 5, "b": None, "v": 99}), ("upsert", {"k": 1, "a": None, "b": "t", "v": None})]
    )
    (row,) = engine.resolve(stored, changes).select(["k", "a", "b", "v"]).to_pylist()
    assert row == {"k": 1, "a": 15, "b": "t", "v": 4}


@pytest.mark.parametrize("engine", ["first-row", "aggregate"])
def test_deletes_refused_before_anything_is_written(engine):
    with pytest.raises(BatchError, match="does not accept deletes") as info:
        conform(definition(engine), pa.table({"k": [1]}), "delete", Limits())
    # every engine that accepts deletes is named as a way out, 'versioned' included
    assert all(f"'{other}'" in str(info.value) for other in ("last-row", "partial-update", "versioned"))


def test_versioned_refuses_rows_without_a_version():
    rows = pa.table({"k": [1, 2], "a": [1, 1], "b": ["x", "y"], "v": [1, None]})
    with pytest.raises(BatchError, match="version column 'v' has 1 null"):
        conform(definition("versioned"), rows, "upsert", Limits())


def test_partial_update_accepts_rows_of_some_columns():
    out = conform(definition("partial-update"), pa.table({"k": [1], "b": ["x"]}), "upsert", Limits())
    assert out.column_names == ["k", "a", "b", "v"] and out.column("a").to_pylist() == [None]
    with pytest.raises(SchemaError, match="lacks columns"):
        conform(definition("last-row"), pa.table({"k": [1], "b": ["x"]}), "upsert", Limits())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"merge_engine": "newest"}, "merge_engine must be one of"),
        ({"merge_engine": "versioned"}, "needs version_column"),
        ({"merge_engine": "versioned", "version_column": "b"}, "has type string"),
        ({"merge_engine": "versioned", "version_column": "k"}, "primary-key column 'k'"),
        ({"merge_engine": "versioned", "version_column": "nope"}, "not in the schema"),
        ({"merge_engine": "last-row", "version_column": "v"}, "option of the 'versioned'"),
        ({"merge_engine": "aggregate", "aggregates": {"b": "sum"}}, "sum of column 'b' needs a number"),
        ({"merge_engine": "aggregate", "aggregates": {"a": "avg"}}, "'avg' of column 'a' is not one of"),
        ({"merge_engine": "partial-update", "aggregates": {"a": "sum"}}, "options of the 'aggregate'"),
    ],
)
def test_bad_engine_options_are_refused(options, message):
    with pytest.raises(SchemaError, match=message):
        TableDefinition.build("t.m", SCHEMA, buckets=1, primary_key=["k"], **options)


def test_engines_need_a_key_and_nullable_values_for_partial_update():
    with pytest.raises(SchemaError, match="give the table a primary key"):
        TableDefinition.build("t.m", SCHEMA, buckets=1, merge_engine="first-row")
    strict = pa.schema([("k", pa.int64()), pa.field("a", pa.int64(), nullable=False)])
    with pytest.raises(SchemaError, match=r"must be nullable; \['a'\]"):
        TableDefinition.build("t.m", strict, buckets=1, primary_key=["k"], merge_engine="partial-update")


def test_the_definition_keeps_its_engine():
    d = definition("aggregate")
    again = TableDefinition.from_json(d.to_json())
    assert (again.merge_engine, again.aggregates) == ("aggregate", tuple(AGGREGATES.items()))
    assert "aggregate (a sum, v max, b min)" in d.describe()["merge engine"]
    old = TableDefinition.from_json(definition("last-row").to_json().replace(b'"merge-engine"', b'"x-engine"'))
    assert old.merge_engine == "last-row"


@pytest.mark.parametrize("engine", ["partial-update", "aggregate"])
@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_resolve_of_keys_changed_once_equals_the_fold(engine, data):
    """A round whose every key changes once (the usual round) is folded column by column, without grouping
    (`MergeEngine.aligned`): the same rows as the oracle's fold, stored rows present or not, nulls anywhere."""
    value = st.one_of(st.none(), st.integers(-5, 5))
    row = st.fixed_dictionaries(
        {"k": st.integers(0, 9), "a": value, "b": st.one_of(st.none(), st.sampled_from(["x", "y"])), "v": value}
    )
    first = data.draw(st.lists(st.tuples(st.just("upsert"), row), max_size=10))
    rest = data.draw(
        st.lists(
            st.tuples(st.sampled_from(["insert", "upsert"]), row),
            min_size=1,
            max_size=10,
            unique_by=lambda c: c[1]["k"],
        )
    )
    options = {"aggregates": {"a": "sum", "v": "count", "b": "max"}} if engine == "aggregate" else {}
    oracle = {"value_columns": ["a", "b", "v"], "version": None, "aggregates": options.get("aggregates")}
    expected = fold_all(engine, first + rest, "k", **oracle)
    engine_ = engine_of(definition(engine, **options))
    state = apply({}, engine_.resolve(SCHEMA.empty_table(), log_records(first)) if first else log_records([]))
    changes = log_records(rest)
    columns = engine_.stored_columns(changes)
    stored = pa.Table.from_pylist(list(state.values()), schema=SCHEMA).select(["k", *columns])
    assert engine_.aligned(stored, changes, columns) is not None  # the column-wise fold, not the grouping
    assert apply(state, engine_.resolve(stored, changes)) == expected


@pytest.mark.parametrize("repeated", [False, True])
def test_an_aggregate_that_overflows_its_column_is_refused_either_way(repeated):
    """Folded column by column (each key once) or grouped (a key twice), a sum past the column's type is a
    `BatchError` asking to widen it, never a wrapped value."""
    schema = pa.schema([("k", pa.int64()), ("a", pa.int32())])
    engine = engine_of(
        TableDefinition.build(
            "t.m", schema, buckets=1, primary_key=["k"], merge_engine="aggregate", aggregates={"a": "sum"}
        )
    )
    rows = [("upsert", {"k": 1, "a": 1})] * (2 if repeated else 1)
    user = pa.Table.from_pylist([r for _, r in rows], schema=schema)
    ops = pa.DictionaryArray.from_arrays(pa.array([OPS.index(op) for op, _ in rows], pa.int8()), pa.array(OPS))
    changes = (
        user.append_column("_op", ops.cast(OP_TYPE))
        .append_column("_offset", pa.array(range(len(rows)), pa.int64()))
        .append_column("_timestamp", pa.array([datetime(2026, 1, 1)] * len(rows), pa.timestamp("ms", "UTC")))
    )
    stored = pa.table({"k": pa.array([1], pa.int64()), "a": pa.array([2**31 - 1], pa.int32())})
    with pytest.raises(BatchError, match="widen the column"):
        engine.resolve(stored, changes)
