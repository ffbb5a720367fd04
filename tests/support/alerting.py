"""Alerting cases: `routing_for`, a routing whose owners' webhooks and Slack point at a hooks server (anything with
a ``url``), and `lost_rows`, a failed reconciliation of a table: what the alert tests and their worker process
send."""

from __future__ import annotations

from quality.alerts import parse_routing
from quality.results import CheckResult, Violation


def routing_for(hooks, **extra):
    """Owners orders-team (webhook and Slack) and platform (webhook, the default) at ``hooks.url``, plus ``extra``."""
    return parse_routing(
        {
            "owners": {
                "orders-team": {"webhook": f"{hooks.url}/orders", "slack": f"{hooks.url}/slack"},
                "platform": {"webhook": [f"{hooks.url}/platform"]},
                **extra,
            },
            "tables": {"ods.orders": "orders-team", "dwd.*": "orders-team"},
            "default_owner": "platform",
        },
        path="alerts.yml",
    )


def lost_rows(table="ods.orders") -> CheckResult:
    """A failed reconciliation of ``table``: two rows of the log are not in the lake."""
    v = Violation(
        check="content",
        table=table,
        message="2 rows of the log are not in the lake",
        bucket=2,
        offsets=(100, 140),
        snapshot_id=77,
        keys=(17, 18),
    )
    return CheckResult("reconcile", table, snapshot_id=77, violations=[v])
