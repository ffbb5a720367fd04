"""Great Expectations suites per table (`quality.expectations`): the example project's suites pass on its data,
a violated expectation is named (type, column, value), bad suite files are refused naming the file, lakestream
references (other tables' keys and row counts, the clock) are resolved from the lake, results and Data Docs are
kept in the warehouse, and GX stays quiet."""

from __future__ import annotations

import contextlib
import copy
import datetime
import decimal
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lakehouse.lakehouse import Lakehouse
from lakestream.demo.layers import nations
from layers.project import load_project
from quality import expectations as qx
from quality.errors import QualityError, SuiteError
from quality.expectations import check_suite, load_suite, load_suites, run_suite, run_suites
from tests.support.example_ods import ALL, EXAMPLE, N_CUSTOMERS, N_NATIONS, N_ORDERS, load_ods

ROOT = Path(__file__).resolve().parents[2]


def bad_order(key: int, *, price: str = "10.00", custkey: int = 1) -> pa.Table:
    return pa.table(
        {
            "o_orderkey": pa.array([key], pa.int64()),
            "o_custkey": pa.array([custkey], pa.int64()),
            "o_orderstatus": ["O"],
            "o_totalprice": pa.array([decimal.Decimal(price)], pa.decimal128(12, 2)),
            "o_orderdate": pa.array([datetime.date(1995, 6, 1)], pa.date32()),
            "o_orderpriority": ["2-HIGH"],
        }
    )


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, spark):
    """The example project deployed, loaded with demo data, its layers built once and every table tiered (on a
    local warehouse: building the layers takes Spark a while; the tests on ``lakehouse`` cover S3)."""
    from layers.runner import Runner

    lh = Lakehouse.open(tmp_path_factory.mktemp("wh").as_uri())
    load_ods(lh)
    layers = Runner(lh, load_project(EXAMPLE), spark)
    layers.deploy()
    layers.run_once()
    for name in ALL[3:]:
        lh.tier(name)
    try:
        yield lh
    finally:
        lh.close()


@pytest.fixture
def suites():
    return load_suites(EXAMPLE)


def test_example_suites_pass_on_clean_data_and_keep_results_and_docs(warehouse, suites, tmp_path):
    lh = warehouse
    assert sorted(suites) == sorted(ALL)
    results = run_suites(lh, EXAMPLE, docs_dir=tmp_path / "docs")
    assert [r.table for r in results] == sorted(ALL)
    for r in results:
        assert r.ok, (r.table, [str(v) for v in r.violations])
        assert r.check == f"gx:{r.table}"
        assert r.snapshot_id == lh.lake_table(r.table).current_snapshot().snapshot_id
        assert r.details["expectations"] == r.details["passed"] == len(suites[r.table].expectations)
        assert r.rows > 0 and r.details["engine"] == "pandas"
        page = r.details["data_docs"]
        assert page.startswith("_lakestream/quality/gx/docs/validations/") and page.endswith(".html")
        html = lh.store.get(page).data.decode()
        assert r.table.split(".")[1] in html and "Succeeded" in html
        result = json.loads(lh.store.get(f"_lakestream/quality/gx/results/{r.table}/{r.snapshot_id}.json").data)
        assert result["success"] is True and len(result["results"]) == r.details["expectations"]
        assert r.to_dict()["details"]["data_docs"] == page  # JSON-able for the run record
    assert lh.store.exists("_lakestream/quality/gx/docs/index.html")
    assert lh.store.exists("_lakestream/quality/gx/docs/static/styles/data_docs_default_styles.css")
    assert list((tmp_path / "docs" / "validations").rglob("*.html"))  # the local copy too
    rows = {r.table: r.rows for r in results}
    assert rows["dwd.orders_enriched"] == rows["ods.orders"] == N_ORDERS  # what the row-count expectation checked


