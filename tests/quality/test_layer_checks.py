"""Layer checks (`quality.layers`): a model's table after its newest finished round equals its SQL over its
inputs as of that round's positions; wrong, deleted and extra rows written to a layer's log behind the runner's
back are caught and named by key with the expected and actual rows; the sample sees the newest round's keys,
``full=True`` everything; no false alarm over randomized clean rounds or while a round is in progress.

Real Spark and the example project (examples/tpch, a few hundred orders). To keep the file near two minutes,
only the round-in-progress case runs on both backends (local and SeaweedFS S3); the others on the local
warehouse (they exercise the check, not the store)."""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pytest

from layers.lease import Owner
from layers.project import load_project
from layers.rounds import RoundRecord, create_round, latest_round
from layers.runner import Runner
from quality.layers import check_layer, check_layers, newest_finished_round
from quality.results import CheckResult
from tests.layers._tpch import EXAMPLE, MODELS, change_some, customers, load_base, nations, orders

pytestmark = pytest.mark.usefixtures("spark")

DWD, ADS = MODELS


@pytest.fixture(scope="module")
def project():
    return load_project(EXAMPLE)


def built(lh, project, spark, *, rounds: int = 1) -> Runner:
    layers = Runner(lh, project, spark)
    layers.deploy()  # idempotent
    load_base(lh)
    layers.run_once()
    if rounds > 1:
        change_some(lh)
        layers.run_once()
    return layers


def row_of(lh, model: str, column: str, value) -> dict:
    rows = [r for r in lh.union_read(model).to_pylist() if r[column] == value]
    assert len(rows) == 1, rows
    return {k: v for k, v in rows[0].items() if not k.startswith("__")}


def append_rows(lh, model: str, rows: list[dict]) -> None:
    """Rows written straight to the layer's log, bypassing its runner (a rogue producer)."""
    lh.log(model).append(pa.Table.from_pylist(rows, schema=lh.table(model).schema), "upsert")


def assert_clean(results: list[CheckResult]) -> None:
    for r in results:
        assert r.ok, [str(v) for v in r.violations] or r.error


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local"])
def test_clean_layers_pass_after_first_and_second_round_and_over_randomized_rounds(lakehouse, spark, project):
    lh = lakehouse
    Runner(lh, project, spark).deploy()
    results = check_layers(lh, project, spark=spark)
    assert [(r.table, r.details.get("skipped")) for r in results] == [(m, "no finished round") for m in MODELS]
    assert all(r.ok for r in results)

    layers = built(lh, project, spark)
    results = check_layers(lh, project, spark=spark, seed=1)
    assert_clean(results)
    assert [r.table for r in results] == list(MODELS)  # dependency order
    dwd, ads = results
    assert dwd.check == "layer" and dwd.details["round"] == 0 and dwd.details["full"] is False
    rows = lh.union_read(DWD, columns=["o_orderkey"]).num_rows
    assert 0 < rows < 200  # orders whose customer (and its nation) exist
    assert dwd.details["changed_keys"] == rows  # round 0 wrote every row
    assert dwd.rows > 0 and dwd.seconds > 0
    assert dwd.details["positions"]["ods.orders"] == {str(b): o for b, o in lh.log("ods.orders").end_offsets().items()}
    assert ads.details["positions"][DWD] == {str(b): o for b, o in lh.log(DWD).end_offsets().items()}

    change_some(lh)
    reports = layers.run_once()
    assert [r.round for r in reports] == [1, 1]
    results = check_layers(lh, project, spark=spark, sample=5, seed=2)
    assert_clean(results)
    dwd, ads = results
    assert dwd.details["round"] == 1 and ads.details["round"] == 1
    assert 0 < dwd.details["changed_keys"] < 100  # only the newest round's keys, not round 0's
    assert dwd.details["random_keys"] == 5
    assert dwd.snapshot_id is None  # nothing tiered yet
    for table in project.tables:  # the lake holds it all now: as-of reads come from the lake
        lh.tier(table)
    full = check_layers(lh, project, spark=spark, full=True)
    assert_clean(full)
    assert full[0].snapshot_id == lh.lake_table(DWD).current_snapshot().snapshot_id
    assert full[0].details["full"] is True
    assert full[0].rows == 2 * lh.union_read(DWD, columns=["o_orderkey"]).num_rows  # the SQL's rows and the table's

    # no false alarm over randomized clean rounds on top (the lake, then each round's log tail)
    rng = np.random.default_rng(20261125)
    n_orders, n_customers, n_nations = 200, 30, 5
    for i, seed in enumerate((7, 8, 9)):
        new = np.arange(n_orders, n_orders + int(rng.integers(1, 20)))
        n_orders += len(new)
        upd = rng.choice(n_orders, size=int(rng.integers(1, 30)), replace=False)
        keys = np.concatenate([new, upd]).tolist()
        months = rng.integers(1, 13, len(keys)).tolist()
        prices = [str(p) for p in rng.integers(1, 2_000, len(keys))]
        lh.log("ods.orders").append(
            orders(keys, rng.integers(0, n_customers + 2, len(keys)).tolist(), prices=prices, months=months), "upsert"
        )
        gone = rng.choice(n_orders, size=3, replace=False).tolist()
        lh.log("ods.orders").append(pa.table({"o_orderkey": pa.array(gone, pa.int64())}), "delete")
        moved = rng.choice(n_customers, size=3, replace=False).tolist()
        lh.log("ods.customer").append(customers(moved, rng.integers(0, n_nations + 1, 3).tolist()), "upsert")
        if i % 2:
            k = int(rng.integers(0, n_nations))
            lh.log("ods.nation").append(nations([k], [f"N{k}-{i}"]), "upsert")
        assert [r.round for r in layers.run_once()] == [i + 2, i + 2]
        results = check_layers(lh, project, spark=spark, sample=25, seed=seed)
        assert_clean(results)
        assert all(r.details["sampled_keys"] > 0 for r in results)
    assert_clean(check_layers(lh, project, spark=spark, full=True))


