"""Metrics per lake commit, computed from the commit's changes and kept in the Iceberg table ``_lakestream.metrics``.

`collect` walks each table's new commits and records their metrics (``collect_metrics``); `partials` is one
commit's metrics as per-bucket partial aggregates, merged on the driver; `sketch` the mergeable distinct-count
sketch those partials carry; `table` the metrics table itself (created, appended once per call, read as series,
maintained). What callers import from ``quality.metrics`` is re-exported here.
"""

from __future__ import annotations

from quality.metrics.collect import (
    MAX_COMMITS,
    OTHER,
    ROUND,
    TIERING,
    WORKERS,
    MetricsError,
    collect_metrics,
    is_new_for,
)
from quality.metrics.partials import (
    BucketPartial,
    after_images_partial,
    bucket_partial,
    merge_partials,
    metric_rows,
    numeric,
)
from quality.metrics.table import (
    Recorded,
    append_metrics,
    load_commits,
    load_series,
    metrics_dataframe,
    metrics_table,
    recorded,
)

__all__ = [
    "MAX_COMMITS",
    "OTHER",
    "ROUND",
    "TIERING",
    "WORKERS",
    "BucketPartial",
    "MetricsError",
    "Recorded",
    "after_images_partial",
    "append_metrics",
    "bucket_partial",
    "collect_metrics",
    "is_new_for",
    "load_commits",
    "load_series",
    "merge_partials",
    "metric_rows",
    "metrics_dataframe",
    "metrics_table",
    "numeric",
    "recorded",
]