def test_cross_table_references_read_the_inputs_as_the_round_saw_them(warehouse, suites, spark):
    """A model's snapshot is checked against its inputs as of the round that produced it: ODS changes no round has
    seen yet are no drift, even once tiered; a layer tiered behind its input's lake is no drift either; but what
    the round did see (orders left without their customer) and a rogue row in the layer are violations."""
    from layers.runner import Runner

    lh, dwd, ads = warehouse, "dwd.orders_enriched", "ads.revenue_by_nation_month"

    def check(name: str):
        return run_suite(lh, name, suites[name])

    assert check(dwd).ok and check(ads).ok
    # ODS changes after the round, tiered: an order of an existing customer, a customer with orders deleted
    lh.log("ods.orders").append(bad_order(N_ORDERS + 1), "upsert")
    deleted = lh.union_read(dwd, columns=["o_custkey"]).column("o_custkey")[0].as_py()
    orphans = pa.compute.sum(pa.compute.equal(lh.union_read("ods.orders").column("o_custkey"), deleted)).as_py()
    lh.log("ods.customer").append(pa.table({"c_custkey": pa.array([deleted], pa.int64())}), "delete")
    lh.tier("ods.orders")
    lh.tier("ods.customer")
    after_ods = check(dwd)
    assert after_ods.ok, [str(v) for v in after_ods.violations]  # the round has not seen them: no drift

    # the layers run on them; dwd is tiered, ads is not: ads still agrees with dwd as its own round read it
    Runner(lh, load_project(EXAMPLE), spark).run_once()
    lh.tier(dwd)
    result = check(ads)
    assert result.ok and result.snapshot_id == lh.lake_table(ads).current_snapshot().snapshot_id
    # dwd's round saw orders whose customer is gone: the inner join drops them, so dwd lacks them
    result = check(dwd)
    [count] = result.violations
    assert count.message.startswith("expect_table_row_count_to_equal")
    assert count.actual == N_ORDERS + 1 - orphans and count.expected["value"] == N_ORDERS + 1
    lh.tier(ads)
    assert check(ads).ok

    # a rogue row written into dwd's log behind its runner: a customer that never existed
    rogue = lh.union_read(dwd).slice(0, 1).drop_columns(["__bucket", "__offset", "__timestamp"])
    rogue = rogue.set_column(0, "o_orderkey", pa.array([10**9], pa.int64()))
    rogue = rogue.set_column(1, "o_custkey", pa.array([10**9], pa.int64()))
    lh.log(dwd).append(rogue, "upsert")
    lh.tier(dwd)
    result = check(dwd)
    by_type = {v.message.split(" ")[0]: v for v in result.violations}
    assert set(by_type) == {"expect_table_row_count_to_equal", "expect_column_values_to_be_in_set"}
    assert by_type["expect_column_values_to_be_in_set"].actual["unexpected_values"] == [10**9]


def test_a_model_is_tiered_to_round_boundaries_and_a_snapshot_off_them_is_an_error(warehouse, suites):
    """Half a round in a model's log (a round appending, or a runner that died in it) is not tiered; a snapshot
    that holds one anyway (tiered without the boundary: an older version) is an error for the suite, not a
    violation."""
    from lakehouse.tiering.boundaries import hold
    from lakehouse.tiering.round import tier
    from layers.lease import Owner
    from layers.rounds import RoundRecord, create_round, latest_round

    lh, ads = warehouse, "ads.revenue_by_nation_month"
    assert qx.upstream_positions(lh, ads, lh.lake_table(ads).current_snapshot().snapshot_id)
    latest = latest_round(lh.store, ads)
    before = lh.log(ads).end_offsets()
    assert lh.lake_offsets(ads) == before
    create_round(
        lh.store, RoundRecord(ads, latest.number + 1, "incremental", latest.end, latest.end, before), Owner.new()
    ).release()
    hold(lh.store, lh.table(ads), before, writer="layers.ads")  # as a round does before it appends
    half = lh.union_read(ads).slice(0, 1).drop_columns(["__bucket", "__offset", "__timestamp"])
    lh.log(ads).append(half, "upsert")
    assert lh.tier(ads).snapshot_id is None and lh.lake_offsets(ads) == before  # the half round stays in the log

    tier(lh.store, lh.catalog, lh.log(ads))  # as a tiering that ignores round boundaries would
    assert lh.lake_offsets(ads) != before
    with pytest.raises(qx.QualityError, match="no round boundary"):
        run_suite(lh, ads, suites[ads])


@pytest.fixture
def ods(lakehouse):
    load_ods(lakehouse)
    return lakehouse


