"""The native stack end to end (``make test-stack``; skipped unless LAKESTREAM_TEST_STACK=1): ``python -m stack up``
brings up SeaweedFS, a Spark master and worker and Airflow's real scheduler; orders are produced into the ODS; the
scheduler runs every DAG (layers and tiering triggered, quality on the assets, maintenance), and then lake == log,
the layers == their SQL, each layers task reported its model's column lineage to OpenLineage, and the quality run
published every table; a ``kill -9`` of the Spark worker while tiering runs fails the task with the reason in its
log, the retry succeeds once the worker is back, nothing lost or doubled; ``down`` leaves no process.

Tiering and layers run here only when triggered (``LAKESTREAM_*_SCHEDULE=none``, dags/README.md): on their
every-minute schedules, runs nobody waits for would fill the two cores beside the ones the test waits for (most of
the stack's CPU). That the DAGs carry those schedules is proven where they are parsed (tests/dags/)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from object_store.seaweedfs import free_ports
from stack import scenario, services
from stack.airflow_api import AirflowApi
from tests.support.spark_cds import driver_options

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(os.environ.get("LAKESTREAM_TEST_STACK") != "1", reason="make test-stack runs it"),
    pytest.mark.timeout(1800),
]

N_ORDERS = 20_000
KILL_ORDERS = 100_000  # the worker dies at the app's first task: ods.orders (tiered last) is still to come
EXECUTOR_WAIT = 15  # seconds a tiering job waits without executors before it cancels itself


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    root = tmp_path_factory.mktemp("stack") / ".stack"
    events = root.parent / "openlineage.jsonl"
    ports = free_ports(len(services.PORT_ENV))
    env = scenario.environment(
        {
            **{var: str(port) for var, port in zip(services.PORT_ENV, ports, strict=True)},
            "LAKESTREAM_TASK_RETRIES": "2",
            "LAKESTREAM_TASK_RETRY_DELAY_SECONDS": "5",
            "LAKESTREAM_SPARK_EXECUTOR_WAIT_SECONDS": str(EXECUTOR_WAIT),
            "SPARK_SUBMIT_OPTS": driver_options(),  # the tasks' drivers, as the suite's (tests/conftest.py)
            "LAKESTREAM_TIERING_SCHEDULE": "none",
            "LAKESTREAM_LAYERS_SCHEDULE": "none",
            # Airflow's OpenLineage provider writes each task's events to a file (its documented file transport)
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                {"type": "file", "log_file_path": str(events), "append": True}
            ),
            # the listener gives an event's extraction 10 s by default, then drops it: generous on a loaded machine
            "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "300",
        }
    )
    cfg, seconds, out = scenario.stack_up(root, env)
    try:
        yield {
            "cfg": cfg,
            "env": env,
            "root": root,
            "ready_seconds": seconds,
            "events": events,
            "out": out,
            "api": AirflowApi.for_home(cfg.airflow_url, cfg.airflow_home),
            "lh": scenario.open_lakehouse(cfg),
        }
    finally:
        for service in services.SERVICES:  # whatever the tests did, leave nothing running
            pid = services.read_pid(cfg, service)
            if pid is not None and services._alive(pid):
                services.stop_service(cfg, service, timeout=5)


def test_up_is_ready_and_a_second_up_starts_nothing(running) -> None:
    cfg, env = running["cfg"], running["env"]
    assert "stack ready in" in running["out"]
    assert all(services.running(cfg, s) for s in services.SERVICES)
    dags = running["api"].dags()
    assert {"lake_tiering", "warehouse_layers", "lake_quality", "lake_maintenance"} <= set(dags)
    pids = {s: services.running(cfg, s) for s in services.SERVICES}
    out = scenario._stack_command("up", running["root"], env)
    assert "already running" in out
    assert {s: services.running(cfg, s) for s in services.SERVICES} == pids


def test_the_scheduler_runs_every_dag_and_publishes(running, spark) -> None:
    cfg, api, lh, env = running["cfg"], running["api"], running["lh"], running["env"]
    scenario.deploy_example(cfg, env)
    producer = scenario.Producer(lh)
    running["producer"] = producer
    producer.orders(N_ORDERS)
    # the layers round after the data landed, then a tiering run after it (the layers' tables too), then quality,
    # scheduled by the assets the tiering tasks update (unpaused only now: a paused DAG's asset events are not
    # queued, so the layers' events start no run of their own)
    scenario.trigger_and_wait(api, "warehouse_layers", 600)
    api.set_paused("lake_quality", False)
    tiering, _ = scenario.trigger_and_wait(api, "lake_tiering", 600)
    # after the run's start, not its end: its task's asset event may start quality before the run is marked done
    scenario.next_success(api, "lake_quality", tiering["start_date"], 600)
    maintenance, _ = scenario.trigger_and_wait(api, "lake_maintenance", 600)
    [ti] = api.task_instances("lake_tiering", tiering["dag_run_id"])
    task_log = api.task_log("lake_tiering", tiering["dag_run_id"], ti["task_id"], ti["try_number"])
    assert '"table": "ods.orders"' in task_log and "lakestream-tier_all_tables" in task_log
    assert "does not yet fully support pandas" not in task_log  # PySpark's FutureWarning: not in every task log

    # lake == log: every ODS row tiered once; the layers' lakes hold whole rounds
    for name in scenario.ODS:
        assert lh.lake_offsets(name) == lh.log(name).end_offsets(), name
        lake, union = lh.lake_read(name), lh.union_read(name)
        assert lake.num_rows == union.num_rows, name
    orders = lh.lake_read("ods.orders", columns=["o_orderkey"]).column("o_orderkey")
    assert len(orders) == pc.count_distinct(orders).as_py() == N_ORDERS

    from layers.project import load_project
    from quality.layers import check_layers
    from quality.published_tag import published_snapshot
    from quality.reconcile import reconcile
    from quality.runs import load_runs

    for name in (*scenario.ODS, *scenario.MODELS):
        result = reconcile(lh, name, full=True)
        assert result.ok, (name, [str(v) for v in result.violations])
    for result in check_layers(lh, load_project(scenario.EXAMPLE), spark=spark, full=True):
        assert result.ok, (result.table, [str(v) for v in result.violations])
    # the quality run under the scheduler published every table at its current snapshot, with its report
    for name in (*scenario.ODS, *scenario.MODELS):
        assert published_snapshot(lh, name) is not None, name
    [newest] = load_runs(lh, limit=1)
    assert newest.ok and lh.store.exists(f"_lakestream/quality/reports/{newest.run_id}.html")
    assert maintenance["state"] == "success"
    assert_no_failed_run(api)
    assert_layers_lineage(running["events"], load_project(scenario.EXAMPLE), f"s3://{services.BUCKET}/warehouse")


def assert_layers_lineage(events: Path, project, namespace: str) -> None:
    """Each layers task's COMPLETE event: the model's input tables, its table, and on it the lineage of every
    column, in the warehouse's namespace, as `column_lineage` has it."""
    from layers.lineage import column_lineage

    sent = [json.loads(line) for line in events.read_text().splitlines()]
    complete = {e["job"]["name"]: e for e in sent if e["eventType"] == "COMPLETE" and "run" in e}
    lineage = column_lineage(project)
    for model in scenario.MODELS:
        event = complete[f"warehouse_layers.run__{model.replace('.', '__')}"]
        assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [
            (namespace, t) for t in project.models[model].inputs
        ]
        [output] = event["outputs"]
        assert (output["namespace"], output["name"]) == (namespace, model)
        assert [f["name"] for f in output["facets"]["schema"]["fields"]] == list(project.models[model].column_names)
        fields = output["facets"]["columnLineage"]["fields"]
        assert sorted(fields) == sorted(project.models[model].column_names)  # the transport sorts keys
        for column, reported in fields.items():
            expected = [
                (namespace, s.table, s.column, [{"type": "DIRECT", "subtype": s.kind.upper(), "masking": False}])
                for s in lineage.column(model, column).direct
            ]
            got = [(f["namespace"], f["name"], f["field"], f["transformations"]) for f in reported["inputFields"]]
            assert got == expected, (model, column)
    # By hand: revenue sums the price, which the DWD model copies from the orders.
    dwd, ads = (complete[f"warehouse_layers.run__{m.replace('.', '__')}"] for m in scenario.MODELS)
    dwd, ads = (e["outputs"][0]["facets"]["columnLineage"] for e in (dwd, ads))
    assert [
        (f["name"], f["field"], f["transformations"][0]["subtype"]) for f in ads["fields"]["revenue"]["inputFields"]
    ] == [("dwd.orders_enriched", "o_totalprice", "AGGREGATION")]
    assert [
        (f["name"], f["field"], f["transformations"][0]["subtype"])
        for f in dwd["fields"]["o_totalprice"]["inputFields"]
    ] == [("ods.orders", "o_totalprice", "IDENTITY")]


