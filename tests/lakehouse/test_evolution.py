"""Schema evolution (`lakehouse.table.evolution`, `Lakehouse.alter_table`): refusals that change nothing, the
compare-and-swap, an alter that stops before its lake step, other readers (pyiceberg, DuckDB), and a property:
random alters and appends (of producers holding the new and the old schema) with tiering, compaction and expiry
between, read by the union read, the lake read and pyiceberg's scan, equal an oracle kept by field id."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from lakehouse import Lakehouse
from lakehouse.errors import AlterConflict, InvalidArgument, SchemaEvolutionError
from lakehouse.log import Log
from lakehouse.table.definition import TableDefinition
from lakestream.cli import app
from quality.reconcile import reconcile
from tests.conftest import duckdb_connection
from tests.support.profiles import examples

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), False),
        pa.field("day", pa.date32()),
        pa.field("v", pa.int32()),
        pa.field("f", pa.float32()),
        pa.field("d", pa.decimal128(9, 2)),
        pa.field("s", pa.string()),
    ]
)


def make(lh: Lakehouse, name: str = "ods.t") -> TableDefinition:
    return lh.create_table(name, SCHEMA, primary_key=["k"], buckets=2, partition_by=["day"])


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "k": list(range(start, start + n)),
            "day": pa.array([19000] * n, pa.int32()).cast(pa.date32()),
            "v": list(range(n)),
            "f": [1.5] * n,
            "d": pa.array([Decimal(1)] * n, pa.decimal128(9, 2)),
            "s": [f"s{i}" for i in range(n)],
        },
        schema=SCHEMA,
    )


def one(k: int, v: int, label: str, c: object, **more: object) -> pa.Table:
    """A row of the altered table (columns ``k, day, v, f, d, label, c`` and any of ``more``)."""
    return pa.table(
        {"k": [k], "day": rows(1)["day"], "v": [v], "f": [0.5], "d": rows(1)["d"], "label": [label], "c": [c], **more}
    )


def duckdb_rows(table, names: list[str]) -> list[tuple]:
    location = table.metadata_location.removeprefix("file://")
    return duckdb_connection().execute(f"SELECT {', '.join(names)} FROM iceberg_scan('{location}')").fetchall()


def user(table: pa.Table, names: list[str]) -> list[tuple]:
    return sorted(tuple(r[c] for c in names) for r in table.select(names).to_pylist())


# ---- refusals: a clear error, nothing changed ------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"widen": "v:int16"}, "only widening"),
        ({"widen": "f:int64"}, "only widening"),
        ({"widen": "d:decimal(10,3)"}, "only widening"),
        ({"widen": "d:decimal(8,2)"}, "only widening"),
        ({"widen": "v:int32"}, "nothing to widen"),
        ({"add_columns": "c:string!"}, "must be nullable"),
        ({"add_columns": "s:string"}, "exists already"),
        ({"add_columns": "_op:string"}, "reserved"),
        ({"add_columns": "__x:int64"}, "reserved"),
        ({"rename": "k:key"}, "primary-key column"),
        ({"drop_columns": "k"}, "primary-key column"),
        ({"widen": "day:timestamp"}, "partition column"),
        ({"drop_columns": "day"}, "partition column"),
        ({"rename": "v:s"}, "exists already"),
        ({"rename": "v:__v"}, "reserved"),
        ({"drop_columns": "nope"}, "no column 'nope'"),
        ({"drop_columns": "v", "rename": "v:w"}, "more than one change"),
    ],
)
def test_refused_alters_change_nothing(tmp_path, change: dict, match: str) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    before = make(lh)
    lake_before = lh.lake_table("ods.t").metadata_location
    with pytest.raises(SchemaEvolutionError, match=match):
        lh.alter_table("ods.t", **change)
    assert lh.table("ods.t") == before
    assert lh.lake_table("ods.t").metadata_location == lake_before


def test_bucket_key_of_a_log_table_is_refused_and_nothing_to_alter_is_an_error(tmp_path) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    lh.create_table("ods.e", SCHEMA, bucket_key="v", buckets=2)
    with pytest.raises(SchemaEvolutionError, match="'v' is a bucket-key column"):
        lh.alter_table("ods.e", widen="v:int64")
    with pytest.raises(InvalidArgument, match="nothing to alter"):
        lh.alter_table("ods.e")


@pytest.mark.backends("local", "s3")
def test_concurrent_alters_one_wins_the_other_changes_nothing(lakehouse: Lakehouse, monkeypatch) -> None:
    """Both read version 0; the first to write wins; the second's If-Match fails: AlterConflict, and the
    definition and lake are the winner's."""
    lh = lakehouse
    make(lh)
    barrier = threading.Barrier(2)
    real_put = lh.store.put

    def put(key, data, **kw):  # both alters have read the definition before either writes it
        if key.endswith("ods.t.json") and kw.get("if_match"):
            barrier.wait(timeout=30)
        return real_put(key, data, **kw)

    monkeypatch.setattr(lh.store, "put", put)
    outcomes: list[object] = []

    def alter(column: str) -> None:
        try:
            outcomes.append(lh.alter_table("ods.t", add_columns=f"{column}:string"))
        except AlterConflict as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=alter, args=(c,)) for c in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [o for o in outcomes if isinstance(o, TableDefinition)]
    lost = [o for o in outcomes if isinstance(o, AlterConflict)]
    assert len(won) == 1 and len(lost) == 1 and "nothing was changed" in str(lost[0])
    current = lh.table("ods.t")
    assert current.schema_version == 1 and current.schema.names == [*SCHEMA.names, won[0].schema.names[-1]]
    assert [f.name for f in lh.lake_table("ods.t").schema().fields][-1] == won[0].schema.names[-1]