def test_a_violated_expectation_names_type_column_and_value(ods, suites):
    lh = ods
    clean = run_suite(lh, "ods.orders", suites["ods.orders"])
    assert clean.ok, [str(v) for v in clean.violations]
    lh.log("ods.orders").append(bad_order(N_ORDERS + 5, price="-3.50"), "upsert")
    lh.tier("ods.orders")
    result = run_suite(lh, "ods.orders", suites["ods.orders"])
    assert not result.ok and result.snapshot_id != clean.snapshot_id
    assert result.rows == N_ORDERS + 1
    [v] = result.violations
    assert v.check == "gx-expectation" and v.table == "ods.orders" and v.snapshot_id == result.snapshot_id
    assert v.message.startswith("expect_column_values_to_be_between on o_totalprice failed: 1 of ")
    assert "-3.50" in v.message
    assert v.expected == {"column": "o_totalprice", "min_value": 0}
    assert v.actual["unexpected_count"] == 1
    assert "gx-expectation: table ods.orders" in str(v)
    # the snapshot read is the one asked for: the clean one still passes
    again = run_suite(lh, "ods.orders", suites["ods.orders"], snapshot_id=clean.snapshot_id)
    assert again.ok and again.snapshot_id == clean.snapshot_id and again.rows == N_ORDERS
    stored = json.loads(lh.store.get(f"_lakestream/quality/gx/results/ods.orders/{result.snapshot_id}.json").data)
    assert stored["success"] is False


def test_referential_integrity_against_another_table(ods):
    lh = ods
    suite = {
        "name": "orders-have-customers",
        "expectations": [
            {
                "type": "expect_column_values_to_be_in_set",
                "kwargs": {
                    "column": "o_custkey",
                    "value_set": {"$lakestream": "column_values", "table": "ods.customer", "column": "c_custkey"},
                },
                "meta": {},
            }
        ],
        "meta": {},
    }
    assert run_suite(lh, "ods.orders", suite).ok
    lh.log("ods.orders").append(bad_order(N_ORDERS + 7, custkey=999_999), "upsert")
    lh.tier("ods.orders")
    result = run_suite(lh, "ods.orders", suite)
    assert result.check == "gx:orders-have-customers"
    [v] = result.violations
    assert "on o_custkey" in v.message and "999999" in v.message
    assert v.actual["unexpected_values"] == [999_999]
    assert len(v.expected["value_set"]) == qx._LIST_LIMIT + 1  # N_CUSTOMERS keys, abbreviated


@pytest.mark.parametrize("backend", ["local"])
def test_schema_drift_and_an_expectation_gx_cannot_evaluate_are_named(ods):
    suite = {
        "name": "odd",
        "expectations": [
            {"type": "expect_column_values_to_be_between", "kwargs": {"column": "o_orderpriority", "min_value": 3}},
            {"type": "expect_table_columns_to_match_set", "kwargs": {"column_set": ["o_orderkey", "o_gone"]}},
        ],
    }
    result = run_suite(ods, "ods.orders", suite)
    first, second = result.violations
    assert first.message.startswith("expect_column_values_to_be_between on o_orderpriority could not be evaluated: ")
    assert "same type" in first.actual
    assert second.message.startswith("expect_table_columns_to_match_set failed: observed [__bucket, ")
    assert "missing: [o_gone]" in second.message
    assert result.details == {**result.details, "expectations": 2, "passed": 0}


@pytest.mark.parametrize("backend", ["local"])
def test_a_suite_written_by_gx_itself_loads_and_runs(ods, tmp_path):
    """What ``suite.to_json_dict()`` writes (ids, notes, severities) is a suite file as it is; a failed
    expectation of severity ``warning`` is reported, not a violation."""
    from quality._gx import quiet

    with quiet() as gx:
        context = gx.get_context(mode="ephemeral")
        suite = context.suites.add(gx.ExpectationSuite(name="nation-by-gx"))
        suite.add_expectation(gx.expectations.ExpectColumnValuesToNotBeNull(column="n_nationkey", notes="the key"))
        suite.add_expectation(
            gx.expectations.ExpectColumnValuesToBeBetween(column="n_regionkey", max_value=2, severity="warning")
        )
        suite.add_expectation(gx.expectations.ExpectTableRowCountToEqual(value=N_NATIONS + 1))
        doc = suite.to_json_dict()
    path = write_suite(tmp_path, "ods.nation.json", json.dumps(doc, default=str))
    loaded = load_suites(tmp_path)["ods.nation"]
    assert loaded.name == "nation-by-gx" and loaded.path == str(path)
    result = run_suite(ods, "ods.nation", loaded)
    [v] = result.violations
    assert v.message == f"expect_table_row_count_to_equal failed: observed {N_NATIONS}, expected value={N_NATIONS + 1}"
    [warning] = result.details["warnings"]
    assert warning.startswith("expect_column_values_to_be_between on n_regionkey failed: ")
    assert (result.details["expectations"], result.details["passed"]) == (3, 1)


