"""The lake_tiering DAG, parsed and run by real Airflow (in subprocesses, see conftest)."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

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


@pytest.mark.slow
def test_dag_test_tiers_the_log_into_the_lake(run_probe, airflow_db: Path, tmp_path: Path) -> None:
    from lakehouse import Lakehouse

    schema = pa.schema([pa.field("user_id", pa.int64(), nullable=False), pa.field("url", pa.string())])
    rows = pa.table({"user_id": list(range(100)), "url": [f"/page/{i % 7}" for i in range(100)]}, schema=schema)
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    with Lakehouse.open(warehouse.as_uri()) as lh:
        lh.create_table("ods.clicks", schema, bucket_key="user_id", buckets=4)
        lh.log("ods.clicks").append(rows)

    result = run_probe(
        "test",
        "lake_tiering",
        env={
            "LAKESTREAM_WAREHOUSE": warehouse.as_uri(),
            "LAKESTREAM_TIERED_TABLES": "ods.clicks",
            "AIRFLOW_CONN_LAKESTREAM_SPARK": LOCAL_2,
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        },
        timeout=540,
    )
    assert result["import_errors"] == {}, result["output"]
    assert result["tasks"] == {"tier__ods__clicks": "success"}, result["output"]
    assert result["state"] == "success", result["output"]

    with Lakehouse.open(warehouse.as_uri()) as lh:
        ends = lh.log("ods.clicks").end_offsets()
        assert sum(ends.values()) > 0
        assert lh.lake_offsets("ods.clicks") == ends
