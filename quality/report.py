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
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import logging
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from quality.results import NOT_EVALUATED, RECONCILE, CheckResult, QualityRun, Violation
from quality.runs import QUALITY_PREFIX, check_run_id, load_runs

log = logging.getLogger(__name__)

REPORTS_PREFIX = f"{QUALITY_PREFIX}reports/"
INDEX_KEY = f"{QUALITY_PREFIX}index.html"
#: From a run's page (``_lakestream/quality/reports/``) to the warehouse root.
WAREHOUSE_FROM_REPORT = "../../../"
#: How many runs the trend charts cover.
TREND_RUNS = 30
#: Violations listed per table (the rest are counted).
MAX_VIOLATIONS = 200
#: Points per metrics series charted in a run's page (the newest, up to the run's end).
METRIC_POINTS = 100
#: The table-level metrics series charted for every table (those recorded), before the anomaly checks' own.
CHART_METRICS = ("changes", "rows", "freshness_seconds_max")
#: Open incidents listed in a run's page (the rest are counted).
MAX_INCIDENTS = 200
ANOMALY_PREFIX = "anomaly:"

_PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#4b5563", "#65a30d"]
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")

_CSS = """
:root { --ok:#15803d; --ok-bg:#dcfce7; --bad:#b91c1c; --bad-bg:#fee2e2; --warn:#b45309; --warn-bg:#fef3c7;
  --ink:#111827; --muted:#6b7280; --line:#e5e7eb; --card:#ffffff; --page:#f3f4f6; --accent:#2563eb; }
* { box-sizing: border-box; }
body { margin:0; background:var(--page); color:var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header.top { background:#111827; color:#f9fafb; padding:14px 28px; display:flex; align-items:baseline; gap:18px;
  flex-wrap:wrap; }
header.top h1 { font-size:18px; margin:0; font-weight:600; }
header.top a { color:#93c5fd; }
header.top .meta { color:#d1d5db; font-size:13px; }
main { max-width:1240px; margin:0 auto; padding:20px 28px 48px; }
.banner { border-radius:10px; padding:18px 24px; margin-bottom:18px; display:flex; align-items:center; gap:22px; }
.banner.pass { background:var(--ok-bg); color:var(--ok); border:2px solid var(--ok); }
.banner.fail { background:var(--bad-bg); color:var(--bad); border:2px solid var(--bad); }
.banner .big { font-size:44px; font-weight:800; letter-spacing:2px; }
.banner .why { font-size:16px; color:var(--ink); }
.cards { display:grid; grid-template-columns:repeat(auto-fill, minmax(130px, 1fr)); gap:12px; margin-bottom:18px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px 14px; }
.card .label { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.card .value { font-size:22px; font-weight:650; font-variant-numeric:tabular-nums; }
.card .value.bad { color:var(--bad); }
section.box { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:16px 20px;
  margin-bottom:18px; }
section.box > h2 { margin:0 0 10px; font-size:19px; display:flex; align-items:center; gap:10px; flex-wrap:wrap; }
h3 { font-size:14px; margin:16px 0 6px; color:#374151; text-transform:uppercase; letter-spacing:.04em; }
.chip { display:inline-block; border-radius:999px; padding:1px 10px; font-size:12px; font-weight:700;
  letter-spacing:.04em; vertical-align:middle; white-space:nowrap; }
.chip.pass { background:var(--ok-bg); color:var(--ok); }
.chip.fail { background:var(--bad-bg); color:var(--bad); }
.chip.error, .chip.stale { background:var(--warn-bg); color:var(--warn); }
.chip.skip { background:var(--line); color:#374151; }
.chip.warn { background:var(--warn-bg); color:var(--warn); }
ul.judged { margin:0; padding-left:18px; }
table.grid { border-collapse:collapse; width:100%; font-variant-numeric:tabular-nums; }
table.grid th, table.grid td { border-bottom:1px solid var(--line); padding:5px 8px; text-align:left;
  vertical-align:top; }
table.grid th { background:#f9fafb; font-size:12px; color:#374151; font-weight:600; white-space:nowrap; }
table.grid td.num, table.grid th.num { text-align:right; white-space:nowrap; }
table.grid tr.total td { font-weight:650; border-top:2px solid var(--line); }
table.grid tr.bad td { background:#fff7f7; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:12.5px; }
.kv { display:flex; flex-wrap:wrap; gap:6px 22px; color:#374151; margin-bottom:6px; }
.kv b { font-variant-numeric:tabular-nums; }
.muted { color:var(--muted); }
.msg { color:#374151; }
.bar { display:inline-block; height:9px; background:var(--accent); border-radius:3px; vertical-align:middle;
  margin-right:6px; }
.bar.zero { background:var(--line); width:3px; }
.cols { display:grid; grid-template-columns:1fr 1fr; gap:18px; }
@media (max-width: 900px) { .cols { grid-template-columns:1fr; } }
.charts { display:grid; grid-template-columns:repeat(auto-fill, minmax(540px, 1fr)); gap:14px; }
figure.chart { margin:0; background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px; }
figure.chart figcaption { font-weight:600; margin-bottom:4px; }
.legend { display:flex; flex-wrap:wrap; gap:4px 14px; font-size:12px; color:#374151; margin-top:4px; }
.legend i { display:inline-block; width:12px; height:12px; border-radius:3px; margin-right:4px;
  vertical-align:-2px; }
ul.toc { list-style:none; padding:0; margin:0; display:flex; flex-wrap:wrap; gap:8px 18px; }
a { color:var(--accent); text-decoration:none; }
a:hover { text-decoration:underline; }
details.more summary { cursor:pointer; color:var(--accent); }
section.tsec > details > summary { cursor:pointer; list-style-position:outside; }
section.tsec > details > summary > h2 { display:inline-flex; align-items:center; gap:10px; margin:0; font-size:19px;
  flex-wrap:wrap; }
section.tsec > details[open] > summary { margin-bottom:10px; }
table.mini { border-collapse:collapse; font-size:12.5px; font-variant-numeric:tabular-nums; }
table.mini th, table.mini td { padding:1px 10px 1px 0; text-align:left; vertical-align:top; border:0; }
table.mini th { color:var(--muted); font-weight:500; white-space:nowrap; background:none; font-size:12.5px; }
table.mini table.mini { margin:0; }
table.mini td { overflow-wrap:anywhere; }
.lineage { display:flex; align-items:flex-start; gap:8px; overflow-x:auto; }
.lineage .level { min-width:180px; }
.lineage .level h3 { margin-top:0; }
.lineage ul { list-style:none; padding:0; margin:0; }
.lineage li { margin-bottom:8px; }
.lineage .arrow { color:var(--muted); font-size:22px; padding-top:18px; }
.lineage .node.bad code { color:var(--bad); }
.lineage .from { font-size:12px; }
.filter { display:flex; flex-wrap:wrap; align-items:center; gap:8px 18px; margin-bottom:18px; }
.filter input[type=search] { font:inherit; padding:5px 10px; border:1px solid var(--line); border-radius:6px;
  min-width:280px; }
.filter[hidden], section.tsec[hidden], ul.toc li[hidden] { display:none; }
.sparks { display:grid; grid-template-columns:repeat(auto-fill, minmax(300px, 1fr)); gap:10px; }
figure.spark { margin:0; border:1px solid var(--line); border-radius:8px; padding:6px 8px; }
figure.spark figcaption { font-size:12.5px; font-weight:600; display:flex; gap:8px; align-items:center; }
"""

