"""The lake_quality DAG, parsed by real Airflow (in subprocesses, see conftest): scheduled by any tiering or layer
task's asset; check, then publish."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.dags.conftest import LOCAL_2, PER_TABLE_ENV, REPO, assert_default_robustness

EXAMPLE = REPO / "examples" / "tpch"
MODELS = ["dwd.orders_enriched", "ads.revenue_by_nation_month"]


def test_scheduled_by_the_tables_assets_check_then_publish(run_probe) -> None:
    result = run_probe("dagbag", LOCAL_2, env=PER_TABLE_ENV)  # tiered: ods.orders, ods.clicks; project: example
    assert result["import_errors"] == {}, result["output"]
    dag = result["dags"]["lake_quality"]
    assert dag["schedule_kind"] == "AssetAny"
    tables = ["ods.orders", "ods.clicks", *MODELS]
    assert dag["schedule_assets"] == [f"lakestream://{t}/" for t in tables]
    assert dag["max_active_runs"] == 1 and dag["catchup"] is False
    # every asset that schedules it is produced by a task of lake_tiering or warehouse_layers
    tasks = [t for d in ("lake_tiering", "warehouse_layers") for t in result["dags"][d]["tasks"].values()]
    produced = {uri for t in tasks for uri in t["outlets"]}
    assert set(dag["schedule_assets"]) <= produced
    check, publish = dag["tasks"]["check"], dag["tasks"]["publish"]
    assert publish["upstream"] == ["check"] and check["upstream"] == []
    # the run's alerts after the check whatever its outcome; a failing check or publish is alerted, once
    alerts = dag["tasks"]["alerts"]
    assert alerts["upstream"] == ["check"] and alerts["trigger_rule"] == "all_done"
    for task in (check, publish):
        assert task["on_failure_callback"] == task["on_success_callback"] == ["LakestreamNotifier"]
    selection = [arg for t in tables for arg in ("--table", t)]
    application = str(REPO / "jobs" / "check.py")
    assert check["application"] == publish["application"] == application
    assert check["application_args"] == [*selection, "--project", str(EXAMPLE)]
    assert publish["application_args"] == [*selection, "--publish"]
    assert check["spark_submit"][LOCAL_2][:3] == ["spark-submit", "--master", "local[2]"]
    assert_default_robustness(check)
    assert_default_robustness(publish)
    assert "AWS_SECRET_ACCESS_KEY" not in check["env_vars"]  # forwarded at run time only
    assert check["env_vars_at_run_time"]["AWS_SECRET_ACCESS_KEY"] == PER_TABLE_ENV["AWS_SECRET_ACCESS_KEY"]


def test_without_lists_it_follows_every_table(run_probe, tmp_path: Path) -> None:
    """No table list and no project: scheduled by the all-tables tiering task, checking every table."""
    env = {"LAKESTREAM_LAYERS_PROJECT": str(tmp_path / "none"), "LAKESTREAM_JOBS_DIR": str(tmp_path)}
    result = run_probe("dagbag", LOCAL_2, env=env)
    dag = result["dags"]["lake_quality"]
    assert dag["schedule_assets"] == ["lakestream://all-tables/"]
    assert result["dags"]["lake_tiering"]["tasks"]["tier_all_tables"]["outlets"] == ["lakestream://all-tables/"]
    assert dag["tasks"]["check"]["application_args"] == []
    assert dag["tasks"]["publish"]["application_args"] == ["--publish"]
    assert dag["tasks"]["check"]["application"] == str(tmp_path / "check.py")


@pytest.mark.slow
def test_dag_test_checks_then_publishes_and_a_violation_stops_publishing(run_probe, airflow_db, tmp_path) -> None:
    """dag.test() with real spark-submits of jobs/check.py: a clean table is checked, then published; after a
    rogue commit drops a row, `check` fails and `publish` does not run (`published` stays). Alerts go to a
    loopback HTTP server: none while all is well; then the violation (the run's, to the table's owner) and the
    failed `check` task (the notifier's, to the default owner, in Slack's format)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import pyarrow as pa

    from lakehouse import Lakehouse
    from quality.published_tag import published_snapshot
    from tests.support.rogue import rogue_commit

    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    with Lakehouse.open(warehouse.as_uri()) as lh:
        lh.create_table("ods.t", schema, primary_key=["k"], buckets=2)
        lh.log("ods.t").append(pa.table({"k": list(range(100)), "v": [f"v{i}" for i in range(100)]}, schema=schema))
        lh.tier("ods.t")
        clean = lh.lake_table("ods.t").current_snapshot().snapshot_id
    received: list[tuple[str, dict]] = []

    class Hooks(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            received.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hooks)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    routing = tmp_path / "alerts.yml"
    routing.write_text(
        f"owners:\n  data: {{webhook: {url}/data}}\n  ops: {{slack: {url}/ops}}\ntables:\n  ods.t: data\n"
        "default_owner: ops\n"
    )
    env = {
        "LAKESTREAM_ALERTS_FILE": str(routing),
        "LAKESTREAM_WAREHOUSE": warehouse.as_uri(),
        "LAKESTREAM_TIERED_TABLES": "ods.t",
        "LAKESTREAM_LAYERS_PROJECT": str(tmp_path / "no-project"),
        "AIRFLOW_CONN_LAKESTREAM_SPARK": LOCAL_2,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": str(REPO),  # spark-submit runs jobs/check.py: this checkout's packages
        "LAKESTREAM_TASK_RETRIES": "0",  # the failing check must fail now, not be retried
    }
    result = run_probe("test", "lake_quality", env=env, timeout=540)
    assert result["tasks"] == {"check": "success", "publish": "success", "alerts": "success"}, result["output"]
    assert received == []
    with Lakehouse.open(warehouse.as_uri()) as lh:
        assert published_snapshot(lh, "ods.t") == clean
        # a rogue commit drops the rows of one data file
        f = next(iter(lh.lake_table("ods.t").scan().plan_files())).file
        rogue_commit(lh, remove=[f], name="ods.t")
    result = run_probe("test", "lake_quality", env=env, timeout=540)
    assert result["tasks"]["check"] == "failed", result["output"]
    assert result["tasks"]["publish"] == "upstream_failed", result["output"]
    assert "content" in result["output"]
    assert result["tasks"]["alerts"] == "success", result["output"]
    server.shutdown()
    server.server_close()
    [opened] = [body for path, body in received if path == "/data"]  # the run's violation, to the table's owner
    assert (opened["event"], opened["table"], opened["check"], opened["kind"]) == (
        "open",
        "ods.t",
        "reconcile",
        "violation",
    )
    assert opened["violations"] and opened["violations"][0]["check"] in opened["message"]
    [failed] = [body for path, body in received if path == "/ops"]  # the failed task, to the default owner
    assert failed["text"] == "[lakestream] FAILED task:check on dag:lake_quality"
    assert len(received) == 2
    with Lakehouse.open(warehouse.as_uri()) as lh:
        assert published_snapshot(lh, "ods.t") == clean