class Crash(BaseException):
    """The process stops (as a kill would: no handler runs)."""


def test_an_alter_that_stops_before_its_lake_step_is_completed_by_the_next_tiering_round(tmp_path, monkeypatch):
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh)
    lh.log("ods.t").append(rows(4), op="upsert")
    lh.tier("ods.t")

    def crash(lake, definition):
        raise Crash("the process stopped here")

    monkeypatch.setattr(lh, "_sync_lake", crash)
    with pytest.raises(Crash):
        lh.alter_table("ods.t", add_columns="c:string", rename="s:label", widen="v:int64")
    monkeypatch.undo()
    other = Lakehouse.open(tmp_path.as_uri())  # another process: the definition is altered, the lake is not
    stale = other.catalog.load_table(("ods", "t")).schema()
    assert [f.name for f in stale.fields if not f.name.startswith("__")] == SCHEMA.names
    other.log("ods.t").append(one(9, 2**40, "x", "c"))
    other.tier("ods.t")  # brings the lake up to the definition first, then tiers the new rows
    lake = other.catalog.load_table(("ods", "t"))
    assert {f.name: str(f.field_type) for f in lake.schema().fields if not f.name.startswith("__")} == {
        "k": "long",
        "day": "date",
        "v": "long",
        "f": "float",
        "d": "decimal(9, 2)",
        "label": "string",
        "c": "string",
    }
    names = ["k", "v", "label", "c"]
    want = [(i, i, f"s{i}", None) for i in range(4)] + [(9, 2**40, "x", "c")]
    assert user(other.union_read("ods.t"), names) == want
    assert user(lake.scan().to_arrow(), names) == want