@pytest.mark.parametrize("backend", ["local"])
def test_wrong_deleted_and_extra_rows_are_caught_by_key_and_full_is_compared_by_spark(
    lakehouse, spark, project, monkeypatch
):
    """Wrong, deleted and extra rows in dwd's log are caught by key with the sample; once they are put right,
    ``full``: Spark joins the SQL's rows with the table's and only the keys that differ reach the driver (a
    guard fails the test if the driver reads the model's table whole); the first `MAX_VIOLATIONS` (by key) become
    violations, the last one saying how many differ in all; a data file committed twice makes each of its keys
    a difference of its own (held twice). One build of two rounds for both."""
    from lakehouse.lakehouse import Lakehouse
    from quality.layers import MAX_VIOLATIONS
    from tests.support.rogue import rogue_commit

    lh = lakehouse
    built(lh, project, spark, rounds=2)
    assert_clean(check_layers(lh, project, spark=spark, sample=0))
    good = row_of(lh, DWD, "o_orderkey", 10)
    good11 = row_of(lh, DWD, "o_orderkey", 11)
    append_rows(lh, DWD, [{**good, "n_name": "BOGUS"}])  # a wrong value
    lh.log(DWD).append(pa.table({"o_orderkey": pa.array([11], pa.int64())}), "delete")  # a row deleted
    extra = {**good, "o_orderkey": 99_999}
    append_rows(lh, DWD, [extra])  # a row the SQL does not give

    result = check_layer(lh, project, DWD, spark=spark, sample=0)
    assert not result.ok
    assert result.details["differences"] == 3, [str(v) for v in result.violations]
    by_key = {v.keys: v for v in result.violations}
    assert set(by_key) == {(10,), (11,), (99_999,)}
    assert all(v.check == "layer-row" and v.table == DWD for v in result.violations)
    wrong = by_key[(10,)]
    assert wrong.expected == good and wrong.actual == {**good, "n_name": "BOGUS"}
    assert 'column n_name expected "' in wrong.message and 'got "BOGUS"' in wrong.message
    assert "row of key (o_orderkey=10) differs from the model's SQL as of round 1" in wrong.message
    missing = by_key[(11,)]
    assert missing.actual is None and missing.expected["o_orderkey"] == 11
    assert "has no row" in missing.message
    assert by_key[(99_999,)].expected is None and by_key[(99_999,)].actual == extra
    assert "does not give" in by_key[(99_999,)].message
    # the check of ads reads dwd as of ads's own round: the rows written behind dwd's runner are not in it
    assert check_layer(lh, project, ADS, spark=spark, sample=0).ok

    # put right behind the runner's back again: the same round's table as built, then the full comparison
    append_rows(lh, DWD, [good, good11])
    lh.log(DWD).append(pa.table({"o_orderkey": pa.array([99_999], pa.int64())}), "delete")
    bogus = [{**good, "o_orderkey": 90_000 + i} for i in range(MAX_VIOLATIONS + 5)]
    append_rows(lh, DWD, [{**good, "n_name": "BOGUS"}, *bogus])
    for table in project.tables:
        lh.tier(table)
    real = Lakehouse.union_read

    def no_whole_table(self, name, *args, **kwargs):
        assert kwargs.get("row_filter") is not None, "the driver read a model's table whole"
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(Lakehouse, "union_read", no_whole_table)
    result = check_layer(lh, project, DWD, spark=spark, full=True)
    assert result.details["differences"] == MAX_VIOLATIONS + 6, result.error
    assert [v.keys for v in result.violations] == [(10,), *[(90_000 + i,) for i in range(MAX_VIOLATIONS - 1)]]
    assert result.violations[0].actual["n_name"] == "BOGUS"
    assert result.violations[-1].message.endswith(f"; 6 more differences, {MAX_VIOLATIONS + 6} in all")
    monkeypatch.undo()
    # a data file committed twice: its keys are held twice
    twice = lh.lake_table(DWD).scan().plan_files()[0].file
    rogue_commit(lh, add=[twice], name=DWD)
    held = check_layer(lh, project, DWD, spark=spark, full=True)
    doubled = [v for v in held.violations if "rows of it" in v.message]
    assert doubled and all("holds 2 rows of it" in v.message for v in doubled), [str(v) for v in held.violations]
    # Spark counts the file's keys that equal the SQL's rows too (held twice), not only those differing anyway
    assert held.details["differences"] > MAX_VIOLATIONS + 6, held.details