def assert_no_failed_run(api: AirflowApi) -> None:
    for dag_id in ("lake_tiering", "warehouse_layers", "lake_quality", "lake_maintenance"):
        failed = [r["dag_run_id"] for r in api.runs(dag_id) if r["state"] == "failed"]
        assert not failed, f"{dag_id}: failed runs {failed}:\n{api.failure_report(dag_id, failed[0])}"


def test_a_lost_worker_fails_the_task_and_the_retry_recovers(running) -> None:
    cfg, api, lh, env = running["cfg"], running["api"], running["lh"], running["env"]
    producer = running["producer"]
    api.set_paused("lake_quality", True)  # its run after the retry is not what this test waits for
    # produce while no tiering task runs, so that the next tiering app (started after this) tiers all of it
    deadline = time.monotonic() + 300
    while any(
        ti["state"] in ("queued", "running")
        for r in api.runs("lake_tiering", limit=2)
        for ti in api.task_instances("lake_tiering", r["dag_run_id"])
    ):
        assert time.monotonic() < deadline, "lake_tiering never idle"
        time.sleep(0.5)
    producer.orders(KILL_ORDERS)
    started = time.time() * 1000
    api.trigger("lake_tiering")
    # kill the worker as soon as that app's executor runs a task (its log says so): the app has had executors,
    # a job is under way, and ods.orders (tiered last, in name order) is still to come or under way
    while True:
        apps = [a["id"] for a in scenario.active_apps(cfg) if "tier" in a.get("name", "") and a["starttime"] > started]
        if any("Running task" in scenario.executor_log(cfg, app) for app in apps):
            break
        assert time.monotonic() < deadline, "no tiering app ran a task"
        time.sleep(0.1)
    os.killpg(services.running(cfg, "spark-worker"), signal.SIGKILL)  # the worker and its executors: a lost machine
    killed = time.monotonic()
    lake_before = lh.lake_offsets("ods.orders")
    [run] = [r for r in api.runs("lake_tiering", limit=5) if r["state"] == "running"]
    run_id = run["dag_run_id"]

    [ti] = api.task_instances("lake_tiering", run_id)
    while ti["state"] != "up_for_retry":
        assert ti["state"] not in ("success", "failed"), f"try 1 {ti['state']} although its worker died"
        assert time.monotonic() - killed < 300, f"the task is still {ti['state']} 300 s after its worker died"
        time.sleep(1)
        [ti] = api.task_instances("lake_tiering", run_id)
    first_try = api.task_log("lake_tiering", run_id, ti["task_id"], 1)
    assert "no Spark executor for" in first_try, first_try[-3000:]
    assert lh.lake_offsets("ods.orders") == lake_before  # nothing of the failed try was committed

    out = scenario._stack_command("up", running["root"], env)  # a second `make stack` brings the worker back
    assert "starting the rest" in out and services.running(cfg, "spark-worker")
    run = scenario.wait_success(api, "lake_tiering", run_id, 600)
    assert run["state"] == "success"
    [ti] = api.task_instances("lake_tiering", run_id)
    assert ti["try_number"] == 2

    # nothing lost, nothing doubled
    assert lh.lake_offsets("ods.orders") == lh.log("ods.orders").end_offsets()
    orders = lh.lake_read("ods.orders", columns=["o_orderkey"]).column("o_orderkey")
    assert len(orders) == pc.count_distinct(orders).as_py() == N_ORDERS + KILL_ORDERS
    from quality.reconcile import reconcile

    assert reconcile(lh, "ods.orders", full=True).ok
    assert_no_failed_run(api)


def test_down_leaves_no_process(running) -> None:
    cfg = running["cfg"]
    pids = {s: services.read_pid(cfg, s) for s in services.SERVICES}
    running["lh"].close()
    out = scenario.stack_down(running["root"], running["env"])
    for service, pid in pids.items():
        assert f"stopped {service}" in out
        assert pid is not None and not services._group_members(pid), f"{service}: a process of its group is left"
    assert not any(Path(cfg.root).glob("*.pid"))