def test_freshness_of_timestamp(ods):
    lh = ods

    def suite(seconds):
        ref = {"$lakestream": "now_minus_seconds", "seconds": seconds}
        kwargs = {"column": "__timestamp", "min_value": ref}
        return {"name": "fresh", "expectations": [{"type": "expect_column_max_to_be_between", "kwargs": kwargs}]}

    assert run_suite(lh, "ods.nation", suite(3600)).ok
    [v] = run_suite(lh, "ods.nation", suite(0)).violations  # nothing written after the run started
    assert v.message.startswith("expect_column_max_to_be_between on __timestamp failed: observed ")

    # a table with a log but nothing tiered yet has no state to validate: skipped, not stale (GX saw NaT)
    d = load_project(EXAMPLE).sources["ods.nation"].definition
    lh.create_table("ods.nation_copy", d.schema, buckets=d.buckets, primary_key=list(d.primary_key))
    lh.log("ods.nation_copy").append(nations(np.arange(3)), "upsert")
    result = run_suite(lh, "ods.nation_copy", suite(3600))
    assert result.ok and result.snapshot_id is None and result.rows == 0
    assert result.details["skipped"].startswith("the table has no lake snapshot yet")
    lh.tier("ods.nation_copy")
    assert run_suite(lh, "ods.nation_copy", suite(3600)).details.get("skipped") is None


def integrity_suite() -> dict:
    """Row-level and table-level expectations, references to another table and to the table itself (resolved on
    the run's engine), and freshness (the clock, in Spark's time zone on Spark)."""

    def e(kind: str, **kwargs) -> dict:
        return {"type": kind, "kwargs": kwargs, "meta": {}}

    return {
        "name": "orders-integrity",
        "expectations": [
            e("expect_column_values_to_not_be_null", column="o_orderkey"),
            e("expect_column_values_to_be_unique", column="o_orderkey"),
            e("expect_column_values_to_be_between", column="o_totalprice", min_value=0),
            e(
                "expect_column_values_to_be_in_set",
                column="o_custkey",
                value_set={"$lakestream": "column_values", "table": "ods.customer", "column": "c_custkey"},
            ),
            e("expect_table_row_count_to_equal", value={"$lakestream": "row_count", "table": "ods.orders"}),
            e(
                "expect_column_max_to_be_between",
                column="__timestamp",
                min_value={"$lakestream": "now_minus_seconds", "seconds": 3600},
            ),
        ],
    }


def verdicts(result) -> list[tuple]:
    """What a result says, engine aside: each violation's expectation, column and unexpected count or observed
    value."""
    out = []
    for v in result.violations:
        actual = v.actual["unexpected_count"] if isinstance(v.actual, dict) else v.actual
        out.append((v.message.split(" ")[0], v.expected.get("column"), actual))
    return sorted(out, key=str)


@contextlib.contextmanager
def no_rows_in_the_driver():
    """Every way lakestream reads a table's rows in this process raises while it lasts: pyiceberg's scans, the
    read plan's executions and file streams, and handing rows to Spark from here. Spark's Python data source
    plans and reads in worker processes, which this does not touch."""
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import DataScan
    from pyspark.sql import SparkSession

    import lakehouse.read.union as union

    def refuse(what):
        def raising(*args, **kwargs):
            raise AssertionError(f"{what} read rows in the driver")

        return raising

    with pytest.MonkeyPatch.context() as mp:
        for owner, name in [
            (DataScan, "to_arrow"),
            (DataScan, "to_arrow_batch_reader"),
            (DataScan, "to_pandas"),
            (ArrowScan, "to_table"),
            (ArrowScan, "to_record_batches"),
            (union.ReadPlan, "execute_all"),
            (union.ReadPlan, "execute_bucket"),
            (union, "stream_tasks"),
            (SparkSession, "createDataFrame"),
        ]:
            mp.setattr(owner, name, refuse(f"{name}"))
        yield


