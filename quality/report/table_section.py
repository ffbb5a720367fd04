"""The section of one table in a run's page: its figures, checks (an anomaly check's details in words),
violations, metrics charts, buckets (log vs lake), subscriptions, last reconciliation and Great Expectations
results."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quality.report.charts import metric_chart
from quality.report.figures import ANOMALY_PREFIX, lag_records, lag_seconds, series_key
from quality.report.format import (
    byte_size,
    data_value,
    docs_href,
    dollars,
    esc,
    ident,
    num,
    result_chip,
    result_message,
    secs,
    status_chip,
)
from quality.results import RECONCILE, CheckResult, QualityRun, Violation

#: Violations listed per table (the rest are counted).
MAX_VIOLATIONS = 200


def _detail_value(value: Any, depth: int = 0) -> str:
    """One detail's value: a mapping as a nested table (one level; deeper values as text), a list of scalars
    comma separated, anything else as a value cut to 160 characters."""
    if isinstance(value, dict) and value and depth == 0:
        rows = "".join(
            f"<tr><th>{esc(k)}</th><td>{_detail_value(v, depth + 1)}</td></tr>" for k, v in list(value.items())[:20]
        )
        more = f'<tr><td colspan="2" class="muted">+{len(value) - 20} more</td></tr>' if len(value) > 20 else ""
        return f'<table class="mini">{rows}{more}</table>'
    if isinstance(value, list | tuple) and value and all(not isinstance(v, dict | list | tuple) for v in value):
        shown = ", ".join(data_value(v, 80) for v in value[:10])
        return shown + (f' <span class="muted">+{len(value) - 10} more</span>' if len(value) > 10 else "")
    return data_value(value, 160)  # numbers as they are: ids and offsets get no thousands separators


def _number(value: Any) -> str:
    """A metric's value as the anomaly messages write it (6 significant digits), or a dash."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—" if value is None else str(value)
    return f"{value:.6g}"


def _judged_point(point: Mapping[str, Any], anomalous: set[Any], spec: Mapping[str, Any]) -> str:
    """One judged point of an anomaly check as a sentence: its snapshot and time, its value, and the band (or
    the relative bound) it was judged against, or why it was not judged."""
    sid = point.get("snapshot_id")
    at = esc(point.get("committed_at") or "?")
    head = f'snapshot <span class="mono">{esc(sid)}</span> ({at}): value {esc(_number(point.get("value")))}'
    if point.get("skipped"):
        return f"<li>{head}, not judged: {esc(point['skipped'])}</li>"
    flagged = sid in anomalous
    parts = []
    if point.get("low") is not None and point.get("high") is not None:
        where = "outside" if flagged else "within"
        parts.append(f"{where} [{esc(_number(point['low']))}, {esc(_number(point['high']))}]")
    basis = "its phase in the season" if point.get("method") == "seasonal" else "the recent commits"
    parts.append(f"median {esc(_number(point.get('centre')))} of {basis}, scale {esc(_number(point.get('scale')))}")
    change = point.get("relative_change")
    if isinstance(change, int | float) and not isinstance(change, bool):
        parts.append(f"a change of {change:+.1%}")
    elif change is not None:
        parts.append(f"a change of {esc(change)}")  # from a centre of 0: inf, kept as text in JSON
    chip = (
        f' <span class="chip {"fail" if spec.get("severity") == "fail" else "warn"}">anomaly</span>' if flagged else ""
    )
    return f"<li>{head}: {'; '.join(parts)}{chip}</li>"


def _anomaly_details(details: Mapping[str, Any]) -> str:
    """An anomaly check's details in words: the series watched, then each judged point and each anomaly's
    message in full (the generic table showed them as JSON cut at 160 characters)."""
    what = f"{details.get('metric')}" + (f" of column {details['column']}" if details.get("column") else "")
    head = (
        f"<div><b>{esc(what)}</b> · severity {esc(details.get('severity', 'warn'))} · "
        f"{num(details.get('points'))} points</div>"
    )
    anomalies = [a for a in details.get("anomalies") or [] if isinstance(a, Mapping)]
    flagged = {a.get("snapshot_id") for a in anomalies}
    judged = [j for j in details.get("judged") or [] if isinstance(j, Mapping)]
    points = "".join(_judged_point(j, flagged, details) for j in judged)
    listed = f'<ul class="judged">{points}</ul>' if points else ""
    skipped = details.get("skipped")
    if skipped and not judged:
        listed = f'<div class="muted">not judged: {esc(skipped)}</div>'
    messages = "".join(f'<div class="msg">{esc(a.get("message", ""))}</div>' for a in anomalies)
    return head + listed + messages


