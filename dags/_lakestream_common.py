"""What the lakestream DAGs share: the table list, the jobs directory, task ids, schedules, environment forwarding,
and `spark_submit`, which builds every task (retries, retry delay, timeout and Spark cores from the environment).

Not a DAG. Airflow parses it (it mentions DAGs), finds none, and moves on: that is not an import error.
The DAG files import it as ``_lakestream_common``, which works because Airflow puts the DAG folder (the
``dags-folder`` bundle's path) on ``sys.path`` before it parses a DAG file, in the DAG processor and in
the workers alike. Only the standard library, the Spark provider and (for a schedule from the environment)
croniter, Airflow's own cron parser, are imported here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

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


def _env_int(name: str, default: int, minimum: int) -> int:
    """The integer in environment variable ``name`` (unset or blank: ``default``); anything else is an error that
    names the variable, so the DAG file fails to import with it."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer (unset it for the default, {default})") from None
    if value < minimum:
        raise ValueError(f"{name}={value} is below {minimum} (unset it for the default, {default})")
    return value


#: Airflow's schedule presets a ``LAKESTREAM_*_SCHEDULE`` variable may name (besides a cron expression and ``none``)
SCHEDULE_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")


def schedule(variable: str, default: str) -> str | None:
    """A DAG's schedule from environment variable ``variable``, read at parse time: a cron expression
    (``*/5 * * * *``) or an Airflow preset (``@hourly``); ``none``: no schedule, the DAG runs only when triggered
    (by the UI, the REST API or another orchestrator); unset or blank: ``default``. Anything else is an error that
    names the variable, so the DAG file fails to import with it."""
    raw = " ".join(os.environ.get(variable, "").split())
    if not raw:
        return default
    if raw.lower() == "none":
        return None
    from croniter import croniter  # Airflow's own cron parser: what it accepts, we accept

    if raw in SCHEDULE_PRESETS or croniter.is_valid(raw):
        return raw
    raise ValueError(
        f"{variable}={raw!r} is not a schedule: use a cron expression ('*/5 * * * *'), one of "
        f"{', '.join(SCHEDULE_PRESETS)}, or none (runs only when triggered); unset it for the default, {default!r}"
    )


def task_defaults() -> dict[str, Any]:
    """retries, retry_delay and execution_timeout of every SparkSubmitOperator, read at parse time.

    LAKESTREAM_TASK_RETRIES (default 2), LAKESTREAM_TASK_RETRY_DELAY_SECONDS (30) and
    LAKESTREAM_TASK_TIMEOUT_MINUTES (30; 0: no timeout). The timeout is what ends a task whose Spark driver waits
    for executors that never come (a lost standalone worker); the retry then runs it again.
    """
    timeout = _env_int("LAKESTREAM_TASK_TIMEOUT_MINUTES", 30, 0)
    return {
        "retries": _env_int("LAKESTREAM_TASK_RETRIES", 2, 0),
        "retry_delay": timedelta(seconds=_env_int("LAKESTREAM_TASK_RETRY_DELAY_SECONDS", 30, 0)),
        "execution_timeout": timedelta(minutes=timeout) if timeout else None,
    }


def spark_conf() -> dict[str, str]:
    """The Spark conf every job is submitted with, read at parse time: ``spark.cores.max``
    (LAKESTREAM_SPARK_CORES_MAX, default 1; 0: not set, the first app takes every core of a standalone cluster)
    so that the tables' apps run side by side, and ``spark.executor.cores`` if LAKESTREAM_SPARK_EXECUTOR_CORES
    is set (at most the cores max: an executor larger than an app may hold is never launched). The cores max
    applies to a standalone master only (local, YARN and Kubernetes ignore it); executor cores to all clusters.
    LAKESTREAM_SPARK_EXECUTOR_WAIT_SECONDS, if set, becomes ``spark.lakestream.executorWaitSeconds``: how long a
    job may wait with no executor (a lost worker) before the job cancels itself (default 300; 0: for good)."""
    cores_max = _env_int("LAKESTREAM_SPARK_CORES_MAX", 1, 0)
    executor_cores = _env_int("LAKESTREAM_SPARK_EXECUTOR_CORES", 0, 0)
    conf = {}
    if os.environ.get("LAKESTREAM_SPARK_EXECUTOR_WAIT_SECONDS", "").strip():
        wait = _env_int("LAKESTREAM_SPARK_EXECUTOR_WAIT_SECONDS", 300, 0)
        conf["spark.lakestream.executorWaitSeconds"] = str(wait)
    if cores_max:
        conf["spark.cores.max"] = str(cores_max)
    if executor_cores:
        if cores_max and executor_cores > cores_max:
            raise ValueError(
                f"LAKESTREAM_SPARK_EXECUTOR_CORES={executor_cores} is above LAKESTREAM_SPARK_CORES_MAX={cores_max}: "
                "Spark would never launch an executor"
            )
        conf["spark.executor.cores"] = str(executor_cores)
    return conf


def spark_submit(
    task_id: str,
    application: str,
    application_args: Sequence[str],
    *,
    operator: type[SparkSubmitOperator] = SparkSubmitOperator,
    **kwargs: Any,
) -> SparkSubmitOperator:
    """A ``spark-submit <application> <application_args>`` task with what every lakestream task has: the
    connection ``lakestream_spark``, the app name ``lakestream-<task_id>``, `spark_env_vars`, `spark_conf`,
    `task_defaults` and run-time forwarding of LAKESTREAM_* / AWS_* (`forward_environment`). ``kwargs`` (e.g.
    ``outlets``, ``name``) go to the operator and win over the defaults; ``operator`` is the class, a
    SparkSubmitOperator or a subclass (the layers' `_layers_lineage.ModelSubmitOperator`)."""
    options: dict[str, Any] = {
        "conn_id": SPARK_CONN_ID,
        "name": f"lakestream-{task_id}",
        "env_vars": spark_env_vars(),
        "conf": spark_conf(),
        "pre_execute": forward_environment,
        **task_defaults(),
    }
    return operator(
        task_id=task_id, application=application, application_args=list(application_args), **{**options, **kwargs}
    )


def spark_submit_per_table(
    verb: str, job: str, extra_args: Sequence[str] = (), *, outlets: bool = False
) -> list[SparkSubmitOperator]:
    """One ``spark-submit <jobs dir>/<job> --table T [extra_args]`` task per table of LAKESTREAM_TIERED_TABLES,
    or a single one without ``--table`` (every table of the warehouse) when the list is empty. With
    ``outlets``, each task produces its table's asset (`asset`)."""
    application = os.path.join(jobs_dir(), job)
    return [
        spark_submit(
            task_id(verb, table),
            application,
            [*(["--table", table] if table else []), *extra_args],
            outlets=[asset(table)] if outlets else [],
        )
        for table in tables() or [None]
    ]