@pytest.mark.parametrize("backend", ["local"])  # the engine, not the store, is under test
def test_above_the_budget_spark_validates_what_the_executors_read_with_the_drivers_verdicts(ods, spark):
    """Above the driver's budget GX validates the lakestream source's DataFrame at exactly the snapshot checked
    (not the current one), and nothing of the table's rows is read in the driver (`no_rows_in_the_driver`): the
    verdicts, passing and failing, are the driver path's, references and freshness included."""
    lh = ods

    def on_spark(**kwargs):
        with no_rows_in_the_driver():
            result = run_suite(lh, "ods.orders", integrity_suite(), spark=spark, driver_budget_rows=10, **kwargs)
        assert result.details["engine"] == "spark" and "sample" not in result.details
        return result

    clean = lh.lake_table("ods.orders").current_snapshot().snapshot_id
    lh.log("ods.orders").append(bad_order(3, price="-1.00", custkey=999_999), "upsert")  # an update: keys unique
    lh.tier("ods.orders")
    in_driver = run_suite(lh, "ods.orders", integrity_suite(), spark=spark)  # 1,000 rows: within the default
    assert in_driver.details["engine"] == "pandas" and in_driver.rows == N_ORDERS
    assert verdicts(in_driver) == [
        ("expect_column_values_to_be_between", "o_totalprice", 1),
        ("expect_column_values_to_be_in_set", "o_custkey", 1),
    ]
    assert run_suite(lh, "ods.orders", integrity_suite(), snapshot_id=clean).ok

    cached = spark._jsparkSession.sharedState().cacheManager()
    cached_before = cached.isEmpty()
    failing = on_spark()
    assert cached.isEmpty() == cached_before  # GX persisted the snapshot's DataFrame; it is unpersisted
    assert verdicts(failing) == verdicts(in_driver) and failing.snapshot_id == in_driver.snapshot_id
    assert failing.rows == N_ORDERS and failing.details["passed"] == failing.details["expectations"] - 2 == 4
    assert any("-1.00" in v.message for v in failing.violations)
    assert any("999999" in v.message for v in failing.violations)
    # the snapshot asked for, not the current one, whenever Spark plans the read
    passing = on_spark(snapshot_id=clean)
    assert passing.ok, [str(v) for v in passing.violations]
    assert passing.snapshot_id == clean and passing.rows == N_ORDERS and passing.details["passed"] == 6

    # a table within the budget validates in the driver; a reference above it is counted by Spark
    count = {"$lakestream": "row_count", "table": "ods.customer"}
    suite = {"name": "n", "expectations": [{"type": "expect_table_row_count_to_equal", "kwargs": {"value": count}}]}
    small = run_suite(lh, "ods.nation", suite, spark=spark, driver_budget_rows=N_NATIONS)
    assert small.details["engine"] == "pandas"
    [v] = small.violations
    assert v.message.endswith(f"observed {N_NATIONS}, expected value={N_CUSTOMERS}")


