"""What a run's page shows beyond the run record, read from the warehouse as plain data (`report_data`): the
metrics series it charts (`quality.metrics.table`), the open incidents of the alerts record (`quality.alerts`)
and what each table cost the store in the day before the run (`lakehouse.cost`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from quality.report.figures import ANOMALY_PREFIX
from quality.report.format import parse_time
from quality.results import QualityRun

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

log = logging.getLogger(__name__)


#: Points per metrics series charted in a run's page (the newest, up to the run's end).
METRIC_POINTS = 100


#: The table-level metrics series charted for every table (those recorded), before the anomaly checks' own.
CHART_METRICS = ("changes", "rows", "freshness_seconds_max", "write_requests")


#: Open incidents listed in a run's page (the rest are counted).
MAX_INCIDENTS = 200


def _anomaly_series(run: QualityRun) -> dict[str, list[tuple[str, str | None]]]:
    """Per table, the (metric, column) each of the run's anomaly checks judged."""
    out: dict[str, list[tuple[str, str | None]]] = {}
    for r in run.results:
        if r.check.startswith(ANOMALY_PREFIX) and r.details.get("metric"):
            out.setdefault(r.table, []).append((str(r.details["metric"]), r.details.get("column")))
    return out


def charted_series(run: QualityRun) -> dict[str, list[tuple[str, str | None]]]:
    """Per table of ``run``: the series its page charts, `CHART_METRICS` then those its anomaly checks name."""
    anomalies = _anomaly_series(run)
    tables = sorted(set(run.tables) | {r.table for r in run.results})
    return {t: list(dict.fromkeys([*((m, None) for m in CHART_METRICS), *anomalies.get(t, [])])) for t in tables}


def metric_series(lh: Lakehouse, run: QualityRun, *, points: int = METRIC_POINTS) -> dict[str, list[dict[str, Any]]]:
    """The metrics series a run's page charts (`charted_series`), from the metrics table (`quality.metrics.table`):
    per table ``[{"metric", "column", "points": [[committed_at ISO, snapshot_id, value], ...]}]``, each the newest
    ``points`` up to the run's end (a page rendered again later shows what the run saw), each series read back
    only as far as those points go (`load_series` with ``last``). A series with no point is left out."""
    from quality.metrics.table import load_series, metrics_table

    wanted = charted_series(run)
    if not wanted:
        return {}
    table = metrics_table(lh)
    if table is None or table.current_snapshot() is None:
        return {}
    end = parse_time(run.finished)
    end = end.astimezone(UTC) if end is not None else None
    out: dict[str, list[dict[str, Any]]] = {}
    for name, series in wanted.items():
        for metric, column in series:
            found = load_series(lh, name, metric, column, last=points, until=end)
            picked = [p for p in found if end is None or p[0] <= end][-points:]
            if picked:
                pts = [[at.isoformat(), sid, value] for at, sid, value in picked]
                out.setdefault(name, []).append({"metric": metric, "column": column, "points": pts})
    return out


def open_incident_list(lh: Lakehouse, *, limit: int = MAX_INCIDENTS) -> list[dict[str, Any]]:
    """The open incidents of the alerts record (`quality.alerts`), oldest first, each reduced to what a page
    shows: table, check, column, kind, severity, opened_at, last_seen, sent, delivered, message."""
    from quality.alerts import OPEN, open_incidents

    keep = ("table", "check", "column", "kind", "severity", "opened_at", "last_seen", "sent", "delivered", "message")
    found = [{k: inc.get(k) for k in keep} for inc in open_incidents(lh.store) if inc.get("status") == OPEN]
    found.sort(key=lambda inc: (str(inc["opened_at"]), str(inc["table"]), str(inc["check"])))
    return found[:limit] + ([{"more": len(found) - limit}] if len(found) > limit else [])


#: The period a run's page prices each table over: the day before the run ended.
COST_PERIOD = timedelta(days=1)


def table_costs(lh: Lakehouse, run: QualityRun) -> dict[str, dict[str, Any]]:
    """Per table of ``run``: what it cost the store in the day before the run ended (`Lakehouse.cost`, as
    `lakestream table cost` prints it), as its JSON form. A table whose cost cannot be read is left out."""
    from object_store.errors import LakestreamError

    end = parse_time(run.finished)
    until = end.astimezone(UTC) if end is not None else datetime.now(UTC)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(run.tables) | {r.table for r in run.results}):
        try:
            out[name] = lh.cost(name, since=until - COST_PERIOD, until=until).to_dict()
        except (LakestreamError, OSError) as exc:
            log.warning("the report of run %s shows no cost of %s: %s", run.run_id, name, exc)
    return out


def report_data(lh: Lakehouse, run: QualityRun) -> dict[str, Any]:
    """What a run's page shows beyond the run record, read from the warehouse as plain data: ``{"metrics":
    metric_series(...), "incidents": open_incident_list(...), "cost": table_costs(...)}``. What cannot be read
    is logged and left out (None: the page says it was not read); the page is written either way."""
    from object_store.errors import LakestreamError

    data: dict[str, Any] = {"metrics": None, "incidents": None, "cost": None}
    parts: tuple[tuple[str, Callable[[], Any]], ...] = (
        ("metrics", lambda: metric_series(lh, run)),
        ("incidents", lambda: open_incident_list(lh)),
        ("cost", lambda: table_costs(lh, run)),
    )
    for key, read in parts:
        try:
            data[key] = read()
        except (LakestreamError, OSError) as exc:
            log.warning("the report of run %s shows no %s: %s", run.run_id, key, exc)
    return data
