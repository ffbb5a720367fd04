"""The figures a quality report shows for one table, from metadata only: per bucket the log's end, the lake's
offset and the lag between them (records, and seconds since the oldest record not yet in the lake was
appended), each subscription's lag, and the current lake snapshot's data files. Cost: one lake-table load, one
listing per bucket, one HEAD per bucket (or subscription bucket) that is behind; no data is read, so it does not
grow with the table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakehouse.iceberg.offsets import lake_offsets

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse


def _summary_int(summary: Any, key: str) -> int | None:
    if summary is None:
        return None
    try:
        value = summary.get(key)
    except (AttributeError, KeyError):
        value = None
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def table_stats(lh: Lakehouse, name: Any, *, now: datetime | None = None) -> dict[str, Any]:
    """The report's figures for table ``name`` of the `Lakehouse` ``lh``, as JSON values::

        {"table": "ods.orders", "snapshot_id": 123 | None,
         "buckets": [{"bucket": 0, "log_start": 0, "log_end": 120, "lake_offset": 100, "lag_records": 20,
                      "lag_seconds": 4.2}, ...],
         "subscriptions": [{"consumer": "c1", "lag_records": 3, "lag_seconds": 1.0, "idle_seconds": 60.0,
                            "stale": False}, ...],
         "files": {"count": 4, "bytes": 8192, "records": 100, "delete_files": 0},
         "log_records": 120}

    ``lag_seconds`` is the age of the oldest record not yet in the lake (0 when caught up; None when its
    segment was removed by retention); a subscription's ``lag_seconds`` is its oldest unconsumed record's age
    over all buckets. ``files`` comes from the current snapshot's summary (None values if it has none).
    ``log_records`` counts the records the log retains (end minus start offsets, over all buckets).
    """
    at = now or datetime.now(UTC)
    definition = lh.table(name)
    table_name = str(definition.name)
    log = lh.log(definition.name)
    lake_table = lh.lake_table(definition.name)
    # the lake first, then the log: the log's end is read after, so it is never behind the lake's offset
    lake = lake_offsets(lake_table.metadata, definition.buckets, name=table_name, io=lake_table.io)
    snapshot = lake_table.current_snapshot()
    ends = log.end_offsets()
    starts = log.start_offsets()
    buckets = []
    for b in range(definition.buckets):
        end, offset = ends.get(b, 0), lake.get(b, 0)
        lag = max(0, end - offset)
        seconds: float | None = 0.0
        if lag:
            appended = log.appended_at(b, offset)
            seconds = None if appended is None else max(0.0, at.timestamp() - appended / 1e6)
        buckets.append(
            {
                "bucket": b,
                "log_start": starts.get(b, 0),
                "log_end": end,
                "lake_offset": offset,
                "lag_records": lag,
                "lag_seconds": seconds,
            }
        )
    subscriptions: list[dict[str, Any]] = []
    for sub in lh.subscriptions(definition.name):
        if sub.stale:
            subscriptions.append(
                {"consumer": sub.consumer, "lag_records": None, "lag_seconds": None, "idle_seconds": None}
                | {"stale": True}
            )
            continue
        lags = sub.lag(at)
        behind = [lag for lag in lags.values() if lag.records]
        ages = [lag.seconds for lag in behind if lag.seconds is not None]
        subscriptions.append(
            {
                "consumer": sub.consumer,
                "lag_records": sum(lag.records for lag in lags.values()),
                "lag_seconds": 0.0 if not behind else (max(ages) if ages else None),
                "idle_seconds": max(0.0, sub.idle_for(at).total_seconds()),
                "stale": False,
            }
        )
    summary = snapshot.summary if snapshot is not None else None
    files = {
        "count": _summary_int(summary, "total-data-files") if snapshot is not None else 0,
        "bytes": _summary_int(summary, "total-files-size") if snapshot is not None else 0,
        "records": _summary_int(summary, "total-records") if snapshot is not None else 0,
        "delete_files": _summary_int(summary, "total-delete-files") if snapshot is not None else 0,
    }
    return {
        "table": table_name,
        "snapshot_id": snapshot.snapshot_id if snapshot is not None else None,
        "buckets": buckets,
        "subscriptions": subscriptions,
        "files": files,
        "log_records": sum(max(0, ends.get(b, 0) - starts.get(b, 0)) for b in range(definition.buckets)),
    }


__all__ = ["table_stats"]