@pytest.mark.parametrize("backend", ["local"])
def test_a_reference_s_values_reach_the_driver_only_within_the_budget(ods, spark, monkeypatch):
    """A `column_values` reference never lists more values in the driver than the budget allows: on Spark, "in
    the set" and "not in the set" (with ``mostly``) are checked by a join (no value list at all: `_distinct`
    raises), with the driver's verdicts; a snapshot the driver holds gets only the referenced values among its
    own column's, with the same verdicts; any other expectation whose list would pass the budget is an error
    naming the setting."""
    lh = ods
    lh.log("ods.orders").append(bad_order(3, custkey=999_999), "upsert")
    lh.log("ods.orders").append(bad_order(4, custkey=7), "upsert")
    lh.tier("ods.orders")
    values = {"$lakestream": "column_values", "table": "ods.customer", "column": "c_custkey"}

    def e(kind: str, **kwargs) -> dict:
        return {"type": kind, "kwargs": {"column": "o_custkey", "value_set": values, **kwargs}}

    suite = {
        "name": "members",
        "expectations": [
            e("expect_column_values_to_be_in_set"),
            e("expect_column_values_to_be_in_set", mostly=0.99),  # 1 of 1,000 outside: passes
            e("expect_column_values_to_not_be_in_set"),  # every known customer is unexpected
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "o_orderkey"}},
        ],
    }
    in_driver = run_suite(lh, "ods.orders", suite)
    assert in_driver.details["engine"] == "pandas"
    assert verdicts(in_driver) == [
        ("expect_column_values_to_be_in_set", "o_custkey", 1),
        ("expect_column_values_to_not_be_in_set", "o_custkey", N_ORDERS - 1),
    ]
    with monkeypatch.context() as guard:
        guard.setattr(qx, "_distinct", lambda values: pytest.fail("a reference's values were listed"))
        with no_rows_in_the_driver():
            joined = run_suite(lh, "ods.orders", suite, spark=spark, driver_budget_rows=10)
    assert joined.details["engine"] == "spark" and joined.details["passed"] == 2
    assert verdicts(joined) == verdicts(in_driver)
    [outside] = [v for v in joined.violations if v.message.startswith("expect_column_values_to_be_in_set")]
    assert outside.actual["unexpected_values"] == [999_999] and "999999" in outside.message
    assert outside.expected["value_set"] == values  # what the suite says, not a list
    kept = json.loads(lh.store.get(joined.details["result"]).data)
    assert len(kept["results"]) == 4 and sum(not r["success"] for r in kept["results"]) == 2

    # the customers validated in the driver (100 rows), the orders' keys above the budget read by Spark: only
    # the customers' own keys among them come back
    customers_suite = {
        "name": "ordered",
        "expectations": [
            {
                "type": "expect_column_values_to_be_in_set",
                "kwargs": {
                    "column": "c_custkey",
                    "value_set": {"$lakestream": "column_values", "table": "ods.orders", "column": "o_custkey"},
                },
            }
        ],
    }
    everything = run_suite(lh, "ods.customer", customers_suite, driver_budget_rows=10**6)
    listed = []
    monkeypatch.setattr(qx, "_distinct", lambda values, real=qx._distinct: listed.append(real(values)) or listed[-1])
    within = run_suite(lh, "ods.customer", customers_suite, spark=spark, driver_budget_rows=N_CUSTOMERS)
    assert within.details["engine"] == "pandas" and verdicts(within) == verdicts(everything)
    assert len(listed[-1]) <= N_CUSTOMERS < N_ORDERS

    # another expectation's list above the budget (and above the floor for short lists): an error, nothing run
    monkeypatch.setattr(qx, "VALUE_LIST_FLOOR", 50)
    distinct = {
        "type": "expect_column_distinct_values_to_be_in_set",
        "kwargs": {"column": "o_custkey", "value_set": values},
    }
    with pytest.raises(QualityError, match=r"holds 100 distinct values, more than the driver's budget of 50 \(LAKE"):
        run_suite(lh, "ods.orders", {"name": "d", "expectations": [distinct]}, spark=spark, driver_budget_rows=10)