def test_reads_of_a_lake_behind_its_definition_commit_nothing_and_return_the_new_schema(tmp_path, monkeypatch):
    """`lake_table` and the reads are pure: after an alter stopped before its lake step, they read the lake under
    the definition's schema without committing it; the next write (a tiering round) rolls the lake forward."""
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh)
    lh.log("ods.t").append(rows(4), op="upsert")
    lh.tier("ods.t")
    monkeypatch.setattr(lh, "_sync_lake", lambda lake, definition: lake)  # the alter's lake step does not run
    lh.alter_table("ods.t", add_columns="c:string", rename="s:label", widen="v:int64")
    monkeypatch.undo()

    def committed() -> tuple:
        lake = lh.catalog.load_table(("ods", "t"))
        return lake.metadata_location, lake.metadata.current_snapshot_id, lake.metadata.current_schema_id

    before = committed()
    view = lh.lake_table("ods.t")
    assert [f.name for f in view.schema().fields if not f.name.startswith("__")] == [
        "k",
        "day",
        "v",
        "f",
        "d",
        "label",
        "c",
    ]
    assert view.metadata_location == before[0]
    names = ["k", "v", "label", "c"]
    want = [(i, i, f"s{i}", None) for i in range(4)]
    assert user(lh.union_read("ods.t"), names) == want
    assert user(lh.lake_read("ods.t"), names) == want
    assert user(view.scan().to_arrow(), names) == want
    assert committed() == before  # nothing read above committed the schema

    lh.tier("ods.t")  # a write: the roll-forward first
    lake = lh.catalog.load_table(("ods", "t"))
    assert lake.metadata_location != before[0]
    assert lake.schema().as_struct() == view.schema().as_struct()
    assert lh.lake_table("ods.t").metadata_location == lake.metadata_location


def test_a_commit_through_the_view_of_a_lake_behind_rolls_it_forward_first(tmp_path, monkeypatch):
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh)
    lh.log("ods.t").append(rows(2), op="upsert")
    lh.tier("ods.t")
    monkeypatch.setattr(lh, "_sync_lake", lambda lake, definition: lake)
    lh.alter_table("ods.t", add_columns="c:string")
    monkeypatch.undo()
    view = lh.lake_table("ods.t")
    with view.transaction() as tx:
        tx.set_properties({"comment": "x"})
    lake = lh.catalog.load_table(("ods", "t"))
    assert lake.properties["comment"] == "x"
    assert lake.schema().as_struct() == view.schema().as_struct()
    assert "c" in [f.name for f in lake.schema().fields]


def test_compaction_and_sync_lake_schema_roll_a_lake_behind_forward(tmp_path, monkeypatch) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh)
    for start in (0, 10):
        lh.log("ods.t").append(rows(2, start), op="upsert")
        lh.tier("ods.t")
    monkeypatch.setattr(lh, "_sync_lake", lambda lake, definition: lake)
    lh.alter_table("ods.t", add_columns="c:string")
    monkeypatch.undo()
    lh.compact("ods.t")  # a write: the roll-forward first
    assert "c" in [f.name for f in lh.catalog.load_table(("ods", "t")).schema().fields]
    assert user(lh.union_read("ods.t"), ["k", "c"]) == [(k, None) for k in (0, 1, 10, 11)]
    before = lh.catalog.load_table(("ods", "t")).metadata_location
    assert lh.sync_lake_schema("ods.t").metadata_location == before  # nothing behind: nothing committed


def test_pyiceberg_and_duckdb_read_an_evolved_table(tmp_path) -> None:
    """Files of three schema versions (a name dropped and added again among them): every reader projects them
    by field id."""
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh)
    lh.log("ods.t").append(rows(3), op="upsert")
    lh.tier("ods.t")
    lh.alter_table("ods.t", add_columns="c:int64", widen=["v:int64", "d:decimal(12,2)"], rename="s:label")
    lh.log("ods.t").append(one(10, 2**40, "z", 5))
    lh.tier("ods.t")
    lh.alter_table("ods.t", drop_columns=["c", "f"])
    lh.alter_table("ods.t", add_columns="c:string")
    lh.log("ods.t").append(one(11, 7, "y", "new").drop_columns(["f"]))
    lh.tier("ods.t")
    names = ["k", "v", "label", "c"]
    want = [(0, 0, "s0", None), (1, 1, "s1", None), (2, 2, "s2", None), (10, 2**40, "z", None), (11, 7, "y", "new")]
    table = lh.lake_table("ods.t")
    assert user(lh.union_read("ods.t"), names) == want
    assert user(lh.lake_read("ods.t"), names) == want
    assert user(table.scan().to_arrow(), names) == want
    assert sorted(duckdb_rows(table, names)) == want
    assert lh.union_read("ods.t").schema.names[:6] == ["k", "day", "v", "d", "label", "c"]
    result = reconcile(lh, "ods.t", full=True)
    assert result.ok, result.violations


