"""The charts of a report page, drawn as inline SVG (no script, no external resource): line and bar charts of
the trends over runs, and the small chart of one metrics series with the points the anomaly checks flagged."""

from __future__ import annotations

import math
from collections.abc import Mapping

from quality.report.format import esc, parse_time

_PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#4b5563", "#65a30d"]


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
        f'<span><i style="background:{_PALETTE[i % len(_PALETTE)]}"></i>{esc(n)}</span>' for i, n in enumerate(names)
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
            f"{esc(_axis_label(v))}</text>"
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
        f"{esc(labels[i])}</text>"
        for i in sorted(shown)
    ]


def line_chart(title: str, labels: list[str], series: list[tuple[str, list[float | None]]], unit: str = "") -> str:
    """A line chart, one line per series over ``labels`` (None: no point), as an HTML figure with inline SVG."""
    values = [v for _, vs in series for v in vs if v is not None]
    if not values or not labels:
        return f'<figure class="chart"><figcaption>{esc(title)}</figcaption><p class="muted">no data yet</p></figure>'
    w, h, left, right, top, bottom = 540, 210, 52, 34, 12, 30
    vmax = _nice_ceiling(max(values))
    xs = _x_positions(len(labels), w, left, right)

    def y(v: float) -> float:
        return top + (h - top - bottom) * (1 - v / vmax)

    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" role="img" '
        f'aria-label="{esc(title)}">'
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
                    f'<circle cx="{x:.1f}" cy="{y(v):.1f}" r="3" fill="{color}"><title>{esc(name)} · {esc(label)}: '
                    f"{esc(_axis_label(v) if v >= 1e3 else f'{v:g}')}{esc(unit)}</title></circle>"
                )
    svg.append("</svg>")
    return (
        f'<figure class="chart"><figcaption>{esc(title)}</figcaption>{"".join(svg)}'
        f"{_legend([name for name, _ in series])}</figure>"
    )


def bar_chart(title: str, labels: list[str], values: list[float], colors: list[str], *, unit: str = "") -> str:
    """A bar chart (one bar per label, each its color), as an HTML figure with inline SVG."""
    if not labels:
        return f'<figure class="chart"><figcaption>{esc(title)}</figcaption><p class="muted">no data yet</p></figure>'
    w, h, left, right, top, bottom = 540, 210, 52, 34, 12, 30
    vmax = _nice_ceiling(max(values) if values else 0)
    xs = _x_positions(len(labels), w, left, right, bars=True)
    width = max(2.0, min(36.0, (w - left - right) / len(labels) * 0.7))
    base = h - bottom
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" role="img" '
        f'aria-label="{esc(title)}">'
    ]
    svg += _frame(vmax, w, h, left, top, bottom, right)
    svg += _x_labels(labels, xs, h, bottom)
    for label, x, v, color in zip(labels, xs, values, colors, strict=False):
        bh = max(1.0, (base - top) * (v / vmax)) if v else 1.0
        svg.append(
            f'<rect x="{x - width / 2:.1f}" y="{base - bh:.1f}" width="{width:.1f}" height="{bh:.1f}" rx="2" '
            f'fill="{color}"><title>{esc(label)}: {esc(f"{v:.3g}")}{esc(unit)}</title></rect>'
        )
    svg.append("</svg>")
    return f'<figure class="chart"><figcaption>{esc(title)}</figcaption>{"".join(svg)}</figure>'


def metric_chart(
    title: str, points: list[tuple[str, int, float]], marks: Mapping[int, str] | None = None, *, unit: str = ""
) -> str:
    """A small line chart of one metrics series, ``points`` ``(committed_at, snapshot_id, value)`` oldest first,
    as an HTML figure with inline SVG; the points whose snapshot is in ``marks`` are red circles whose tooltip
    (``<title>``) is the mark's text (an anomaly's message), the newest point a dot with its value."""
    marks = marks or {}
    flagged = sum(1 for _, sid, _ in points if sid in marks)
    chip = f' <span class="chip fail">{flagged} anomal{"y" if flagged == 1 else "ies"}</span>' if flagged else ""
    caption = f"<figcaption>{esc(title)}{chip}</figcaption>"
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
        f'aria-label="{esc(title)}">'
    ]
    for v in (vmin, vmax):
        svg.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - right}" y2="{y(v):.1f}" stroke="#e5e7eb"/>')
        svg.append(
            f'<text x="{left - 5}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10" fill="#6b7280">'
            f"{esc(label(v))}</text>"
        )
    for i, anchor in ((0, "start"), (len(points) - 1, "end")):
        tick = parse_time(points[i][0])
        svg.append(
            f'<text x="{xs[i]:.1f}" y="{h - 5}" text-anchor="{anchor}" font-size="10" fill="#6b7280">'
            f"{esc(f'{tick:%m-%d %H:%M}' if tick is not None else points[i][0])}</text>"
        )
    line = " ".join(f"{x:.1f},{y(v):.1f}" for x, v in zip(xs, values, strict=True))
    if len(points) > 1:
        svg.append(f'<polyline fill="none" stroke="{_PALETTE[0]}" stroke-width="1.5" points="{line}"/>')
    for i, ((at, sid, v), x) in enumerate(zip(points, xs, strict=True)):
        tip = f"{title} at snapshot {sid} ({at}): {label(v)}{unit}"
        if sid in marks:
            svg.append(
                f'<circle class="anomaly" cx="{x:.1f}" cy="{y(v):.1f}" r="4.5" fill="#dc2626" stroke="#fff" '
                f'stroke-width="1"><title>{esc(tip)}. {esc(marks[sid])}</title></circle>'
            )
        elif i == len(points) - 1 or len(points) == 1:
            svg.append(
                f'<circle cx="{x:.1f}" cy="{y(v):.1f}" r="2.5" fill="{_PALETTE[0]}"><title>{esc(tip)}</title></circle>'
            )
    svg.append("</svg>")
    return f'<figure class="spark">{caption}{"".join(svg)}</figure>'
