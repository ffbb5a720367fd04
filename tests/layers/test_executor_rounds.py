"""Incremental rounds on Spark's executors (`layers.executor_rounds`): above the driver's budget a round's changed keys,
hops, old rows, diff and appends run in Spark tasks. Every strategy (keyed over an inner and a left join, retract
of one input, GROUP BY over a join, regroup, SELECT DISTINCT, window functions) gives what the driver's round
gives and what a rebuild gives; the driver reads no table data and holds no round rows; a retried write appends
nothing twice; a bad model writes nothing."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakehouse.lakehouse import Lakehouse
from lakehouse.log import Log
from layers.errors import ModelKeyError
from layers.executor_rounds import round_input_rows
from layers.incremental import RoundRows
from layers.project import load_project
from layers.rounds import latest_round
from layers.runner import Runner

pytestmark = pytest.mark.usefixtures("spark")

SOURCES = """
sources:
  ods.d:
    columns: {d_id: int64, d_name: string, d_region: string}
    primary_key: [d_id]
    buckets: 2
  ods.f:
    columns: {f_id: int64, f_dim: int64, f_amount: int64, f_qty: int64}
    primary_key: [f_id]
    buckets: 3
"""
MODELS = {
    # keyed: the driving table's key, a dimension joined on its key (a hop from d's changes to f's rows)
    "dwd.f_named": "-- primary_key: [f_id]\n-- buckets: 2\n"
    "SELECT f.f_id, f.f_amount, d.d_name, d.d_region FROM ods.f AS f JOIN ods.d AS d ON f.f_dim = d.d_id",
    # keyed over a LEFT JOIN: a fact whose dimension is missing (deleted, or late) keeps its row with nulls
    "dwd.f_left": "-- primary_key: [f_id]\n-- buckets: 2\n"
    "SELECT f.f_id, f.f_dim, d.d_name FROM ods.f AS f LEFT JOIN ods.d AS d ON f.f_dim = d.d_id",
    # retract, one input: before-images subtract, after-images add
    "ads.by_dim": "-- primary_key: [f_dim]\n-- buckets: 2\n"
    "SELECT f_dim, count(*) AS n, sum(f_amount) AS s FROM ods.f GROUP BY f_dim",
    # GROUP BY over a join: the groups as of the start and as of the end
    "ads.by_region": "-- primary_key: [d_region]\n-- buckets: 1\n"
    "SELECT d.d_region, count(*) AS n, sum(f.f_amount) AS s FROM ods.f AS f JOIN ods.d AS d ON f.f_dim = d.d_id "
    "GROUP BY d.d_region",
    # regroup: an aggregate that needs the group's rows
    "ads.qty": "-- primary_key: [f_dim]\n-- buckets: 1\n"
    "SELECT f_dim, count(DISTINCT f_qty) AS kinds, max(f_amount) AS top FROM ods.f GROUP BY f_dim",
    # SELECT DISTINCT: a GROUP BY of its columns (regroup); a pair whose last fact moved away is deleted
    "ads.pairs": "-- primary_key: [f_dim, f_qty]\n-- bucket_key: f_dim\n-- buckets: 1\n"
    "SELECT DISTINCT f_dim, f_qty FROM ods.f",
    # window: the partitions (f_dim, f_qty: the columns both windows partition by) of the changed facts, before
    # and after, recomputed; a fact moving to another partition renumbers the rows of both
    "dwd.f_rank": "-- primary_key: [f_id]\n-- buckets: 2\n"
    "SELECT f_id, f_dim, row_number() OVER (PARTITION BY f_qty, f_dim ORDER BY f_amount DESC, f_id) AS rn, "
    "sum(f_amount) OVER (PARTITION BY f_dim, f_qty, f_id % 2) AS half_total FROM ods.f WHERE f_qty > 0",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    (root / "sources.yml").write_text(SOURCES)
    (root / "models").mkdir()
    for name, sql in MODELS.items():
        (root / "models" / f"{name}.sql").write_text(sql + "\n")
    return load_project(root)


def dims(ids, region=lambda i: f"R{i % 3}") -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "d_id": pa.array(ids, pa.int64()),
            "d_name": [f"D{i}" for i in ids],
            "d_region": [region(i) for i in ids],
        }
    )


def facts(ids, dim=lambda i: i % 7, amount=lambda i: i, qty=lambda i: i % 4) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "f_id": pa.array(ids, pa.int64()),
            "f_dim": pa.array([dim(i) for i in ids], pa.int64()),
            "f_amount": pa.array([amount(i) for i in ids], pa.int64()),
            "f_qty": pa.array([qty(i) for i in ids], pa.int64()),
        }
    )


def base(lh: Lakehouse) -> None:
    lh.log("ods.d").append(dims(range(7)), "upsert")
    lh.log("ods.f").append(facts(range(200)), "upsert")
    lh.tier("ods.d")
    lh.tier("ods.f")


def change(lh: Lakehouse, step: int) -> None:
    """Updates that move facts between dimensions and groups, deletes, new keys, a dimension moving region, a
    renamed dimension, a dimension deleted (its facts leave the join), a late dimension."""
    f, d = lh.log("ods.f"), lh.log("ods.d")
    f.append(facts(range(step, 200, 9), dim=lambda i: (i + step) % 8, amount=lambda i: i * 10 + step), "upsert")
    f.append(facts(range(200 + 10 * step, 210 + 10 * step)), "upsert")
    f.append(facts(range(3 + step, 200, 31)).select(["f_id"]), "delete")
    d.append(dims([step % 7], region=lambda i: f"R{(i + step) % 4}"), "upsert")
    d.append(dims([7]), "upsert")  # a dimension facts with f_dim 7 waited for
    if step == 2:
        d.append(dims([5]).select(["d_id"]), "delete")


def state(lh: Lakehouse, name: str, project) -> list[dict]:
    key = list(project.models[name].primary_key)
    rows = lh.union_read(name, columns=lh.table(name).schema.names)  # no system columns: offsets may differ
    return rows.sort_by([(k, "ascending") for k in key]).to_pylist()


@pytest.mark.slow
def test_every_strategy_on_the_executors_equals_the_driver_and_a_rebuild(tmp_path, spark, project, monkeypatch):
    on_driver = Lakehouse.open((tmp_path / "driver").as_uri())
    on_executors = Lakehouse.open((tmp_path / "executors").as_uri())
    driver = Runner(on_driver, project, spark, driver_budget_rows=10**9)
    executors = Runner(on_executors, project, spark, driver_budget_rows=0)
    for lh, runner in ((on_driver, driver), (on_executors, executors)):
        runner.deploy()
        base(lh)
        assert {r.strategy for r in runner.run_once()} == {"recompute"}
    plans = {name: executors.plans[name].strategy for name in MODELS}
    assert plans == {
        "dwd.f_named": "keyed",
        "dwd.f_left": "keyed",
        "ads.by_dim": "retract",
        "ads.by_region": "retract",
        "ads.qty": "regroup",
        "ads.pairs": "regroup",
        "dwd.f_rank": "window",
    }

    def driver_read(*args, **kwargs):
        raise AssertionError("the driver read table data or held a round's rows")

    for step in (1, 2):
        for lh in (on_driver, on_executors):
            change(lh, step)
        expected = {r.model: r for r in driver.run_once()}
        with monkeypatch.context() as guard:
            # the driver plans and commits: no Parquet file, no log record, no rows into or out of Spark
            guard.setattr(pq, "read_table", driver_read)
            guard.setattr(pq.ParquetFile, "__init__", driver_read)
            guard.setattr(Log, "read", driver_read)
            guard.setattr(RoundRows, "compute", driver_read)
            guard.setattr(type(spark), "createDataFrame", driver_read)
            from pyspark.sql import DataFrame

            guard.setattr(DataFrame, "toArrow", driver_read)
            got = {r.model: r for r in executors.run_once()}
        for report in (expected["dwd.f_rank"], got["dwd.f_rank"]):  # incremental: by partition, not in full
            assert report.strategy == "window" and "window partition" in report.reason, report.reason
        for name in MODELS:
            assert "on Spark's executors" in got[name].reason, got[name].reason
            assert "on Spark's executors" not in expected[name].reason
            assert state(on_executors, name, project) == state(on_driver, name, project), f"step {step}: {name}"
            assert got[name].input_changes == expected[name].input_changes, name
            assert (got[name].upserts, got[name].deletes) == (expected[name].upserts, expected[name].deletes), name
    assert state(on_executors, "dwd.f_named", project)  # the test holds rows at all
    unmatched = [r for r in state(on_executors, "dwd.f_left", project) if r["d_name"] is None]
    assert {r["f_dim"] for r in unmatched} == {5}  # dimension 5 was deleted; 7 came late and is matched now
    for name in MODELS:  # a rebuild of a state that is right changes nothing
        report = executors.rebuild(name)
        assert (report.upserts, report.deletes) == (0, 0), (name, report)


def test_the_budget_counts_the_rounds_input_records(tmp_path, spark, project):
    """At the budget a round stays in the driver; one record more and it goes to the executors."""
    lh = Lakehouse.open((tmp_path / "wh").as_uri())
    Runner(lh, project, spark).deploy()
    base(lh)
    Runner(lh, project, spark).run_once(["ads.by_dim"])
    lh.log("ods.f").append(facts(range(5)), "upsert")
    lh.log("ods.f").append(facts(range(5, 8)).select(["f_id"]), "delete")
    (report,) = Runner(lh, project, spark, driver_budget_rows=8).run_once(["ads.by_dim"])
    assert round_input_rows(latest_round(lh.store, "ads.by_dim")) == 8
    assert "on Spark's executors" not in report.reason
    lh.log("ods.f").append(facts(range(9)), "upsert")
    (report,) = Runner(lh, project, spark, driver_budget_rows=8).run_once(["ads.by_dim"])
    assert "on Spark's executors" in report.reason and report.input_changes == 9


def test_a_retried_write_appends_nothing_twice(tmp_path, spark, project, monkeypatch):
    """Every task's appends carry the round's producer id and sequences: a round that died after its tasks
    appended (before its subscriptions advanced) is resumed with the same rows, and the log recognises them."""
    import layers.executor_rounds

    lh = Lakehouse.open((tmp_path / "wh").as_uri())
    runner = Runner(lh, project, spark, driver_budget_rows=0)
    runner.deploy()
    base(lh)
    runner.run_once(["dwd.f_named"])
    change(lh, 1)
    ends_before = lh.log("dwd.f_named").end_offsets()
    real = layers.executor_rounds.write_keys

    def write_then_die(*args, **kwargs):
        real(*args, **kwargs)
        raise RuntimeError("killed after the appends")

    with monkeypatch.context() as m:
        m.setattr(layers.executor_rounds, "write_keys", write_then_die)
        with pytest.raises(RuntimeError, match="killed after the appends"):
            runner.run_once(["dwd.f_named"])
    appended = lh.log("dwd.f_named").end_offsets()
    assert appended != ends_before
    (report,) = Runner(lh, project, spark, driver_budget_rows=0).run_once(["dwd.f_named"])
    assert report.resumed and lh.log("dwd.f_named").end_offsets() == appended  # nothing appended twice
    assert report.upserts > 0  # the resumed round computed the same rows again
    rebuilt = Runner(lh, project, spark).rebuild("dwd.f_named")
    assert (rebuilt.upserts, rebuilt.deletes) == (0, 0)


def test_a_null_key_on_the_executors_writes_nothing(tmp_path, spark, project):
    """A group whose key is null (a fact without a dimension): the executors' key check refuses the round before
    any append, and the round is tried again, not skipped."""
    lh = Lakehouse.open((tmp_path / "wh").as_uri())
    runner = Runner(lh, project, spark, driver_budget_rows=0)
    runner.deploy()
    base(lh)
    runner.run_once(["ads.by_dim"])
    ends = lh.log("ads.by_dim").end_offsets()
    lonely = facts([5000]).set_column(1, "f_dim", pa.array([None], pa.int64()))
    lh.log("ods.f").append(lonely, "upsert")
    for _ in range(2):
        with pytest.raises(ModelKeyError, match=r"yields 1 row\(s\) whose key \['f_dim'\] is null"):
            runner.run_once(["ads.by_dim"])
        assert lh.log("ads.by_dim").end_offsets() == ends


def test_a_full_round_that_empties_buckets_deletes_their_rows_in_tasks(tmp_path, spark, project, monkeypatch):
    """A full round's buckets without any new row lose their old rows, in Spark tasks (each bucket gets a task
    through a marker row): the driver reads none of them."""
    lh = Lakehouse.open((tmp_path / "wh").as_uri())
    runner = Runner(lh, project, spark)
    runner.deploy()
    base(lh)
    runner.run_once(["dwd.f_named"])
    assert lh.union_read("dwd.f_named").num_rows == 200
    lh.log("ods.f").append(facts(range(200)).select(["f_id"]), "delete")

    def driver_read(*args, **kwargs):
        raise AssertionError("the driver read table data")

    with monkeypatch.context() as guard:
        guard.setattr(pq, "read_table", driver_read)
        guard.setattr(pq.ParquetFile, "__init__", driver_read)
        guard.setattr(Log, "read", driver_read)
        report = runner.rebuild("dwd.f_named")
    assert (report.upserts, report.deletes) == (0, 200)
    assert lh.union_read("dwd.f_named").num_rows == 0
    assert runner.rebuild("dwd.f_named").deletes == 0


def test_a_round_resumes_where_it_began_whatever_the_budget_is_now(tmp_path, spark, project, monkeypatch):
    """The choice is recorded in the round's intent: a round begun on the executors and resumed by a runner whose
    budget would keep it in the driver still runs on the executors (the same chunks, the same sequences)."""
    import layers.executor_rounds

    lh = Lakehouse.open((tmp_path / "wh").as_uri())
    runner = Runner(lh, project, spark, driver_budget_rows=0)
    runner.deploy()
    base(lh)
    runner.run_once(["ads.by_dim"])
    change(lh, 1)

    real = layers.executor_rounds.write_keys

    def write_then_die(*args, **kwargs):
        real(*args, **kwargs)
        raise RuntimeError("killed after the appends")

    def compute(*args, **kwargs):
        raise AssertionError("the resumed round ran in the driver")

    with monkeypatch.context() as m:
        m.setattr(layers.executor_rounds, "write_keys", write_then_die)
        with pytest.raises(RuntimeError, match="killed after the appends"):
            runner.run_once(["ads.by_dim"])
    assert latest_round(lh.store, "ads.by_dim").on_executors
    with monkeypatch.context() as guard:
        guard.setattr(RoundRows, "compute", compute)
        (report,) = Runner(lh, project, spark, driver_budget_rows=10**9).run_once(["ads.by_dim"])
    assert report.resumed and "on Spark's executors" in report.reason
    lh.log("ods.f").append(facts([1]), "upsert")
    (report,) = Runner(lh, project, spark, driver_budget_rows=10**9).run_once(["ads.by_dim"])
    assert not latest_round(lh.store, "ads.by_dim").on_executors and "on Spark's executors" not in report.reason


@pytest.mark.slow
def test_window_models_with_null_partition_values_equal_a_rebuild_on_the_driver_and_the_executors(tmp_path, spark):
    """Facts moving into, within and out of the null partition (which no IN list or range holds): a round on the
    driver (Spark reads with IS NULL pushed) and one on the executors (no range pushed) both equal a rebuild; so
    does the "top rows per partition" shape (a filter on a window's value over a subquery, kept as a QUALIFY)."""
    root = tmp_path / "project"
    (root / "models").mkdir(parents=True)
    (root / "sources.yml").write_text(SOURCES)
    (root / "models" / "dwd.f_rank.sql").write_text(MODELS["dwd.f_rank"] + "\n")
    (root / "models" / "dwd.f_top.sql").write_text(
        "-- primary_key: [f_id]\n-- buckets: 1\nSELECT f_id, f_dim, f_amount FROM (SELECT f_id, f_dim, f_amount, "
        "row_number() OVER (PARTITION BY f_dim ORDER BY f_amount DESC, f_id) AS rn FROM ods.f) AS t WHERE rn <= 2\n"
    )
    project = load_project(root)
    dims_of = {i: (None if i % 3 == 0 else i % 4) for i in range(40)}
    runners = []
    for where, budget in (("driver", 10**9), ("executors", 0)):
        lh = Lakehouse.open((tmp_path / where).as_uri())
        runner = Runner(lh, project, spark, driver_budget_rows=budget)
        runner.deploy()
        lh.log("ods.f").append(facts(range(40), dim=lambda i: dims_of[i]), "upsert")
        runner.run_once()
        runners.append((lh, runner))
    for lh, runner in runners:
        f = lh.log("ods.f")
        f.append(facts(range(1, 40, 5), dim=lambda i: None if i % 2 else dims_of[i]), "upsert")  # in and out
        f.append(facts([3, 39]).select(["f_id"]), "delete")  # facts of the null partition (39: one of its top 2)
        for report in runner.run_once():
            assert report.strategy == "window" and "window partition" in report.reason, report.reason
    (driver_lh, driver), (executors_lh, executors) = runners
    for name in ("dwd.f_rank", "dwd.f_top"):
        rows = state(driver_lh, name, project)
        assert any(r["f_dim"] is None for r in rows) and rows == state(executors_lh, name, project), name
        for runner in (driver, executors):
            report = runner.rebuild(name)
            assert (report.upserts, report.deletes) == (0, 0), report
