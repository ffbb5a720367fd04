"""The pages: a run's page and the index of runs, assembled from their sections in one HTML shell whose style
and one script are the package's assets (``assets/report.css``, ``assets/report.js``)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from importlib.resources import files
from typing import Any
from urllib.parse import quote

from quality.report.charts import bar_chart
from quality.report.figures import TREND_RUNS, check_seconds, duration, lag_records
from quality.report.format import esc, num, run_label, secs, status_chip
from quality.report.run_sections import filter_box, incidents_section, lineage, lineage_section, trends
from quality.report.table_section import table_section
from quality.results import NOT_EVALUATED, QualityRun


def _asset(name: str) -> str:
    # A file ends with a newline; the text before it is the asset (a page carries the script, and its hash, as is).
    return (files(__package__) / "assets" / name).read_text(encoding="utf-8").rstrip("\n")


_CSS = _asset("report.css")
#: From a run's page (``_lakestream/quality/reports/``) to the warehouse root.
WAREHOUSE_FROM_REPORT = "../../../"


#: The run page's only script. It enhances what the HTML already shows: the filter box (hidden without it) hides
#: table sections (and their table-of-contents entries) whose name does not contain the text, or that passed when
#: "failures only" is ticked; the URL's hash can set both (``#filter=failures&q=orders``, so a link or a headless
#: screenshot shows the filtered page); a link to a collapsed section opens it. No data goes into it (the
#: Content-Security-Policy allows exactly this text by its hash).
FILTER_JS = _asset("report.js")


_FILTER_JS_HASH = base64.b64encode(hashlib.sha256(FILTER_JS.encode()).digest()).decode()


def _page(title: str, header: str, body: str, *, script: bool = False) -> str:
    """A page; with ``script``, `FILTER_JS` at the end of the body, allowed by its hash (no other script runs)."""
    scripts = f"; script-src 'sha256-{_FILTER_JS_HASH}'" if script else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        f'img-src data:{scripts}">'
        f"<title>{esc(title)}</title><style>\n{_CSS}\n</style></head><body>"
        f'<header class="top">{header}</header><main>{body}</main>'
        + (f"<script>{FILTER_JS}</script>" if script else "")
        + "</body></html>\n"
    )


def render_run(
    run: QualityRun,
    history: list[QualityRun],
    *,
    docs_base: str = WAREHOUSE_FROM_REPORT,
    index_href: str = "../index.html",
    data: Mapping[str, Any] | None = None,
) -> str:
    """The HTML page of ``run``; ``history`` (any order, may include ``run``) feeds the trend charts and the
    last reconciliation of tables this run did not reconcile. ``docs_base`` is prefixed to Data Docs paths
    (relative to the warehouse root): by default the way from ``_lakestream/quality/reports/`` to the root.

    ``data`` (`report_data`: plain data read from the warehouse) adds per table the charts of its metrics series
    (``data["metrics"]``, `metric_series`), the points the run's anomaly checks flagged in red, and the open
    incidents of the alerts record (``data["incidents"]``, `open_incident_list`); a part that is None (or no
    ``data``) is not shown."""
    data = data or {}
    failing = {r.table for r in run.results if not r.ok}
    # failing tables first (each group by name): the first detailed section is where to look
    tables = sorted(set(run.tables) | {r.table for r in run.results}, key=lambda t: (t not in failing, t))
    violations = run.violations
    errors = [r for r in run.results if r.error is not None]
    skipped = [r for r in run.results if r.status == NOT_EVALUATED]
    failed = [r for r in run.results if not r.ok]
    if run.ok:
        why = f"All {len(run.results):,} checks on {len(tables):,} tables passed." if run.results else "No checks ran."
    else:
        why = (
            f"{len(failed):,} of {len(run.results):,} checks failed: {len(violations):,} violations"
            + (f", {len(errors):,} checks could not run" if errors else "")
            + (f", {len(skipped):,} checks not evaluated because an upstream table failed" if skipped else "")
            + "."
        )
    total_lag = sum(lag_records(run.tables.get(t)) or 0 for t in tables)
    cards = [
        ("Tables", num(len(tables)), False),
        ("Checks", num(len(run.results)), False),
        ("Violations", num(len(violations)), bool(violations)),
        ("Errors", num(len(errors)), bool(errors)),
        ("Not evaluated", num(len(skipped)), bool(skipped)),
        ("Check time", secs(check_seconds(run)), False),
        ("Rows checked", num(sum(r.rows for r in run.results)), False),
        ("Lag (records)", num(int(total_lag)), False),
        ("Run took", secs(duration(run)), False),
    ]
    sections = [
        table_section(i, t, run, history, docs_base, data.get("metrics"), data.get("cost"))
        for i, t in enumerate(tables)
    ]
    anchors = {t: f"t{i}" for i, t in enumerate(tables)}
    status = "PASS" if run.ok else "FAIL"
    header = (
        f'<h1>lakestream data quality</h1><span class="meta">run <code>{esc(run.run_id)}</code> · started '
        f"{esc(run.started)} · finished {esc(run.finished)}</span>"
        f'<span class="meta"><a href="{esc(index_href)}">all runs</a></span>'
    )
    body = (
        f'<div class="banner {status.lower()}"><div class="big" id="status">{status}</div>'
        f'<div class="why">{esc(why)}</div></div>'
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="label">{esc(label)}</div>'
            f'<div class="value{" bad" if bad else ""}">{value}</div></div>'
            for label, value, bad in cards
        )
        + "</div>"
        + (filter_box(len(tables)) if tables else "")
        + (
            f'<section class="box"><h2>Tables</h2><ul class="toc">{"".join(t for t, _ in sections)}</ul></section>'
            if tables
            else ""
        )
        + incidents_section(data.get("incidents"), anchors, run)
        + lineage_section(lineage(run), anchors, {t for t in tables if t in failing})
        + trends(run, history)
        + "".join(b for _, b in sections)
    )
    return _page(f"{status} · quality run {run.run_id}", header, body, script=bool(tables))


def render_index(runs: list[QualityRun], *, reports_href: str = "reports/") -> str:
    """The HTML index of ``runs`` (any order; listed newest first), each linking to
    ``<reports_href><run_id>.html``."""
    ordered = sorted({r.run_id: r for r in runs}.values(), key=lambda r: r.run_id, reverse=True)
    chrono = list(reversed(ordered))[-TREND_RUNS:]
    labels = [run_label(r) for r in chrono]
    colors = ["#16a34a" if r.ok else "#dc2626" for r in chrono]
    rows = []
    for r in ordered:
        tables = set(r.tables) | {c.table for c in r.results}
        href = reports_href + quote(r.run_id, safe="") + ".html"
        errors = sum(1 for c in r.results if c.error is not None)
        bad = ' class="bad"' if not r.ok else ""
        rows.append(
            f"<tr{bad}><td>{status_chip(r.ok)}</td>"
            f'<td><a href="{esc(href)}"><code>{esc(r.run_id)}</code></a></td><td>{esc(r.started)}</td>'
            f'<td class="num">{secs(duration(r))}</td><td class="num">{num(len(tables))}</td>'
            f'<td class="num">{num(len(r.results))}</td><td class="num">{num(len(r.violations))}</td>'
            f'<td class="num">{num(errors)}</td><td class="num">{secs(check_seconds(r))}</td></tr>'
        )
    latest = ordered[0] if ordered else None
    banner = ""
    if latest is not None:
        status = "PASS" if latest.ok else "FAIL"
        banner = (
            f'<div class="banner {status.lower()}"><div class="big">{status}</div><div class="why">Latest run '
            f'<a href="{esc(reports_href + quote(latest.run_id, safe="") + ".html")}"><code>{esc(latest.run_id)}</code>'
            f"</a>: {len(latest.violations):,} violations in {len(latest.results):,} checks.</div></div>"
        )
    charts = (
        '<section class="box"><h2>Trends</h2><div class="charts">'
        + bar_chart("Violations per run", labels, [float(len(r.violations)) for r in chrono], colors)
        + bar_chart(
            "Check time per run (seconds; red: failed)", labels, [check_seconds(r) for r in chrono], colors, unit=" s"
        )
        + "</div></section>"
    )
    table = (
        f'<section class="box"><h2>Runs ({len(ordered):,})</h2>'
        '<table class="grid"><thead><tr><th>Status</th><th>Run</th><th>Started</th><th class="num">Took</th>'
        '<th class="num">Tables</th><th class="num">Checks</th><th class="num">Violations</th>'
        '<th class="num">Errors</th><th class="num">Check time</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></section>"
        if ordered
        else '<section class="box"><p class="muted">No quality runs yet.</p></section>'
    )
    header = '<h1>lakestream data quality: runs</h1><span class="meta">newest first</span>'
    return _page("lakestream data quality: runs", header, banner + charts + table)
