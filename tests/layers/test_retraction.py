"""`Retraction.combine`: a group's new row from its old row and the changed rows' aggregates, or the verdict
that only the group's rows can tell (pure: no Spark, no store)."""

from __future__ import annotations

import pytest

from layers.strategy import RECOMPUTE_GROUP, Retraction

R = Retraction(("g",), (("g", "key"), ("n", "count"), ("s", "sum"), ("m", "max"), ("lo", "min")), "n")


def row(n, s, m, lo, g="a"):
    return {"g": g, "n": n, "s": s, "m": m, "lo": lo}


@pytest.mark.parametrize(
    ("old", "gone", "came", "expected"),
    [
        # rows come to a new group: the new rows' aggregates
        (None, None, row(2, 10, 7, 3), row(2, 10, 7, 3)),
        # a row below the extremes leaves, another comes: retraction
        (row(5, 50, 20, 1), row(1, 8, 8, 8), row(1, 9, 9, 9), row(5, 51, 20, 1)),
        # the max row leaves and a bigger one comes: the new max is the new row's
        (row(5, 50, 20, 1), row(1, 20, 20, 20), row(1, 25, 25, 25), row(5, 55, 25, 1)),
        # the max row leaves and nothing reaches it: only the group's rows know the runner-up
        (row(5, 50, 20, 1), row(1, 20, 20, 20), row(1, 5, 5, 5), RECOMPUTE_GROUP),
        # the min row leaves
        (row(5, 50, 20, 1), row(1, 1, 1, 1), None, RECOMPUTE_GROUP),
        # every row leaves: the group is deleted, whatever its extremes
        (row(2, 30, 20, 10), row(2, 30, 20, 10), None, None),
        # a count below zero means the base was wrong: recompute, never guess
        (row(1, 5, 5, 5), row(2, 10, 5, 5), None, RECOMPUTE_GROUP),
        # rows left a group the table does not have
        (None, row(1, 5, 5, 5), None, RECOMPUTE_GROUP),
        # a sum over nulls cannot be retracted (null and 0 look alike)
        (row(3, None, 5, 1), row(1, None, 2, 2), None, RECOMPUTE_GROUP),
        # a sum that reaches 0 with rows left may be a sum of nulls: recompute
        (row(3, 5, 5, 1), row(1, 5, 3, 3), None, RECOMPUTE_GROUP),
    ],
)
def test_combine(old, gone, came, expected):
    assert R.combine(old, gone, came) == expected


def test_without_count_star_a_group_rows_left_is_recomputed():
    no_count = Retraction(("g",), (("g", "key"), ("s", "sum")), None)
    assert no_count.combine({"g": 1, "s": 5}, None, {"g": 1, "s": 2}) == {"g": 1, "s": 7}
    assert no_count.combine({"g": 1, "s": 5}, {"g": 1, "s": 2}, None) is RECOMPUTE_GROUP


def test_a_regroup_pushes_the_groups_rows_filter_into_the_read():
    import datetime

    import pyarrow as pa

    from layers.group_rows import groups_filter
    from layers.project import load_project
    from layers.rewrite import merged as _merged
    from tests.layers._tpch import EXAMPLE

    select = _merged(load_project(EXAMPLE).models["ads.revenue_by_nation_month"].qualified)
    groups = pa.table(
        {"__g0": [3, 4], "__g1": ["N3", None], "__g2": [datetime.date(2024, 12, 1), datetime.date(2024, 2, 1)]}
    )
    text = str(groups_filter(select, groups))
    # December runs into the next year; a null group value matches nulls
    for part in ("'2024-12-01'", "'2025-01-01'", "'2024-02-01'", "'2024-03-01'", "IsNull", "n_nationkey", "Or("):
        assert part in text, (part, text)
    assert groups_filter(select, groups.slice(0, 0)) is None