#: The run page's only script. It enhances what the HTML already shows: the filter box (hidden without it) hides
#: table sections (and their table-of-contents entries) whose name does not contain the text, or that passed when
#: "failures only" is ticked; the URL's hash can set both (``#filter=failures&q=orders``, so a link or a headless
#: screenshot shows the filtered page); a link to a collapsed section opens it. No data goes into it (the
#: Content-Security-Policy allows exactly this text by its hash).
FILTER_JS = """(function () {
  var box = document.getElementById("filter");
  if (!box) return;
  var q = document.getElementById("filter-q"), fails = document.getElementById("filter-fails");
  var count = document.getElementById("filter-count");
  var sections = document.querySelectorAll("section.tsec"), items = document.querySelectorAll("ul.toc li");
  function apply() {
    var text = q.value.trim().toLowerCase(), only = fails.checked, shown = 0;
    sections.forEach(function (s) {
      var hit = s.dataset.table.toLowerCase().indexOf(text) >= 0 && (!only || s.dataset.status === "fail");
      s.hidden = !hit;
      if (hit) { shown += 1; if (text) s.querySelector("details").open = true; }
    });
    items.forEach(function (li) {
      li.hidden = !(li.dataset.table.toLowerCase().indexOf(text) >= 0 && (!only || li.dataset.status === "fail"));
    });
    count.textContent = shown + " of " + sections.length + " tables shown";
    document.body.dataset.filtered = (text || only) ? "yes" : "no";
  }
  function fromHash() {
    var hash = location.hash.slice(1);
    if (hash.indexOf("=") >= 0) {
      var params = new URLSearchParams(hash);
      if (params.has("q")) q.value = params.get("q");
      fails.checked = params.get("filter") === "failures";
    } else if (hash) {
      var target = document.getElementById(hash);
      var inner = target && target.querySelector("details");
      if (inner) inner.open = true;
    }
    apply();
  }
  q.addEventListener("input", apply);
  fails.addEventListener("change", apply);
  window.addEventListener("hashchange", fromHash);
  box.hidden = false;
  fromHash();
})();"""
_FILTER_JS_HASH = base64.b64encode(hashlib.sha256(FILTER_JS.encode()).digest()).decode()


# ---- formatting -------------------------------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.2f}"
    return _e(value)


def _ident(value: Any) -> str:
    """An identifier (snapshot id): as is, no thousands separators."""
    return "—" if value is None else _e(value)


def _secs(value: Any) -> str:
    """A duration, as a person reads it."""
    if value is None:
        return "—"
    try:
        s = float(value)
    except (TypeError, ValueError):
        return _e(value)
    if s < 0.01 and s > 0:
        return f"{s * 1000:.1f} ms"
    if s < 60:
        return f"{s:.2f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    if s < 86400:
        return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"
    return f"{int(s // 86400)} d {int(s % 86400 // 3600)} h"


def _bytes(value: Any) -> str:
    if value is None:
        return "—"
    try:
        n = float(value)
    except (TypeError, ValueError):
        return _e(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} PB"  # pragma: no cover


def _value(value: Any, limit: int = 300) -> str:
    """A data value (JSON-ish), escaped and cut to ``limit`` characters."""
    if value is None:
        return '<span class="muted">—</span>'
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    if len(text) > limit:
        text = text[:limit] + "…"
    return f"<code>{_e(text)}</code>"