def test_old_producers_and_old_names_are_accepted_and_as_of_reads_return_the_current_schema(lakehouse) -> None:
    lh = lakehouse
    make(lh)
    lh.log("ods.t").append(rows(2), op="upsert")
    before = lh.log("ods.t").end_offsets()
    old = Log(lh.store, lh.table("ods.t"))  # a producer that keeps the definition it opened with
    try:
        lh.alter_table("ods.t", add_columns="c:string", rename="s:label", widen="v:int64")
        old.append(rows(1, start=5), op="upsert")  # a segment of version 0
        lh.log("ods.t").append(rows(1, start=6).drop_columns(["f"]).append_column("f", pa.array([2.5], pa.float32())))
        lh.log("ods.t").append(one(7, 1, "n", None).drop_columns(["c"]), op="upsert")
    finally:
        old.close()
    names = ["k", "v", "label", "c"]
    assert user(lh.union_read("ods.t"), names) == [
        (0, 0, "s0", None),
        (1, 1, "s1", None),
        (5, 0, "s0", None),
        (6, 0, "s0", None),
        (7, 1, "n", None),
    ]
    asof = lh.union_read("ods.t", as_of=before)
    assert asof.schema.names[:7] == ["k", "day", "v", "f", "d", "label", "c"]
    assert user(asof, names) == [(0, 0, "s0", None), (1, 1, "s1", None)]
    lh.tier("ods.t")
    assert user(lh.union_read("ods.t", as_of=before), names) == [(0, 0, "s0", None), (1, 1, "s1", None)]
    changes = lh.changes("ods.t", before, lh.log("ods.t").end_offsets())
    assert sorted(changes.column("k").to_pylist()) == [5, 6, 7] and "label" in changes.column_names
    sub = lh.subscription("ods.t", "reader", start=before)  # a consumer positioned before the alter
    assert user(lh.union_read("ods.t", as_of=sub.position), names) == [(0, 0, "s0", None), (1, 1, "s1", None)]
    seen = lh.changes("ods.t", sub.position, lh.log("ods.t").end_offsets())
    assert sorted(seen.column("k").to_pylist()) == [5, 6, 7] and "c" in seen.column_names
    sub.advance(lh.log("ods.t").end_offsets())


def test_cli_alter(tmp_path) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh)
    runner = CliRunner()
    args = ["table", "alter", "ods.t", "--warehouse", tmp_path.as_uri()]
    result = runner.invoke(app, [*args, "--add-column", "c:string", "--widen", "v:int64", "--rename", "s:label"])
    assert result.exit_code == 0, result.output
    assert "schema version 1" in result.output
    assert lh.table("ods.t").schema.names == ["k", "day", "v", "f", "d", "label", "c"]
    result = runner.invoke(app, [*args, "--drop-column", "k"])
    assert result.exit_code != 0 and "primary-key column" in result.output
    assert lh.table("ods.t").schema_version == 1


# ---- the property ----------------------------------------------------------------------------------------

ALTERS = st.sampled_from(["add", "widen", "rename", "drop"])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("alter"), ALTERS, st.integers(0, 99)),
        st.tuples(st.just("append"), st.sampled_from(["new", "old", "delete"]), st.integers(0, 99)),
        st.tuples(st.sampled_from(["tier", "compact", "expire"]), st.just(""), st.just(0)),
    ),
    min_size=4,
    max_size=12,
)


