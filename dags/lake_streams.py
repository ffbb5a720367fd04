"""Streaming aggregates on a schedule: every 5 minutes one `spark-submit jobs/stream_aggregate.py` per aggregate,
a Structured Streaming query with ``trigger(availableNow=True)`` that reads the source's changes since its
checkpoint, updates the target and stops (the idiom for scheduled incremental streaming jobs; docs/guides/spark.md).

Configuration (environment; see dags/README.md):
    LAKESTREAM_STREAM_AGGREGATES   "ads.orders_by_status=ods.orders:o_orderstatus:o_totalprice" (target=source:
                                   group columns joined by "+":summed columns joined by "+"; several separated by
                                   ","); unset: this file defines no DAG
    LAKESTREAM_CHECKPOINTS_DIR     where each aggregate keeps its checkpoint (<dir>/<target>); required with them
    AIRFLOW_CONN_LAKESTREAM_SPARK  the Spark master, e.g. 'spark://local%5B2%5D' for local[2]
    LAKESTREAM_JOBS_DIR            where stream_aggregate.py lives (default: <repo>/jobs)
    LAKESTREAM_STREAMS_SCHEDULE    cron, an Airflow preset, or none (only when triggered); default */5 * * * *
"""

from __future__ import annotations

import os

from _lakestream_common import asset, jobs_dir, schedule, spark_submit, task_id
from airflow.sdk import dag


def aggregates() -> list[dict[str, str]]:
    """LAKESTREAM_STREAM_AGGREGATES parsed: one {target, source, group_by, sums} per item; a malformed item is an
    error naming it (the DAG file then fails to import with it)."""
    out = []
    for item in filter(None, (i.strip() for i in os.environ.get("LAKESTREAM_STREAM_AGGREGATES", "").split(","))):
        target, sep, rest = item.partition("=")
        parts = rest.split(":")
        if not sep or not target.strip() or len(parts) not in (2, 3) or not parts[0].strip() or not parts[1].strip():
            raise ValueError(
                f"LAKESTREAM_STREAM_AGGREGATES item {item!r}: write target=source:group+columns[:summed+columns], "
                "e.g. ads.orders_by_status=ods.orders:o_orderstatus:o_totalprice"
            )
        sums = parts[2] if len(parts) == 3 else ""
        out.append({"target": target.strip(), "source": parts[0].strip(), "group_by": parts[1], "sums": sums})
    return out


def checkpoints_dir() -> str:
    path = os.environ.get("LAKESTREAM_CHECKPOINTS_DIR", "").strip()
    if not path:
        raise ValueError("LAKESTREAM_CHECKPOINTS_DIR is required with LAKESTREAM_STREAM_AGGREGATES")
    return path


if aggregates():

    @dag(
        schedule=schedule("LAKESTREAM_STREAMS_SCHEDULE", "*/5 * * * *"),
        catchup=False,
        max_active_runs=1,
        tags=["lakestream"],
        doc_md=__doc__,
    )
    def lake_streams():
        application = os.path.join(jobs_dir(), "stream_aggregate.py")
        for a in aggregates():
            args = ["--source", a["source"], "--target", a["target"], "--group-by", a["group_by"].replace("+", ",")]
            for column in filter(None, a["sums"].split("+")):
                args += ["--sum", column]
            args += ["--checkpoint", os.path.join(checkpoints_dir(), a["target"])]
            spark_submit(task_id("aggregate", a["target"]), application, args, outlets=[asset(a["target"])])

    lake_streams()
