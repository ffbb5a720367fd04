"""`Retraction.combine`: a group's new row from its old row and the changed rows' aggregates, or the verdict
that only the group's rows can tell (pure: no Spark, no store)."""

from __future__ import annotations

import pytest

from lakehouse.layers.planner import RECOMPUTE_GROUP, Retraction

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

    from lakehouse.layers.project import load_project
    from lakehouse.layers.runner import _merged, groups_filter
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
