"""The lake_tiering DAG, parsed and run by real Airflow (in subprocesses, see conftest)."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.dags.conftest import REPO

LOCAL_2 = "spark://local%5B2%5D"  # AIRFLOW_CONN_LAKESTREAM_SPARK as dags/README.md documents it
# Connection values (as AIRFLOW_CONN_LAKESTREAM_SPARK) and the --master each one gives.
MASTERS = {
    LOCAL_2: "local[2]",
    '{"conn_type": "spark", "host": "local[2]"}': "local[2]",
    "spark://spark-master:7077": "spark://spark-master:7077",
    # Unencoded, the brackets read as an IPv6 host: the connection fails to parse and the provider
    # silently falls back to YARN. This is why the README insists on %5B / %5D.
    "spark://local[2]": "yarn",
}


def test_one_spark_submit_per_table(run_probe) -> None:
    result = run_probe(
        "dagbag",
        *MASTERS,
        env={
            "LAKESTREAM_TIERED_TABLES": " ods.orders, ods.clicks,,ods.orders ",
            "PYSPARK_PYTHON": "/opt/python/bin/python3",
            "LAKESTREAM_WAREHOUSE": "s3://lake/wh",
            "AWS_SECRET_ACCESS_KEY": "not-in-the-dag",
        },
    )
    assert result["import_errors"] == {}, result["output"]
    dag = result["dags"]["lake_tiering"]
    assert dag["schedule"] == "* * * * *"
    assert dag["max_active_runs"] == 1
    assert dag["catchup"] is False
    assert list(dag["tasks"]) == ["tier__ods__orders", "tier__ods__clicks"]

    application = str(REPO / "jobs" / "tiering.py")
    for table, task in zip(["ods.orders", "ods.clicks"], dag["tasks"].values(), strict=True):
        assert task["operator"] == "SparkSubmitOperator"
        assert task["conn_id"] == "lakestream_spark"
        assert task["application"] == application
        assert task["application_args"] == ["--table", table]
        for conn, master in MASTERS.items():
            command = task["spark_submit"][conn]
            assert command[:3] == ["spark-submit", "--master", master], conn
            assert command[-3:] == [application, "--table", table], conn
        # Parsed (and serialized): no credentials, only what the DAG sets itself.
        assert task["env_vars"] == {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": "/opt/python/bin/python3"}
        # Just before execute(): plus the worker's LAKESTREAM_* / AWS_* variables.
        forwarded = {"LAKESTREAM_WAREHOUSE": "s3://lake/wh", "AWS_SECRET_ACCESS_KEY": "not-in-the-dag"}
        assert task["env_vars_at_run_time"].items() >= {**task["env_vars"], **forwarded}.items()


def test_without_a_table_list_one_task_tiers_every_table(run_probe, tmp_path: Path) -> None:
    result = run_probe("dagbag", LOCAL_2, env={"LAKESTREAM_JOBS_DIR": str(tmp_path)})
    assert result["import_errors"] == {}, result["output"]
    tasks = result["dags"]["lake_tiering"]["tasks"]
    assert list(tasks) == ["tier_all_tables"]
    task = tasks["tier_all_tables"]
    assert task["application"] == str(tmp_path / "tiering.py")
    assert task["application_args"] == []
    assert task["spark_submit"][LOCAL_2] == [
        "spark-submit",
        "--master",
        "local[2]",
        "--name",
        "lakestream-tier_all_tables",
        str(tmp_path / "tiering.py"),
    ]
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