@pytest.mark.parametrize("backend", ["local"])
def test_above_the_budget_without_spark_a_bounded_sample_is_validated(ods, monkeypatch, caplog):
    """Without Spark, a snapshot above the budget (the setting, from the environment) is validated on a sample of
    budget rows streamed from its files, never read whole (pyiceberg's to_arrow raises here); the result and a
    warning say it covers a sample, and the violations inside the sample are found. A reference that would read
    more than the budget, or a budget of 0, is an error naming the setting."""
    from pyiceberg.table import DataScan

    from lakehouse.errors import ConfigError

    lh = ods
    ok = {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "o_orderkey"}}
    half = {"type": "expect_column_values_to_be_between", "kwargs": {"column": "o_orderkey", "max_value": 499}}
    suite = {"name": "sampled", "expectations": [ok, half]}  # keys 500..999 violate, in every file (by hash)
    monkeypatch.setattr(DataScan, "to_arrow", lambda *a, **k: pytest.fail("the snapshot was read whole"))
    monkeypatch.setenv("LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS", "300")
    caplog.set_level(logging.WARNING, logger="quality.expectations")
    result = run_suite(lh, "ods.orders", suite)
    assert result.details["sample"] == {"rows": 300, "of": N_ORDERS} and result.rows == 300
    assert result.details["engine"] == "pandas" and result.details["passed"] == 1
    [v] = result.violations
    sample = qx._sample(lh, lh.lake_table("ods.orders"), "ods.orders", result.snapshot_id, 300)
    violating = pa.compute.sum(pa.compute.greater(sample["o_orderkey"], 499)).as_py()
    assert v.actual["element_count"] == 300 and v.actual["unexpected_count"] == violating > 0
    [note] = result.details["warnings"]
    assert "a sample of 300 of the snapshot's 1,000 rows" in note and "LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS" in note
    assert note in caplog.text
    assert verdicts(run_suite(lh, "ods.orders", suite)) == verdicts(result)  # the same snapshot, the same sample

    values = {"$lakestream": "column_values", "table": "ods.customer", "column": "c_custkey"}
    refs = {
        "name": "r",
        "expectations": [
            {"type": "expect_column_values_to_be_in_set", "kwargs": {"column": "o_custkey", "value_set": values}}
        ],
    }
    monkeypatch.setenv("LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS", str(N_CUSTOMERS - 1))
    with pytest.raises(QualityError, match=r"column_values to ods.customer .* budget of 99 rows \(LAKESTREAM_QUALITY"):
        run_suite(lh, "ods.orders", refs)
    with pytest.raises(QualityError, match=r"budget of 0 rows \(LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS\) and no Spark"):
        run_suite(lh, "ods.orders", suite, driver_budget_rows=0)
    for bad in ("-5", "1.5", "many"):
        monkeypatch.setenv("LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS", bad)
        with pytest.raises(
            ConfigError, match=f"LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS is a whole number of rows >= 0.*got '{bad}'"
        ):
            run_suite(lh, "ods.orders", suite)


# -- bad suite files ----------------------------------------------------------------------------------------


def write_suite(folder: Path, name: str, content) -> Path:
    (folder / "expectations").mkdir(exist_ok=True)
    path = folder / "expectations" / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def good_doc() -> dict:
    return json.loads((EXAMPLE / "expectations" / "ods.orders.json").read_text())


@pytest.mark.parametrize(
    ("name", "change", "says"),
    [
        ("ods.orders.json", "{not json", r"not valid JSON at line 1"),
        ("orders.json", None, r"named <namespace>.<table>.json"),
        ("ods.orders.json", {"type": "expect_column_to_be_lovely"}, r"has no expectation type .expect_column_to_be"),
        ("ods.orders.json", {"kwargs": {"colum": "o_orderkey"}}, r"GX refuses its kwargs: .*column"),
        ("ods.orders.json", {"kwargs": {"column": "o_orderkey", "value_set": {"$lakestream": "rows"}}}, r"unknown \$"),
        (
            "ods.orders.json",
            {"kwargs": {"value": {"$lakestream": "row_count"}}, "type": "expect_table_row_count_to_equal"},
            r"'row_count' reference takes table; missing table",
        ),
        ("ods.orders.json", {"drop_name": True}, r'needs a "name"'),
    ],
)
def test_a_bad_suite_file_names_the_file_and_the_fix(tmp_path, name, change, says):
    if isinstance(change, str):
        content = change
    else:
        doc = good_doc()
        if change and change.get("drop_name"):
            del doc["name"]
        elif change:
            doc["expectations"][1] = {**doc["expectations"][1], **change}
        content = doc
    path = write_suite(tmp_path, name, content)
    with pytest.raises(SuiteError, match=says) as err:
        load_suites(tmp_path)
    assert str(path) in str(err.value)


def test_a_column_or_table_the_warehouse_lacks_is_refused_before_running(ods, tmp_path):
    lh = ods
    doc = good_doc()
    doc["expectations"][1]["kwargs"]["column"] = "o_orderkey_typo"
    path = write_suite(tmp_path, "ods.orders.json", doc)
    suite = load_suite(path)
    with pytest.raises(SuiteError, match=r"expectation 2 .* names column 'o_orderkey_typo', which ods.orders lacks"):
        run_suites(lh, tmp_path)
    assert not list(lh.store.list("_lakestream/quality/gx/"))  # nothing ran
    doc = good_doc()
    doc["expectations"][1]["kwargs"] = {
        "column": "o_custkey",
        "value_set": {"$lakestream": "column_values", "table": "ods.customer", "column": "custkey"},
    }
    doc["expectations"][1]["type"] = "expect_column_values_to_be_in_set"
    with pytest.raises(SuiteError, match=r"ods.customer has no column 'custkey'") as err:
        check_suite(lh, load_suite(write_suite(tmp_path, "ods.orders.json", doc)))
    assert str(path) in str(err.value)
    with pytest.raises(SuiteError, match=r"no table ods.missing"):
        check_suite(lh, load_suite(write_suite(tmp_path, "ods.missing.json", good_doc())))
    assert suite.table == "ods.orders"