@pytest.mark.parametrize("backend", ["local"])
def test_a_model_whose_input_failed_is_not_evaluated_and_so_are_its_readers(lakehouse, spark, project):
    """ods.orders fails its reconciliation (a rogue commit adds one of its files a second time): dwd, which
    reads it, is not evaluated, and ads, which reads dwd, is not evaluated either (transitively); neither is
    compared, neither has a violation, neither is ok."""
    from quality.reconcile import reconcile
    from tests.support.rogue import rogue_commit

    lh = lakehouse
    built(lh, project, spark)
    lh.tier("ods.orders")
    rogue_commit(lh, add=[lh.lake_table("ods.orders").scan().plan_files()[0].file], name="ods.orders")
    failed = reconcile(lh, "ods.orders")
    assert not failed.ok
    dwd, ads = check_layers(lh, project, spark=spark, prior=[failed])
    assert (dwd.status, ads.status) == ("not evaluated", "not evaluated")
    assert dwd.not_evaluated == "upstream ods.orders failed (reconcile)"
    assert ads.not_evaluated == f"upstream {DWD} failed (layer not evaluated)"
    assert not (dwd.ok or ads.ok or dwd.violations or ads.violations or dwd.rows or ads.rows)
    # an input that passed does not hold its readers back
    passed = reconcile(lh, "ods.customer")
    assert passed.ok
    evaluated = check_layers(lh, project, spark=spark, prior=[passed])
    assert [r.not_evaluated for r in evaluated] == [None, None] and all(r.rows for r in evaluated)


