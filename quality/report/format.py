"""How values are written in a report page: escaped text, numbers, durations, sizes, data values, times, the
status chips of checks and links to Data Docs. Everything that comes from data goes through `esc`."""

from __future__ import annotations

import html
import json
import re
from datetime import datetime
from typing import Any
from urllib.parse import quote

from quality.results import NOT_EVALUATED, CheckResult, QualityRun

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


def esc(value: Any) -> str:
    """``value`` as HTML text, quotes escaped (None: empty)."""
    return html.escape("" if value is None else str(value), quote=True)


def num(value: Any) -> str:
    """A number with thousands separators (a float with two decimals unless whole), or a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.2f}"
    return esc(value)


def ident(value: Any) -> str:
    """An identifier (snapshot id): as is, no thousands separators."""
    return "—" if value is None else esc(value)


def secs(value: Any) -> str:
    """A duration, as a person reads it."""
    if value is None:
        return "—"
    try:
        s = float(value)
    except (TypeError, ValueError):
        return esc(value)
    if s < 0.01 and s > 0:
        return f"{s * 1000:.1f} ms"
    if s < 60:
        return f"{s:.2f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    if s < 86400:
        return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"
    return f"{int(s // 86400)} d {int(s % 86400 // 3600)} h"


def byte_size(value: Any) -> str:
    """A size in bytes, in B, KB, MB, GB or TB (1,024 each), or a dash."""
    if value is None:
        return "—"
    try:
        n = float(value)
    except (TypeError, ValueError):
        return esc(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} PB"  # pragma: no cover


def dollars(value: Any) -> str:
    """Dollars to the cent, and to six places below a cent (one request costs $0.0000004)."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    return f"${value:,.2f}" if abs(value) >= 0.01 or value == 0 else f"${value:.6f}"


def data_value(value: Any, limit: int = 300) -> str:
    """A data value (JSON-ish), escaped and cut to ``limit`` characters."""
    if value is None:
        return '<span class="muted">—</span>'
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    if len(text) > limit:
        text = text[:limit] + "…"
    return f"<code>{esc(text)}</code>"


def parse_time(stamp: str | None) -> datetime | None:
    """An ISO timestamp, or None if there is none or it does not parse."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None


def run_label(run: QualityRun) -> str:
    """A run's short label on a chart's axis: its start (month-day hour:minute), else its id's start."""
    at = parse_time(run.started)
    return f"{at:%m-%d %H:%M}" if at is not None else run.run_id[:13]


def status_chip(ok: bool, error: bool = False) -> str:
    """The chip of a table's or run's status: PASS, FAIL, or ERROR."""
    if error:
        return '<span class="chip error">ERROR</span>'
    return '<span class="chip pass">PASS</span>' if ok else '<span class="chip fail">FAIL</span>'


def result_chip(r: CheckResult) -> str:
    """The chip of one check's outcome: PASS, WARN (passed with warnings: nothing held back, but not a plain
    pass), FAIL, ERROR or NOT EVALUATED (an upstream table failed)."""
    if r.status == NOT_EVALUATED:
        return '<span class="chip skip">NOT EVALUATED</span>'
    if r.ok and r.warnings:
        return '<span class="chip warn">WARN</span>'
    return status_chip(r.ok, r.error is not None)


def result_message(r: CheckResult) -> str:
    if r.not_evaluated is not None:
        return f'<div class="msg">not evaluated: {esc(r.not_evaluated)}</div>'
    return f'<div class="msg">{esc(r.error)}</div>' if r.error else ""


def docs_href(path: Any, base: str) -> str | None:
    """The link to a Data Docs page whose path is relative to the warehouse root, or None if ``path`` is not a
    relative path (a URL with a scheme is not linked: pages link only inside the warehouse)."""
    if not isinstance(path, str) or not path or _SCHEME.match(path) or path.startswith(("/", "\\")):
        return None
    return base + quote(path, safe="/#.-_~")