def test_a_window_round_pushes_its_partitions_values_into_the_read():
    """An IN list of the first partition column's values (a null one adds IS NULL), their range past the limit:
    every row of the partitions passes the filter."""
    import pyarrow as pa
    from pyiceberg.expressions import visitors
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from layers.group_rows import GROUPS_FILTER_LIMIT, partitions_filter

    schema = Schema(NestedField(1, "f_dim", LongType(), required=False))

    def keeps(row_filter, value) -> bool:
        return visitors.expression_evaluator(schema, row_filter, case_sensitive=True)(_Row(value))

    small = partitions_filter("f_dim", pa.chunked_array([[3, 5, None, 3]]))
    assert [keeps(small, v) for v in (3, 5, None, 4)] == [True, True, True, False]
    assert "In" in repr(small)
    many = partitions_filter("f_dim", pa.array(range(0, 2 * GROUPS_FILTER_LIMIT + 2, 2)))
    assert [keeps(many, v) for v in (0, 2 * GROUPS_FILTER_LIMIT, -1, 2 * GROUPS_FILTER_LIMIT + 1)] == [
        True,
        True,
        False,
        False,
    ]
    assert partitions_filter("f_dim", pa.array([], pa.int64())) is None


class _Row:
    """A one-column record for pyiceberg's expression evaluator."""

    def __init__(self, value) -> None:
        self.value = value

    def __getitem__(self, pos: int):
        return self.value

    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize("months_as_days", [60, 0], ids=["days", "range"])
def test_group_rows_reads_exactly_the_groups_rows(tmp_path, monkeypatch, months_as_days):
    """A one-input regroup's rows, read by the driver: a coarse filter (the groups' months as their days, a
    leap day and month ends included, or as one range), then the exact groups (the month of a date inverted,
    a plain column matched); shapes it cannot invert fall back to Spark (None)."""
    import datetime

    import pyarrow as pa
    import sqlglot

    import layers.group_rows as runner
    from lakehouse import Lakehouse
    from layers.group_rows import group_rows
    from layers.rewrite import sided as _sided
    from layers.sql import DIALECT

    monkeypatch.setattr(runner, "MONTHS_AS_DAYS_LIMIT", months_as_days)

    lh = Lakehouse.open(tmp_path.as_uri())
    schema = pa.schema([("k", pa.int64()), ("n", pa.int64()), ("d", pa.date32()), ("p", pa.int64())])
    lh.create_table("dwd.x", schema, primary_key=["k"], buckets=2)
    days = [
        datetime.date(2024, 1, 31),
        datetime.date(2024, 2, 1),
        datetime.date(2024, 2, 29),
        datetime.date(2024, 3, 1),
    ]
    rows = pa.table(
        {
            "k": list(range(16)),
            "n": [k % 2 for k in range(16)],
            "d": [days[k % 4] for k in range(16)],
            "p": list(range(16)),
        },
        schema=schema,
    )
    lh.log("dwd.x").append(rows)
    lh.tier("dwd.x")
    lh.log("dwd.x").append(pa.table({"k": [16], "n": [1], "d": [datetime.date(2024, 2, 10)], "p": [99]}, schema=schema))
    select = sqlglot.parse_one(
        "SELECT x.n AS n, CAST(TRUNC(x.d, 'MM') AS DATE) AS m, COUNT(*) AS c, MAX(x.p) AS mp FROM dwd.x AS x "
        "GROUP BY x.n, CAST(TRUNC(x.d, 'MM') AS DATE)",
        read=DIALECT,
    )
    groups = pa.table({"__g0": [1, 0], "__g1": [datetime.date(2024, 2, 1), datetime.date(2024, 1, 1)]})
    got = group_rows(lh, "dwd.x", lh.log("dwd.x").end_offsets(), select, groups)
    assert got is not None and sorted(got.column_names) == ["d", "n", "p"]  # only the columns the SQL uses
    expected = sorted(
        (r["n"], r["d"], r["p"])
        for r in [*rows.to_pylist(), {"n": 1, "d": datetime.date(2024, 2, 10), "p": 99}]
        if (r["n"], r["d"].replace(day=1)) in {(1, datetime.date(2024, 2, 1)), (0, datetime.date(2024, 1, 1))}
    )
    assert sorted(zip(got["n"].to_pylist(), got["d"].to_pylist(), got["p"].to_pylist(), strict=True)) == expected
    assert len(expected) > 2  # the log tail's row (k=16) is among them
    # a null group value, or more groups than the limit: the caller reads through Spark
    assert (
        group_rows(
            lh, "dwd.x", lh.log("dwd.x").end_offsets(), select, groups.set_column(0, "__g0", pa.array([1, None]))
        )
        is None
    )
    # the one query of a retraction: a __side column in the output and the GROUP BY; not with a LIMIT
    sided = _sided(select)
    assert sided is not None and sided.sql(dialect=DIALECT).count("__side") == 2
    assert _sided(select.limit(5)) is None
    lh.close()