def _when(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None


def _duration(run: QualityRun) -> float | None:
    start, end = _when(run.started), _when(run.finished)
    if start is None or end is None:
        return None
    try:
        return max(0.0, (end - start).total_seconds())
    except TypeError:  # one naive, one aware
        return None


def _short(run: QualityRun) -> str:
    at = _when(run.started)
    return f"{at:%m-%d %H:%M}" if at is not None else run.run_id[:13]


def _status(ok: bool, error: bool = False) -> str:
    if error:
        return '<span class="chip error">ERROR</span>'
    return '<span class="chip pass">PASS</span>' if ok else '<span class="chip fail">FAIL</span>'


def _result_status(r: CheckResult) -> str:
    """The chip of one check's outcome: PASS, WARN (passed with warnings: nothing held back, but not a plain
    pass), FAIL, ERROR or NOT EVALUATED (an upstream table failed)."""
    if r.status == NOT_EVALUATED:
        return '<span class="chip skip">NOT EVALUATED</span>'
    if r.ok and r.warnings:
        return '<span class="chip warn">WARN</span>'
    return _status(r.ok, r.error is not None)


def _result_message(r: CheckResult) -> str:
    if r.not_evaluated is not None:
        return f'<div class="msg">not evaluated: {_e(r.not_evaluated)}</div>'
    return f'<div class="msg">{_e(r.error)}</div>' if r.error else ""


def _docs_href(path: Any, base: str) -> str | None:
    """The link to a Data Docs page whose path is relative to the warehouse root, or None if ``path`` is not a
    relative path (a URL with a scheme is not linked: pages link only inside the warehouse)."""
    if not isinstance(path, str) or not path or _SCHEME.match(path) or path.startswith(("/", "\\")):
        return None
    return base + quote(path, safe="/#.-_~")


def _detail_value(value: Any, depth: int = 0) -> str:
    """One detail's value: a mapping as a nested table (one level; deeper values as text), a list of scalars
    comma separated, anything else as a value cut to 160 characters."""
    if isinstance(value, dict) and value and depth == 0:
        rows = "".join(
            f"<tr><th>{_e(k)}</th><td>{_detail_value(v, depth + 1)}</td></tr>" for k, v in list(value.items())[:20]
        )
        more = f'<tr><td colspan="2" class="muted">+{len(value) - 20} more</td></tr>' if len(value) > 20 else ""
        return f'<table class="mini">{rows}{more}</table>'
    if isinstance(value, list | tuple) and value and all(not isinstance(v, dict | list | tuple) for v in value):
        shown = ", ".join(_value(v, 80) for v in value[:10])
        return shown + (f' <span class="muted">+{len(value) - 10} more</span>' if len(value) > 10 else "")
    return _value(value, 160)  # numbers as they are: ids and offsets get no thousands separators


def _number(value: Any) -> str:
    """A metric's value as the anomaly messages write it (6 significant digits), or a dash."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—" if value is None else str(value)
    return f"{value:.6g}"


def _judged_point(point: Mapping[str, Any], anomalous: set[Any], spec: Mapping[str, Any]) -> str:
    """One judged point of an anomaly check as a sentence: its snapshot and time, its value, and the band (or
    the relative bound) it was judged against, or why it was not judged."""
    sid = point.get("snapshot_id")
    at = _e(point.get("committed_at") or "?")
    head = f'snapshot <span class="mono">{_e(sid)}</span> ({at}): value {_e(_number(point.get("value")))}'
    if point.get("skipped"):
        return f"<li>{head}, not judged: {_e(point['skipped'])}</li>"
    flagged = sid in anomalous
    parts = []
    if point.get("low") is not None and point.get("high") is not None:
        where = "outside" if flagged else "within"
        parts.append(f"{where} [{_e(_number(point['low']))}, {_e(_number(point['high']))}]")
    basis = "its phase in the season" if point.get("method") == "seasonal" else "the recent commits"
    parts.append(f"median {_e(_number(point.get('centre')))} of {basis}, scale {_e(_number(point.get('scale')))}")
    change = point.get("relative_change")
    if isinstance(change, int | float) and not isinstance(change, bool):
        parts.append(f"a change of {change:+.1%}")
    elif change is not None:
        parts.append(f"a change of {_e(change)}")  # from a centre of 0: inf, kept as text in JSON
    chip = (
        f' <span class="chip {"fail" if spec.get("severity") == "fail" else "warn"}">anomaly</span>' if flagged else ""
    )
    return f"<li>{head}: {'; '.join(parts)}{chip}</li>"


def _anomaly_details(details: Mapping[str, Any]) -> str:
    """An anomaly check's details in words: the series watched, then each judged point and each anomaly's
    message in full (the generic table showed them as JSON cut at 160 characters)."""
    what = f"{details.get('metric')}" + (f" of column {details['column']}" if details.get("column") else "")
    head = (
        f"<div><b>{_e(what)}</b> · severity {_e(details.get('severity', 'warn'))} · "
        f"{_num(details.get('points'))} points</div>"
    )
    anomalies = [a for a in details.get("anomalies") or [] if isinstance(a, Mapping)]
    flagged = {a.get("snapshot_id") for a in anomalies}
    judged = [j for j in details.get("judged") or [] if isinstance(j, Mapping)]
    points = "".join(_judged_point(j, flagged, details) for j in judged)
    listed = f'<ul class="judged">{points}</ul>' if points else ""
    skipped = details.get("skipped")
    if skipped and not judged:
        listed = f'<div class="muted">not judged: {_e(skipped)}</div>'
    messages = "".join(f'<div class="msg">{_e(a.get("message", ""))}</div>' for a in anomalies)
    return head + listed + messages


def _details(details: dict[str, Any], docs_base: str) -> str:
    """A check's details as a small table of key and value (a Data Docs path as a link)."""
    if not details:
        return '<span class="muted">—</span>'
    rows = []
    for key, value in details.items():
        if key == "data_docs":
            href = _docs_href(value, docs_base)
            cell = f'<a href="{_e(href)}">Data Docs</a>' if href is not None else _value(value)
            rows.append(f"<tr><th>data docs</th><td>{cell}</td></tr>")
            continue
        rows.append(f"<tr><th>{_e(key)}</th><td>{_detail_value(value)}</td></tr>")
    return f'<table class="mini details">{"".join(rows)}</table>'


# ---- charts (inline SVG) ------------------------------------------------------------------------------------


def _nice_ceiling(value: float) -> float:
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exp:
            return step * exp
    return 10 * exp  # pragma: no cover


def _axis_label(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _legend(names: list[str]) -> str:
    items = "".join(
        f'<span><i style="background:{_PALETTE[i % len(_PALETTE)]}"></i>{_e(n)}</span>' for i, n in enumerate(names)
    )
    return f'<div class="legend">{items}</div>'


def _frame(vmax: float, w: int, h: int, left: int, top: int, bottom: int, right: int) -> list[str]:
    out = []
    for k in range(5):
        v = vmax * k / 4
        y = top + (h - top - bottom) * (1 - k / 4)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{w - right}" y2="{y:.1f}" stroke="#e5e7eb"/>')
        out.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#6b7280">'
            f"{_e(_axis_label(v))}</text>"
        )
    return out


def _x_positions(n: int, w: int, left: int, right: int, *, bars: bool = False) -> list[float]:
    span = w - left - right
    if bars:
        return [left + span * (i + 0.5) / n for i in range(n)]
    if n == 1:
        return [left + span / 2]
    return [left + span * i / (n - 1) for i in range(n)]


def _x_labels(labels: list[str], xs: list[float], h: int, bottom: int) -> list[str]:
    n = len(labels)
    step = max(1, math.ceil(n / 6))
    shown = set(range(0, n, step)) | {n - 1}
    return [
        f'<text x="{xs[i]:.1f}" y="{h - bottom + 16}" text-anchor="middle" font-size="11" fill="#6b7280">'
        f"{_e(labels[i])}</text>"
        for i in sorted(shown)
    ]


def line_chart(title: str, labels: list[str], series: list[tuple[str, list[float | None]]], unit: str = "") -> str:
    """A line chart, one line per series over ``labels`` (None: no point), as an HTML figure with inline SVG."""
    values = [v for _, vs in series for v in vs if v is not None]
    if not values or not labels:
        return f'<figure class="chart"><figcaption>{_e(title)}</figcaption><p class="muted">no data yet</p></figure>'
    w, h, left, right, top, bottom = 540, 210, 52, 34, 12, 30
    vmax = _nice_ceiling(max(values))
    xs = _x_positions(len(labels), w, left, right)

    def y(v: float) -> float:
        return top + (h - top - bottom) * (1 - v / vmax)

    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" role="img" '
        f'aria-label="{_e(title)}">'
    ]
    svg += _frame(vmax, w, h, left, top, bottom, right)
    svg += _x_labels(labels, xs, h, bottom)
    for i, (name, vs) in enumerate(series):
        color = _PALETTE[i % len(_PALETTE)]
        run: list[str] = []
        segments = []
        for x, v in zip(xs, vs, strict=False):
            if v is None:
                if run:
                    segments.append(run)
                run = []
            else:
                run.append(f"{x:.1f},{y(v):.1f}")
        if run:
            segments.append(run)
        for seg in segments:
            if len(seg) > 1:
                svg.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(seg)}"/>')
        for label, x, v in zip(labels, xs, vs, strict=False):
            if v is not None:
                svg.append(
                    f'<circle cx="{x:.1f}" cy="{y(v):.1f}" r="3" fill="{color}"><title>{_e(name)} · {_e(label)}: '
                    f"{_e(_axis_label(v) if v >= 1e3 else f'{v:g}')}{_e(unit)}</title></circle>"
                )
    svg.append("</svg>")
    return (
        f'<figure class="chart"><figcaption>{_e(title)}</figcaption>{"".join(svg)}'
        f"{_legend([name for name, _ in series])}</figure>"
    )


