"""Tier each table's log into its Iceberg table every minute: one `spark-submit jobs/tiering.py` per table.

Configuration (environment; see dags/README.md):
    LAKESTREAM_TIERED_TABLES       "ods.orders,ods.clicks"; unset: one task tiers every table
    AIRFLOW_CONN_LAKESTREAM_SPARK  the Spark master, e.g. 'spark://local%5B2%5D' for local[2]
    LAKESTREAM_JOBS_DIR            where tiering.py lives (default: <repo>/jobs)
"""

from __future__ import annotations

import os

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import dag

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the parent of dags/
JOBS_DIR = os.path.abspath(os.environ.get("LAKESTREAM_JOBS_DIR") or os.path.join(REPO, "jobs"))
TABLES = list(dict.fromkeys(t.strip() for t in os.environ.get("LAKESTREAM_TIERED_TABLES", "").split(",") if t.strip()))
FORWARDED_PREFIXES = ("LAKESTREAM_", "AWS_")


def forward_environment(context) -> None:
    """pre_execute: hand the job the worker's LAKESTREAM_* / AWS_* variables, read at task run time.

    Read here rather than at parse time so that credentials never land in the serialized DAG.
    """
    task = context["task"]
    task.env_vars = {**{k: v for k, v in os.environ.items() if k.startswith(FORWARDED_PREFIXES)}, **task.env_vars}


@dag(schedule="* * * * *", catchup=False, max_active_runs=1, tags=["lakestream"], doc_md=__doc__)
def lake_tiering():
    env_vars = {"SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    if os.environ.get("PYSPARK_PYTHON"):
        env_vars["PYSPARK_PYTHON"] = os.environ["PYSPARK_PYTHON"]
    for table in TABLES or [None]:
        task_id = f"tier__{table.replace('.', '__')}" if table else "tier_all_tables"
        SparkSubmitOperator(
            task_id=task_id,
            conn_id="lakestream_spark",
            application=os.path.join(JOBS_DIR, "tiering.py"),
            application_args=["--table", table] if table else [],
            name=f"lakestream-{task_id}",
            env_vars=env_vars,
            pre_execute=forward_environment,
        )


lake_tiering()