@settings(max_examples=examples(15), deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=STEPS)
def test_random_alters_and_appends_read_as_the_oracle(tmp_path_factory, steps) -> None:
    lh = Lakehouse.open(tmp_path_factory.mktemp("evo").as_uri())
    schema = pa.schema([pa.field("k", pa.int64(), False), pa.field("a", pa.int32()), pa.field("b", pa.string())])
    lh.create_table("ods.p", schema, primary_key=["k"], buckets=2)
    oracle: dict[int, dict[int, object]] = {}  # key -> {field id: value}
    old_log: Log | None = None
    counter = 0
    try:
        for kind, what, n in steps:
            definition = lh.table("ods.p")
            if kind == "alter":
                others = [c for c in definition.schema.names if c != "k"]
                ints = [f.name for f in definition.schema if pa.types.is_int32(f.type)]
                if old_log is not None:
                    old_log.close()
                old_log = Log(lh.store, definition)  # a producer left behind at this version
                counter += 1
                if what == "add" or not others:
                    lh.alter_table("ods.p", add_columns=f"c{counter}:{'int32' if n % 2 else 'string'}")
                elif what == "widen" and ints:
                    lh.alter_table("ods.p", widen=f"{ints[n % len(ints)]}:int64")
                elif what == "rename":
                    lh.alter_table("ods.p", rename=f"{others[n % len(others)]}:r{counter}")
                elif what == "drop" and len(others) > 1:
                    dropped = definition.current.id_of(others[n % len(others)])
                    lh.alter_table("ods.p", drop_columns=others[n % len(others)])
                    for row in oracle.values():
                        row.pop(dropped, None)
            elif kind == "append":
                target = old_log if what == "old" and old_log is not None else lh.log("ods.p")
                d = target.definition
                keys = [n % 7, (n * 3) % 7]
                if what == "delete":
                    target.append(pa.table({"k": keys}), op="delete")
                    for k in keys:
                        oracle.pop(k, None)
                    continue
                data = {}
                for f in d.schema:
                    if f.name == "k":
                        data["k"] = keys
                    elif pa.types.is_integer(f.type):
                        data[f.name] = [n, n + 1]
                    else:
                        data[f.name] = [f"x{n}", None]
                target.append(pa.table(data, schema=d.schema), op="upsert")
                for i, k in enumerate(keys):
                    row = {field_id: data[f.name][i] for f, field_id in zip(d.schema, d.ids, strict=True)}
                    current = set(lh.table("ods.p").ids)
                    oracle[k] = {fid: v for fid, v in row.items() if fid in current}
            elif kind == "tier":
                lh.tier("ods.p")
            elif kind == "compact":
                lh.compact("ods.p", min_input_files=2)
            else:
                lh.expire_snapshots("ods.p", older_than=timedelta(0), retain_last=1)
        definition = lh.table("ods.p")
        names = definition.schema.names
        want = sorted(tuple(row.get(fid) for fid in definition.ids) for row in oracle.values())
        assert user(lh.union_read("ods.p"), names) == want
        lh.tier("ods.p")
        assert user(lh.lake_read("ods.p"), names) == want
        assert user(lh.lake_table("ods.p").scan().to_arrow(), names) == want
    finally:
        if old_log is not None:
            old_log.close()
        lh.close()


@pytest.mark.slow
def test_spark_reads_an_evolved_table_as_the_union_read(tmp_path, spark) -> None:
    from tests.support.spark_reads import lakestream

    lh = Lakehouse.open(tmp_path.as_uri())
    make(lh)
    lh.log("ods.t").append(rows(3), op="upsert")
    lh.tier("ods.t")
    lh.alter_table("ods.t", add_columns="c:int64", widen="v:int64", rename="s:label", drop_columns="f")
    lh.log("ods.t").append(one(7, 2**40, "z", 5).drop_columns(["f"]), op="upsert")
    df = lakestream(spark, lh).load("ods.t")
    names = ["k", "v", "label", "c"]
    assert df.columns[:5] == ["k", "day", "v", "d", "label"]
    assert (
        user(df.toArrow(), names)
        == user(lh.union_read("ods.t"), names)
        == [(0, 0, "s0", None), (1, 1, "s1", None), (2, 2, "s2", None), (7, 2**40, "z", 5)]
    )