def bar_chart(title: str, labels: list[str], values: list[float], colors: list[str], *, unit: str = "") -> str:
    """A bar chart (one bar per label, each its color), as an HTML figure with inline SVG."""
    if not labels:
        return f'<figure class="chart"><figcaption>{_e(title)}</figcaption><p class="muted">no data yet</p></figure>'
    w, h, left, right, top, bottom = 540, 210, 52, 34, 12, 30
    vmax = _nice_ceiling(max(values) if values else 0)
    xs = _x_positions(len(labels), w, left, right, bars=True)
    width = max(2.0, min(36.0, (w - left - right) / len(labels) * 0.7))
    base = h - bottom
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" role="img" '
        f'aria-label="{_e(title)}">'
    ]
    svg += _frame(vmax, w, h, left, top, bottom, right)
    svg += _x_labels(labels, xs, h, bottom)
    for label, x, v, color in zip(labels, xs, values, colors, strict=False):
        bh = max(1.0, (base - top) * (v / vmax)) if v else 1.0
        svg.append(
            f'<rect x="{x - width / 2:.1f}" y="{base - bh:.1f}" width="{width:.1f}" height="{bh:.1f}" rx="2" '
            f'fill="{color}"><title>{_e(label)}: {_e(f"{v:.3g}")}{_e(unit)}</title></rect>'
        )
    svg.append("</svg>")
    return f'<figure class="chart"><figcaption>{_e(title)}</figcaption>{"".join(svg)}</figure>'


def metric_chart(
    title: str, points: list[tuple[str, int, float]], marks: Mapping[int, str] | None = None, *, unit: str = ""
) -> str:
    """A small line chart of one metrics series, ``points`` ``(committed_at, snapshot_id, value)`` oldest first,
    as an HTML figure with inline SVG; the points whose snapshot is in ``marks`` are red circles whose tooltip
    (``<title>``) is the mark's text (an anomaly's message), the newest point a dot with its value."""
    marks = marks or {}
    flagged = sum(1 for _, sid, _ in points if sid in marks)
    chip = f' <span class="chip fail">{flagged} anomal{"y" if flagged == 1 else "ies"}</span>' if flagged else ""
    caption = f"<figcaption>{_e(title)}{chip}</figcaption>"
    if not points:
        return f'<figure class="spark">{caption}<p class="muted">no points yet</p></figure>'
    w, h, left, right, top, bottom = 360, 120, 46, 10, 8, 20
    values = [v for _, _, v in points]
    lo, hi = min(values), max(values)
    vmin = min(0.0, lo)
    vmax = _nice_ceiling(hi) if hi > 0 else (hi if hi > vmin else vmin + 1.0)
    xs = _x_positions(len(points), w, left, right)

    def y(v: float) -> float:
        return top + (h - top - bottom) * (1 - (v - vmin) / (vmax - vmin))

    def label(v: float) -> str:
        return _axis_label(v) if abs(v) >= 1e3 else f"{v:.4g}"

    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" role="img" '
        f'aria-label="{_e(title)}">'
    ]
    for v in (vmin, vmax):
        svg.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - right}" y2="{y(v):.1f}" stroke="#e5e7eb"/>')
        svg.append(
            f'<text x="{left - 5}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10" fill="#6b7280">'
            f"{_e(label(v))}</text>"
        )
    for i, anchor in ((0, "start"), (len(points) - 1, "end")):
        at = _when(points[i][0])
        svg.append(
            f'<text x="{xs[i]:.1f}" y="{h - 5}" text-anchor="{anchor}" font-size="10" fill="#6b7280">'
            f"{_e(f'{at:%m-%d %H:%M}' if at is not None else points[i][0])}</text>"
        )
    line = " ".join(f"{x:.1f},{y(v):.1f}" for x, v in zip(xs, values, strict=True))
    if len(points) > 1:
        svg.append(f'<polyline fill="none" stroke="{_PALETTE[0]}" stroke-width="1.5" points="{line}"/>')
    for i, ((at, sid, v), x) in enumerate(zip(points, xs, strict=True)):
        tip = f"{title} at snapshot {sid} ({at}): {label(v)}{unit}"
        if sid in marks:
            svg.append(
                f'<circle class="anomaly" cx="{x:.1f}" cy="{y(v):.1f}" r="4.5" fill="#dc2626" stroke="#fff" '
                f'stroke-width="1"><title>{_e(tip)}. {_e(marks[sid])}</title></circle>'
            )
        elif i == len(points) - 1 or len(points) == 1:
            svg.append(
                f'<circle cx="{x:.1f}" cy="{y(v):.1f}" r="2.5" fill="{_PALETTE[0]}"><title>{_e(tip)}</title></circle>'
            )
    svg.append("</svg>")
    return f'<figure class="spark">{caption}{"".join(svg)}</figure>'


