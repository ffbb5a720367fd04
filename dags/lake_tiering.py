"""Tier each table's log into its Iceberg table every minute: one `spark-submit jobs/tiering.py` per table,
each producing the asset `lakestream://<namespace.table>` (`lakestream://all-tables` for the one task over every
table) that schedules `lake_quality`.

Configuration (environment; see dags/README.md):
    LAKESTREAM_TIERED_TABLES       "ods.orders,ods.clicks"; unset: one task tiers every table
    AIRFLOW_CONN_LAKESTREAM_SPARK  the Spark master, e.g. 'spark://local%5B2%5D' for local[2]
    LAKESTREAM_JOBS_DIR            where tiering.py lives (default: <repo>/jobs)
    LAKESTREAM_TIERING_SCHEDULE    cron, an Airflow preset, or none (only when triggered); default * * * * *
"""

from __future__ import annotations

from _lakestream_common import schedule, spark_submit_per_table
from airflow.sdk import dag


@dag(
    schedule=schedule("LAKESTREAM_TIERING_SCHEDULE", "* * * * *"),
    catchup=False,
    max_active_runs=1,
    tags=["lakestream"],
    doc_md=__doc__,
)
def lake_tiering():
    spark_submit_per_table("tier", "tiering.py", outlets=True)


lake_tiering()
