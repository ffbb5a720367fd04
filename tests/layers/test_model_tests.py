"""Model tests (`layers.model_tests`, `lakestream layers test`): the example's tests pass; a broken join, a wrong
aggregate and a round that drops deletes are caught, naming the test, the model and the step with a row diff;
malformed test files are clear errors (no Spark); the command's exit codes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakestream.cli import app
from layers.errors import ModelTestFormatError
from layers.model_tests import load_model_tests, run_model_tests, select_tests
from layers.project import load_project

REPO = Path(__file__).resolve().parents[2]
TPCH = REPO / "examples" / "tpch"
EXAMPLE_TESTS = ["deletes", "dimension_move", "joins_and_aggregate", "late_dimension"]


def invoke(*args: str):
    return CliRunner().invoke(app, ["layers", *args], catch_exceptions=False, env={"COLUMNS": "400"})


def copy_example(tmp_path: Path) -> Path:
    target = tmp_path / "tpch"
    shutil.copytree(TPCH, target, ignore=shutil.ignore_patterns("expectations"))
    return target


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def example_run(spark):
    """``lakestream layers test`` of the example, once for the module. The command makes its session with
    getOrCreate: in this process the tests' own, which it must not stop."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spark, "stop", lambda: None)
        return invoke("test", "--project", str(TPCH))


@pytest.mark.slow
def test_the_examples_tests_pass(example_run) -> None:
    assert example_run.exit_code == 0, example_run.output
    lines = example_run.output.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("PASS")] == EXAMPLE_TESTS
    assert "FAIL" not in example_run.output
    assert lines[-1].startswith("4 passed, 0 failed in ") and "Spark started in" in lines[-1]
    steps = {t.name: len(t.steps) for t in load_model_tests(load_project(TPCH))}
    assert steps == {"deletes": 4, "dimension_move": 3, "joins_and_aggregate": 3, "late_dimension": 3}


def test_a_broken_join_fails_naming_test_model_step_and_rows(tmp_path, spark) -> None:
    """Nations joined on the customer key instead of the customer's nation: Alice (customer 1, nation 0) lands
    in nation 1."""
    root = copy_example(tmp_path)
    replace_in(
        root / "models" / "dwd.orders_enriched.sql", "c.c_nationkey = n.n_nationkey", "c.c_custkey = n.n_nationkey"
    )
    project = load_project(root)
    (result,) = run_model_tests(project, select_tests(load_model_tests(project), "dimension_move"), spark)
    assert not result.passed
    (failure,) = [f for f in result.failures if f.check == "expected"]
    assert (failure.test, failure.model, failure.step.number) == (
        "dimension_move",
        "ads.revenue_by_nation_month",
        1,
    )
    assert "step 1 (Alice (France) has two January orders" in failure.headline()
    diff = failure.diff
    # France's group is missing, Germany's holds Alice's orders too (Bob: custkey 2 -> no nation 2: gone)
    assert [r["n_nationkey"] for r in diff.missing] == [0]
    assert [(c.key["n_nationkey"], c.columns["order_count"]) for c in diff.changed] == [(1, (1, 2))]
    assert any(line.startswith("- missing {n_nationkey: 0, n_name: FRANCE") for line in diff.lines())
    assert "~ changed {n_nationkey: 1, order_month: 2024-01-01}: order_count: 1 -> 2" in "\n".join(diff.lines())
    # the SQL in full gives the same wrong rows: the incremental state equals a rebuild
    assert not [f for f in result.failures if f.check == "rebuild"]


def test_a_round_that_drops_deletes_fails_the_rebuild_check(tmp_path, spark, monkeypatch) -> None:
    """A runner whose incremental rounds never append deletes: the deleted order stays in the DWD (against the
    expected rows and against the rebuild)."""
    from layers.runner import Runner

    own = Runner._append
    monkeypatch.setattr(
        Runner, "_append", lambda self, record, upserts, deletes: own(self, record, upserts, deletes[:0])
    )
    project = load_project(TPCH)
    (result,) = run_model_tests(project, select_tests(load_model_tests(project), "deletes"), spark)
    assert not result.passed
    found = {(f.model, f.check, f.step.number) for f in result.failures}
    assert ("dwd.orders_enriched", "rebuild", 2) in found and ("dwd.orders_enriched", "expected", 2) in found
    rebuild = next(f for f in result.failures if (f.model, f.check) == ("dwd.orders_enriched", "rebuild"))
    assert [r["o_orderkey"] for r in rebuild.diff.extra] == [10] and not rebuild.diff.missing
    assert "incremental state != rebuild" in rebuild.headline()
    assert max(f.step.number for f in result.failures) == 2  # stops at the first failing step


def test_cli_fails_a_wrong_aggregate_with_exit_1(tmp_path, spark, monkeypatch) -> None:
    monkeypatch.setattr(spark, "stop", lambda: None)
    root = copy_example(tmp_path)
    replace_in(root / "models" / "ads.revenue_by_nation_month.sql", "sum(o_totalprice)", "max(o_totalprice)")
    bad = invoke("test", "--project", str(root), "--test", "joins_and_aggregate")
    assert bad.exit_code == 1, bad.output
    assert "FAIL joins_and_aggregate" in bad.output and "0 passed, 1 failed" in bad.output
    text = " ".join(bad.output.split())
    assert "joins_and_aggregate, step 1 (two nations, two customers, three orders), ads.revenue_by_nation_month" in text
    assert "~ changed {n_nationkey: 0, order_month: 2024-01-01}: revenue: 150.50 -> 100.00" in text


