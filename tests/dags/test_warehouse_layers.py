"""The warehouse_layers DAG, parsed and run by real Airflow (in subprocesses, see conftest)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.dags.conftest import LOCAL_2, MASTERS, PER_TABLE_ENV, REPO, assert_default_robustness

EXAMPLE = REPO / "examples" / "tpch"
DWD, ADS = "run__dwd__orders_enriched", "run__ads__revenue_by_nation_month"


def test_one_spark_submit_per_model_wired_from_the_dependency_graph(run_probe) -> None:
    result = run_probe("dagbag", *MASTERS, env=PER_TABLE_ENV)  # no LAKESTREAM_LAYERS_PROJECT: examples/tpch
    assert result["import_errors"] == {}, result["output"]
    dag = result["dags"]["warehouse_layers"]
    assert dag["schedule"] == "* * * * *"
    assert dag["max_active_runs"] == 1
    assert dag["catchup"] is False
    assert list(dag["tasks"]) == [DWD, ADS]  # dependency order
    assert dag["tasks"][DWD]["upstream"] == []
    assert dag["tasks"][ADS]["upstream"] == [DWD]

    application = str(REPO / "jobs" / "run_layers.py")
    for model, task in zip(["dwd.orders_enriched", "ads.revenue_by_nation_month"], dag["tasks"].values(), strict=True):
        tid = f"run__{model.replace('.', '__')}"
        assert task["operator"] == "SparkSubmitOperator"
        assert task["conn_id"] == "lakestream_spark"
        assert task["outlets"] == [f"lakestream://{model}/"]  # Airflow normalizes the URI with a trailing /
        args = ["--project", str(EXAMPLE), "--model", model]
        assert task["application"] == application
        assert task["application_args"] == args
        assert_default_robustness(task)
        for conn, master in MASTERS.items():
            command = task["spark_submit"][conn]
            assert command[:3] == ["spark-submit", "--master", master], conn
            assert command[-(len(args) + 2) :] == ["lakestream-" + tid, application, *args], conn
        assert task["spark_submit"][LOCAL_2] == [
            "spark-submit",
            "--master",
            "local[2]",
            "--conf",
            "spark.cores.max=1",
            "--name",
            f"lakestream-{tid}",
            application,
            *args,
        ]
        # Parsed (and serialized): no credentials; just before execute(): the worker's LAKESTREAM_* / AWS_*.
        assert task["env_vars"] == {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": "/opt/python/bin/python3"}
        forwarded = {k: PER_TABLE_ENV[k] for k in ("LAKESTREAM_WAREHOUSE", "AWS_SECRET_ACCESS_KEY")}
        assert task["env_vars_at_run_time"].items() >= {**task["env_vars"], **forwarded}.items()


def test_the_project_comes_from_the_environment(run_probe, tmp_path: Path) -> None:
    """A diamond: dwd.a and dwd.b read the source, ads.c reads both; the jobs folder moves too."""
    (tmp_path / "models").mkdir()
    (tmp_path / "sources.yml").write_text(
        "sources:\n  ods.f:\n    columns: {f_id: int64, f_v: int64}\n    primary_key: [f_id]\n"
    )
    for name, sql in {
        "dwd.a": "SELECT f_id, f_v FROM ods.f",
        "dwd.b": "SELECT f_id, f_v FROM ods.f WHERE f_v > 0",
        "ads.c": "SELECT a.f_id, b.f_v FROM dwd.a AS a JOIN dwd.b AS b ON a.f_id = b.f_id",
    }.items():
        (tmp_path / "models" / f"{name}.sql").write_text(f"-- primary_key: [f_id]\n{sql}\n")
    jobs = tmp_path / "jobs"
    result = run_probe(
        "dagbag", LOCAL_2, env={"LAKESTREAM_LAYERS_PROJECT": str(tmp_path), "LAKESTREAM_JOBS_DIR": str(jobs)}
    )
    assert result["import_errors"] == {}, result["output"]
    tasks = result["dags"]["warehouse_layers"]["tasks"]
    assert {tid: task["upstream"] for tid, task in tasks.items()} == {
        "run__dwd__a": [],
        "run__dwd__b": [],
        "run__ads__c": ["run__dwd__a", "run__dwd__b"],
    }
    assert tasks["run__ads__c"]["application"] == str(jobs / "run_layers.py")
    assert tasks["run__ads__c"]["application_args"] == ["--project", str(tmp_path), "--model", "ads.c"]


def test_a_missing_project_is_an_import_error_that_says_what_to_set(run_probe, tmp_path: Path) -> None:
    result = run_probe("dagbag", env={"LAKESTREAM_LAYERS_PROJECT": str(tmp_path / "nowhere")})
    errors = result["import_errors"]
    assert list(errors) == ["warehouse_layers.py"], result["output"]
    message = " ".join(str(next(iter(errors.values()))).split())
    assert "is not a warehouse-layers project" in message and "LAKESTREAM_LAYERS_PROJECT" in message
    assert "warehouse_layers" not in result["dags"] and "lake_tiering" in result["dags"]


@pytest.mark.slow
def test_dag_test_runs_every_model_in_order(run_probe, airflow_db: Path, tmp_path: Path, spark) -> None:
    from lakehouse import Lakehouse
    from layers import load_project
    from layers.runner import Runner
    from tests.layers._tpch_sql import produce, sql_rows, table_rows

    project = load_project(EXAMPLE)
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    with Lakehouse.open(warehouse.as_uri()) as lh:
        layers = Runner(lh, project, spark)
        layers.deploy()
        layers.close()
        produce(lh, project)

    result = run_probe(
        "test",
        "warehouse_layers",
        env={
            "LAKESTREAM_WAREHOUSE": warehouse.as_uri(),
            "LAKESTREAM_LAYERS_PROJECT": str(EXAMPLE),
            "AIRFLOW_CONN_LAKESTREAM_SPARK": LOCAL_2,
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            # spark-submit runs jobs/run_layers.py with jobs/ first on sys.path: this checkout's lakehouse and jobs
            # packages, not an editable install's of another one
            "PYTHONPATH": str(REPO),
        },
        timeout=540,
    )
    assert result["import_errors"] == {}, result["output"]
    assert result["tasks"] == {DWD: "success", ADS: "success"}, result["output"]
    assert result["state"] == "success", result["output"]

    with Lakehouse.open(warehouse.as_uri()) as lh:
        for model in project.order:
            got = table_rows(lh, project, model)
            assert got, model
            assert got == sql_rows(spark, lh, project, model), model
