"""The layers' test oracle (tests/layers/oracle.py) against hand-computed results of the example project's models
on a small fixed dataset: joins that drop orders without a customer or nation, nation renames, customers moving
nation, months, sums and maxima with nulls, deletes; and the replay and comparison helpers."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from layers import load_project

from .oracle import OdsReplay, PkState, assert_same_rows, duckdb_sql, oracle, oracle_all, replay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tpch"
DWD, ADS = "dwd.orders_enriched", "ads.revenue_by_nation_month"


@pytest.fixture(scope="module")
def project():
    return load_project(EXAMPLE)


def table(project, name: str, rows: list[tuple]) -> pa.Table:
    schema = project.schema_of(name)
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


def D(x: str) -> Decimal:  # noqa: N802
    return Decimal(x)


NATIONS = [(1, "FRANCE", 0), (2, "GERMANY", 0), (3, "JAPAN", 2)]
CUSTOMERS = [
    (10, "Alice", 1, "BUILDING", D("1.00")),
    (11, "Bob", 2, "MACHINERY", D("2.00")),
    (12, "Carol", 9, "HOUSEHOLD", None),  # nation 9 does not exist: her orders join nothing
]
ORDERS = [
    (100, 10, "O", D("10.00"), date(2024, 1, 5), "1-URGENT"),
    (101, 10, "F", D("5.50"), date(2024, 1, 31), "2-HIGH"),
    (102, 11, "O", D("7.25"), date(2024, 2, 1), "3-MEDIUM"),
    (103, 99, "O", D("1.00"), date(2024, 2, 1), "3-MEDIUM"),  # customer 99 never arrived
    (104, 12, "O", D("1.00"), date(2024, 2, 1), "3-MEDIUM"),  # customer without nation
    (105, None, "O", D("1.00"), date(2024, 2, 1), "3-MEDIUM"),  # no customer key
    (106, 11, "P", None, date(2024, 2, 29), None),  # null price: counted, not summed
]


def states(project, nations=NATIONS, customers=CUSTOMERS, orders=ORDERS) -> dict[str, pa.Table]:
    return {
        "ods.nation": table(project, "ods.nation", nations),
        "ods.customer": table(project, "ods.customer", customers),
        "ods.orders": table(project, "ods.orders", orders),
    }


def dwd_row(order: tuple, c_name: str, segment: str, nation: int, n_name: str) -> tuple:
    return (*order, c_name, segment, nation, n_name)


def test_duckdb_sql_spells_out_sparks_trunc_units() -> None:
    sql = duckdb_sql("SELECT CAST(trunc(d, 'MM') AS DATE) AS m, trunc(d, 'year') AS y FROM ods.t")
    assert "DATE_TRUNC('month', d)" in sql and "DATE_TRUNC('year', d)" in sql
    assert "'MM'" not in sql


def test_orders_enriched_joins_orders_to_customer_and_nation(project) -> None:
    got = oracle(project, DWD, states(project))
    assert got.schema == pa.schema([f.with_nullable(True) for f in project.schema_of(DWD)])
    o = {r[0]: r for r in ORDERS}
    expected = table(
        project,
        DWD,
        [
            dwd_row(o[100], "Alice", "BUILDING", 1, "FRANCE"),
            dwd_row(o[101], "Alice", "BUILDING", 1, "FRANCE"),
            dwd_row(o[102], "Bob", "MACHINERY", 2, "GERMANY"),
            dwd_row(o[106], "Bob", "MACHINERY", 2, "GERMANY"),
        ],
    )
    assert got.to_pylist() == expected.to_pylist()  # sorted by o_orderkey


def test_revenue_by_nation_month_groups_counts_sums_and_maxima(project) -> None:
    results = oracle_all(project, states(project))
    assert list(results) == [DWD, ADS]
    assert results[ADS].to_pylist() == [
        {
            "n_nationkey": 1,
            "n_name": "FRANCE",
            "order_month": date(2024, 1, 1),
            "order_count": 2,
            "revenue": D("15.50"),
            "max_totalprice": D("10.00"),
        },
        {
            "n_nationkey": 2,
            "n_name": "GERMANY",
            "order_month": date(2024, 2, 1),
            "order_count": 2,  # order 106's null price counts in count(*)
            "revenue": D("7.25"),
            "max_totalprice": D("7.25"),
        },
    ]
    assert results[ADS].schema.field("revenue").type == pa.decimal128(22, 2)
    assert results[ADS].schema.field("order_count").type == pa.int64()
    assert results[ADS].schema.field("order_month").type == pa.date32()


def test_a_group_of_null_prices_has_a_null_revenue_and_max(project) -> None:
    orders = [(106, 11, "P", None, date(2024, 2, 29), None)]
    results = oracle_all(project, states(project, orders=orders))
    assert results[ADS].to_pylist() == [
        {
            "n_nationkey": 2,
            "n_name": "GERMANY",
            "order_month": date(2024, 2, 1),
            "order_count": 1,
            "revenue": None,
            "max_totalprice": None,
        }
    ]


def test_rename_move_late_dimension_and_deletes(project) -> None:
    """The changes a round must follow, replayed: nation 1 renamed, Alice moves to Germany, Carol's nation 9
    arrives late (her order 104 appears), customer 99 still absent, Bob deleted (his orders leave)."""
    ods = OdsReplay(project)
    for name, rows in (("ods.nation", NATIONS), ("ods.customer", CUSTOMERS), ("ods.orders", ORDERS)):
        ods.apply(name, "insert", table(project, name, rows))
    ods.apply("ods.nation", "upsert", table(project, "ods.nation", [(1, "FRANCE2", 0), (9, "PERU", 1)]))
    ods.apply("ods.customer", "upsert", table(project, "ods.customer", [(10, "Alice", 2, "BUILDING", D("1.00"))]))
    ods.apply("ods.customer", "delete", pa.table({"c_custkey": pa.array([11], pa.int64())}))
    results = oracle_all(project, ods.states())
    o = {r[0]: r for r in ORDERS}
    assert (
        results[DWD].to_pylist()
        == table(
            project,
            DWD,
            [
                dwd_row(o[100], "Alice", "BUILDING", 2, "GERMANY"),
                dwd_row(o[101], "Alice", "BUILDING", 2, "GERMANY"),
                dwd_row(o[104], "Carol", "HOUSEHOLD", 9, "PERU"),
            ],
        ).to_pylist()
    )
    assert [
        (r["n_nationkey"], r["n_name"], r["order_month"], r["order_count"], r["revenue"])
        for r in results[ADS].to_pylist()
    ] == [
        (2, "GERMANY", date(2024, 1, 1), 2, D("15.50")),
        (9, "PERU", date(2024, 2, 1), 1, D("1.00")),
    ]
    # an order moves month and customer, another is deleted: groups follow
    ods.apply("ods.orders", "upsert", table(project, "ods.orders", [(100, 12, "O", D("3.00"), date(2024, 3, 9), "x")]))
    ods.apply("ods.orders", "delete", pa.table({"o_orderkey": pa.array([104], pa.int64())}))
    results = oracle_all(project, ods.states())
    ads = [
        (r["n_nationkey"], r["order_month"], r["order_count"], r["revenue"], r["max_totalprice"])
        for r in results[ADS].to_pylist()
    ]
    assert ads == [
        (2, date(2024, 1, 1), 1, D("5.50"), D("5.50")),
        (9, date(2024, 3, 1), 1, D("3.00"), D("3.00")),
    ]


def test_renamed_nation_is_one_group_per_key(project) -> None:
    ods = states(project, nations=[(1, "FRANCE2", 0), (2, "GERMANY", 0)])
    results = oracle_all(project, ods)
    assert [(r["n_nationkey"], r["n_name"]) for r in results[ADS].to_pylist()] == [(1, "FRANCE2"), (2, "GERMANY")]


def test_empty_inputs_give_empty_typed_outputs(project) -> None:
    results = oracle_all(project, replay(project, []))
    for name in (DWD, ADS):
        assert results[name].num_rows == 0
        assert results[name].schema.names == list(project.schema_of(name).names)


def test_pk_state_replays_upserts_and_deletes_last_wins() -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    state = PkState(schema, ["k"])
    state.apply("insert", pa.table({"k": [1, 2, 1], "v": ["a", "b", "c"]}))
    state.apply("delete", pa.table({"k": [2, 7]}))
    state.apply("upsert", pa.table({"k": [3], "v": [None]}, schema=schema))
    assert state.table().to_pylist() == [{"k": 1, "v": "c"}, {"k": 3, "v": None}]
    assert 1 in state and 2 not in state and state.get(3) == {"k": 3, "v": None}


def test_assert_same_rows_ignores_internal_columns_order_and_types() -> None:
    expected = pa.table({"k": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])})
    actual = pa.table(
        {
            "v": pa.array(["b", "a"], pa.large_string()),
            "k": pa.array([2, 1], pa.int32()),
            "__bucket": pa.array([0, 0], pa.int32()),
            "__offset": pa.array([5, 3], pa.int64()),
        }
    )
    assert_same_rows(actual, expected, ["k"])


def test_assert_same_rows_names_the_first_differing_keys() -> None:
    expected = pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]})
    actual = pa.table({"k": pa.array([1, 3, 4], pa.int64()), "v": ["a", "x", "d"]})
    with pytest.raises(AssertionError) as info:
        assert_same_rows(actual, expected, ["k"], what="dwd.m")
    message = str(info.value)
    assert "dwd.m: 3 rows, expected 3" in message
    assert "1 missing, first: (2,)" in message
    assert "1 unexpected, first: (4,)" in message
    assert "key (3,): (actual, expected) {'v': ('x', 'c')}" in message
    with pytest.raises(AssertionError, match="missing"):
        assert_same_rows(actual.select(["k"]), expected, ["k"])


def test_oracle_refuses_a_key_twice(tmp_path) -> None:
    from tests.support.projects import make_project

    root = make_project(
        tmp_path,
        {"dwd.m": "-- primary_key: [f_dim]\nSELECT f_dim, f_qty FROM ods.f\n"},
    )
    project = load_project(root)
    f = project.schema_of("ods.f")
    rows = [dict.fromkeys(f.names) | {"f_id": i, "f_dim": 1, "f_qty": i} for i in (1, 2)]
    ods = {"ods.f": pa.Table.from_pylist(rows, schema=f), "ods.d": pa.table({}), "ods.r": pa.table({})}
    with pytest.raises(AssertionError, match=r"output keys \[\(1,\)\] appear more than once"):
        oracle(project, "dwd.m", ods)
