"""Check the lake against the log (and the layers against their SQL, and the expectation suites) whenever a
tiering or layer task wrote a table; publish what passed.

Scheduled by the assets the `lake_tiering` and `warehouse_layers` tasks produce (`lakestream://<table>`, any of
them). Three tasks: `check` (`spark-submit jobs/check.py`: reconcile, suites, layer checks; records the run
and its report under `_lakestream/quality/`; fails on a violation) and then `publish` (`jobs/check.py
--publish`: moves each table's tag `published` to the snapshot the run passed on, then records the warehouse
publication, `quality.warehouse_publication`), which runs only after `check` succeeded; and `alerts`, after `check`
whatever its outcome: the latest run's alerts to the tables' owners (`quality.alerts`: once per incident,
routed by the project's alerts.yml; e-mail through Airflow's SMTP notifier). A `check` or `publish` that fails
is alerted too (`_notifiers.LakestreamNotifier`), once; its next success closes the incident.

Configuration (environment; see dags/README.md):
    LAKESTREAM_TIERED_TABLES       the tiered tables whose assets schedule it (unset: the all-tables asset)
    LAKESTREAM_LAYERS_PROJECT      the layers project (default: <repo>/examples/tpch if present): its models'
                                   assets schedule it too, and its suites and layer checks run
    AIRFLOW_CONN_LAKESTREAM_SPARK  the Spark master (the layer checks run on Spark)
    LAKESTREAM_JOBS_DIR            where check.py lives (default: <repo>/jobs)
"""

from __future__ import annotations

import os

from _lakestream_common import asset, jobs_dir, spark_submit, tables
from _layers_graph import layers_graph, model_order, project_folder
from _notifiers import LakestreamNotifier, send_run_alerts
from airflow.sdk import AssetAny, dag, task


def _project() -> str | None:
    folder = project_folder()
    return folder if os.path.isdir(folder) else None


def _models(project: str | None) -> list[str]:
    """The project's models in dependency order, those not tiered already listed."""
    if project is None:
        return []
    return [m for m in model_order(layers_graph(project)) if m not in tables()]


def _assets() -> list:
    return ([asset(t) for t in tables()] or [asset(None)]) + [asset(m) for m in _models(_project())]


@dag(schedule=AssetAny(*_assets()), catchup=False, max_active_runs=1, tags=["lakestream", "quality"], doc_md=__doc__)
def lake_quality():
    application = os.path.join(jobs_dir(), "check.py")
    project = _project()
    selection = [arg for t in tables() for arg in ("--table", t)]
    if selection:
        selection += [arg for m in _models(project) for arg in ("--table", m)]
    # a task that fails (after its retries) is alerted once; its next success closes the incident
    notify = {
        "on_failure_callback": LakestreamNotifier(project),
        "on_success_callback": LakestreamNotifier(project, failed=False),
    }
    check = spark_submit(
        "check",
        application,
        [*selection, *(["--project", project] if project else [])],
        name="lakestream-quality-check",
        **notify,
    )
    publish = spark_submit(
        "publish", application, [*selection, "--publish"], name="lakestream-quality-publish", **notify
    )

    @task(trigger_rule="all_done", retries=0)
    def alerts(**context) -> dict:
        """The latest run's alerts (violations, anomalies, checks that could not run; recoveries)."""
        return send_run_alerts(project, context)

    check >> publish
    check >> alerts()


lake_quality()
