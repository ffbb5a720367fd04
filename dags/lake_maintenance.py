"""Maintain each table every hour: one `spark-submit jobs/maintenance.py` per table.

Compaction of small data files (on Spark), then snapshot expiry, orphan-file removal and log retention. One more
task, `maintain_metrics` (`spark-submit jobs/metrics_maintenance.py`), maintains the quality metrics table
`_lakestream.metrics` (compaction keeping what was recorded, optional row retention, snapshot expiry).

Configuration (environment; see dags/README.md):
    LAKESTREAM_TIERED_TABLES       "ods.orders,ods.clicks"; unset: one task maintains every table
    LAKESTREAM_MAINTENANCE_ARGS    options for jobs/maintenance.py, e.g. "--min-input-files 10 --retention-hours 48"
    LAKESTREAM_METRICS_MAINTENANCE_ARGS  options for jobs/metrics_maintenance.py, e.g. "--retention-days 90"
    AIRFLOW_CONN_LAKESTREAM_SPARK  the Spark master, e.g. 'spark://local%5B2%5D' for local[2]
    LAKESTREAM_JOBS_DIR            where maintenance.py lives (default: <repo>/jobs)
    LAKESTREAM_MAINTENANCE_SCHEDULE  cron, an Airflow preset, or none (only when triggered); default @hourly
"""

from __future__ import annotations

import os
import shlex

from _lakestream_common import jobs_dir, schedule, spark_submit, spark_submit_per_table
from airflow.sdk import dag


def maintenance_args() -> list[str]:
    """LAKESTREAM_MAINTENANCE_ARGS split like a shell would (no expansion), appended to every task's arguments."""
    args = shlex.split(os.environ.get("LAKESTREAM_MAINTENANCE_ARGS", ""))
    if any(arg == "--table" or arg.startswith("--table=") for arg in args):
        raise ValueError("LAKESTREAM_MAINTENANCE_ARGS must not name tables (--table); use LAKESTREAM_TIERED_TABLES")
    return args


@dag(
    schedule=schedule("LAKESTREAM_MAINTENANCE_SCHEDULE", "@hourly"),
    catchup=False,
    max_active_runs=1,
    tags=["lakestream"],
    doc_md=__doc__,
)
def lake_maintenance():
    spark_submit_per_table("maintain", "maintenance.py", maintenance_args())
    metrics_args = shlex.split(os.environ.get("LAKESTREAM_METRICS_MAINTENANCE_ARGS", ""))
    spark_submit("maintain_metrics", os.path.join(jobs_dir(), "metrics_maintenance.py"), metrics_args)


lake_maintenance()
