"""Figures read off run records (no I/O): how long a run took, its check time, a table's lag and data files, the
runs the trend charts cover."""

from __future__ import annotations

from typing import Any

from quality.report.format import parse_time
from quality.results import QualityRun

#: How many runs the trend charts cover.
TREND_RUNS = 30


ANOMALY_PREFIX = "anomaly:"


def duration(run: QualityRun) -> float | None:
    """Seconds from a run's start to its end, or None if either is missing or unreadable."""
    start, end = parse_time(run.started), parse_time(run.finished)
    if start is None or end is None:
        return None
    try:
        return max(0.0, (end - start).total_seconds())
    except TypeError:  # one naive, one aware
        return None


def timeline(run: QualityRun | None, history: list[QualityRun]) -> list[QualityRun]:
    """The runs up to ``run`` (itself included), oldest first, at most `TREND_RUNS`."""
    by_id = {r.run_id: r for r in history}
    if run is not None:
        by_id[run.run_id] = run
    runs = sorted(by_id.values(), key=lambda r: r.run_id)
    if run is not None:
        runs = [r for r in runs if r.run_id <= run.run_id]
    return runs[-TREND_RUNS:]


def check_seconds(run: QualityRun) -> float:
    """The seconds a run's checks took, summed."""
    return float(sum(r.seconds for r in run.results))


def lag_records(stats: dict[str, Any] | None) -> float | None:
    """A table's records in the log not yet in the lake (all buckets), or None without figures."""
    if not stats or not isinstance(stats.get("buckets"), list):
        return None
    return float(sum(b.get("lag_records") or 0 for b in stats["buckets"]))


def lag_seconds(stats: dict[str, Any] | None) -> float | None:
    """The age of a table's oldest untiered record (its worst bucket), or None if unknown."""
    if not stats or not isinstance(stats.get("buckets"), list):
        return None
    ages = [b.get("lag_seconds") for b in stats["buckets"] if b.get("lag_seconds") is not None]
    return float(max(ages)) if ages else None


def file_count(stats: dict[str, Any] | None) -> float | None:
    """A table's data files, or None without figures."""
    files = (stats or {}).get("files") or {}
    count = files.get("count") if isinstance(files, dict) else None
    return float(count) if count is not None else None


def series_key(metric: str, column: str | None) -> str:
    """The name of a metrics series: the metric, ``metric:column`` for a column's."""
    return metric if column is None else f"{metric}:{column}"
