"""One `quality.alerts.send_alerts` run in its own process (tests/quality/test_alerts.py): ``python -m
tests.quality._alerts_worker STORE_URL STORE_OPTIONS_JSON HOOKS_URL RUN_ID START_AT``. It waits until the wall
clock reaches START_AT (so several processes race on the incident record at once), sends what the failing check of
`tests.support.alerting.lost_rows` calls for, and prints how many alerts it sent."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime

from object_store import open_store
from quality.alerts import send_alerts
from tests.support.alerting import lost_rows, routing_for


class _Hooks:
    def __init__(self, url: str) -> None:
        self.url = url


def main() -> None:
    url, options, hooks_url, run_id, start_at = sys.argv[1:6]
    store = open_store(url, **json.loads(options))
    routing = routing_for(_Hooks(hooks_url))  # type: ignore[arg-type]
    time.sleep(max(0.0, float(start_at) - time.time()))
    sent = send_alerts(store, [lost_rows()], routing, run_id=run_id, now=datetime(2026, 11, 27, 12, 1, tzinfo=UTC))
    print(json.dumps({"sent": len(sent)}), flush=True)


if __name__ == "__main__":
    main()