# -- malformed tests and the command's errors: no Spark ---------------------------------------------------

ORDER = "{o_orderkey: 1, o_custkey: 1, o_totalprice: 1.00, o_orderdate: 2024-01-01}"


@pytest.mark.parametrize(
    ("body", "message", "step"),
    [
        ("steps: [\n  - input: {", "the YAML does not parse", None),
        ("steps: []", "`steps:` must be a non-empty list", None),
        ("stepz: []", "unknown setting stepz", None),
        ("steps:\n  - input: {ods.lineitem: {insert: []}}", "`input:` ods.lineitem: no table of the project", 1),
        (
            "steps:\n  - input: {dwd.orders_enriched: {insert: []}}",
            "`input:` dwd.orders_enriched: a model, not a source",
            1,
        ),
        ("steps:\n  - input: {ods.orders: {upsert: []}}", "unknown change 'upsert'; use insert, update, delete", 1),
        (
            "steps:\n  - input: {ods.orders: {insert: [{o_orderkey: 1, o_price: 3}]}}",
            "input ods.orders insert: unknown column 'o_price'",
            1,
        ),
        (
            f"steps:\n  - input: {{ods.orders: {{insert: [{ORDER}]}}}}\n"
            "  - input: {ods.orders: {update: [{o_custkey: 2}]}}",
            "input ods.orders update: the row {'o_custkey': 2} lacks key column o_orderkey",
            2,
        ),
        (
            "steps:\n  - input: {ods.orders: {delete: [{o_custkey: 2}]}}",
            "input ods.orders delete: the row {'o_custkey': 2} lacks key column o_orderkey",
            1,
        ),
        ("steps:\n  - input: {ods.orders: {update: [{o_orderkey: 7}]}}", "no row with o_orderkey=7", 1),
        (
            "steps:\n  - input: {ods.orders: {insert: [{o_orderkey: 1, o_totalprice: cheap}]}}",
            "column o_totalprice: 'cheap' is not a decimal128(12, 2)",
            1,
        ),
        (
            "steps:\n  - expect: {ads.revenue_by_nation_month: [{n_nationkey: 1, order_month: 2024-01-01}, "
            "{n_nationkey: 2, order_month: 2024-01-01, revenue: 3}]}",
            "every expected row gives the same columns",
            1,
        ),
        (
            "steps:\n  - expect: {dwd.orders_enriched: [{o_orderkey: 1, nope: 2}]}",
            "expect dwd.orders_enriched: unknown column 'nope'",
            1,
        ),
        ("steps:\n  - expect: {ods.orders: []}", "`expect:` ods.orders: a source, not a model", 1),
    ],
)
def test_a_malformed_test_is_a_clear_error_naming_file_and_step(tmp_path, body, message, step) -> None:
    root = copy_example(tmp_path)
    shutil.rmtree(root / "tests")
    (root / "tests").mkdir()
    (root / "tests" / "broken.yml").write_text(body)
    with pytest.raises(ModelTestFormatError) as caught:
        load_model_tests(load_project(root))
    error = caught.value
    assert message in str(error), str(error)
    assert (error.test, error.step, error.path) == ("broken", step, str(root / "tests" / "broken.yml"))
    assert str(error).startswith(
        f"model test broken ({root / 'tests' / 'broken.yml'}" + (f", step {step})" if step else ")")
    )

    result = invoke("test", "--project", str(root))  # the command: one line, exit 1, before Spark
    assert result.exit_code == 1 and message in " ".join(result.output.split())


def test_the_command_without_tests_or_with_an_unknown_test_exits_1(tmp_path) -> None:
    root = copy_example(tmp_path)
    shutil.rmtree(root / "tests")
    result = invoke("test", "--project", str(root))
    assert result.exit_code == 1
    assert "no model tests in" in result.output and "(*.yml)" in result.output
    (root / "tests").mkdir()
    assert invoke("test", "--project", str(root)).exit_code == 1

    result = invoke("test", "--project", str(TPCH), "--test", "nope")
    assert result.exit_code == 1
    assert "--test nope: no such test; the project's tests are deletes, dimension_move" in result.output


def test_a_round_that_fails_fails_its_test_with_the_error(tmp_path, spark) -> None:
    """Nations joined on ``<=``: Alice (nation 0) matches nations 0 and 1, so each of her orders is its key twice,
    which the first round refuses."""
    root = copy_example(tmp_path)
    replace_in(
        root / "models" / "dwd.orders_enriched.sql", "c.c_nationkey = n.n_nationkey", "c.c_nationkey <= n.n_nationkey"
    )
    project = load_project(root)
    (result,) = run_model_tests(project, select_tests(load_model_tests(project), "dimension_move"), spark)
    (failure,) = result.failures
    assert (failure.check, failure.model, failure.step.number) == ("error", None, 1)
    assert failure.headline().startswith("dimension_move, step 1 (Alice (France) has two January orders")
    assert "ModelKeyError" in failure.error and "o_orderkey" in failure.error, failure.error