def _details(details: dict[str, Any], docs_base: str) -> str:
    """A check's details as a small table of key and value (a Data Docs path as a link)."""
    if not details:
        return '<span class="muted">—</span>'
    rows = []
    for key, value in details.items():
        if key == "data_docs":
            href = docs_href(value, docs_base)
            cell = f'<a href="{esc(href)}">Data Docs</a>' if href is not None else data_value(value)
            rows.append(f"<tr><th>data docs</th><td>{cell}</td></tr>")
            continue
        rows.append(f"<tr><th>{esc(key)}</th><td>{_detail_value(value)}</td></tr>")
    return f'<table class="mini details">{"".join(rows)}</table>'


def _anomaly_marks(run: QualityRun, table: str) -> dict[str, dict[int, str]]:
    """Per series key, the snapshots the run's anomaly checks of ``table`` flagged, with their messages."""
    marks: dict[str, dict[int, str]] = {}
    for r in run.results:
        if r.table != table or not r.check.startswith(ANOMALY_PREFIX):
            continue
        key = series_key(str(r.details.get("metric")), r.details.get("column"))
        severity = r.details.get("severity", "warn")
        for a in r.details.get("anomalies") or []:
            if isinstance(a, Mapping) and a.get("snapshot_id") is not None:
                marks.setdefault(key, {})[int(a["snapshot_id"])] = f"Anomaly ({severity}): {a.get('message', '')}"
    return marks


def _metrics_block(table: str, run: QualityRun, series: list[dict[str, Any]] | None) -> str:
    if series is None:
        return ""
    if not series:
        return '<h3>Metrics per commit</h3><p class="muted">No metrics recorded yet (lakestream metrics collect).</p>'
    marks = _anomaly_marks(run, table)
    charts = []
    for s in series:
        key = series_key(s["metric"], s.get("column"))
        points = [(str(at), int(sid), float(v)) for at, sid, v in s.get("points") or []]
        unit = " s" if s["metric"].endswith("_seconds_max") or s["metric"].endswith("_seconds_min") else ""
        charts.append(metric_chart(key, points, marks.get(key), unit=unit))
    return f'<h3>Metrics per commit</h3><div class="sparks">{"".join(charts)}</div>'


