"""The lake_tiering DAG, parsed and run by real Airflow (in subprocesses, see conftest)."""

from __future__ import annotations

from pathlib import Path

from tests.dags.conftest import (
    LOCAL_2,
    MASTERS,
    PER_TABLE_ENV,
    assert_one_task_for_all_tables,
    assert_per_table_tasks,
)


def test_one_spark_submit_per_table(run_probe) -> None:
    result = run_probe("dagbag", *MASTERS, env=PER_TABLE_ENV)
    assert result["import_errors"] == {}, result["output"]
    dag = result["dags"]["lake_tiering"]
    assert dag["schedule"] == "* * * * *"
    assert dag["max_active_runs"] == 1
    assert dag["catchup"] is False
    assert list(dag["tasks"]) == ["tier__ods__orders", "tier__ods__clicks"]
    # each task produces its table's asset (lake_quality is scheduled by them)
    assert [t["outlets"] for t in dag["tasks"].values()] == [["lakestream://ods.orders/"], ["lakestream://ods.clicks/"]]

    assert_per_table_tasks(dag, "tiering.py", [])


def test_without_a_table_list_one_task_tiers_every_table(run_probe, tmp_path: Path) -> None:
    result = run_probe("dagbag", LOCAL_2, env={"LAKESTREAM_JOBS_DIR": str(tmp_path)})
    task = assert_one_task_for_all_tables(result, "lake_tiering", "tier_all_tables", tmp_path, "tiering.py")
    assert "PYSPARK_PYTHON" not in task["env_vars"]
