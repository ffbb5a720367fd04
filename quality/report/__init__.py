"""Quality reports people look at: one self-contained HTML page per run and an index of runs.

Pages are plain HTML with inline CSS and charts drawn here as inline SVG: no CDN, no external resource (a
Content-Security-Policy forbids them), so a page opens offline from a local folder or a download. A run's page
carries one small inline script (allowed by its hash in the policy, `FILTER_JS`) that only enhances: it shows a
filter box (by table name, failures only; also from the URL, ``#filter=failures&q=orders``) and opens a collapsed
section a link jumps to. Without it every section is still there: failing tables open, passing ones collapsed.
Everything that comes from data (table names, keys, values, messages) is escaped.

A run's page shows its overall status, a lineage view (which tables feed which models, from their subscriptions),
then per table: its checks (status, time, rows), violations (check code,
bucket, offsets, snapshot, sample keys, expected vs actual), per bucket the log end, lake offset and lag, each
subscription's lag, the last reconciliation and its cost, Great Expectations results with links to their Data
Docs, data files, its metrics per commit as small charts (the points the run's anomaly checks flagged in red);
the open incidents of the alerts record; and trends over the last runs (lag, files, check time) as charts. The
metrics and incidents are read from the warehouse by `report_data` and handed to `render_run` as plain data.

`write_report` writes ``reports/<run_id>.html`` and ``index.html`` to the warehouse under
``_lakestream/quality/`` (and to a local folder if given). Data Docs paths (``CheckResult.details["data_docs"]``,
relative to the warehouse root) are linked relative to the page, so the links work when the warehouse is a local
folder.

The package, one job per module: `format` (how values are written), `figures` (figures read off run records),
`charts` (inline SVG), `data` (what a page shows beyond the run record, read from the warehouse),
`table_section` (one table's section), `run_sections` (incidents, lineage, trends, the filter box), `pages`
(the two pages, their style and script from ``assets/``) and `write` (to the warehouse and a local folder).
"""

from __future__ import annotations

from quality.report.charts import bar_chart, line_chart, metric_chart
from quality.report.data import (
    CHART_METRICS,
    MAX_INCIDENTS,
    METRIC_POINTS,
    charted_series,
    metric_series,
    open_incident_list,
    report_data,
)
from quality.report.figures import ANOMALY_PREFIX, TREND_RUNS
from quality.report.pages import FILTER_JS, WAREHOUSE_FROM_REPORT, render_index, render_run
from quality.report.run_sections import lineage
from quality.report.table_section import MAX_VIOLATIONS
from quality.report.write import INDEX_KEY, REPORTS_PREFIX, write_report

__all__ = [
    "ANOMALY_PREFIX",
    "CHART_METRICS",
    "FILTER_JS",
    "INDEX_KEY",
    "MAX_INCIDENTS",
    "MAX_VIOLATIONS",
    "METRIC_POINTS",
    "REPORTS_PREFIX",
    "TREND_RUNS",
    "WAREHOUSE_FROM_REPORT",
    "bar_chart",
    "charted_series",
    "line_chart",
    "lineage",
    "metric_chart",
    "metric_series",
    "open_incident_list",
    "render_index",
    "render_run",
    "report_data",
    "write_report",
]