def _cost_block(cost: Mapping[str, Any] | None) -> str:
    """What the table cost the store in the day before the run (`quality.report.data.table_costs`)."""
    if cost is None:
        return ""
    rows = []
    for line in cost.get("lines") or []:
        moved = int((line.get("usage") or {}).get("bytes_sent", 0)) + int(
            (line.get("usage") or {}).get("bytes_received", 0)
        )
        rows.append(
            f'<tr><td>{esc(line.get("part"))}</td><td class="num">{num(line.get("operations"))}</td>'
            f'<td class="num">{num(line.get("write_requests"))}</td>'
            f'<td class="num">{num(line.get("read_requests"))}</td>'
            f'<td class="num">{byte_size(moved)}</td><td class="num">{dollars(line.get("dollars"))}</td>'
            f'<td class="muted">{esc(line.get("note") or "")}</td></tr>'
        )
    rows.append(
        f'<tr><td>storage</td><td></td><td></td><td></td><td class="num">{byte_size(cost.get("stored_bytes"))}</td>'
        f'<td class="num">{dollars(cost.get("storage_dollars"))}</td><td class="muted">held now</td></tr>'
    )
    return (
        f"<h3>Cost, last 24 hours: {dollars(cost.get('total_dollars'))}</h3>"
        '<p class="muted">Requests and bytes the store served for this table, at the configured price list '
        "(<code>lakestream table cost</code>).</p>"
        '<table class="grid"><thead><tr><th>Part</th><th class="num">Operations</th><th class="num">Write req.</th>'
        '<th class="num">Read req.</th><th class="num">Bytes</th><th class="num">$</th><th>Note</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _checks_table(results: list[CheckResult], docs_base: str) -> str:
    if not results:
        return '<p class="muted">No checks ran on this table in this run.</p>'
    rows = []
    for r in results:
        cls = ' class="bad"' if not r.ok else ""
        error = result_message(r)
        anomaly = r.check.startswith(ANOMALY_PREFIX) and r.details.get("metric") is not None
        shown = _anomaly_details(r.details) if anomaly else _details(r.details, docs_base)
        rows.append(
            f"<tr{cls}><td><code>{esc(r.check)}</code></td><td>{result_chip(r)}</td>"
            f'<td class="num mono">{ident(r.snapshot_id)}</td><td class="num">{secs(r.seconds)}</td>'
            f'<td class="num">{num(r.rows)}</td><td class="num">{num(len(r.violations))}</td>'
            f"<td>{shown}{error}</td></tr>"
        )
    return (
        '<table class="grid"><thead><tr><th>Check</th><th>Status</th><th class="num">Snapshot</th>'
        '<th class="num">Time</th><th class="num">Rows</th><th class="num">Violations</th><th>Details</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _violations_table(violations: list[Violation]) -> str:
    if not violations:
        return ""
    rows = []
    for v in violations[:MAX_VIOLATIONS]:
        offsets = f"[{num(v.offsets[0])}, {num(v.offsets[1])})" if v.offsets else "—"
        keys = ", ".join(data_value(k, 80) for k in list(v.keys)[:10]) or '<span class="muted">—</span>'
        if len(v.keys) > 10:
            keys += f' <span class="muted">+{len(v.keys) - 10} more</span>'
        rows.append(
            f'<tr><td><code>{esc(v.check)}</code></td><td class="num">{num(v.bucket)}</td>'
            f'<td class="num mono">{offsets}</td><td class="num mono">{ident(v.snapshot_id)}</td>'
            f"<td>{keys}</td><td>{data_value(v.expected)}</td><td>{data_value(v.actual)}</td>"
            f'<td class="msg">{esc(v.message)}</td></tr>'
        )
    more = ""
    if len(violations) > MAX_VIOLATIONS:
        more = f'<p class="muted">… and {len(violations) - MAX_VIOLATIONS:,} more violations.</p>'
    return (
        f"<h3>Violations ({len(violations):,})</h3>"
        '<table class="grid"><thead><tr><th>Check</th><th class="num">Bucket</th><th class="num">Offsets</th>'
        '<th class="num">Snapshot</th><th>Sample keys</th><th>Expected</th><th>Actual</th><th>Message</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"
    )


def _bar(value: Any, vmax: float) -> str:
    if not value or vmax <= 0:
        return '<span class="bar zero"></span>'
    return f'<span class="bar" style="width:{max(3, round(80 * float(value) / vmax))}px"></span>'


def _buckets_table(stats: dict[str, Any]) -> str:
    buckets = stats.get("buckets") or []
    if not buckets:
        return '<p class="muted">No bucket figures.</p>'
    vmax = float(max((b.get("lag_records") or 0) for b in buckets))
    rows = []
    for b in buckets:
        rows.append(
            f'<tr><td class="num">{num(b.get("bucket"))}</td><td class="num">{num(b.get("log_end"))}</td>'
            f'<td class="num">{num(b.get("lake_offset"))}</td>'
            f'<td class="num">{_bar(b.get("lag_records"), vmax)}{num(b.get("lag_records"))}</td>'
            f'<td class="num">{secs(b.get("lag_seconds"))}</td></tr>'
        )
    total_end = sum(b.get("log_end") or 0 for b in buckets)
    total_lake = sum(b.get("lake_offset") or 0 for b in buckets)
    rows.append(
        f'<tr class="total"><td>all</td><td class="num">{num(total_end)}</td><td class="num">{num(total_lake)}</td>'
        f'<td class="num">{num(int(lag_records(stats) or 0))}</td><td class="num">{secs(lag_seconds(stats))}</td>'
        "</tr>"
    )
    return (
        '<table class="grid"><thead><tr><th class="num">Bucket</th><th class="num">Log end</th>'
        '<th class="num">Lake offset</th><th class="num">Lag (records)</th><th class="num">Lag (time)</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _subscriptions_table(stats: dict[str, Any]) -> str:
    from layers.rounds import is_self_consumer

    every = stats.get("subscriptions") or []
    subs = [s for s in every if not is_self_consumer(str(s.get("consumer") or ""))]
    hidden = len(every) - len(subs)
    note = (
        f'<p class="muted">{hidden:,} internal subscription{"s" if hidden > 1 else ""} not shown (a model\'s '
        "own log, kept for its rounds).</p>"
        if hidden
        else ""
    )
    if not subs:
        return '<p class="muted">No subscriptions.</p>' + note
    rows = []
    for s in subs:
        stale = ' <span class="chip stale">STALE</span>' if s.get("stale") else ""
        rows.append(
            f"<tr><td><code>{esc(s.get('consumer'))}</code>{stale}</td>"
            f'<td class="num">{num(s.get("lag_records"))}</td><td class="num">{secs(s.get("lag_seconds"))}</td>'
            f'<td class="num">{secs(s.get("idle_seconds"))}</td></tr>'
        )
    return (
        '<table class="grid"><thead><tr><th>Consumer</th><th class="num">Lag (records)</th>'
        '<th class="num">Lag (time)</th><th class="num">Idle for</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>{note}"
    )


def _last_reconcile(table: str, run: QualityRun, history: list[QualityRun], docs_base: str) -> str:
    found: tuple[CheckResult, QualityRun] | None = None
    for r in [run, *sorted((h for h in history if h.run_id < run.run_id), key=lambda h: h.run_id, reverse=True)]:
        matches = [c for c in r.results if c.table == table and c.check == RECONCILE]
        if matches:
            found = (matches[-1], r)
            break
    if found is None:
        return '<p class="muted">Never reconciled (in the runs kept).</p>'
    result, where = found
    origin = "this run" if where.run_id == run.run_id else f"run {esc(where.run_id)}"
    rate = f"{result.rows / result.seconds:,.0f} rows/s" if result.seconds > 0 else "—"
    return (
        f'<div class="kv"><span>{result_chip(result)}</span><span>from {origin}</span>'
        f'<span>snapshot <b class="mono">{ident(result.snapshot_id)}</b></span>'
        f"<span>time <b>{secs(result.seconds)}</b></span><span>rows <b>{num(result.rows)}</b></span>"
        f"<span>throughput <b>{rate}</b></span><span>violations <b>{num(len(result.violations))}</b></span></div>"
        f'<div class="msg">{_details(result.details, docs_base)}</div>'
    )


def _gx_table(results: list[CheckResult], docs_base: str) -> str:
    gx = [r for r in results if r.check == "gx" or r.check.startswith("gx:")]
    if not gx:
        return ""
    rows = []
    for r in gx:
        suite = r.check.partition(":")[2] or r.details.get("suite") or "—"
        href = docs_href(r.details.get("data_docs"), docs_base)
        link = f'<a href="{esc(href)}">open Data Docs</a>' if href else data_value(r.details.get("data_docs"))
        expectations = r.details.get("expectations")
        if isinstance(expectations, list | dict):
            expectations = len(expectations)
        rows.append(
            f"<tr><td><code>{esc(suite)}</code></td><td>{result_chip(r)}</td>"
            f'<td class="num">{num(expectations)}</td><td class="num">{num(len(r.violations))}</td>'
            f'<td class="num">{num(r.rows)}</td><td class="num">{secs(r.seconds)}</td><td>{link}</td></tr>'
        )
    return (
        "<h3>Great Expectations</h3>"
        '<table class="grid"><thead><tr><th>Suite</th><th>Status</th><th class="num">Expectations</th>'
        '<th class="num">Failed</th><th class="num">Rows</th><th class="num">Time</th><th>Data Docs</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def table_section(
    index: int,
    table: str,
    run: QualityRun,
    history: list[QualityRun],
    docs_base: str,
    metrics: Mapping[str, list[dict[str, Any]]] | None = None,
    costs: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[str, str]:
    """One table's entry in the table of contents and its section, the ``index``-th (anchor ``t<index>``)."""
    results = [r for r in run.results if r.table == table]
    ok = all(r.ok for r in results)
    stats = run.tables.get(table) or {}
    files = stats.get("files") or {}
    published = run.published.get(table) if table in run.published else "—"
    violations = [v for r in results for v in r.violations]
    # data-* carry what the filter reads; failing tables open, passing ones collapsed (the page opens on problems)
    data = f'data-table="{esc(table)}" data-status="{"pass" if ok else "fail"}"'
    toc = (
        f'<li {data}>{status_chip(ok)} <a href="#t{index}">{esc(table)}</a>'
        + (f' <span class="muted">({len(violations):,} violations)</span>' if violations else "")
        + "</li>"
    )
    body = (
        f'<section class="box tsec" id="t{index}" {data}><details{"" if ok else " open"}>'
        f"<summary><h2>{status_chip(ok)} <span>{esc(table)}</span></h2></summary>"
        f'<div class="kv"><span>lake snapshot <b class="mono">{ident(stats.get("snapshot_id"))}</b></span>'
        f'<span>published <b class="mono">{ident(published)}</b></span>'
        f"<span>data files <b>{num(files.get('count'))}</b></span>"
        f"<span>size <b>{byte_size(files.get('bytes'))}</b></span>"
        f"<span>lake records <b>{num(files.get('records'))}</b></span>"
        + (f"<span>delete files <b>{num(files.get('delete_files'))}</b></span>" if files.get("delete_files") else "")
        + f"<span>log records <b>{num(stats.get('log_records'))}</b></span></div>"
        f"<h3>Checks</h3>{_checks_table(results, docs_base)}"
        f"{_violations_table(violations)}"
        f"{_metrics_block(table, run, None if metrics is None else metrics.get(table, []))}"
        f"{_cost_block(None if costs is None else costs.get(table))}"
        '<div class="cols"><div><h3>Buckets: log vs lake</h3>'
        f"{_buckets_table(stats)}</div><div><h3>Subscriptions</h3>{_subscriptions_table(stats)}</div></div>"
        f"<h3>Last reconciliation</h3>{_last_reconcile(table, run, history, docs_base)}"
        f"{_gx_table(results, docs_base)}</details></section>"
    )
    return toc, body