@pytest.mark.parametrize("backend", ["local"])
def test_a_wrong_group_row_is_caught_and_full_catches_a_wrong_row_outside_the_newest_round_and_the_sample(
    lakehouse, spark, project
):
    lh = lakehouse
    layers = built(lh, project, spark)
    # a wrong group row in a group-by model (ads), caught by its key; dwd is not affected
    group = lh.union_read(ADS).sort_by([("n_nationkey", "ascending"), ("order_month", "ascending")]).to_pylist()[3]
    group = {k: v for k, v in group.items() if not k.startswith("__")}
    append_rows(lh, ADS, [{**group, "revenue": group["revenue"] + decimal.Decimal("0.01")}])
    result = check_layer(lh, project, ADS, spark=spark, sample=0)
    [violation] = result.violations
    assert violation.keys == ((group["n_nationkey"], group["order_month"]),)
    assert violation.expected == group
    assert violation.actual["revenue"] == group["revenue"] + decimal.Decimal("0.01")
    assert "column revenue expected" in violation.message
    assert check_layer(lh, project, DWD, spark=spark, sample=0).ok
    append_rows(lh, ADS, [group])  # put right: ads as built again

    # a wrong row in dwd that the next round does not touch
    good = row_of(lh, DWD, "o_orderkey", 10)
    append_rows(lh, DWD, [{**good, "o_orderstatus": "X"}])
    # a new round that does not touch order 10: the wrong row is now older than the newest round
    lh.log("ods.orders").append(orders([50, 51], [1, 2], prices=["7.00", "8.00"]), "upsert")
    assert [r.round for r in layers.run_once()] == [1, 1]
    for table in project.tables:  # the wrong row is in the lake now, not only in the log
        lh.tier(table)
    sampled = check_layer(lh, project, DWD, spark=spark, sample=0)
    assert sampled.details["round"] == 1 and sampled.details["changed_keys"] == 2
    assert sampled.ok  # neither the newest round's keys nor a random one: the sample does not see it
    full = check_layer(lh, project, DWD, spark=spark, full=True)
    [violation] = full.violations
    assert violation.keys == (10,) and violation.expected == good and violation.actual["o_orderstatus"] == "X"
    assert full.details["differences"] == 1
    # every key sampled is a full check too
    assert not check_layer(lh, project, DWD, spark=spark, sample=10_000).ok


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_positions_of_a_round_in_progress_are_those_of_the_round_before(lakehouse, spark, project):
    """A round that started (intent, some appends) but has no report: the check compares the table as of the
    log end the running round began at, with the inputs as of the finished round's end: no false alarm."""
    lh = lakehouse
    built(lh, project, spark)
    finished = latest_round(lh.store, DWD)
    ends = lh.log(DWD).end_offsets()
    lh.log("ods.orders").append(orders([60], [1]), "upsert")
    inputs = {t: lh.log(t).end_offsets() for t in project.models[DWD].inputs}
    create_round(
        lh.store, RoundRecord(DWD, 1, "incremental", finished.end, inputs, ends, finished.sql), Owner.new()
    ).release()
    good = row_of(lh, DWD, "o_orderkey", 10)
    append_rows(lh, DWD, [{**good, "o_orderstatus": "X"}])  # the running round's appends (not finished)
    state = newest_finished_round(lh, DWD)
    assert state.number == 0 and state.after == ends and state.inputs == finished.end
    result = check_layer(lh, project, DWD, spark=spark, sample=10_000)
    assert result.ok, [str(v) for v in result.violations]
    assert result.details["round"] == 0


def test_a_key_the_table_holds_twice_is_a_difference_even_with_equal_rows():
    """A data file committed twice holds the same rows again: each key twice, every value right."""
    from quality.layers import _violations, compare_rows

    expected = pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]})
    doubled = pa.concat_tables([expected, expected.slice(1, 2)])
    [two, three] = compare_rows(expected, doubled, ["k"])
    assert (two.key, two.times, two.expected, two.actual) == ((2,), 2, {"k": 2, "v": "b"}, {"k": 2, "v": "b"})
    assert three.key == (3,) and three.times == 2
    [violation, _] = _violations("dwd.x", 4, [two, three], ["k"])
    assert "holds 2 rows of it" in violation.message and violation.keys == (2,)
    # a key twice whose copies differ from the SQL's row is still one difference, the repeat
    changed = pa.concat_tables([expected, pa.table({"k": [1], "v": ["z"]})])
    [one] = compare_rows(expected, changed, ["k"])
    assert one.key == (1,) and one.times == 2
    assert compare_rows(expected, expected, ["k"]) == []
