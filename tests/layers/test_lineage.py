"""Column-level lineage (`layers.lineage`, ``lakestream layers lineage``): the example's columns against a
hand-written expectation, the SQL shapes lineage must see through (``*``, CTEs, subqueries, aggregates, windows,
``DISTINCT``, set operations, literals, a join of two models), the OpenLineage facet, and the CLI. No Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakehouse.errors import InvalidArgument
from lakestream.cli.layers import layers_app
from layers import load_project
from layers.lineage import ColumnLineage, Lineage, SourceColumn, column_lineage, openlineage_facet
from tests.support.projects import EXAMPLE, make_project

runner = CliRunner()


def cols(*specs: str) -> set[tuple[str, str, str]]:
    """``"ods.orders.o_orderkey identity"`` -> ``("ods.orders", "o_orderkey", "identity")``."""
    out = set()
    for spec in specs:
        name, kind = spec.split()
        table, column = name.rsplit(".", 1)
        out.add((table, column, kind))
    return out


def as_set(sources: tuple[SourceColumn, ...]) -> set[tuple[str, str, str]]:
    return {(s.table, s.column, s.kind) for s in sources}


def check(c: ColumnLineage, kind: str, direct: set, ultimate: set) -> None:
    assert (c.kind, as_set(c.direct), as_set(c.ultimate)) == (kind, direct, ultimate), c


# -- the example ---------------------------------------------------------------------------------------------------

ORDERS = ("o_orderkey", "o_custkey", "o_orderstatus", "o_totalprice", "o_orderdate", "o_orderpriority")
#: dwd.orders_enriched: orders.* and three dimension columns, each copied from one source column.
ENRICHED = {
    **{c: "ods.orders" for c in ORDERS},
    "c_name": "ods.customer",
    "c_mktsegment": "ods.customer",
    "n_nationkey": "ods.nation",
    "n_name": "ods.nation",
}
#: ads.revenue_by_nation_month: (kind, direct, ultimate) per output column.
REVENUE = {
    "n_nationkey": (
        "identity",
        cols("dwd.orders_enriched.n_nationkey identity"),
        cols("ods.nation.n_nationkey identity"),
    ),
    "n_name": ("identity", cols("dwd.orders_enriched.n_name identity"), cols("ods.nation.n_name identity")),
    "order_month": (
        "transformation",
        cols("dwd.orders_enriched.o_orderdate transformation"),
        cols("ods.orders.o_orderdate transformation"),
    ),
    "order_count": ("aggregation", set(), set()),  # count(*): an aggregate of no column
    "revenue": (
        "aggregation",
        cols("dwd.orders_enriched.o_totalprice aggregation"),
        cols("ods.orders.o_totalprice aggregation"),
    ),
    "max_totalprice": (
        "aggregation",
        cols("dwd.orders_enriched.o_totalprice aggregation"),
        cols("ods.orders.o_totalprice aggregation"),
    ),
}


@pytest.fixture(scope="module")
def example() -> Lineage:
    return column_lineage(load_project(EXAMPLE))


def test_every_column_of_the_example_has_the_hand_written_lineage(example: Lineage) -> None:
    assert list(example.models) == ["dwd.orders_enriched", "ads.revenue_by_nation_month"]
    enriched = example.model("dwd.orders_enriched")
    assert list(enriched.columns) == list(ENRICHED)
    for column, table in ENRICHED.items():
        expected = {(table, column, "identity")}
        check(enriched.columns[column], "identity", expected, expected)
    revenue = example.model("ads.revenue_by_nation_month")
    assert list(revenue.columns) == list(REVENUE)
    for column, (kind, direct, ultimate) in REVENUE.items():
        check(revenue.columns[column], kind, direct, ultimate)


def test_the_example_s_joins_and_groups_decide_rows_not_values(example: Lineage) -> None:
    enriched = example.model("dwd.orders_enriched")
    assert as_set(enriched.indirect) == cols(
        "ods.orders.o_custkey join",
        "ods.customer.c_custkey join",
        "ods.customer.c_nationkey join",
        "ods.nation.n_nationkey join",
    )
    revenue = example.model("ads.revenue_by_nation_month")
    assert as_set(revenue.indirect) == cols(
        "dwd.orders_enriched.n_nationkey group_by",
        "dwd.orders_enriched.n_name group_by",
        "dwd.orders_enriched.o_orderdate group_by",
    )
    assert as_set(revenue.indirect_ultimate) == cols(
        "ods.nation.n_nationkey group_by", "ods.nation.n_name group_by", "ods.orders.o_orderdate group_by"
    )


# -- SQL shapes ----------------------------------------------------------------------------------------------------

SOURCES = """
sources:
  ods.f:
    columns: {f_id: int64, f_dim: int64, f_qty: int64, f_amount: "decimal(12,2)", f_day: date}
    primary_key: [f_id]
  ods.d:
    columns: {d_id: int64, d_name: string, d_region: int64}
    primary_key: [d_id]
