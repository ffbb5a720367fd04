"""Run Airflow in a subprocess for tests/dags, so the pytest process never imports (and configures) Airflow.

    python airflow_probe.py dagbag DAGS_FOLDER [CONN...]  parse the folder, print what the tests assert on,
                                  with the spark-submit command line (built, not run) for each connection value
    python airflow_probe.py test DAGS_FOLDER DAG_ID       run `dag.test()` (needs `airflow db migrate`)
    python airflow_probe.py lineage DAGS_FOLDER PROJECT MODEL...  the OpenLineage datasets a warehouse_layers
                                  task of each model reports (as the provider serializes them), or the error

    python airflow_probe.py serve DAGS_FOLDER     the probe server: Airflow imported once, then one request
                                  per stdin line, one response per stdout line (`serve`; tests/dags/conftest.py)

The folder is parsed the way Airflow's DAG processor and task runner parse it: with a `BundleDagBag`, which
first puts the folder on sys.path (the DAGs import `_lakestream_common` from it; a plain `DagBag` does not).
The environment (AIRFLOW_HOME, AIRFLOW__*, LAKESTREAM_*, ...) comes from the caller. The result is the last
stdout line, prefixed with RESULT_PREFIX; everything before it is Airflow's own output.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

RESULT_PREFIX = "PROBE_RESULT "
#: The commands the server answers; `test` (dag.test(): a DB, executors, Spark) always runs in a fresh process.
SERVED_COMMANDS = ("dagbag", "lineage")
#: The variables a served request may set differently from the server's own environment: what the DAG files (and
#: `lineage`) read when called, never at import by Airflow or a library. Any other difference (AIRFLOW_HOME,
#: AIRFLOW__*, AIRFLOW_CONN_*, PATH, ...), read once when Airflow is imported, needs a server of its own.
CALL_TIME_PREFIXES = ("LAKESTREAM_", "AWS_", "PYSPARK_PYTHON", "SPARK_LOCAL_IP")
#: Set by pytest to the running test's id; Airflow reads only whether it is set (its logging config, at import).
PER_TEST = "PYTEST_CURRENT_TEST"


def without_call_time(env: dict[str, str]) -> dict[str, str]:
    """``env`` without the variables read at call time: the environment to start a server with."""
    return {k: v for k, v in env.items() if not k.startswith(CALL_TIME_PREFIXES)}


def static_environment(env: dict[str, str]) -> dict[str, str]:
    """What must be the same for every request to one server: ``env`` without the variables read at call time, and
    of PER_TEST only whether it is set."""
    static = without_call_time(env)
    if PER_TEST in static:
        static[PER_TEST] = "(set)"
    return static


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


def _drop_dags_modules(dags_folder: str) -> None:
    """Forget every module loaded from the DAG folder (`_lakestream_common`, `_layers_graph`, ... and the DAG files
    under Airflow's mangled names), so the next parse executes them afresh under the next request's environment."""
    folder = os.path.realpath(dags_folder) + os.sep
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and os.path.realpath(file).startswith(folder):
            del sys.modules[name]


def serve(dags_folder: str) -> int:
    """The probe server: Airflow (and what the commands import) imported once; then, per line of stdin, a request
    ``{"command", "args", "env", "output"}`` answered by one line ``{"result": ...}`` (or ``{"error": ...}``, after
    which the server exits) on the original stdout.

    Each request runs as a fresh process would run it, as far as the DAG folder can tell: ``os.environ`` is exactly
    the request's ``env`` (whose static part, `static_environment`, must equal the server's own: Airflow read it at
    import), ``sys.path`` is the server's, every module of the DAG folder is dropped before (and after) the parse,
    and a new `BundleDagBag` parses the folder. Everything written to fd 1 and 2 during the request goes to the
    file ``output`` (Airflow's log), as a fresh process' output would.
    """
    channel = os.fdopen(os.dup(1), "w", buffering=1)  # responses only
    os.dup2(2, 1)  # between requests, a stray print goes to the server's stderr, never into the channel
    startup = dict(os.environ)
    static = static_environment(startup)
    # What a fresh process imports before it parses: Airflow and its configuration, the provider's operator.
    from airflow.dag_processing.dagbag import BundleDagBag  # noqa: F401
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: F401

    if dict(os.environ) != startup:  # then a fresh process' environment would differ from a request's
        channel.write(json.dumps({"error": "importing Airflow changed os.environ: serve nothing"}) + "\n")
        return 1
    base_path = list(sys.path)
    _drop_dags_modules(dags_folder)
    channel.write(json.dumps({"ready": os.getpid()}) + "\n")
    saved = os.dup(1), os.dup(2)
    for line in sys.stdin:
        request = json.loads(line)
        if static_environment(request["env"]) != static:
            channel.write(json.dumps({"error": "the request's static environment is not the server's"}) + "\n")
            return 1
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[:] = base_path
        _drop_dags_modules(dags_folder)
        with open(request["output"], "ab") as out:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
        try:
            command = {"dagbag": dagbag, "lineage": lineage}[request["command"]]
            response = {"result": command(dags_folder, *request["args"])}
        except BaseException:  # a fresh process would have died: so does the server, after saying why
            traceback.print_exc()
            response = {"error": traceback.format_exc()}
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            _drop_dags_modules(dags_folder)
            sys.path[:] = base_path
        channel.write(json.dumps(response, default=str) + "\n")
        if "error" in response:
            return 1
    return 0


def main(argv: list[str]) -> int:
    command, *args = argv
    if command == "serve":
        return serve(*args)
    result = {"dagbag": dagbag, "test": dag_test, "lineage": lineage}[command](*args)
    print(RESULT_PREFIX + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