def test_every_example_suite_is_checked_against_the_example_project():
    """The columns the example suites name are those of the project (sources, models) or the lake's."""
    project = load_project(EXAMPLE)
    for table, suite in load_suites(EXAMPLE).items():
        schema = project.schema_of(table)
        columns = set(schema.names if schema is not None else project.models[table].column_names)
        columns |= set(qx.LAKE_COLUMNS)
        assert {c for _, c in suite.columns()} <= columns, table
        [match] = [e for e in suite.expectations if e["type"] == "expect_table_columns_to_match_set"]
        assert set(match["kwargs"]["column_set"]) == columns, table
        for ref in suite.references:
            assert ref.table is None or ref.table in project.tables
        for spec in suite.anomalies:
            assert spec.column is None or spec.column in columns, (table, spec)
    # the example's anomaly checks: ods.orders' volume and a null fraction; too little history is not judged
    from datetime import UTC, datetime, timedelta

    from quality.anomaly import anomaly_results

    suites = load_suites(EXAMPLE)
    assert {(s.metric, s.column) for s in suites["ods.orders"].anomalies} == {
        ("changes", None),
        ("null_fraction", "o_orderpriority"),
    }
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    short = [(t0 + timedelta(hours=i), i, v) for i, v in enumerate([1000.0, 1000.0, 3.0])]
    results = anomaly_results(suites, lambda table, metric, column: short, now=t0 + timedelta(days=1))
    assert results and all(r.ok and "needed" in r.details["skipped"] for r in results)
    long = [(t0 + timedelta(hours=i), i, 1000.0 + i % 5) for i in range(12)] + [(t0 + timedelta(hours=12), 12, 100.0)]
    [drop] = [
        r
        for r in anomaly_results(suites, lambda table, metric, column: long, now=t0 + timedelta(days=1))
        if r.check == "anomaly:changes"
    ]
    assert drop.ok and drop.details["anomalies"] and drop.details["severity"] == "warn"


# -- quiet ------------------------------------------------------------------------------------------------


def test_running_a_suite_logs_no_gx_info_and_prints_nothing(ods, suites, caplog, capsys):
    caplog.set_level(logging.INFO)
    result = run_suite(ods, "ods.nation", copy.deepcopy(suites["ods.nation"]))
    assert result.ok
    gx_records = [r for r in caplog.records if r.name.startswith("great_expectations")]
    assert not gx_records, gx_records[:3]
    out = capsys.readouterr()
    assert out.out == ""
    assert "Calculating Metrics" not in out.err  # no progress bars


@pytest.mark.subprocess
def test_importing_and_running_gx_under_info_logging_stays_quiet(tmp_path):
    """In a fresh interpreter (GX not imported yet) with the root logger at INFO, as under Airflow."""
    script = textwrap.dedent(
        f"""
        import logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        sys.path.insert(0, {str(ROOT)!r})
        import numpy as np
        from lakehouse.lakehouse import Lakehouse
        from lakestream.demo.layers import nations
        from layers.project import load_project
        from quality.expectations import load_suites, run_suite
        lh = Lakehouse.open({(tmp_path / "wh").as_uri()!r})
        d = load_project({str(EXAMPLE)!r}).sources["ods.nation"].definition
        lh.create_table("ods.nation", d.schema, buckets=1, primary_key=["n_nationkey"])
        lh.log("ods.nation").append(nations(np.arange(5)), "upsert")
        lh.tier("ods.nation")
        result = run_suite(lh, "ods.nation", load_suites({str(EXAMPLE)!r})["ods.nation"])
        lh.close()
        print("ok" if result.ok else "failed")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "ok\n"
    gx_lines = [line for line in proc.stderr.splitlines() if "great_expectations" in line]
    assert not gx_lines, gx_lines[:5]
    assert "Calculating Metrics" not in proc.stderr
