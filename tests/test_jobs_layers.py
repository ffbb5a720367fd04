"""jobs/run_layers.py, the spark-submit entry point of the warehouse layers: what it does before Spark starts, and a
real run of the example project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import _common
from jobs import run_layers as job

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tpch"


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.fixture
def no_spark(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("Spark was started before the settings, the project and --model were checked")

    monkeypatch.setattr("lakehouse.spark.spark_session", refuse)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (["--config", "{tmp}/missing.yaml"], "ConfigError", "does not exist"),
        (["--project", "{tmp}/nowhere"], "ProjectFormatError", "does not exist"),
        (["--model", "dwd.nope"], "InvalidArgument", "its models are dwd.orders_enriched, ads.revenue_by_nation_month"),
    ],
    ids=["config", "project", "model"],
)
def test_errors_before_spark_are_one_json_line_and_exit_1(no_spark, tmp_path, capsys, args, error, message) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert job.main(["--warehouse", tmp_path.as_uri(), "--project", str(EXAMPLE), *args]) == 1
    (line,) = json_lines(capsys.readouterr().out)
    assert line["type"] == error and message in line["error"], line


def test_the_project_defaults_to_the_environment_then_the_example(monkeypatch) -> None:
    monkeypatch.delenv("LAKESTREAM_LAYERS_PROJECT", raising=False)
    assert job.default_project() == str(EXAMPLE)
    monkeypatch.setenv("LAKESTREAM_LAYERS_PROJECT", "/srv/project")
    assert job.default_project() == "/srv/project"
    with pytest.raises(SystemExit):
        job.parser().parse_args(["--rebuild", "--follow"])


def test_spark_submit_name_wins_over_the_job_default(monkeypatch) -> None:
    assert _common.submitted_name("lakestream-run__dwd__m", "/repo/jobs/run_layers.py", "lakestream-layers") == (
        "lakestream-run__dwd__m"
    )
    # spark-submit without --name names the application after the script; pyspark's own gateway: pyspark-shell
    assert (
        _common.submitted_name("run_layers.py", "/repo/jobs/run_layers.py", "lakestream-layers") == "lakestream-layers"
    )
    assert _common.submitted_name("pyspark-shell", "jobs/run_layers.py", "lakestream-layers") == "lakestream-layers"
    assert _common.submitted_name(None, "jobs/run_layers.py", "lakestream-layers") == "lakestream-layers"
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)  # not under spark-submit
    assert _common.submitted_app_name("lakestream-layers") == "lakestream-layers"


def test_a_round_of_every_model_then_a_rebuild(spark, tmp_path, capsys) -> None:
    """The job deploys what is missing, runs one round per model (JSON lines), and the tables are what the SQL
    gives; --rebuild of one model changes nothing then."""
    from lakehouse import Lakehouse
    from layers import load_project
    from layers.runner import Runner
    from tests.layers._tpch_sql import produce, sql_rows, table_rows

    wh = tmp_path.as_uri()
    project = load_project(EXAMPLE)
    with Lakehouse.open(wh) as lh:
        layers = Runner(lh, project, spark)
        layers.deploy()
        layers.close()
        produce(lh, project)

    assert job.main(["--warehouse", wh, "--project", str(EXAMPLE)]) == 0
    lines = json_lines(capsys.readouterr().out)
    assert [line["model"] for line in lines] == list(project.order), lines
    assert all(line["round"] == 0 and line["upserts"] > 0 for line in lines), lines
    with Lakehouse.open(wh) as lh:
        for model in project.order:
            assert table_rows(lh, project, model) == sql_rows(spark, lh, project, model), model
        produce(lh, project, round_=1)

    assert job.main(["--warehouse", wh, "--project", str(EXAMPLE), "--model", "dwd.orders_enriched"]) == 0
    (line,) = json_lines(capsys.readouterr().out)
    assert (line["model"], line["round"], line["strategy"]) == ("dwd.orders_enriched", 1, "keyed"), line
    assert job.main(["--warehouse", wh, "--project", str(EXAMPLE)]) == 0
    lines = json_lines(capsys.readouterr().out)
    assert [(r["model"], r["idle"]) for r in lines] == [(project.order[0], True), (project.order[1], False)], lines
    with Lakehouse.open(wh) as lh:
        for model in project.order:
            assert table_rows(lh, project, model) == sql_rows(spark, lh, project, model), model

    assert job.main(["--warehouse", wh, "--project", str(EXAMPLE), "--rebuild", "--model", "dwd.orders_enriched"]) == 0
    (line,) = json_lines(capsys.readouterr().out)
    assert line["model"] == "dwd.orders_enriched" and line["upserts"] == line["deletes"] == 0, line


def test_follow_runs_rounds_until_sigterm_and_exits_0(spark, tmp_path, capsys) -> None:
    """--follow: rounds as inputs advance; SIGTERM (what Airflow sends a task it stops) ends it with exit 0."""
    import os
    import signal
    import threading

    from lakehouse import Lakehouse
    from layers import load_project
    from tests.layers._tpch_sql import produce, sql_rows, table_rows

    wh = tmp_path.as_uri()
    project = load_project(EXAMPLE)
    before = signal.getsignal(signal.SIGTERM)
    assert job.main(["--warehouse", wh, "--project", str(EXAMPLE)]) == 0  # deploys; idle rounds
    with Lakehouse.open(wh) as lh:
        produce(lh, project)
    capsys.readouterr()

    def terminate_when_caught_up() -> None:
        with Lakehouse.open(wh) as lh:
            for _ in range(600):
                if all(s.lag_seconds is None and s.last_round for s in _status(lh, project)):
                    break
                threading.Event().wait(0.1)
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=terminate_when_caught_up)
    killer.start()
    assert job.main(["--warehouse", wh, "--project", str(EXAMPLE), "--follow", "--poll-seconds", "0.05"]) == 0
    killer.join()
    assert signal.getsignal(signal.SIGTERM) is before
    lines = json_lines(capsys.readouterr().out)
    assert [line["model"] for line in lines] == list(project.order), lines
    with Lakehouse.open(wh) as lh:
        for model in project.order:
            assert table_rows(lh, project, model) == sql_rows(spark, lh, project, model), model


def _status(lh, project):
    from layers.runner import Runner

    layers = Runner(lh, project)
    try:
        return layers.status()
    finally:
        layers.close()