# ---- what a run's page shows beyond the run record ---------------------------------------------------------------


def _series_key(metric: str, column: str | None) -> str:
    return metric if column is None else f"{metric}:{column}"


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


def metric_series(lh: Any, run: QualityRun, *, points: int = METRIC_POINTS) -> dict[str, list[dict[str, Any]]]:
    """The metrics series a run's page charts (`charted_series`), from the metrics table (`quality.metrics_store`):
    per table ``[{"metric", "column", "points": [[committed_at ISO, snapshot_id, value], ...]}]``, each the newest
    ``points`` up to the run's end (a page rendered again later shows what the run saw), each series read back
    only as far as those points go (`load_series` with ``last``). A series with no point is left out."""
    from quality.metrics_store import load_series, metrics_table

    wanted = charted_series(run)
    if not wanted:
        return {}
    table = metrics_table(lh)
    if table is None or table.current_snapshot() is None:
        return {}
    end = _when(run.finished)
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


def open_incident_list(lh: Any, *, limit: int = MAX_INCIDENTS) -> list[dict[str, Any]]:
    """The open incidents of the alerts record (`quality.alerts`), oldest first, each reduced to what a page
    shows: table, check, column, kind, severity, opened_at, last_seen, sent, delivered, message."""
    from quality.alerts import OPEN, open_incidents

    keep = ("table", "check", "column", "kind", "severity", "opened_at", "last_seen", "sent", "delivered", "message")
    found = [{k: inc.get(k) for k in keep} for inc in open_incidents(lh.store) if inc.get("status") == OPEN]
    found.sort(key=lambda inc: (str(inc["opened_at"]), str(inc["table"]), str(inc["check"])))
    return found[:limit] + ([{"more": len(found) - limit}] if len(found) > limit else [])


def report_data(lh: Any, run: QualityRun) -> dict[str, Any]:
    """What a run's page shows beyond the run record, read from the warehouse as plain data: ``{"metrics":
    metric_series(...), "incidents": open_incident_list(...)}``. What cannot be read is logged and left out
    (None: the page says it was not read); the page is written either way."""
    from object_store.errors import LakestreamError

    data: dict[str, Any] = {"metrics": None, "incidents": None}
    for key, read in (("metrics", lambda: metric_series(lh, run)), ("incidents", lambda: open_incident_list(lh))):
        try:
            data[key] = read()
        except (LakestreamError, OSError) as exc:
            log.warning("the report of run %s shows no %s: %s", run.run_id, key, exc)
    return data


def _anomaly_marks(run: QualityRun, table: str) -> dict[str, dict[int, str]]:
    """Per series key, the snapshots the run's anomaly checks of ``table`` flagged, with their messages."""
    marks: dict[str, dict[int, str]] = {}
    for r in run.results:
        if r.table != table or not r.check.startswith(ANOMALY_PREFIX):
            continue
        key = _series_key(str(r.details.get("metric")), r.details.get("column"))
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
        key = _series_key(s["metric"], s.get("column"))
        points = [(str(at), int(sid), float(v)) for at, sid, v in s.get("points") or []]
        unit = " s" if s["metric"].endswith("_seconds_max") or s["metric"].endswith("_seconds_min") else ""
        charts.append(metric_chart(key, points, marks.get(key), unit=unit))
    return f'<h3>Metrics per commit</h3><div class="sparks">{"".join(charts)}</div>'


