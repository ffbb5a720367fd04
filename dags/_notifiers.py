"""Lakestream alerts from Airflow: a notifier for tasks that fail (and recover), and the function behind the
``alerts`` task of ``lake_quality``. Both go through `quality.alerts` (incidents de-duplicated in the warehouse,
routed by the project's ``alerts.yml``) and send e-mail through Airflow's SMTP notifier.

Not a DAG (Airflow parses it, finds none, and moves on). Only the standard library and Airflow's notifier base
are imported at parse time; lakestream's packages are imported when a notification is sent (on the worker, with
the worker's LAKESTREAM_* environment: the warehouse).
"""

from __future__ import annotations

import html
import logging
import os
from collections.abc import Sequence
from typing import Any

from airflow.sdk.bases.notifier import BaseNotifier

log = logging.getLogger(__name__)


def _email(context: Any):
    """``send_email(addresses, subject, body)`` through Airflow's SMTP notifier (connection ``smtp_default``, or
    ``[email] email_conn_id``), or None where the SMTP provider is not installed."""
    try:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier
    except ImportError:
        return None

    def send(addresses: Sequence[str], subject: str, body: str) -> None:
        content = f"<pre>{html.escape(body)}</pre>"
        # notify(), not __call__: the message is data, not a Jinja template to render
        SmtpNotifier(to=list(addresses), subject=subject, html_content=content).notify(context)

    return send


def _lakehouse():
    from lakehouse import Lakehouse

    return Lakehouse.from_env()


#: A routing file (alerts.yml's format) used instead of the project's alerts.yml.
ALERTS_FILE_ENV = "LAKESTREAM_ALERTS_FILE"


def _routing(project: str | None):
    """LAKESTREAM_ALERTS_FILE if set, else the project's alerts.yml (none: incidents are kept, nobody is told)."""
    from quality.alerts import Routing, load_routing, load_routing_file

    if os.environ.get(ALERTS_FILE_ENV):
        return load_routing_file(os.environ[ALERTS_FILE_ENV])
    return load_routing(project) if project else Routing()


class LakestreamNotifier(BaseNotifier):
    """``on_failure_callback=LakestreamNotifier(project)``: a task that failed (after its retries) opens the
    incident ``(dag:<dag_id>, task:<task_id>)``, alerted once to the owner of ``dag:<dag_id>`` (alerts.yml; the
    default owner unless a pattern names it). ``on_success_callback=LakestreamNotifier(project, failed=False)``:
    its success closes that incident (a recovery message if the failure was alerted)."""

    def __init__(self, project: str | None = None, *, failed: bool = True) -> None:
        super().__init__()
        self.project = project
        self.failed = failed

    def notify(self, context: Any) -> None:
        from quality.alerts import send_alerts, task_result

        ti = context["ti"]
        error = None
        if self.failed:
            exc = context.get("exception")
            error = f"{type(exc).__name__}: {exc}" if exc is not None else "the task failed"
        run_id = str(context.get("run_id") or getattr(ti, "run_id", ""))
        with _lakehouse() as lh:
            alerts = send_alerts(
                lh.store,
                [task_result(ti.dag_id, ti.task_id, error)],
                _routing(self.project),
                run_id=run_id,
                send_email=_email(context),
            )
        for alert in alerts:
            log.info("lakestream alert %s: sent to %s; failed: %s", alert.title, alert.delivered, alert.failed)


def send_run_alerts(project: str | None, context: Any) -> dict[str, Any]:
    """The ``alerts`` task: the alerts of the latest quality run recorded in the warehouse (what the ``check``
    task just recorded, whether it passed or failed). Returns what was sent (the task's XCom)."""
    from quality.alerts import send_alerts
    from quality.runs import load_runs

    with _lakehouse() as lh:
        latest = load_runs(lh, limit=1)
        if not latest:
            log.warning("no quality run recorded yet: nothing to alert")
            return {"run_id": None, "alerts": []}
        run = latest[0]
        alerts = send_alerts(lh.store, run.results, _routing(project), run_id=run.run_id, send_email=_email(context))
    sent = [{"title": a.title, "delivered": a.delivered, "failed": a.failed} for a in alerts]
    for a in sent:
        log.info("lakestream alert %s", a)
    return {"run_id": run.run_id, "alerts": sent}
