"""The sections of a run's page about the run as a whole: the filter box, the open incidents (and what this
run's findings open), the lineage of tables and the trends over the last runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quality.report.charts import bar_chart, line_chart
from quality.report.figures import check_seconds, file_count, lag_records, lag_seconds, timeline
from quality.report.format import data_value, esc, run_label
from quality.results import QualityRun


def filter_box(tables: int) -> str:
    """The filter box: hidden until `FILTER_JS` runs (without it, it would do nothing)."""
    return (
        '<div class="filter box" id="filter" hidden><label>Filter tables '
        '<input type="search" id="filter-q" placeholder="name contains…" autocomplete="off"></label>'
        '<label><input type="checkbox" id="filter-fails"> failures only</label>'
        f'<span class="muted" id="filter-count">{tables:,} tables</span></div>'
    )


def incidents_section(
    incidents: list[dict[str, Any]] | None, anchors: Mapping[str, str], run: QualityRun | None = None
) -> str:
    """The open incidents of the alerts record, and what this run's findings open.

    Incidents are opened when a run's alerts are sent (`quality.alerts.send_alerts`: the DAG's ``alerts`` task,
    after ``check``), not by the check that writes this page; so the record read here does not hold this run's
    failures yet. "No open incidents." beside a failing check read as a contradiction: the findings of the run
    (`findings_of`, what the alerts will open or keep open) are listed too, those not open yet apart."""
    if incidents is None:
        return ""
    from quality.alerts import findings_of, incident_key

    more = next((i["more"] for i in incidents if "more" in i), 0)
    shown = [i for i in incidents if "more" not in i]
    open_keys = {incident_key(str(i.get("table")), str(i.get("check")), i.get("column")) for i in shown}
    findings = findings_of(run.results) if run is not None else []
    # with more incidents than listed, a finding may be open among those left out: it is not called new then
    pending = [f for f in findings if f.key not in open_keys] if not more else []

    def linked(table: str) -> str:
        return f'<a href="#{anchors[table]}">{esc(table)}</a>' if table in anchors else esc(table)

    rows = []
    for inc in shown:
        told = inc.get("sent") == "open"
        delivered = ", ".join(str(c) for c in inc.get("delivered") or [])
        notified = (
            f'<span class="chip pass">yes</span> <span class="muted">{esc(delivered)}</span>'
            if told
            else '<span class="chip error">not yet</span>'
        )
        severity = inc.get("severity") or ""
        rows.append(
            f'<tr class="{"bad" if severity == "fail" else ""}"><td>{linked(str(inc.get("table")))}</td>'
            f"<td><code>{esc(inc.get('check'))}</code></td>"
            f"<td>{esc(inc.get('column') or '—')}</td><td>{esc(inc.get('kind'))} · {esc(severity)}</td>"
            f"<td>{esc(inc.get('opened_at'))}</td><td>{esc(inc.get('last_seen'))}</td><td>{notified}</td>"
            f'<td class="msg">{data_value(inc.get("message"), 160)}</td></tr>'
        )
    to_open = ""
    if pending:
        items = "".join(
            f'<tr class="{"bad" if f.severity == "fail" else ""}"><td>{linked(f.table)}</td>'
            f"<td><code>{esc(f.check)}</code></td><td>{esc(f.column or '—')}</td>"
            f"<td>{esc(f.kind)} · {esc(f.severity)}</td>"
            f'<td class="msg">{data_value(f.message, 300)}</td></tr>'
            for f in pending
        )
        to_open = (
            '<table class="grid"><thead><tr><th>Table</th><th>Check</th><th>Column</th><th>Kind</th>'
            f"<th>Message</th></tr></thead><tbody>{items}</tbody></table>"
        )
    when = (
        "when its alerts are sent (the alerts task after the check, <code>quality.alerts.send_alerts</code>); "
        "the check itself opens none"
    )
    if not shown:
        if not pending:
            return (
                '<section class="box" id="incidents"><h2>Incidents</h2>'
                '<p class="muted">No open incidents.</p></section>'
            )
        return (
            '<section class="box" id="incidents"><h2>Incidents</h2>'
            f"<p>No incident is open in the alerts record yet; this run opens {len(pending):,} {when}:</p>"
            f"{to_open}</section>"
        )
    pending_note = f"<p>And this run opens {len(pending):,} more {when}:</p>{to_open}" if pending else ""
    return (
        f'<section class="box" id="incidents"><h2>Incidents ({len(shown) + more:,} open)</h2>'
        '<table class="grid"><thead><tr><th>Table</th><th>Check</th><th>Column</th><th>Kind</th><th>Since</th>'
        "<th>Last seen</th><th>Notified</th><th>Message</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        + (f'<p class="muted">and {more:,} more</p>' if more else "")
        + pending_note
        + "</section>"
    )


def lineage(run: QualityRun) -> dict[str, list[str]]:
    """Which tables feed which, from what the run's figures already hold: a subscription ``layers.<model>`` in a
    table (`layers.rounds.consumer_of`) means the table feeds ``<model>``; a model's own (``.self``) is not an
    input. Returns each model's inputs, models and inputs in name order."""
    from layers.rounds import model_of_consumer

    inputs: dict[str, set[str]] = {}
    for table, stats in (run.tables or {}).items():
        for sub in (stats or {}).get("subscriptions") or []:
            model = model_of_consumer(str(sub.get("consumer") or ""))
            if model is not None:
                inputs.setdefault(model, set()).add(table)
    return {model: sorted(tables) for model, tables in sorted(inputs.items())}


