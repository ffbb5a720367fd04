"""The lake_maintenance DAG, parsed and run by real Airflow (in subprocesses, see conftest)."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.dags.conftest import (
    LOCAL_2,
    MASTERS,
    PER_TABLE_ENV,
    REPO,
    assert_one_task_for_all_tables,
    assert_per_table_tasks,
)

MAINTENANCE_ARGS = [
    "--min-input-files",
    "2",
    "--snapshot-age-hours",
    "0",
    "--orphan-age-hours",
    "0",
    "--unsafe-orphan-age",
]


def test_both_dags_load_with_the_shared_module(run_probe) -> None:
    result = run_probe(
        "dagbag",
        *MASTERS,
        env={
            **PER_TABLE_ENV,
            "LAKESTREAM_MAINTENANCE_ARGS": " ".join(MAINTENANCE_ARGS) + " --retention-hours '48'",
            "LAKESTREAM_METRICS_MAINTENANCE_ARGS": "--retention-days 90",
            "LAKESTREAM_LAYERS_GREEN_PROJECT": str(REPO / "examples" / "tpch"),
        },
    )
    assert result["import_errors"] == {}, result["output"]
    # The helper is parsed like any file that mentions Airflow and DAGs, and holds none: not an error.
    assert result["files"] == {
        "_lakestream_common.py": 0,
        "_layers_graph.py": 0,
        "_layers_lineage.py": 0,
        "_notifiers.py": 0,
        "lake_maintenance.py": 1,
        "lake_quality.py": 1,
        "lake_streams.py": 0,  # no LAKESTREAM_STREAM_AGGREGATES: no DAG
        "lake_tiering.py": 1,
        "warehouse_layers.py": 1,
        "warehouse_layers_bluegreen.py": 1,  # defined: LAKESTREAM_LAYERS_GREEN_PROJECT is set
    }
    assert set(result["dags"]) == {
        "lake_tiering",
        "lake_maintenance",
        "warehouse_layers",
        "lake_quality",
        "warehouse_layers_bluegreen",
    }
    # the blue/green DAG: the green build, then the cutover, of the project it names
    green = result["dags"]["warehouse_layers_bluegreen"]
    assert green["schedule"] == "None" and list(green["tasks"]) == ["green", "cutover"]
    for task, flag in green["tasks"].items():
        assert flag["application"] == str(REPO / "jobs" / "run_layers.py")
        assert flag["application_args"] == ["--project", str(REPO / "examples" / "tpch"), f"--{task}"]
    assert list(result["dags"]["lake_tiering"]["tasks"]) == ["tier__ods__orders", "tier__ods__clicks"]

    dag = result["dags"]["lake_maintenance"]
    assert dag["schedule"] == "@hourly"
    assert dag["max_active_runs"] == 1
    assert dag["catchup"] is False
    assert list(dag["tasks"]) == ["maintain__ods__orders", "maintain__ods__clicks", "maintain_metrics"]

    metrics = dag["tasks"].pop("maintain_metrics")
    assert_per_table_tasks(dag, "maintenance.py", [*MAINTENANCE_ARGS, "--retention-hours", "48"])  # shlex
    # the metrics table's task: its own job and arguments, not the tables' maintenance options
    assert metrics["operator"] == "SparkSubmitOperator" and metrics["conn_id"] == "lakestream_spark"
    assert metrics["application"] == str(REPO / "jobs" / "metrics_maintenance.py")
    assert metrics["application_args"] == ["--retention-days", "90"]


def test_without_a_table_list_one_task_maintains_every_table(run_probe, tmp_path: Path) -> None:
    result = run_probe("dagbag", LOCAL_2, env={"LAKESTREAM_JOBS_DIR": str(tmp_path)})
    metrics = result["dags"]["lake_maintenance"]["tasks"].pop("maintain_metrics")  # and one the metrics table
    assert metrics["application"] == str(tmp_path / "metrics_maintenance.py") and metrics["application_args"] == []
    assert_one_task_for_all_tables(result, "lake_maintenance", "maintain_all_tables", tmp_path, "maintenance.py")
    assert list(result["dags"]["lake_tiering"]["tasks"]) == ["tier_all_tables"]


def test_maintenance_args_must_not_name_tables(run_probe) -> None:
    result = run_probe("dagbag", env={"LAKESTREAM_MAINTENANCE_ARGS": "--table ods.orders"})
    assert list(result["import_errors"]) == ["lake_maintenance.py"], result["output"]
    assert "must not name tables" in result["import_errors"]["lake_maintenance.py"]
    assert "lake_tiering" in result["dags"]  # one broken DAG file does not take the other down


@pytest.mark.slow
def test_dag_test_compacts_expires_and_trims_the_log(run_probe, airflow_db: Path, tmp_path: Path) -> None:
    from lakehouse import Lakehouse

    schema = pa.schema([("user_id", pa.int64()), ("v", pa.string())])
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    appended = []
    with Lakehouse.open(warehouse.as_uri()) as lh:
        lh.create_table("ods.clicks", schema, bucket_key="user_id", buckets=2)
        for round_ in range(6):  # six tiering rounds: one small data file per bucket each
            ids = list(range(round_ * 20, round_ * 20 + 20))
            batch = pa.table({"user_id": ids, "v": [f"r{round_}-{i}" for i in ids]}, schema=schema)
            lh.log("ods.clicks").append(batch)
            lh.tier("ods.clicks")
            appended.append(batch)
        assert len(list(lh.lake_table("ods.clicks").scan().plan_files())) == 12
        assert lh.log("ods.clicks").start_offsets() != lh.log("ods.clicks").end_offsets()

    result = run_probe(
        "test",
        "lake_maintenance",
        env={
            "LAKESTREAM_WAREHOUSE": warehouse.as_uri(),
            "LAKESTREAM_TIERED_TABLES": "ods.clicks",
            "LAKESTREAM_MAINTENANCE_ARGS": " ".join([*MAINTENANCE_ARGS, "--retention-hours", "0"]),
            "AIRFLOW_CONN_LAKESTREAM_SPARK": LOCAL_2,
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        },
        timeout=540,
    )
    assert result["import_errors"] == {}, result["output"]
    assert result["tasks"] == {"maintain__ods__clicks": "success", "maintain_metrics": "success"}, result["output"]
    assert result["state"] == "success", result["output"]

    expected = pa.concat_tables(appended).sort_by("user_id").to_pylist()
    with Lakehouse.open(warehouse.as_uri()) as lh:  # fresh: nothing cached from before the run
        assert len(list(lh.lake_table("ods.clicks").scan().plan_files())) == 2  # one file per bucket
        assert lh.union_read("ods.clicks").select(["user_id", "v"]).sort_by("user_id").to_pylist() == expected
        log = lh.log("ods.clicks")
        ends = log.end_offsets()
        # Retention must not lose the log's end offsets: the next append would reuse offsets the lake holds.
        assert lh.lake_offsets("ods.clicks") == ends
        assert sum(ends.values()) == len(expected)
        # Every segment was tiered and older than 0 h: all deleted but each bucket's newest one (one per append,
        # so the last round's rows), which holds the bucket's end offset.
        starts = log.start_offsets()
        assert all(0 < starts[b] < ends[b] for b in ends), (starts, ends)
        assert sum(ends[b] - starts[b] for b in ends) == appended[-1].num_rows