def _incidents_section(
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
        return f'<a href="#{anchors[table]}">{_e(table)}</a>' if table in anchors else _e(table)

    rows = []
    for inc in shown:
        told = inc.get("sent") == "open"
        delivered = ", ".join(str(c) for c in inc.get("delivered") or [])
        notified = (
            f'<span class="chip pass">yes</span> <span class="muted">{_e(delivered)}</span>'
            if told
            else '<span class="chip error">not yet</span>'
        )
        severity = inc.get("severity") or ""
        rows.append(
            f'<tr class="{"bad" if severity == "fail" else ""}"><td>{linked(str(inc.get("table")))}</td>'
            f"<td><code>{_e(inc.get('check'))}</code></td>"
            f"<td>{_e(inc.get('column') or '—')}</td><td>{_e(inc.get('kind'))} · {_e(severity)}</td>"
            f"<td>{_e(inc.get('opened_at'))}</td><td>{_e(inc.get('last_seen'))}</td><td>{notified}</td>"
            f'<td class="msg">{_value(inc.get("message"), 160)}</td></tr>'
        )
    to_open = ""
    if pending:
        items = "".join(
            f'<tr class="{"bad" if f.severity == "fail" else ""}"><td>{linked(f.table)}</td>'
            f"<td><code>{_e(f.check)}</code></td><td>{_e(f.column or '—')}</td>"
            f"<td>{_e(f.kind)} · {_e(f.severity)}</td>"
            f'<td class="msg">{_value(f.message, 300)}</td></tr>'
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


# ---- pages ---------------------------------------------------------------------------------------------------


def _page(title: str, header: str, body: str, *, script: bool = False) -> str:
    """A page; with ``script``, `FILTER_JS` at the end of the body, allowed by its hash (no other script runs)."""
    scripts = f"; script-src 'sha256-{_FILTER_JS_HASH}'" if script else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        f'img-src data:{scripts}">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f'<header class="top">{header}</header><main>{body}</main>'
        + (f"<script>{FILTER_JS}</script>" if script else "")
        + "</body></html>\n"
    )


def _filter_box(tables: int) -> str:
    """The filter box: hidden until `FILTER_JS` runs (without it, it would do nothing)."""
    return (
        '<div class="filter box" id="filter" hidden><label>Filter tables '
        '<input type="search" id="filter-q" placeholder="name contains…" autocomplete="off"></label>'
        '<label><input type="checkbox" id="filter-fails"> failures only</label>'
        f'<span class="muted" id="filter-count">{tables:,} tables</span></div>'
    )


def _timeline(run: QualityRun | None, history: list[QualityRun]) -> list[QualityRun]:
    """The runs up to ``run`` (itself included), oldest first, at most `TREND_RUNS`."""
    by_id = {r.run_id: r for r in history}
    if run is not None:
        by_id[run.run_id] = run
    runs = sorted(by_id.values(), key=lambda r: r.run_id)
    if run is not None:
        runs = [r for r in runs if r.run_id <= run.run_id]
    return runs[-TREND_RUNS:]


def _check_seconds(run: QualityRun) -> float:
    return float(sum(r.seconds for r in run.results))


def _lag_records(stats: dict[str, Any] | None) -> float | None:
    if not stats or not isinstance(stats.get("buckets"), list):
        return None
    return float(sum(b.get("lag_records") or 0 for b in stats["buckets"]))


def _lag_seconds(stats: dict[str, Any] | None) -> float | None:
    if not stats or not isinstance(stats.get("buckets"), list):
        return None
    ages = [b.get("lag_seconds") for b in stats["buckets"] if b.get("lag_seconds") is not None]
    return float(max(ages)) if ages else None


def _file_count(stats: dict[str, Any] | None) -> float | None:
    files = (stats or {}).get("files") or {}
    count = files.get("count") if isinstance(files, dict) else None
    return float(count) if count is not None else None


def _trends(run: QualityRun, history: list[QualityRun]) -> str:
    runs = _timeline(run, history)
    labels = [_short(r) for r in runs]
    tables = sorted({t for r in runs for t in r.tables})
    lag = [(t, [_lag_records(r.tables.get(t)) for r in runs]) for t in tables]
    age = [(t, [_lag_seconds(r.tables.get(t)) for r in runs]) for t in tables]
    files = [(t, [_file_count(r.tables.get(t)) for r in runs]) for t in tables]
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
            "Check time per run (seconds; red: failed)", labels, [_check_seconds(r) for r in runs], colors, unit=" s"
        )
        + "</div></section>"
    )