def _levels(edges: dict[str, list[str]]) -> dict[str, int]:
    """Each table's level: 0 for a table no model builds (a source), else one more than its highest input (a
    cycle, which layers refuses, is cut where it closes)."""
    level: dict[str, int] = {}

    def visit(name: str, path: frozenset[str]) -> int:
        if name in level:
            return level[name]
        ups = [u for u in edges.get(name, []) if u not in path]
        level[name] = 1 + max((visit(u, path | {name}) for u in ups), default=-1) if name in edges else 0
        return level[name]

    for name in sorted({*edges, *(u for ups in edges.values() for u in ups)}):
        visit(name, frozenset())
    return level


def lineage_section(edges: dict[str, list[str]], anchors: dict[str, str], failing: set[str]) -> str:
    """Levels of tables left to right (sources, then what they build, ...), each model with its inputs; names link
    to their sections, failing tables are marked."""
    if not edges:
        return ""
    level = _levels(edges)

    def name(table: str) -> str:
        mark = ' <span class="chip fail">FAIL</span>' if table in failing else ""
        label = f"<code>{esc(table)}</code>"
        linked = f'<a href="#{anchors[table]}">{label}</a>' if table in anchors else label
        return f'<span class="node{" bad" if table in failing else ""}" data-node="{esc(table)}">{linked}{mark}</span>'

    columns = []
    for depth in range(max(level.values()) + 1):
        items = []
        for table in sorted(t for t, d in level.items() if d == depth):
            ups = edges.get(table)
            fed = (
                '<div class="from muted">from ' + ", ".join(name(u) for u in ups) + "</div>" if ups is not None else ""
            )
            items.append(f"<li>{name(table)}{fed}</li>")
        title = "sources" if depth == 0 else f"level {depth}"
        columns.append(f'<div class="level"><h3>{title}</h3><ul>{"".join(items)}</ul></div>')
    edge_count = sum(len(ups) for ups in edges.values())
    arrow = '<span class="arrow">→</span>'
    return (
        f'<section class="box" id="lineage"><h2>Lineage</h2><p class="muted">Which tables feed which ({edge_count:,} '
        "inputs of models, from their subscriptions <code>layers.&lt;model&gt;</code>).</p>"
        f'<div class="lineage">{arrow.join(columns)}</div></section>'
    )


def trends(run: QualityRun, history: list[QualityRun]) -> str:
    """The trend charts over the runs up to ``run`` (`timeline`): lag, oldest untiered record, data
    files per table, and check time per run."""
    runs = timeline(run, history)
    labels = [run_label(r) for r in runs]
    tables = sorted({t for r in runs for t in r.tables})
    lag = [(t, [lag_records(r.tables.get(t)) for r in runs]) for t in tables]
    age = [(t, [lag_seconds(r.tables.get(t)) for r in runs]) for t in tables]
    files = [(t, [file_count(r.tables.get(t)) for r in runs]) for t in tables]
    colors = [
        ("#16a34a" if r.ok else "#dc2626") if r.run_id != run.run_id else ("#15803d" if r.ok else "#991b1b")
        for r in runs
    ]
    return (
        f'<section class="box"><h2>Trends over the last {len(runs)} runs</h2><div class="charts">'
        + line_chart("Lag behind the log (records) per table", labels, lag)
        + line_chart("Oldest untiered record (seconds) per table", labels, age, " s")
        + line_chart("Data files per table", labels, files)
        + bar_chart(
            "Check time per run (seconds; red: failed)", labels, [check_seconds(r) for r in runs], colors, unit=" s"
        )
        + "</div></section>"
    )
