"""The lake_streams DAG (streaming aggregates with availableNow), parsed and run by real Airflow."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from tests.dags.conftest import LOCAL_2

AGGREGATE = "ads.orders_by_status=ods.orders:o_orderstatus:o_totalprice"


def test_one_task_per_aggregate_with_its_checkpoint(run_probe, tmp_path: Path) -> None:
    env = {
        "LAKESTREAM_STREAM_AGGREGATES": f"{AGGREGATE}, ads.clicks_by_page=ods.clicks:page+day",
        "LAKESTREAM_CHECKPOINTS_DIR": str(tmp_path),
        "LAKESTREAM_JOBS_DIR": str(tmp_path / "jobs"),
    }
    result = run_probe("dagbag", LOCAL_2, env=env)
    assert result["import_errors"] == {}, result["output"]
    dag = result["dags"]["lake_streams"]
    assert dag["schedule"] == "*/5 * * * *" and dag["max_active_runs"] == 1 and dag["catchup"] is False
    assert list(dag["tasks"]) == ["aggregate__ads__orders_by_status", "aggregate__ads__clicks_by_page"]
    first, second = (" ".join(dag["tasks"][t]["spark_submit"][LOCAL_2]) for t in dag["tasks"])
    assert f"{tmp_path}/jobs/stream_aggregate.py" in first
    assert (
        "--source ods.orders --target ads.orders_by_status --group-by o_orderstatus --sum o_totalprice "
        f"--checkpoint {tmp_path}/ads.orders_by_status"
    ) in first
    assert "--group-by page,day --checkpoint" in second and "--sum" not in second


def test_bad_configuration_fails_the_file_naming_it(run_probe, tmp_path: Path) -> None:
    result = run_probe("dagbag", env={"LAKESTREAM_STREAM_AGGREGATES": "ads.x=ods.orders"})
    assert "write target=source:group+columns" in result["import_errors"]["lake_streams.py"], result["output"]
    result = run_probe("dagbag", env={"LAKESTREAM_STREAM_AGGREGATES": AGGREGATE})
    assert "LAKESTREAM_CHECKPOINTS_DIR is required" in result["import_errors"]["lake_streams.py"], result["output"]
    assert "lake_tiering" in result["dags"]  # one broken DAG file does not take the others down


@pytest.mark.slow
def test_dag_test_runs_the_streaming_aggregate(run_probe, airflow_db: Path, tmp_path: Path) -> None:
    from lakehouse import Lakehouse

    schema = pa.schema(
        [
            pa.field("o_orderkey", pa.int64(), nullable=False),
            pa.field("o_orderstatus", pa.string()),
            pa.field("o_totalprice", pa.decimal128(12, 2)),
        ]
    )
    rows = pa.table(
        {
            "o_orderkey": list(range(60)),
            "o_orderstatus": ["FOP"[i % 3] for i in range(60)],
            "o_totalprice": [Decimal(i) for i in range(60)],
        },
        schema=schema,
    )
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    with Lakehouse.open(warehouse.as_uri()) as lh:
        lh.create_table("ods.orders", schema, primary_key=["o_orderkey"], buckets=2)
        lh.log("ods.orders").append(rows, "upsert")
        lh.tier("ods.orders")
        lh.log("ods.orders").append(pa.table({"o_orderkey": pa.array([0, 3], pa.int64())}), "delete")

    result = run_probe(
        "test",
        "lake_streams",
        env={
            "LAKESTREAM_WAREHOUSE": warehouse.as_uri(),
            "LAKESTREAM_STREAM_AGGREGATES": AGGREGATE,
            "LAKESTREAM_CHECKPOINTS_DIR": str(tmp_path / "checkpoints"),
            "AIRFLOW_CONN_LAKESTREAM_SPARK": LOCAL_2,
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        },
        timeout=540,
    )
    assert result["tasks"] == {"aggregate__ads__orders_by_status": "success"}, result["output"]
    with Lakehouse.open(warehouse.as_uri()) as lh:
        got = {
            r["o_orderstatus"]: (r["rows"], r["sum_o_totalprice"])
            for r in lh.union_read("ads.orders_by_status").to_pylist()
        }
    # keys 0 and 3 (both "F") deleted: F keeps 18 of its 20 orders
    assert got == {
        "F": (18, Decimal(sum(range(0, 60, 3)) - 3)),
        "O": (20, Decimal(sum(range(1, 60, 3)))),
        "P": (20, Decimal(sum(range(2, 60, 3)))),
    }
    assert (tmp_path / "checkpoints" / "ads.orders_by_status" / "commits").is_dir()