def _checks_table(results: list[CheckResult], docs_base: str) -> str:
    if not results:
        return '<p class="muted">No checks ran on this table in this run.</p>'
    rows = []
    for r in results:
        cls = ' class="bad"' if not r.ok else ""
        error = _result_message(r)
        anomaly = r.check.startswith(ANOMALY_PREFIX) and r.details.get("metric") is not None
        shown = _anomaly_details(r.details) if anomaly else _details(r.details, docs_base)
        rows.append(
            f"<tr{cls}><td><code>{_e(r.check)}</code></td><td>{_result_status(r)}</td>"
            f'<td class="num mono">{_ident(r.snapshot_id)}</td><td class="num">{_secs(r.seconds)}</td>'
            f'<td class="num">{_num(r.rows)}</td><td class="num">{_num(len(r.violations))}</td>'
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
        offsets = f"[{_num(v.offsets[0])}, {_num(v.offsets[1])})" if v.offsets else "—"
        keys = ", ".join(_value(k, 80) for k in list(v.keys)[:10]) or '<span class="muted">—</span>'
        if len(v.keys) > 10:
            keys += f' <span class="muted">+{len(v.keys) - 10} more</span>'
        rows.append(
            f'<tr><td><code>{_e(v.check)}</code></td><td class="num">{_num(v.bucket)}</td>'
            f'<td class="num mono">{offsets}</td><td class="num mono">{_ident(v.snapshot_id)}</td>'
            f"<td>{keys}</td><td>{_value(v.expected)}</td><td>{_value(v.actual)}</td>"
            f'<td class="msg">{_e(v.message)}</td></tr>'
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
            f'<tr><td class="num">{_num(b.get("bucket"))}</td><td class="num">{_num(b.get("log_end"))}</td>'
            f'<td class="num">{_num(b.get("lake_offset"))}</td>'
            f'<td class="num">{_bar(b.get("lag_records"), vmax)}{_num(b.get("lag_records"))}</td>'
            f'<td class="num">{_secs(b.get("lag_seconds"))}</td></tr>'
        )
    total_end = sum(b.get("log_end") or 0 for b in buckets)
    total_lake = sum(b.get("lake_offset") or 0 for b in buckets)
    rows.append(
        f'<tr class="total"><td>all</td><td class="num">{_num(total_end)}</td><td class="num">{_num(total_lake)}</td>'
        f'<td class="num">{_num(int(_lag_records(stats) or 0))}</td><td class="num">{_secs(_lag_seconds(stats))}</td>'
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
            f"<tr><td><code>{_e(s.get('consumer'))}</code>{stale}</td>"
            f'<td class="num">{_num(s.get("lag_records"))}</td><td class="num">{_secs(s.get("lag_seconds"))}</td>'
            f'<td class="num">{_secs(s.get("idle_seconds"))}</td></tr>'
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
    origin = "this run" if where.run_id == run.run_id else f"run {_e(where.run_id)}"
    rate = f"{result.rows / result.seconds:,.0f} rows/s" if result.seconds > 0 else "—"
    return (
        f'<div class="kv"><span>{_result_status(result)}</span><span>from {origin}</span>'
        f'<span>snapshot <b class="mono">{_ident(result.snapshot_id)}</b></span>'
        f"<span>time <b>{_secs(result.seconds)}</b></span><span>rows <b>{_num(result.rows)}</b></span>"
        f"<span>throughput <b>{rate}</b></span><span>violations <b>{_num(len(result.violations))}</b></span></div>"
        f'<div class="msg">{_details(result.details, docs_base)}</div>'
    )


def _gx_table(results: list[CheckResult], docs_base: str) -> str:
    gx = [r for r in results if r.check == "gx" or r.check.startswith("gx:")]
    if not gx:
        return ""
    rows = []
    for r in gx:
        suite = r.check.partition(":")[2] or r.details.get("suite") or "—"
        href = _docs_href(r.details.get("data_docs"), docs_base)
        link = f'<a href="{_e(href)}">open Data Docs</a>' if href else _value(r.details.get("data_docs"))
        expectations = r.details.get("expectations")
        if isinstance(expectations, list | dict):
            expectations = len(expectations)
        rows.append(
            f"<tr><td><code>{_e(suite)}</code></td><td>{_result_status(r)}</td>"
            f'<td class="num">{_num(expectations)}</td><td class="num">{_num(len(r.violations))}</td>'
            f'<td class="num">{_num(r.rows)}</td><td class="num">{_secs(r.seconds)}</td><td>{link}</td></tr>'
        )
    return (
        "<h3>Great Expectations</h3>"
        '<table class="grid"><thead><tr><th>Suite</th><th>Status</th><th class="num">Expectations</th>'
        '<th class="num">Failed</th><th class="num">Rows</th><th class="num">Time</th><th>Data Docs</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
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


def _lineage_section(edges: dict[str, list[str]], anchors: dict[str, str], failing: set[str]) -> str:
    """Levels of tables left to right (sources, then what they build, ...), each model with its inputs; names link
    to their sections, failing tables are marked."""
    if not edges:
        return ""
    level = _levels(edges)

    def name(table: str) -> str:
        mark = ' <span class="chip fail">FAIL</span>' if table in failing else ""
        label = f"<code>{_e(table)}</code>"
        linked = f'<a href="#{anchors[table]}">{label}</a>' if table in anchors else label
        return f'<span class="node{" bad" if table in failing else ""}" data-node="{_e(table)}">{linked}{mark}</span>'

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


def _table_section(
    index: int,
    table: str,
    run: QualityRun,
    history: list[QualityRun],
    docs_base: str,
    metrics: Mapping[str, list[dict[str, Any]]] | None = None,
) -> tuple[str, str]:
    results = [r for r in run.results if r.table == table]
    ok = all(r.ok for r in results)
    stats = run.tables.get(table) or {}
    files = stats.get("files") or {}
    published = run.published.get(table) if table in run.published else "—"
    violations = [v for r in results for v in r.violations]
    # data-* carry what the filter reads; failing tables open, passing ones collapsed (the page opens on problems)
    data = f'data-table="{_e(table)}" data-status="{"pass" if ok else "fail"}"'
    toc = (
        f'<li {data}>{_status(ok)} <a href="#t{index}">{_e(table)}</a>'
        + (f' <span class="muted">({len(violations):,} violations)</span>' if violations else "")
        + "</li>"
    )
    body = (
        f'<section class="box tsec" id="t{index}" {data}><details{"" if ok else " open"}>'
        f"<summary><h2>{_status(ok)} <span>{_e(table)}</span></h2></summary>"
        f'<div class="kv"><span>lake snapshot <b class="mono">{_ident(stats.get("snapshot_id"))}</b></span>'
        f'<span>published <b class="mono">{_ident(published)}</b></span>'
        f"<span>data files <b>{_num(files.get('count'))}</b></span>"
        f"<span>size <b>{_bytes(files.get('bytes'))}</b></span>"
        f"<span>lake records <b>{_num(files.get('records'))}</b></span>"
        + (f"<span>delete files <b>{_num(files.get('delete_files'))}</b></span>" if files.get("delete_files") else "")
        + f"<span>log records <b>{_num(stats.get('log_records'))}</b></span></div>"
        f"<h3>Checks</h3>{_checks_table(results, docs_base)}"
        f"{_violations_table(violations)}"
        f"{_metrics_block(table, run, None if metrics is None else metrics.get(table, []))}"
        '<div class="cols"><div><h3>Buckets: log vs lake</h3>'
        f"{_buckets_table(stats)}</div><div><h3>Subscriptions</h3>{_subscriptions_table(stats)}</div></div>"
        f"<h3>Last reconciliation</h3>{_last_reconcile(table, run, history, docs_base)}"
        f"{_gx_table(results, docs_base)}</details></section>"
    )
    return toc, body


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
    total_lag = sum(_lag_records(run.tables.get(t)) or 0 for t in tables)
    cards = [
        ("Tables", _num(len(tables)), False),
        ("Checks", _num(len(run.results)), False),
        ("Violations", _num(len(violations)), bool(violations)),
        ("Errors", _num(len(errors)), bool(errors)),
        ("Not evaluated", _num(len(skipped)), bool(skipped)),
        ("Check time", _secs(_check_seconds(run)), False),
        ("Rows checked", _num(sum(r.rows for r in run.results)), False),
        ("Lag (records)", _num(int(total_lag)), False),
        ("Run took", _secs(_duration(run)), False),
    ]
    sections = [_table_section(i, t, run, history, docs_base, data.get("metrics")) for i, t in enumerate(tables)]
    anchors = {t: f"t{i}" for i, t in enumerate(tables)}
    status = "PASS" if run.ok else "FAIL"
    header = (
        f'<h1>lakestream data quality</h1><span class="meta">run <code>{_e(run.run_id)}</code> · started '
        f"{_e(run.started)} · finished {_e(run.finished)}</span>"
        f'<span class="meta"><a href="{_e(index_href)}">all runs</a></span>'
    )
    body = (
        f'<div class="banner {status.lower()}"><div class="big" id="status">{status}</div>'
        f'<div class="why">{_e(why)}</div></div>'
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="label">{_e(label)}</div>'
            f'<div class="value{" bad" if bad else ""}">{value}</div></div>'
            for label, value, bad in cards
        )
        + "</div>"
        + (_filter_box(len(tables)) if tables else "")
        + (
            f'<section class="box"><h2>Tables</h2><ul class="toc">{"".join(t for t, _ in sections)}</ul></section>'
            if tables
            else ""
        )
        + _incidents_section(data.get("incidents"), anchors, run)
        + _lineage_section(lineage(run), anchors, {t for t in tables if t in failing})
        + _trends(run, history)
        + "".join(b for _, b in sections)
    )
    return _page(f"{status} · quality run {run.run_id}", header, body, script=bool(tables))


def render_index(runs: list[QualityRun], *, reports_href: str = "reports/") -> str:
    """The HTML index of ``runs`` (any order; listed newest first), each linking to
    ``<reports_href><run_id>.html``."""
    ordered = sorted({r.run_id: r for r in runs}.values(), key=lambda r: r.run_id, reverse=True)
    chrono = list(reversed(ordered))[-TREND_RUNS:]
    labels = [_short(r) for r in chrono]
    colors = ["#16a34a" if r.ok else "#dc2626" for r in chrono]
    rows = []
    for r in ordered:
        tables = set(r.tables) | {c.table for c in r.results}
        href = reports_href + quote(r.run_id, safe="") + ".html"
        errors = sum(1 for c in r.results if c.error is not None)
        bad = ' class="bad"' if not r.ok else ""
        rows.append(
            f"<tr{bad}><td>{_status(r.ok)}</td>"
            f'<td><a href="{_e(href)}"><code>{_e(r.run_id)}</code></a></td><td>{_e(r.started)}</td>'
            f'<td class="num">{_secs(_duration(r))}</td><td class="num">{_num(len(tables))}</td>'
            f'<td class="num">{_num(len(r.results))}</td><td class="num">{_num(len(r.violations))}</td>'
            f'<td class="num">{_num(errors)}</td><td class="num">{_secs(_check_seconds(r))}</td></tr>'
        )
    latest = ordered[0] if ordered else None
    banner = ""
    if latest is not None:
        status = "PASS" if latest.ok else "FAIL"
        banner = (
            f'<div class="banner {status.lower()}"><div class="big">{status}</div><div class="why">Latest run '
            f'<a href="{_e(reports_href + quote(latest.run_id, safe="") + ".html")}"><code>{_e(latest.run_id)}</code>'
            f"</a>: {len(latest.violations):,} violations in {len(latest.results):,} checks.</div></div>"
        )
    charts = (
        '<section class="box"><h2>Trends</h2><div class="charts">'
        + bar_chart("Violations per run", labels, [float(len(r.violations)) for r in chrono], colors)
        + bar_chart(
            "Check time per run (seconds; red: failed)", labels, [_check_seconds(r) for r in chrono], colors, unit=" s"
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


def write_report(
    lh: Any,
    run: QualityRun,
    *,
    history: list[QualityRun] | None = None,
    out_dir: str | Path | None = None,
    data: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Render ``run`` and the index of runs and write them to the warehouse (``_lakestream/quality/reports/
    <run_id>.html`` and ``_lakestream/quality/index.html``, replacing earlier renderings) and, if ``out_dir`` is
    given, to ``<out_dir>/reports/<run_id>.html`` and ``<out_dir>/index.html``. ``history`` defaults to the
    kept runs (`quality.runs.load_runs`); the index lists it with ``run``. ``data`` (what the page shows beyond
    the run record: metrics charts, open incidents) defaults to `report_data` read now.

    In the local copy, Data Docs links point into the warehouse by its URL (they work when it is a local
    folder); in the warehouse copy they are relative.

    Returns ``{"report_key", "index_key", "report_path", "index_path"}`` (paths None without ``out_dir``)."""
    check_run_id(run.run_id)
    if history is None:
        history = load_runs(lh)
    if data is None:
        data = report_data(lh, run)
    runs = list({r.run_id: r for r in [*history, run]}.values())
    index_html = render_index(runs)
    report_key = f"{REPORTS_PREFIX}{run.run_id}.html"
    lh.store.put(report_key, render_run(run, history, data=data).encode())
    lh.store.put(INDEX_KEY, index_html.encode())
    written: dict[str, Any] = {
        "report_key": report_key,
        "index_key": INDEX_KEY,
        "report_path": None,
        "index_path": None,
    }
    if out_dir is not None:
        out = Path(out_dir)
        (out / "reports").mkdir(parents=True, exist_ok=True)
        base = str(lh.store.url).rstrip("/") + "/"
        report_path = out / "reports" / f"{run.run_id}.html"
        report_path.write_text(render_run(run, history, docs_base=base, data=data), encoding="utf-8")
        index_path = out / "index.html"
        index_path.write_text(index_html, encoding="utf-8")
        written.update(report_path=str(report_path), index_path=str(index_path))
    return written


__all__ = [
    "INDEX_KEY",
    "REPORTS_PREFIX",
    "bar_chart",
    "line_chart",
    "lineage",
    "metric_chart",
    "metric_series",
    "open_incident_list",
    "report_data",
    "render_index",
    "render_run",
    "write_report",
]
