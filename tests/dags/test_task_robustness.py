"""Every SparkSubmitOperator of every DAG: retries, retry delay, execution timeout and Spark cores per app, from
the environment at parse time (dags/_lakestream_common.py `task_defaults` / `spark_conf`)."""

from __future__ import annotations

import pytest

from tests.dags.conftest import LOCAL_2, PER_TABLE_ENV

DAG_FILES = ["lake_maintenance.py", "lake_quality.py", "lake_tiering.py", "warehouse_layers.py"]


def spark_tasks(result: dict) -> dict[str, dict]:
    """Every SparkSubmitOperator (or subclass: the layers' ModelSubmitOperator) of every DAG, as
    ``dag_id.task_id``."""
    return {
        f"{dag_id}.{tid}": task
        for dag_id, dag in result["dags"].items()
        for tid, task in dag["tasks"].items()
        if task["spark_submit_task"]
    }


def test_the_environment_sets_retries_timeout_and_cores_of_every_task(run_probe) -> None:
    env = {
        **PER_TABLE_ENV,
        "LAKESTREAM_TASK_RETRIES": "5",
        "LAKESTREAM_TASK_RETRY_DELAY_SECONDS": " 7 ",
        "LAKESTREAM_TASK_TIMEOUT_MINUTES": "90",
        "LAKESTREAM_SPARK_CORES_MAX": "4",
        "LAKESTREAM_SPARK_EXECUTOR_CORES": "2",
        "LAKESTREAM_SPARK_EXECUTOR_WAIT_SECONDS": "45",
    }
    result = run_probe("dagbag", LOCAL_2, env=env)
    assert result["import_errors"] == {}, result["output"]
    tasks = spark_tasks(result)
    # tiering and maintenance: 2 tables each (and the metrics table's maintenance); layers: 2 models; quality: check
    # and publish
    assert len(tasks) == 9 and {name.split(".")[0] for name in tasks} == {
        "lake_tiering",
        "lake_maintenance",
        "warehouse_layers",
        "lake_quality",
    }
    for name, task in tasks.items():
        assert task["retries"] == 5, name
        assert task["retry_delay"] == 7.0, name
        assert task["execution_timeout"] == 90 * 60.0, name
        assert task["conf"] == {
            "spark.lakestream.executorWaitSeconds": "45",
            "spark.cores.max": "4",
            "spark.executor.cores": "2",
        }, name
        command = task["spark_submit"][LOCAL_2]
        assert "spark.lakestream.executorWaitSeconds=45" in command and "spark.cores.max=4" in command, name


def test_zero_means_no_timeout_and_no_cores_max(run_probe) -> None:
    env = {"LAKESTREAM_TASK_TIMEOUT_MINUTES": "0", "LAKESTREAM_SPARK_CORES_MAX": "0", "LAKESTREAM_TASK_RETRIES": "0"}
    result = run_probe("dagbag", LOCAL_2, env=env)
    assert result["import_errors"] == {}, result["output"]
    for name, task in spark_tasks(result).items():
        assert task["execution_timeout"] is None, name
        assert task["retries"] == 0, name
        assert task["conf"] == {}, name
        assert "--conf" not in task["spark_submit"][LOCAL_2], name


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"LAKESTREAM_TASK_RETRIES": "two"}, "LAKESTREAM_TASK_RETRIES='two' is not an integer"),
        ({"LAKESTREAM_TASK_RETRY_DELAY_SECONDS": "-1"}, "LAKESTREAM_TASK_RETRY_DELAY_SECONDS=-1 is below 0"),
        ({"LAKESTREAM_TASK_TIMEOUT_MINUTES": "1.5"}, "LAKESTREAM_TASK_TIMEOUT_MINUTES='1.5' is not an integer"),
        ({"LAKESTREAM_SPARK_EXECUTOR_WAIT_SECONDS": "x"}, "LAKESTREAM_SPARK_EXECUTOR_WAIT_SECONDS='x' is not an"),
        (
            {"LAKESTREAM_SPARK_CORES_MAX": "1", "LAKESTREAM_SPARK_EXECUTOR_CORES": "2"},
            "LAKESTREAM_SPARK_EXECUTOR_CORES=2 is above LAKESTREAM_SPARK_CORES_MAX=1",
        ),
    ],
)
def test_a_bad_value_is_an_import_error_naming_the_variable(run_probe, variables, message) -> None:
    result = run_probe("dagbag", env=variables)
    errors = result["import_errors"]
    assert sorted(errors) == DAG_FILES, result["output"]  # every DAG file, none loaded with wrong values
    for file, error in errors.items():
        assert message in " ".join(str(error).split()), (file, error)
    assert result["dags"] == {}


def test_schedules_come_from_the_environment_and_a_bad_one_fails_only_its_dag(run_probe) -> None:
    env = {
        "LAKESTREAM_TIERING_SCHEDULE": "every minute",
        "LAKESTREAM_LAYERS_SCHEDULE": " None ",
        "LAKESTREAM_MAINTENANCE_SCHEDULE": "*/10  *  * * *",
    }
    result = run_probe("dagbag", env=env)
    errors = result["import_errors"]
    assert list(errors) == ["lake_tiering.py"], result["output"]
    message = " ".join(str(errors["lake_tiering.py"]).split())
    assert "LAKESTREAM_TIERING_SCHEDULE='every minute' is not a schedule" in message, message
    assert "or none (runs only when triggered)" in message
    dags = result["dags"]
    assert "lake_tiering" not in dags
    assert dags["warehouse_layers"]["schedule_kind"] == "NoneType"  # runs only when triggered
    assert dags["lake_maintenance"]["schedule"] == "*/10 * * * *"
    assert dags["lake_quality"]["schedule_kind"] == "AssetAny"  # its assets still schedule it
