"""Run Airflow in a subprocess for tests/dags, so the pytest process never imports (and configures) Airflow.

    python airflow_probe.py dagbag DAGS_FOLDER [CONN...]  parse the folder, print what the tests assert on,
                                  with the spark-submit command line (built, not run) for each connection value
    python airflow_probe.py test DAGS_FOLDER DAG_ID       run `dag.test()` (needs `airflow db migrate`)
    python airflow_probe.py lineage DAGS_FOLDER PROJECT MODEL...  the OpenLineage datasets a warehouse_layers
                                  task of each model reports (as the provider serializes them), or the error

The folder is parsed the way Airflow's DAG processor and task runner parse it: with a `BundleDagBag`, which
first puts the folder on sys.path (the DAGs import `_lakestream_common` from it; a plain `DagBag` does not).
The environment (AIRFLOW_HOME, AIRFLOW__*, LAKESTREAM_*, ...) comes from the caller. The result is the last
stdout line, prefixed with RESULT_PREFIX; everything before it is Airflow's own output.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

RESULT_PREFIX = "PROBE_RESULT "


def load(dags_folder: str):
    from airflow.dag_processing.dagbag import BundleDagBag

    return BundleDagBag(dag_folder=dags_folder, bundle_path=Path(dags_folder))


def _seconds(delta) -> float | None:
    """A timedelta (or None) as seconds, for JSON."""
    return None if delta is None else delta.total_seconds()


def _callbacks(value) -> list[str]:
    """A task's callbacks (one, a list, or None) by class name."""
    items = value if isinstance(value, list | tuple) else [value] if value is not None else []
    return [type(c).__name__ for c in items]


def dagbag(dags_folder: str, *connections: str) -> dict:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    bag = load(dags_folder)
    dags = {}
    for dag_id, dag in bag.dags.items():
        tasks = {}
        for task in dag.tasks:
            info = {
                "operator": type(task).__name__,
                "spark_submit_task": isinstance(task, SparkSubmitOperator),  # or a subclass
                "conn_id": getattr(task, "_conn_id", None),
                "application": getattr(task, "application", None),
                "application_args": getattr(task, "application_args", None),
                "env_vars": getattr(task, "env_vars", None),
                "upstream": sorted(task.upstream_task_ids),
                "outlets": [getattr(o, "uri", str(o)) for o in task.outlets],
                "retries": task.retries,
                "retry_delay": _seconds(task.retry_delay),
                "execution_timeout": _seconds(task.execution_timeout),
                "conf": getattr(task, "conf", None),
                "trigger_rule": str(getattr(task.trigger_rule, "value", task.trigger_rule)),
                "on_failure_callback": _callbacks(getattr(task, "on_failure_callback", None)),
                "on_success_callback": _callbacks(getattr(task, "on_success_callback", None)),
            }
            if task._pre_execute_hook is not None:  # what the task runner calls just before execute()
                task._pre_execute_hook({"task": task})
                info["env_vars_at_run_time"] = task.env_vars
            if hasattr(task, "_get_hook"):  # SparkSubmitOperator: the command line execute() would run
                info["spark_submit"] = {}
                for conn in connections:  # each as the value of the AIRFLOW_CONN_ environment variable
                    os.environ[f"AIRFLOW_CONN_{task._conn_id.upper()}"] = conn
                    info["spark_submit"][conn] = task._get_hook()._build_spark_submit_command(task.application)
            tasks[task.task_id] = info
        condition = dag.schedule
        dags[dag_id] = {
            "schedule": str(condition),
            # an asset condition: its kind and the URIs of its assets
            "schedule_kind": type(condition).__name__,
            "schedule_assets": [getattr(o, "uri", str(o)) for o in getattr(condition, "objects", ())],
            "catchup": dag.catchup,
            "max_active_runs": dag.max_active_runs,
            "tasks": tasks,
        }
    files = {stat.file: stat.dag_num for stat in bag.dagbag_stats}  # every file parsed: DAGs found in it
    return {"import_errors": bag.import_errors, "files": files, "dags": dags}


def dag_test(dags_folder: str, dag_id: str) -> dict:
    bag = load(dags_folder)
    if dag_id not in bag.dags:
        return {"import_errors": bag.import_errors, "state": None}
    dr = bag.dags[dag_id].test()
    return {
        "import_errors": bag.import_errors,
        "state": str(dr.state),
        "tasks": {ti.task_id: str(ti.state) for ti in dr.get_task_instances()},
    }


def lineage(dags_folder: str, project: str, *models: str) -> dict:
    sys.path.insert(0, dags_folder)  # as the DAG files import it
    from _layers_lineage import model_lineage
    from openlineage.client.serde import Serde

    out = {}
    for model in models:
        try:
            found = model_lineage(project, model)
        except Exception as e:  # what the provider would log (and send the event without datasets)
            out[model] = {"error": type(e).__name__, "message": str(e)}
            continue
        out[model] = {
            "inputs": [json.loads(Serde.to_json(d)) for d in found.inputs],
            "outputs": [json.loads(Serde.to_json(d)) for d in found.outputs],
        }
    return out


def main(argv: list[str]) -> int:
    command, *args = argv
    result = {"dagbag": dagbag, "test": dag_test, "lineage": lineage}[command](*args)
    print(RESULT_PREFIX + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
