"""What the lakestream DAGs share: the table list, the jobs directory, task ids, environment forwarding.

Not a DAG. Airflow parses it (it mentions DAGs), finds none, and moves on: that is not an import error.
The DAG files import it as ``_lakestream_common``, which works because Airflow puts the DAG folder (the
``dags-folder`` bundle's path) on ``sys.path`` before it parses a DAG file, in the DAG processor and in
the workers alike. Only the standard library and the Spark provider are imported here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the parent of dags/
SPARK_CONN_ID = "lakestream_spark"
FORWARDED_PREFIXES = ("LAKESTREAM_", "AWS_")
ASSET_SCHEME = "lakestream://"  # lakestream://<namespace.table>: the table a task writes (log and lake)
ALL_TABLES_ASSET = "lakestream://all-tables"  # what a task over every table of the warehouse writes


def asset(table: str | None) -> Asset:
    """The asset of a table a task writes (``None``: every table of the warehouse)."""
    return Asset(f"{ASSET_SCHEME}{table}" if table else ALL_TABLES_ASSET)


def jobs_dir() -> str:
    """LAKESTREAM_JOBS_DIR, or jobs/ next to this dags/ folder."""
    return os.path.abspath(os.environ.get("LAKESTREAM_JOBS_DIR") or os.path.join(REPO, "jobs"))


def tables() -> list[str]:
    """LAKESTREAM_TIERED_TABLES ("ods.orders, ods.clicks"): stripped, empty items and duplicates dropped."""
    items = (t.strip() for t in os.environ.get("LAKESTREAM_TIERED_TABLES", "").split(","))
    return list(dict.fromkeys(t for t in items if t))


def task_id(verb: str, table: str | None) -> str:
    """``tier__ods__orders`` for one table, ``tier_all_tables`` for all of them."""
    return f"{verb}__{table.replace('.', '__')}" if table else f"{verb}_all_tables"


def forward_environment(context) -> None:
    """pre_execute: hand the job the worker's LAKESTREAM_* / AWS_* variables, read at task run time.

    Read here rather than at parse time so that credentials never land in the serialized DAG.
    """
    task = context["task"]
    task.env_vars = {**{k: v for k, v in os.environ.items() if k.startswith(FORWARDED_PREFIXES)}, **task.env_vars}


def spark_env_vars() -> dict[str, str]:
    """The variables set at parse time: SPARK_LOCAL_IP (127.0.0.1 unless set) and PYSPARK_PYTHON if set."""
    env_vars = {"SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    if os.environ.get("PYSPARK_PYTHON"):
        env_vars["PYSPARK_PYTHON"] = os.environ["PYSPARK_PYTHON"]
    return env_vars


def spark_submit_per_table(
    verb: str, job: str, extra_args: Sequence[str] = (), *, outlets: bool = False
) -> list[SparkSubmitOperator]:
    """One ``spark-submit <jobs dir>/<job> --table T [extra_args]`` task per table of LAKESTREAM_TIERED_TABLES,
    or a single one without ``--table`` (every table of the warehouse) when the list is empty. With
    ``outlets``, each task produces its table's asset (`asset`)."""
    application = os.path.join(jobs_dir(), job)
    env_vars = spark_env_vars()
    operators = []
    for table in tables() or [None]:
        tid = task_id(verb, table)
        operators.append(
            SparkSubmitOperator(
                task_id=tid,
                conn_id=SPARK_CONN_ID,
                application=application,
                application_args=[*(["--table", table] if table else []), *extra_args],
                name=f"lakestream-{tid}",
                env_vars=env_vars,
                pre_execute=forward_environment,
                outlets=[asset(table)] if outlets else [],
            )
        )
    return operators