"""
MODELS = {
    # a star through a CTE with a filter, a join, a literal, an expression, a scalar subquery
    "dwd.star": """
        -- primary_key: [f_id]
        WITH big AS (SELECT * FROM ods.f WHERE f_qty > 0)
        SELECT b.*, d.d_name AS dim_name, 'x' AS tag, f_qty * 2 AS qty2,
               (SELECT max(d_region) FROM ods.d) AS top_region
        FROM big AS b JOIN ods.d AS d ON b.f_dim = d.d_id
    """,
    # aggregates over a subquery in FROM that reads a model
    "ads.agg": """
        -- primary_key: [dim_name]
        SELECT dim_name, count(*) AS n, sum(qty2) AS total, max(f_day) AS last_day, 1 AS one
        FROM (SELECT * FROM dwd.star) AS s
        GROUP BY dim_name HAVING sum(f_amount) > 0
    """,
    "dwd.win": """
        -- primary_key: [f_id]
        SELECT f_id, row_number() OVER (PARTITION BY f_dim ORDER BY f_day) AS rn,
               sum(f_qty) OVER (PARTITION BY f_dim) AS dim_qty
        FROM ods.f
    """,
    "ads.regions": """
        -- primary_key: [d_region]
        SELECT DISTINCT d_region FROM ods.d
    """,
    # a join of two models
    "dwd.joined": """
        -- primary_key: [f_id]
        SELECT s.f_id, s.dim_name, w.rn, s.qty2 + w.dim_qty AS q
        FROM dwd.star AS s JOIN dwd.win AS w ON s.f_id = w.f_id
    """,
    "dwd.u": """
        -- primary_key: [k]
        SELECT f_id AS k, f_qty AS v FROM ods.f UNION ALL SELECT d_id, d_region + 1 FROM ods.d
    """,
}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Lineage:
    return column_lineage(load_project(make_project(tmp_path_factory.mktemp("lineage"), MODELS, SOURCES)))


def test_a_star_through_a_cte_a_literal_an_expression_and_a_scalar_subquery(shapes: Lineage) -> None:
    star = shapes.model("dwd.star")
    assert list(star.columns) == [
        "f_id",
        "f_dim",
        "f_qty",
        "f_amount",
        "f_day",
        "dim_name",
        "tag",
        "qty2",
        "top_region",
    ]
    for column in ("f_id", "f_dim", "f_qty", "f_amount", "f_day"):
        check(star.columns[column], "identity", {("ods.f", column, "identity")}, {("ods.f", column, "identity")})
    check(star.columns["dim_name"], "identity", cols("ods.d.d_name identity"), cols("ods.d.d_name identity"))
    check(star.columns["tag"], "constant", set(), set())
    check(
        star.columns["qty2"], "transformation", cols("ods.f.f_qty transformation"), cols("ods.f.f_qty transformation")
    )
    check(
        star.columns["top_region"],
        "aggregation",
        cols("ods.d.d_region aggregation"),
        cols("ods.d.d_region aggregation"),
    )
    # the CTE's WHERE decides the rows although it is inside the CTE
    assert as_set(star.indirect) == cols("ods.f.f_qty filter", "ods.f.f_dim join", "ods.d.d_id join")


def test_aggregates_over_a_subquery_of_a_model_reach_the_sources(shapes: Lineage) -> None:
    agg = shapes.model("ads.agg")
    check(agg.columns["dim_name"], "identity", cols("dwd.star.dim_name identity"), cols("ods.d.d_name identity"))
    check(agg.columns["n"], "aggregation", set(), set())
    # sum of an expression of a column: the aggregation wins over the transformation one model down
    check(agg.columns["total"], "aggregation", cols("dwd.star.qty2 aggregation"), cols("ods.f.f_qty aggregation"))
    check(agg.columns["last_day"], "aggregation", cols("dwd.star.f_day aggregation"), cols("ods.f.f_day aggregation"))
    check(agg.columns["one"], "constant", set(), set())
    assert as_set(agg.indirect) == cols("dwd.star.dim_name group_by", "dwd.star.f_amount filter")
    assert as_set(agg.indirect_ultimate) == cols("ods.d.d_name group_by", "ods.f.f_amount filter")


def test_window_functions_distinct_and_a_union(shapes: Lineage) -> None:
    win = shapes.model("dwd.win")
    check(win.columns["rn"], "window", set(), set())  # row_number(): the partition decides it, no column feeds it
    check(win.columns["dim_qty"], "aggregation", cols("ods.f.f_qty aggregation"), cols("ods.f.f_qty aggregation"))
    assert as_set(win.indirect) == cols("ods.f.f_dim window", "ods.f.f_day window")
    regions = shapes.model("ads.regions")  # SELECT DISTINCT: a GROUP BY of its columns
    check(regions.columns["d_region"], "identity", cols("ods.d.d_region identity"), cols("ods.d.d_region identity"))
    assert as_set(regions.indirect) == cols("ods.d.d_region group_by")
    u = shapes.model("dwd.u")  # each output column from both branches, named by the first
    check(
        u.columns["k"],
        "identity",
        cols("ods.f.f_id identity", "ods.d.d_id identity"),
        cols("ods.f.f_id identity", "ods.d.d_id identity"),
    )
    assert as_set(u.columns["v"].direct) == cols("ods.f.f_qty identity", "ods.d.d_region transformation")


def test_a_join_of_two_models_follows_each_side_to_the_sources(shapes: Lineage) -> None:
    joined = shapes.model("dwd.joined")
    check(joined.columns["f_id"], "identity", cols("dwd.star.f_id identity"), cols("ods.f.f_id identity"))
    check(joined.columns["dim_name"], "identity", cols("dwd.star.dim_name identity"), cols("ods.d.d_name identity"))
    check(joined.columns["rn"], "identity", cols("dwd.win.rn identity"), set())
    # qty2 (f_qty * 2) + dim_qty (sum(f_qty) OVER ...): one source column, its strongest kind
    check(
        joined.columns["q"],
        "transformation",
        cols("dwd.star.qty2 transformation", "dwd.win.dim_qty transformation"),
        cols("ods.f.f_qty aggregation"),
    )
    assert as_set(joined.indirect) == cols("dwd.star.f_id join", "dwd.win.f_id join")
    assert as_set(joined.indirect_ultimate) == cols("ods.f.f_id join")


def test_queries_by_model_and_column_and_unknown_names(example: Lineage) -> None:
    assert example.column("ADS.Revenue_By_Nation_Month", "REVENUE").column == "revenue"  # case ignored
    assert [c.model for c in example.columns(column="n_name")] == ["dwd.orders_enriched", "ads.revenue_by_nation_month"]
    assert len(example.columns()) == len(ENRICHED) + len(REVENUE)
    with pytest.raises(InvalidArgument, match=r"dwd\.nope: no model .*dwd\.orders_enriched, ads\.revenue_by_nation"):
        example.model("dwd.nope")
    with pytest.raises(InvalidArgument, match=r"ods\.orders: a source"):
        example.columns("ods.orders")
    with pytest.raises(InvalidArgument, match=r"has no output column 'nope'; its columns are o_orderkey, .*n_name"):
        example.columns("dwd.orders_enriched", "nope")
    with pytest.raises(InvalidArgument, match=r"no model of this project has an output column 'nope'"):
        example.columns(column="nope")


def test_the_json_form_and_the_openlineage_facet(example: Lineage) -> None:
    rows = json.loads(json.dumps(example.to_json()))
    assert rows[0] == {
        "model": "dwd.orders_enriched",
        "column": "o_orderkey",
        "kind": "identity",
        "direct": [{"table": "ods.orders", "column": "o_orderkey", "kind": "identity"}],
        "ultimate": [{"table": "ods.orders", "column": "o_orderkey", "kind": "identity"}],
    }
    facet = json.loads(
        json.dumps(openlineage_facet(example, "ads.revenue_by_nation_month", namespace="lakestream://w"))
    )
    assert list(facet["fields"]) == list(REVENUE)
    assert facet["fields"]["revenue"] == {
        "inputFields": [
            {
                "namespace": "lakestream://w",
                "name": "dwd.orders_enriched",
                "field": "o_totalprice",
                "transformations": [{"type": "DIRECT", "subtype": "AGGREGATION", "masking": False}],
            }
        ]
    }
    assert facet["fields"]["order_count"] == {"inputFields": []}
    assert {(f["field"], t["type"], t["subtype"]) for f in facet["dataset"] for t in f["transformations"]} == {
        ("n_nationkey", "INDIRECT", "GROUP_BY"),
        ("n_name", "INDIRECT", "GROUP_BY"),
        ("o_orderdate", "INDIRECT", "GROUP_BY"),
    }


def test_a_column_that_joins_and_filters_is_one_openlineage_input_field(tmp_path: Path) -> None:
    models = {
        "dwd.m": """
            -- primary_key: [f_id]
            SELECT f.f_id, d.d_name FROM ods.f AS f JOIN ods.d AS d ON f.f_dim = d.d_id WHERE f.f_dim > 0
        """
    }
    lineage = column_lineage(load_project(make_project(tmp_path, models, SOURCES)))
    dataset = openlineage_facet(lineage, "dwd.m")["dataset"]
    f_dim = [f for f in dataset if f["field"] == "f_dim"]
    assert len(f_dim) == 1 and [t["subtype"] for t in f_dim[0]["transformations"]] == ["FILTER", "JOIN"]


def test_a_generator_an_in_subquery_qualify_and_order_by(tmp_path: Path) -> None:
    models = {
        "dwd.exploded": """
            -- primary_key: [f_id]
            SELECT f_id, x FROM ods.f LATERAL VIEW explode(array(f_qty, f_dim)) t AS x
        """,
        "dwd.chosen": """
            -- primary_key: [f_id]
            SELECT f_id FROM ods.f WHERE f_dim IN (SELECT d_id FROM ods.d WHERE d_region = 1)
            QUALIFY row_number() OVER (PARTITION BY f_dim ORDER BY f_day) = 1 ORDER BY f_amount
        """,
    }
    lineage = column_lineage(load_project(make_project(tmp_path, models, SOURCES)))
    # a generator's output: a function of its arguments
    x_sources = cols("ods.f.f_qty transformation", "ods.f.f_dim transformation")
    check(lineage.column("dwd.exploded", "x"), "transformation", x_sources, x_sources)
    assert as_set(lineage.model("dwd.chosen").indirect) == cols(
        "ods.f.f_dim filter",  # WHERE, and the QUALIFY's window
        "ods.d.d_id filter",  # the IN subquery's output
        "ods.d.d_region filter",  # the IN subquery's own WHERE
        "ods.f.f_day filter",
        "ods.f.f_dim window",
        "ods.f.f_day window",
        "ods.f.f_amount sort",
    )


# -- CLI -----------------------------------------------------------------------------------------------------------


def test_cli_prints_a_table_and_json_lines(example: Lineage) -> None:
    result = runner.invoke(layers_app, ["lineage", "--project", str(EXAMPLE)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert "ods.orders.o_totalprice (aggregation)" in result.output
    assert "ads.revenue_by_nation_month rows decided by: dwd.orders_enriched.n_name (group_by)" in result.output
    result = runner.invoke(layers_app, ["lineage", "--project", str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == example.to_json()
    args = ["lineage", "-p", str(EXAMPLE), "-m", "ads.revenue_by_nation_month", "-c", "order_month", "--json"]
    result = runner.invoke(layers_app, args)
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["ultimate"] == [{"table": "ods.orders", "column": "o_orderdate", "kind": "transformation"}]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "dwd.orders_enriched", "--column", "nope"], "model dwd.orders_enriched has no output column"),
        (["--model", "dwd.nope"], "no model of this project; the models are dwd.orders_enriched"),
        (["--column", "nope"], "no model of this project has an output column 'nope'"),
    ],
)
def test_cli_names_what_exists_for_an_unknown_model_or_column(args: list[str], message: str) -> None:
    result = runner.invoke(layers_app, ["lineage", "--project", str(EXAMPLE), *args], env={"COLUMNS": "500"})
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "error: " in result.output and message in result.output, result.output
    assert result.stdout == ""  # nothing printed but the error
