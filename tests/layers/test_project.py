"""Warehouse-layers projects: the format, its errors (raised before anything is written), the SQL analysis with
sqlglot, the planner's strategies and key mappings, and the ``layers`` CLI sub-app."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakehouse.errors import LakestreamError
from lakestream.cli.layers import layers_app
from layers import KEYED, RECOMPUTE, REGROUP, RETRACT, WINDOW, Hop, explain, load_project, plan_model
from layers.errors import (
    DependencyCycleError,
    ModelKeyError,
    ModelSqlError,
    ProjectError,
    ProjectFormatError,
    UnknownTableError,
)
from tests.support.projects import EXAMPLE, SOURCES, make_project, model


def plan_of(tmp_path: Path, sql: str, key: str = "[f_id]", extra: str = ""):
    if "," in key:  # a composite key needs its bucket key
        extra += f"-- bucket_key: {key.strip('[]').split(',')[0]}\n"
    project = load_project(make_project(tmp_path, {"dwd.m": model(sql, key, extra)}))
    return plan_model(project, "dwd.m")


# -- the example project ---------------------------------------------------------------------------------------


def test_example_project_loads_with_the_fixed_schemas() -> None:
    project = load_project(EXAMPLE)
    assert list(project.sources) == ["ods.nation", "ods.customer", "ods.orders"]
    assert project.order == ("dwd.orders_enriched", "ads.revenue_by_nation_month")
    assert project.tables == (
        "ods.nation",
        "ods.customer",
        "ods.orders",
        "dwd.orders_enriched",
        "ads.revenue_by_nation_month",
    )
    assert project.levels() == [["dwd.orders_enriched"], ["ads.revenue_by_nation_month"]]
    orders = [
        ("o_orderkey", pa.int64()),
        ("o_custkey", pa.int64()),
        ("o_orderstatus", pa.string()),
        ("o_totalprice", pa.decimal128(12, 2)),
        ("o_orderdate", pa.date32()),
        ("o_orderpriority", pa.string()),
    ]
    assert project.sources["ods.nation"].schema == pa.schema(
        [pa.field("n_nationkey", pa.int64(), False), ("n_name", pa.string()), ("n_regionkey", pa.int64())]
    )
    assert project.sources["ods.customer"].schema == pa.schema(
        [
            pa.field("c_custkey", pa.int64(), False),
            ("c_name", pa.string()),
            ("c_nationkey", pa.int64()),
            ("c_mktsegment", pa.string()),
            ("c_acctbal", pa.decimal128(12, 2)),
        ]
    )
    assert project.sources["ods.orders"].schema == pa.schema([pa.field(*orders[0], False), *orders[1:]])
    assert [s.primary_key for s in project.sources.values()] == [("n_nationkey",), ("c_custkey",), ("o_orderkey",)]
    enriched = project.models["dwd.orders_enriched"]
    assert enriched.primary_key == ("o_orderkey",)
    assert enriched.inputs == ("ods.customer", "ods.nation", "ods.orders")
    assert enriched.schema == pa.schema(
        [
            pa.field(*orders[0], False),
            *orders[1:],
            ("c_name", pa.string()),
            ("c_mktsegment", pa.string()),
            ("n_nationkey", pa.int64()),
            ("n_name", pa.string()),
        ]
    )
    revenue = project.models["ads.revenue_by_nation_month"]
    assert revenue.primary_key == ("n_nationkey", "order_month")
    assert revenue.inputs == ("dwd.orders_enriched",)
    assert revenue.schema == pa.schema(
        [
            pa.field("n_nationkey", pa.int64(), False),
            ("n_name", pa.string()),
            pa.field("order_month", pa.date32(), False),
            ("order_count", pa.int64()),
            ("revenue", pa.decimal128(22, 2)),
            ("max_totalprice", pa.decimal128(12, 2)),
        ]
    )


def test_example_explain_gives_strategies_and_key_mappings() -> None:
    enriched, revenue = explain(load_project(EXAMPLE))
    assert (enriched.model, enriched.strategy, enriched.order) == ("dwd.orders_enriched", KEYED, 1)
    assert enriched.driving == "ods.orders"
    assert enriched.output_key == (("o_orderkey", "o_orderkey"),)
    assert enriched.mapping("ods.orders").role == "driving" and enriched.mapping("ods.orders").path == ()
    customer = enriched.mapping("ods.customer")
    assert customer.key == ("c_custkey",)
    assert customer.path == (Hop("c", "ods.customer", ("c_custkey",), "o", "ods.orders", ("o_custkey",)),)
    nation = enriched.mapping("ods.nation")
    assert [(h.from_table, h.from_columns, h.to_table, h.to_columns) for h in nation.path] == [
        ("ods.nation", ("n_nationkey",), "ods.customer", ("c_nationkey",)),
        ("ods.customer", ("c_custkey",), "ods.orders", ("o_custkey",)),
    ]
    assert (revenue.model, revenue.strategy, revenue.order) == ("ads.revenue_by_nation_month", REGROUP, 2)
    assert [g.output for g in revenue.group_by] == ["n_nationkey", "n_name", "order_month"]
    assert "TRUNC" in revenue.group_by[2].expression.upper()
    assert [(a.kind, a.output, a.retractable) for a in revenue.aggregates] == [
        ("count", "order_count", True),
        ("sum", "revenue", True),
        ("max", "max_totalprice", False),
    ]
    assert revenue.aggregates[0].argument is None and revenue.aggregates[1].argument.endswith("o_totalprice")
    assert "max(" in revenue.reason and "retraction" in revenue.reason


# -- errors, each before anything is written ------------------------------------------------------------------

BAD_MODELS = [
    # (models, error class, words in the message)
    (
        {
            "dwd.a": model("SELECT f_id FROM dwd.b"),
            "dwd.b": model("SELECT f_id FROM dwd.c"),
            "dwd.c": model("SELECT f_id FROM dwd.a"),
        },
        DependencyCycleError,
        ["dwd.a -> dwd.b -> dwd.c -> dwd.a", "break the cycle"],
    ),
    ({"dwd.a": model("SELECT f_id FROM dwd.a")}, DependencyCycleError, ["dwd.a -> dwd.a"]),
    (
        {"dwd.a": model("SELECT f_id FROM ods.missing")},
        UnknownTableError,
        ["table ods.missing is neither a source nor a model", "models/ods.missing.sql", "dwd.a.sql"],
    ),
    ({"dwd.a": model("SELECT f_id FROM f")}, UnknownTableError, ["table f", "namespace.table"]),
    ({"dwd.a": model("SELECT f_id FROM ods.f WHERE")}, ModelSqlError, ["does not parse", ":2:24 (model dwd.a)"]),
    ({"dwd.a": model("SELECT f_id FROM ods.f; SELECT 1")}, ModelSqlError, ["2 SQL statements"]),
    ({"dwd.a": model("INSERT INTO ods.d SELECT f_id, 'x', 1 FROM ods.f")}, ModelSqlError, ["INSERT", "not a SELECT"]),
    ({"dwd.a": model("SELECT f_id, f_qty + 1 FROM ods.f")}, ModelSqlError, ["output column 2", "AS name"]),
    ({"dwd.a": model("SELECT f_id, f_nope FROM ods.f")}, ModelSqlError, ["f_nope", "could not be resolved"]),
    ({"dwd.a": model("SELECT f_id, f_qty AS f_id FROM ods.f")}, ModelSqlError, ["['f_id']", "more than once"]),
    ({"dwd.a": model("SELECT f_qty FROM ods.f")}, ModelKeyError, ["['f_id']", "not in the SELECT's output"]),
    (
        {"dwd.a": model("SELECT f_dim, count(*) AS n FROM ods.f GROUP BY f_dim", key="[n]")},
        ModelKeyError,
        ["'n' is not a GROUP BY expression"],
    ),
    ({"dwd.a": "SELECT f_id FROM ods.f\n"}, ProjectFormatError, ["header", "primary_key"]),
    ({"dwd.a": model("SELECT f_id FROM ods.f", key="[]")}, ProjectFormatError, ["needs '-- primary_key"]),
    ({"dwd.a": model("SELECT f_id FROM ods.f", extra="-- buckets: 0\n")}, ProjectFormatError, ["buckets", "0"]),
    ({"dwd.a": model("SELECT f_id FROM ods.f", extra="-- bucket: 3\n")}, ProjectFormatError, ["unknown setting"]),
    (
        {"dwd.a": model("SELECT f_id, f_dim FROM ods.f", key="[f_id, f_dim]")},
        ProjectFormatError,
        ["composite primary key", "bucket_key"],
    ),
    (
        {"dwd.a": model("SELECT f_id, f_day FROM ods.f", extra="-- partition_by: [week(f_day)]\n")},
        ProjectFormatError,
        ["partition_by", "week(f_day)"],
    ),
    (
        {"dwd.a": model("SELECT f_id, f_ratio FROM ods.f", extra="-- partition_by: [day(f_ratio)]\n")},
        ProjectFormatError,
        ["day() needs a date or timestamp column"],
    ),
    ({"dwd.a": model("SELECT f_id FROM ods.f", extra="-- buckets: [1\n")}, ProjectFormatError, ["YAML"]),
    ({"ods.F": model("SELECT f_id FROM ods.f")}, ProjectFormatError, ["declared twice", "ods.f is a source"]),
    ({"not_a_name": model("SELECT f_id FROM ods.f")}, ProjectFormatError, ["invalid table name"]),
]


@pytest.mark.parametrize(("models", "error", "words"), BAD_MODELS, ids=lambda v: getattr(v, "__name__", None))
def test_bad_models_are_clear_errors(tmp_path, models, error, words) -> None:
    root = make_project(tmp_path / "p", models)
    with pytest.raises(error) as caught:
        load_project(root)
    message = str(caught.value)
    for word in words:
        assert word in message, message
    assert isinstance(caught.value, ProjectError) and isinstance(caught.value, LakestreamError)
    assert caught.value.path is not None and str(root) in caught.value.path


def test_a_description_with_a_colon_needs_no_quotes(tmp_path) -> None:
    """`-- description: revenue: per nation` was a YAML error ("mapping values are not allowed here")."""
    extra = "-- description: revenue: per nation, from 2020: on  # a note\n"
    project = load_project(make_project(tmp_path, {"dwd.m": model("SELECT f_id FROM ods.f", extra=extra)}))
    assert project.models["dwd.m"].description == "revenue: per nation, from 2020: on"


def test_a_colon_elsewhere_in_yaml_says_to_quote_the_value(tmp_path) -> None:
    sources = SOURCES + "    description: the regions: all of them\n"
    with pytest.raises(ProjectFormatError) as caught:
        load_project(make_project(tmp_path, {}, sources=sources))
    assert "mapping values are not allowed here" in str(caught.value)
    assert "quote the value" in str(caught.value)


def test_a_model_named_twice_in_subfolders_is_an_error(tmp_path) -> None:
    root = make_project(tmp_path, {})
    for sub in ("a", "b"):
        (root / "models" / sub).mkdir()
        (root / "models" / sub / "dwd.m.sql").write_text(model("SELECT f_id FROM ods.f"))
    with pytest.raises(ProjectFormatError, match=r"model dwd.m is declared twice: dwd.m is a model in .*/a/dwd.m.sql"):
        load_project(root)


def test_a_cycle_error_names_the_cycle_and_its_files(tmp_path) -> None:
    root = make_project(tmp_path, {"dwd.b": model("SELECT f_id FROM dwd.a"), "dwd.a": model("SELECT f_id FROM dwd.b")})
    with pytest.raises(DependencyCycleError) as caught:
        load_project(root)
    assert caught.value.cycle == ["dwd.a", "dwd.b", "dwd.a"]
    assert "dwd.a.sql" in str(caught.value) and "dwd.b.sql" in str(caught.value)


# Broken SQL (its lines after the file's header), then the line and column within it, and what the message says.
BROKEN_SQL = [
    ("SELECT f_id FROM ods.f WHERE", 1, 24, "the WHERE clause has no condition (unexpected end of the query)"),
    ("SELECT f_id FROM ods.f\nWHERE\nGROUP BY f_id", 2, 1, "the WHERE clause has no condition (found 'GROUP BY')"),
    ("SELECT f_id,, f_qty FROM ods.f", 1, 13, "expected an expression after ',' (found ',')"),
    ("SELECT FROM ods.f", 1, 1, "the SELECT lists no columns (found 'FROM')"),
    (
        "SELECT f_id,\n  f_qty,\nFROM ods.f",
        2,
        8,
        "expected an expression after ',' (found 'FROM'); remove the trailing",
    ),
    ("SELECT f_id\nFROM ods.f\nWHERE (f_qty > 1", 3, 7, "this '(' is never closed"),
    ("SELECT f_id FROM ods.f WHERE f_qty > 1)", 1, 39, "')' closes no '('"),
    ("SELECT f_id, sum(f_qty AS q FROM ods.f GROUP BY f_id", 1, 17, "this '(' is never closed"),
    ("SELECT f_id, sum(f_qty FROM ods.f GROUP BY f_id)", 1, 24, "expected ')' to close the '(' at line 4, column 17"),
    ("SELECT f_id FROM ods.f WHERE f_dim = 'abc", 1, 38, "this string is never closed; end it with '"),
    ("SELECT f_id FROM ods.f /* why", 1, 24, "this /* comment is never closed"),
    ("SELECT `f_id FROM ods.f", 1, 8, "this quoted name is never closed"),
    ("SELEC f_id FROM ods.f", 1, 1, "the query starts with 'SELEC', which is not a keyword; did you mean SELECT?"),
    ("SELECT f_id FORM ods.f", 1, 18, "is 'FORM' (line 4, column 13) a misspelled FROM?"),
    ("SELECT f_id FROM ods.f ORDER BY", 1, 24, "ORDER BY has no expressions"),
    ("SELECT f_id FROM ods.f GROUP BY", 1, 24, "GROUP BY has no expressions"),
    ("SELECT f.f_id FROM ods.f f JOIN ods.d d ON", 1, 41, "the JOIN's ON has no condition"),
    ("SELECT f_id, f_qty + FROM ods.f", 1, 22, "'+' has no right-hand operand (found 'FROM')"),
    ("SELECT f_id FROM ods.f WHERE f_qty > 1 AND", 1, 40, "AND has no condition after it"),
    ("SELECT f_id FROM ods.f WHERE f_qty BETWEEN 1", 1, 44, "BETWEEN has no upper bound"),
    ("SELECT f_id, CAST(f_qty AS) AS q FROM ods.f", 1, 25, "CAST has no type after AS"),
    ("SELECT f_id AS FROM ods.f", 1, 13, "AS has no name after it (found 'FROM')"),
    ("SELECT f_id, CASE WHEN f_qty > 1 THEN 1 AS big FROM ods.f", 1, 41, "CASE has no END"),
    ("SELECT f_id FROM ods.f UNION", 1, 24, "UNION has no query after it"),
    ("SELECT f_id, sum() AS s FROM ods.f GROUP BY f_id", 1, 18, "SUM() is missing an argument"),
    ("SELECT f_id FROM", 1, 17, "expected a table name after 'FROM' (unexpected end of the query)"),
]


@pytest.mark.parametrize(("sql", "line", "column", "words"), BROKEN_SQL, ids=[c[0] for c in BROKEN_SQL])
def test_sql_that_does_not_parse_is_said_in_sql_terms_at_its_line_and_column(tmp_path, sql, line, column, words):
    """sqlglot's internals ("Required keyword: 'this' missing for <class ...Where>") were the message, at its own
    line and column; SQL sqlglot accepts but Spark does not mean (``a,, b``, a trailing ',') passed."""
    root = make_project(tmp_path, {})
    file = root / "models" / "dwd.a.sql"
    file.write_text(f"\n-- primary_key: [f_id]\n-- buckets: 2\n{sql}\n")  # the SQL starts at line 4
    with pytest.raises(ModelSqlError) as caught:
        load_project(root)
    message = str(caught.value)
    first, source, caret = message.splitlines()
    at = line + 3
    assert first.startswith(f"{file}:{at}:{column} (model dwd.a): the SQL does not parse as Spark SQL: "), message
    assert words in first, message
    assert (caught.value.line, caught.value.column) == (at, column)
    assert source == f"{at:>5} | {sql.splitlines()[line - 1]}", message
    assert caret.index("^") - caret.index("|") - 2 == column - 1, message  # under the column
    assert "<class" not in message and "sqlglot" not in message and "Token" not in message


VALID_SQL = [
    "SELECT a, b FROM ods.f",
    "SELECT DISTINCT a FROM ods.f;",
    "SELECT /*+ BROADCAST(d) */ f.a FROM ods.f f JOIN ods.d d ON f.x = d.y",
    "SELECT CAST(a AS DECIMAL(12, 2)) AS a, TRY_CAST(b AS INT) AS b FROM ods.f",
    "SELECT sum(a) OVER (PARTITION BY b ORDER BY c) AS s FROM ods.f",
    "SELECT b, count(*) AS n FROM ods.f GROUP BY ALL",
    "SELECT b, count(*) AS n FROM ods.f GROUP BY GROUPING SETS ((b), ())",
    "WITH x AS (SELECT a FROM ods.f), y AS (SELECT a FROM x) SELECT a FROM y",
    "SELECT a FROM ods.f WHERE s = 'it''s, (not) a comma' AND t = 'a\\'b,' AND u = \"x)\"",
    "SELECT a -- a comment, with a comma (and a parenthesis\nFROM ods.f /* , ) WHERE */",
    "SELECT transform(arr, x -> x + 1) AS t, named_struct('a', 1) AS s FROM ods.f",
    "SELECT a FROM ods.f f LEFT JOIN ods.d d USING (a) ORDER BY a DESC, b LIMIT 10",
    "SELECT `from`, `select` AS `where` FROM ods.f",
    "SELECT a FROM ods.f WHERE a IN (SELECT a FROM ods.d) UNION ALL SELECT a FROM ods.d",
    "SELECT a FROM ods.f WHERE b BETWEEN 1 AND 2 AND c IS NOT NULL OR NOT d",
]


@pytest.mark.parametrize("sql", VALID_SQL)
def test_valid_sql_is_not_taken_for_a_syntax_error(sql) -> None:
    from layers.syntax import parse_statements

    statements, problem = parse_statements(sql, "spark")
    assert problem is None and len(statements) == 1, problem


BAD_SOURCES = [
    ("sources:\n  ods.f:\n    columns: {f_id: int64}\n    primary_key: [f_x]\n", ["f_x", "not in the schema"]),
    ("sources:\n  ods.f:\n    columns: {f_id: bigintt}\n", ["unknown type 'bigintt'"]),
    ("sources:\n  ods.f:\n    columns: {f_id: int64}\n    buckets: 5000\n", ["buckets must be an integer"]),
    ("sources:\n  ods.f:\n    columns: [f_id]\n", ["'columns' must map each column name"]),
    ("sources:\n  ods.f:\n    columns: {f_id: 'decimal(50,2)'}\n", ["decimal(50,2)"]),
    ("sources:\n  ods.f:\n    columns: {f_id: int64}\n  ODS.F:\n    columns: {f_id: int64}\n", ["declared twice"]),
    ("sources:\n  ods.f:\n    columns: {f_id: int64}\n    keys: [f_id]\n", ["unknown setting(s) ['keys']"]),
    ("tables: {}\n", ["one mapping 'sources:'"]),
]


@pytest.mark.parametrize(("sources", "words"), BAD_SOURCES)
def test_bad_sources_are_clear_errors(tmp_path, sources, words) -> None:
    root = make_project(tmp_path, {}, sources=sources)
    with pytest.raises(ProjectFormatError) as caught:
        load_project(root)
    for word in words:
        assert word in str(caught.value), str(caught.value)
    assert "sources.yml" in str(caught.value)


def test_missing_files_are_clear_errors(tmp_path) -> None:
    with pytest.raises(ProjectFormatError, match="does not exist"):
        load_project(tmp_path / "nowhere")
    tmp_path.joinpath("p").mkdir()
    with pytest.raises(ProjectFormatError, match="sources.yml is missing"):
        load_project(tmp_path / "p")
    tmp_path.joinpath("p", "sources.yml").write_text(SOURCES)
    with pytest.raises(ProjectFormatError, match="models is missing"):
        load_project(tmp_path / "p")
    tmp_path.joinpath("p", "models").mkdir()
    tmp_path.joinpath("p", "models", "notes.txt").write_text("x")
    with pytest.raises(ProjectFormatError, match="not a model file"):
        load_project(tmp_path / "p")


# -- sqlglot edge cases ----------------------------------------------------------------------------------------


def test_ctes_are_not_inputs_and_ctes_merge_into_a_keyed_plan(tmp_path) -> None:
    sql = """
    WITH big AS (SELECT * FROM ods.f WHERE f_qty > 10), d AS (SELECT d_id, d_name FROM ods.d)
    SELECT big.f_id, big.f_qty, d.d_name FROM big JOIN d ON big.f_dim = d.d_id
    """
    project = load_project(make_project(tmp_path, {"dwd.m": model(sql)}))
    assert project.models["dwd.m"].inputs == ("ods.d", "ods.f")  # not "big", not "d"
    assert project.models["dwd.m"].schema.names == ["f_id", "f_qty", "d_name"]
    plan = plan_model(project, "dwd.m")
    assert plan.strategy == KEYED, plan.reason
    assert plan.mapping("ods.d").path[0].to_columns == ("f_dim",)


def test_quoted_identifiers_backticks_aliases_and_case(tmp_path) -> None:
    sql = """
    SELECT `x`.`f_id` AS `id`, y.d_name AS name FROM `ods`.`f` AS `x` INNER JOIN ODS.D y ON `x`.f_dim = y.`d_id`
    """
    project = load_project(make_project(tmp_path, {"dwd.m": model(sql, key="[id]")}))
    m = project.models["dwd.m"]
    assert m.inputs == ("ods.d", "ods.f")
    assert m.schema == pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string())])
    plan = plan_model(project, "dwd.m")
    assert plan.strategy == KEYED and plan.output_key == (("id", "f_id"),)
    assert plan.mapping("ods.d").path == (Hop("y", "ods.d", ("d_id",), "x", "ods.f", ("f_dim",)),)


def test_a_subquery_in_from_is_an_input_and_merges(tmp_path) -> None:
    sql = "SELECT s.f_id, s.f_qty FROM (SELECT f_id, f_qty FROM ods.f WHERE f_qty > 0) AS s"
    plan = plan_of(tmp_path, sql)
    assert plan.inputs == ("ods.f",)
    assert plan.strategy == KEYED and plan.driving == "ods.f"


def test_a_subquery_in_from_that_cannot_merge_is_recomputed(tmp_path) -> None:
    sql = "SELECT s.f_id, s.n FROM (SELECT f_id, count(*) AS n FROM ods.f GROUP BY f_id) AS s JOIN ods.d ON s.n = d_id"
    plan = plan_of(tmp_path, sql)
    assert plan.inputs == ("ods.d", "ods.f")
    assert plan.strategy == RECOMPUTE and "subquery in FROM" in plan.reason


def test_types_are_unknown_where_they_cannot_be_certain(tmp_path) -> None:
    project = load_project(
        make_project(tmp_path, {"dwd.m": model("SELECT f_id, f_qty * 2 AS q2, upper(f_dim) AS u FROM ods.f")})
    )
    m = project.models["dwd.m"]
    assert m.schema is None and m.untyped_columns == ("q2", "u")
    assert [c.type for c in m.columns][0] == pa.int64()


# -- strategies ------------------------------------------------------------------------------------------------

STRATEGY_CASES = [
    # (sql, key, strategy, words in the reason)
    ("SELECT f_id, f_qty FROM ods.f WHERE f_qty > 1", "[f_id]", KEYED, ["filter/projection of ods.f"]),
    (
        "SELECT f.f_id, d.d_name, r.r_name FROM ods.f f JOIN ods.d d ON f.f_dim = d.d_id "
        "JOIN ods.r r ON d.d_region = r.r_id AND r.r_name <> 'x'",
        "[f_id]",
        KEYED,
        ["inner equi-joins from ods.f"],
    ),
    (
        "SELECT f.f_id, d.d_name FROM ods.f f LEFT JOIN ods.d d ON f.f_dim = d.d_id",
        "[f_id]",
        KEYED,
        ["inner and left equi-joins from ods.f"],
    ),
    (
        "SELECT f.f_id, d.d_name FROM ods.d d LEFT OUTER JOIN ods.f f ON f.f_dim = d.d_id",
        "[f_id]",
        RECOMPUTE,
        ["ods.f, whose key is the output key, is the right side of a LEFT JOIN"],
    ),
    ("SELECT f.f_id, d.d_name FROM ods.f f RIGHT JOIN ods.d d ON f.f_dim = d.d_id", "[f_id]", RECOMPUTE, ["RIGHT"]),
    ("SELECT f.f_id, d.d_name FROM ods.f f FULL JOIN ods.d d ON f.f_dim = d.d_id", "[f_id]", RECOMPUTE, ["FULL"]),
    (
        "SELECT d.d_name, count(*) AS n FROM ods.f f LEFT JOIN ods.d d ON f.f_dim = d.d_id GROUP BY d.d_name",
        "[d_name]",
        RECOMPUTE,
        ["GROUP BY over a LEFT JOIN of ods.d"],
    ),
    ("SELECT f.f_id, d.d_name FROM ods.f f JOIN ods.d d ON f.f_dim < d.d_id", "[f_id]", RECOMPUTE, ["equality"]),
    (
        "SELECT DISTINCT f.f_dim, d.d_name AS name FROM ods.f f JOIN ods.d d ON f.f_dim = d.d_id",
        "[f_dim, name]",
        REGROUP,
        ["SELECT DISTINCT, planned as a GROUP BY of its columns: GROUP BY f_dim, name"],
    ),
    ("SELECT DISTINCT f_dim FROM ods.f LIMIT 3", "[f_dim]", RECOMPUTE, ["SELECT DISTINCT"]),
    ("SELECT DISTINCT f_dim, count(*) AS n FROM ods.f GROUP BY f_dim", "[f_dim]", RECOMPUTE, ["SELECT DISTINCT"]),
    ("SELECT f.f_id FROM ods.f f LEFT SEMI JOIN ods.d d ON f.f_dim = d.d_id", "[f_id]", RECOMPUTE, ["LEFT SEMI JOIN"]),
    ("SELECT f_id, explode(array(1, 2)) AS x FROM ods.f", "[f_id]", RECOMPUTE, ["generator"]),
    (
        "SELECT f_dim, sum(DISTINCT f_qty) AS s FROM ods.f GROUP BY f_dim",
        "[f_dim]",
        REGROUP,
        ["sum(DISTINCT f.f_qty) needs"],
    ),
    (
        "SELECT f_dim, count(*) AS n, sum(f_qty * 2) AS s FROM ods.f GROUP BY f_dim",
        "[f_dim]",
        RETRACT,
        ["sum(f.f_qty * 2)"],
    ),
    ("SELECT f_dim, avg(abs(f_qty)) AS s FROM ods.f GROUP BY f_dim", "[f_dim]", REGROUP, ["avg(ABS(f.f_qty))"]),
    ("SELECT count(*) AS n FROM ods.f", "[n]", RECOMPUTE, ["aggregate without GROUP BY"]),
    (
        "SELECT f_dim, f_day AS day, count(*) AS n FROM ods.f GROUP BY 1, day",  # an ordinal and an alias
        "[f_dim, day]",
        RETRACT,
        ["GROUP BY f_dim, day with count(*)"],
    ),
    ("SELECT f.f_id, d.d_name FROM ods.f f CROSS JOIN ods.d d", "[f_id]", RECOMPUTE, ["cross join"]),
    ("SELECT 1 AS f_id", "[f_id]", RECOMPUTE, ["without FROM"]),
    (
        "SELECT f.f_id, d.d_name FROM ods.f f JOIN ods.d d ON f.f_qty = d.d_region AND d.d_id = f.f_dim",
        "[f_id]",
        KEYED,
        ["inner equi-joins from ods.f"],
    ),
    (
        "SELECT f.f_id FROM ods.f f JOIN ods.d d ON f.f_dim = d.d_id JOIN ods.r r ON d.d_region = r.r_id "
        "AND f.f_qty = r.r_id",
        "[f_id]",
        RECOMPUTE,
        ["join conditions form a cycle through ods.r"],
    ),
    (
        "SELECT d.d_id, f.f_qty FROM ods.d d JOIN ods.f f ON f.f_dim = d.d_id",
        "[d_id]",
        RECOMPUTE,
        ["ods.f is joined on ['f_dim'], not on its primary key"],
    ),
    (
        "SELECT f.f_dim, d.d_name FROM ods.f f JOIN ods.d d ON f.f_dim = d.d_id",
        "[f_dim]",
        RECOMPUTE,
        ["not the primary key of one input"],
    ),
    (
        "SELECT f_id, row_number() OVER (ORDER BY f_qty) AS rn FROM ods.f",
        "[f_id]",
        RECOMPUTE,
        ["window function ROW_NUMBER(): no PARTITION BY"],
    ),
    (
        "SELECT f_id, row_number() OVER (PARTITION BY f_dim ORDER BY f_qty) AS rn, "
        "lag(f_qty) OVER (PARTITION BY f_qty, f_dim ORDER BY f_id) AS prev FROM ods.f WHERE f_qty > 0",
        "[f_id]",
        WINDOW,
        ["window functions partitioned by f_dim over ods.f", "partitions the changed rows belong to"],
    ),
    (  # the "top rows per partition" shape: a filter on a window's value over a subquery, kept as a QUALIFY
        "SELECT f_id, f_qty * 2 AS q2 FROM (SELECT f_id, f_qty, row_number() OVER (PARTITION BY f_dim ORDER BY "
        "f_qty DESC) AS rn FROM ods.f WHERE f_qty > 0) AS t WHERE rn = 1",
        "[f_id]",
        WINDOW,
        ["window functions partitioned by f_dim over ods.f"],
    ),
    (
        "WITH ranked AS (SELECT f_id, f_dim, rank() OVER (PARTITION BY f_dim ORDER BY f_qty) AS r FROM ods.f) "
        "SELECT f_id, r FROM ranked WHERE r <= 3",
        "[f_id]",
        WINDOW,
        ["partitioned by f_dim"],
    ),
    (
        "SELECT f_dim, max(rn) AS m FROM (SELECT f_id, f_dim, row_number() OVER (PARTITION BY f_dim ORDER BY "
        "f_id) AS rn FROM ods.f) AS t GROUP BY f_dim",
        "[f_dim]",
        RECOMPUTE,
        ["a subquery in FROM that could not be merged"],
    ),
    (
        "SELECT f_id, rank() OVER (PARTITION BY f_dim ORDER BY f_id) AS a, rank() OVER (PARTITION BY f_qty "
        "ORDER BY f_id) AS b FROM ods.f",
        "[f_id]",
        RECOMPUTE,
        ["share no PARTITION BY column"],
    ),
    (
        "SELECT f.f_id, row_number() OVER (PARTITION BY d.d_region ORDER BY f.f_id) AS rn FROM ods.f f "
        "JOIN ods.d d ON f.f_dim = d.d_id",
        "[f_id]",
        RECOMPUTE,
        ["over a join"],
    ),
    (
        "SELECT f_dim, rank() OVER (PARTITION BY f_dim ORDER BY f_id) AS r FROM ods.f",
        "[f_dim]",
        RECOMPUTE,
        ["window function RANK(): the output key", "not the primary key of one input"],
    ),
    (
        "SELECT f_dim, count(*) AS n, rank() OVER (PARTITION BY f_dim ORDER BY count(*)) AS r FROM ods.f "
        "GROUP BY f_dim",
        "[f_dim]",
        RECOMPUTE,
        ["over a GROUP BY"],
    ),
    ("SELECT DISTINCT f_id, f_qty FROM ods.f", "[f_id]", REGROUP, ["SELECT DISTINCT, planned as a GROUP BY"]),
    ("SELECT f_id FROM ods.f LIMIT 10", "[f_id]", RECOMPUTE, ["LIMIT"]),
    ("SELECT f_id FROM ods.f UNION ALL SELECT d_id FROM ods.d", "[f_id]", RECOMPUTE, ["UNION"]),
    ("SELECT f_id, rand() AS x FROM ods.f", "[f_id]", RECOMPUTE, ["non-deterministic", "RAND"]),
    ("SELECT f_id, current_timestamp() AS t FROM ods.f", "[f_id]", RECOMPUTE, ["non-deterministic"]),
    (
        "SELECT f_id FROM ods.f WHERE f_dim IN (SELECT d_id FROM ods.d)",
        "[f_id]",
        RECOMPUTE,
        ["subquery in an expression"],
    ),
    ("SELECT f_id + 1 AS k FROM ods.f", "[k]", RECOMPUTE, ["key column k is computed"]),
    (
        "SELECT f_dim, count(*) AS n, sum(f_amount) AS s, avg(f_qty) AS a FROM ods.f GROUP BY f_dim",
        "[f_dim]",
        REGROUP,
        ["avg(f.f_qty) needs the group's rows", "count(*), sum(f.f_amount) alone would be maintained by retraction"],
    ),
    (
        "SELECT f_dim, count(*) AS n, sum(f_amount) AS s FROM ods.f GROUP BY f_dim",
        "[f_dim]",
        RETRACT,
        ["count(*), sum(f.f_amount)", "before-images subtract"],
    ),
    (
        "SELECT f_dim, sum(f_amount) AS s FROM ods.f GROUP BY f_dim",
        "[f_dim]",
        REGROUP,
        ["no count(*) column tells when a group loses its last row"],
    ),
    (
        "SELECT f_dim, count(*) AS n, max(f_amount) AS m FROM ods.f GROUP BY f_dim",
        "[f_dim]",
        REGROUP,
        ["only a group whose extreme left is recomputed"],
    ),
    (
        "SELECT f_dim, count(DISTINCT f_qty) AS n FROM ods.f GROUP BY f_dim",
        "[f_dim]",
        REGROUP,
        ["count(DISTINCT f.f_qty)"],
    ),
    ("SELECT f_dim, min(f_day) AS first FROM ods.f GROUP BY f_dim", "[f_dim]", REGROUP, ["min(f.f_day) needs"]),
    ("SELECT f_dim, sum(f_ratio) AS s FROM ods.f GROUP BY f_dim", "[f_dim]", REGROUP, ["sum(f.f_ratio)"]),
    (
        "SELECT f_dim, sum(f_qty) AS s FROM ods.f GROUP BY f_dim HAVING sum(f_qty) > 3",
        "[f_dim]",
        REGROUP,
        ["HAVING"],
    ),
    ("SELECT f_dim, collect_list(f_id) AS ids FROM ods.f GROUP BY f_dim", "[f_dim]", RECOMPUTE, ["collect_list"]),
    ("SELECT f_dim FROM ods.f GROUP BY ROLLUP (f_dim)", "[f_dim]", RECOMPUTE, ["ROLLUP"]),
    (
        "SELECT d.d_name, count(*) AS n, sum(f.f_qty) AS q FROM ods.f f JOIN ods.d d ON f.f_dim = d.d_id "
        "GROUP BY d.d_name",
        "[d_name]",
        RETRACT,
        ["GROUP BY d_name"],
    ),
]


@pytest.mark.parametrize(("sql", "key", "strategy", "words"), STRATEGY_CASES)
def test_strategies(tmp_path, sql, key, strategy, words) -> None:
    plan = plan_of(tmp_path, sql, key)
    assert plan.strategy == strategy, plan.reason
    for word in words:
        assert word in plan.reason, plan.reason


def test_a_group_model_over_a_join_maps_dimension_changes_to_the_driving_rows(tmp_path) -> None:
    sql = "SELECT d.d_name, sum(f.f_qty) AS q FROM ods.f f JOIN ods.d d ON f.f_dim = d.d_id GROUP BY d.d_name"
    plan = plan_of(tmp_path, sql, "[d_name]")
    assert plan.driving == "ods.f"
    assert plan.mapping("ods.d").path == (Hop("d", "ods.d", ("d_id",), "f", "ods.f", ("f_dim",)),)
    assert [(g.expression, g.output) for g in plan.group_by] == [("d.d_name", "d_name")]
    assert [(a.kind, a.argument, a.output) for a in plan.aggregates] == [("sum", "f.f_qty", "q")]


# -- the CLI sub-app -------------------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_explain_prints_each_model_with_its_strategy() -> None:
    result = runner.invoke(layers_app, ["explain", "--project", str(EXAMPLE)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    enriched = next(line for line in lines if "dwd.orders_enriched" in line and "keyed" in line)
    assert enriched.split("│")[1].strip() == "1"
    assert any("ads.revenue_by_nation_month" in line and "regroup" in line for line in lines)
    assert "ods.nation(n_nationkey) -> ods.customer(c_nationkey)" in result.output


def test_cli_explain_and_validate_json() -> None:
    import json

    result = runner.invoke(layers_app, ["explain", "--project", str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    plans = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(p["order"], p["model"], p["strategy"]) for p in plans] == [
        (1, "dwd.orders_enriched", "keyed"),
        (2, "ads.revenue_by_nation_month", "regroup"),
    ]
    assert "ods.nation(n_nationkey) -> ods.customer(c_nationkey)" in " ".join(plans[0]["key_mapping"])
    assert plans[1]["inputs"] == ["dwd.orders_enriched"] and plans[1]["group_by"]
    assert plans[0]["partition_by"] == [] == plans[1]["partition_by"]
    result = runner.invoke(layers_app, ["validate", "--project", str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "ok": True,
        "sources": ["ods.nation", "ods.customer", "ods.orders"],
        "models": ["dwd.orders_enriched", "ads.revenue_by_nation_month"],
        "order": ["dwd.orders_enriched", "ads.revenue_by_nation_month"],
        "untyped_columns": {},
    }


def test_cli_validate_ok_and_error(tmp_path) -> None:
    ok = runner.invoke(layers_app, ["validate", "--project", str(EXAMPLE)])
    assert ok.exit_code == 0, ok.output
    assert "3 sources, 2 models; order: dwd.orders_enriched -> ads.revenue_by_nation_month" in ok.output
    root = make_project(tmp_path, {"dwd.a": model("SELECT f_id FROM ods.gone")})
    bad = runner.invoke(layers_app, ["validate", "--project", str(root)], env={"COLUMNS": "500"})
    assert bad.exit_code == 1
    assert "error: " in bad.output and "table ods.gone is neither a source nor a model" in bad.output
    assert len(bad.output.strip().splitlines()) == 1 and "Traceback" not in bad.output
    untyped = make_project(tmp_path / "u", {"dwd.a": model("SELECT f_id, f_qty * 2 AS q FROM ods.f")})
    result = runner.invoke(layers_app, ["validate", "--project", str(untyped)])
    assert result.exit_code == 0 and "dwd.a: types of q are checked at deploy" in result.output
    result = runner.invoke(layers_app, ["validate", "--project", str(untyped), "--json"])
    assert result.exit_code == 0 and '"untyped_columns": {"dwd.a": ["q"]}' in result.stdout, result.output


@pytest.mark.parametrize("command", ["validate", "explain"])
def test_cli_shows_where_the_sql_breaks(tmp_path, command) -> None:
    root = make_project(tmp_path, {"dwd.a": model("SELECT f_id,\n       f_qty,\nFROM ods.f")})
    result = runner.invoke(layers_app, [command, "--project", str(root)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: {root / 'models' / 'dwd.a.sql'}:3:13 (model dwd.a): the SQL does not parse as Spark SQL: expected "
        "an expression after ',' (found 'FROM'); remove the trailing ','",
        "    3 |        f_qty,",
        "      |             ^",
    ]


def test_column_names_keep_their_case_and_are_matched_with_it(tmp_path) -> None:
    sources = "sources:\n  ods.t:\n    columns: {Id: int64, Amount: int64}\n    primary_key: Id\n"
    root = make_project(
        tmp_path / "ok", {"dwd.m": model("SELECT Id, Amount AS MyA, `Amount` FROM ods.t", "[Id]")}, sources
    )
    m = load_project(root).models["dwd.m"]
    assert m.column_names == ("Id", "MyA", "Amount")
    root = make_project(tmp_path / "bad", {"dwd.m": model("SELECT Id, amount FROM ods.t", "[Id]")}, sources)
    with pytest.raises(ModelSqlError, match="Column 'amount' could not be resolved.*with their case"):
        load_project(root)


def test_a_model_reads_a_model_whose_types_are_unknown(tmp_path) -> None:
    root = make_project(
        tmp_path,
        {
            "dwd.a": model("SELECT f_id, f_qty * 2 AS q2 FROM ods.f"),
            "ads.b": model(
                "SELECT a.f_id, a.q2, d.d_name FROM dwd.a a JOIN ods.f f ON a.f_id = f.f_id "
                "JOIN ods.d d ON f.f_dim = d.d_id"
            ),
        },
    )
    project = load_project(root)
    assert project.order == ("dwd.a", "ads.b") and project.levels() == [["dwd.a"], ["ads.b"]]
    assert project.models["ads.b"].untyped_columns == ("q2",)
    assert project.readers_of("dwd.a") == ["ads.b"]
    plan = plan_model(project, "ads.b")
    assert plan.strategy == KEYED and plan.driving == "dwd.a", plan.reason
    assert [h.describe() for h in plan.mapping("ods.d").path] == [
        "ods.d(d_id) -> ods.f(f_dim)",
        "ods.f(f_id) -> dwd.a(f_id)",
    ]


def test_equalities_beyond_the_key_filter_and_the_hop_follows_the_key(tmp_path) -> None:
    sql = "SELECT f.f_id, d.d_name FROM ods.f f JOIN ods.d d ON f.f_qty = d.d_region AND d.d_id = f.f_dim"
    plan = plan_of(tmp_path, sql)
    assert plan.mapping("ods.d").path == (Hop("d", "ods.d", ("d_id",), "f", "ods.f", ("f_dim",)),)


def test_the_driving_table_need_not_come_first_in_from(tmp_path) -> None:
    plan = plan_of(tmp_path, "SELECT f.f_id, d.d_name FROM ods.d d JOIN ods.f f ON f.f_dim = d.d_id")
    assert plan.strategy == KEYED and plan.driving == "ods.f", plan.reason
    assert plan.mapping("ods.d").path == (Hop("d", "ods.d", ("d_id",), "f", "ods.f", ("f_dim",)),)


def test_the_sub_app_under_the_main_command_group(tmp_path) -> None:
    """As the main command wires it (``app.add_typer(layers_app, name="layers")``), errors stay one line."""
    import typer

    from lakestream.cli.common import BoundaryGroup

    main = typer.Typer(cls=BoundaryGroup)
    main.command("config")(lambda: None)  # a group needs a command of its own to keep sub-apps as groups
    main.add_typer(layers_app, name="layers")
    ok = runner.invoke(main, ["layers", "validate", "--project", str(EXAMPLE)])
    assert ok.exit_code == 0 and "3 sources, 2 models" in ok.output, ok.output
    root = make_project(tmp_path, {"dwd.a": model("SELECT f_id FROM dwd.a")})
    bad = runner.invoke(main, ["layers", "explain", "--project", str(root)], env={"COLUMNS": "500"})
    assert bad.exit_code == 1 and "error: " in bad.output and "dwd.a -> dwd.a" in bad.output, bad.output


@pytest.mark.subprocess
def test_layers_import_neither_spark_nor_airflow() -> None:
    """Nor sqlglot until a project is loaded: ``lakestream`` imports the sub-app on every start."""
    import subprocess
    import sys

    code = (
        "import sys, layers, lakestream.cli.layers; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j', 'airflow', 'sqlglot')))"
    )
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_package_exports_what_it_lists() -> None:
    import layers as layers

    assert sorted(layers.__all__) == sorted(layers._EXPORTS)
    assert all(getattr(layers, name) is not None for name in layers.__all__)
    with pytest.raises(AttributeError):
        layers.nothing  # noqa: B018


def test_a_group_model_over_a_keyless_log_table(tmp_path) -> None:
    sources = SOURCES + "  ods.e:\n    columns: {e_kind: string, e_n: int64}\n"
    sql = "SELECT e_kind, count(*) AS events, sum(e_n) AS total FROM ods.e GROUP BY e_kind"
    root = make_project(tmp_path, {"ads.kinds": model(sql, "[e_kind]")}, sources)
    project = load_project(root)
    assert project.sources["ods.e"].primary_key == ()
    plan = plan_model(project, "ads.kinds")
    assert plan.strategy == RETRACT, plan.reason
    assert plan.mapping("ods.e").role == "driving" and plan.mapping("ods.e").key == ()
