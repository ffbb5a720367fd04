"""Anomaly detection on the metrics series of a table (one point per lake commit): is the newest commit's figure
(rows added, a column's null fraction, ...) out of line with the table's own history?

**Method: a robust band (median and MAD).** A point ``x_t`` is judged against the ``window`` points before it:

    centre = median(reference)       scale = 1.4826 * median(|reference - centre|)   (the MAD; 1.4826 makes it
                                                                                      sigma for normal noise)
    anomaly  iff  |x_t - centre| > max(k * scale, min_deviation)

The median and the MAD ignore up to half the history being wild (earlier anomalies, a backfill), where a mean and
a standard deviation are dragged by one outlier; so a past incident neither hides the next one nor widens the band
for good. A history that never varied (MAD 0) flags any change unless ``min_deviation`` allows some.

**Seasonal.** With ``season: P`` (points per period: 24 for hourly commits with a daily rhythm) the point is
compared with the points at its phase: ``baseline(t) = median(x[t-P], x[t-2P], ..., x[t-seasons*P])``. The scale
comes from the residuals ``x_i - baseline(i)`` of the ``window`` points before ``t`` (each against its own phase),
many points rather than ``seasons`` of them, so one quiet night does not make the band tiny:

    centre = baseline(t) + median(residuals)     scale = 1.4826 * MAD(residuals)

While the history is too short for that (fewer than 2 same-phase points, or fewer than ``min_history`` residuals),
the point is judged as without a season, against the recent window (wider, as it holds the whole cycle: less
sensitive, never a false alarm from missing history).

**Relative change.** ``max_relative_change: 0.5`` (or ``{"decrease": 0.5, "increase": 2.0}``) also flags a point
whose change from the centre (the same robust baseline) is beyond that fraction, whatever the band; with
``k: null`` it is the only rule. A centre of 0 makes any other value beyond every bound.

**Minimum history.** A point with fewer than ``min_history`` points before it is not judged
(``details["skipped"]``): a new table has no normal yet.

**Reference.** Deequ's anomaly detection (``com.amazon.deequ.anomalydetection``) judges a metric's newest value
against the metrics repository's history with a strategy: ``OnlineNormalStrategy`` / ``BatchNormalStrategy``
(mean and standard deviation, ``lowerDeviationFactor`` / ``upperDeviationFactor`` in sigmas),
``RelativeRateOfChangeStrategy`` (``maxRateDecrease`` / ``maxRateIncrease`` against the previous value),
``AbsoluteChangeStrategy``, ``SimpleThresholdStrategy`` and ``seasonal.HoltWinters`` (``MetricInterval`` and
``SeriesSeasonality``: daily values with a weekly season, ...), raising a check of level ``Warning`` or
``Error``. Here: the normal strategies with the median and MAD instead of mean and sigma (robust, as above),
seasonality by phase medians instead of Holt-Winters (no model to fit, needs two periods rather than several),
the relative rate of change against the robust baseline instead of the single previous value (one odd commit
does not make its successor look odd too), and Deequ's levels as ``severity`` ``warn`` / ``fail``.

**Configuration** is part of the project's expectations: a suite file's ``meta`` (GX keeps it, and ignores it)::

    "meta": {"anomalies": [
        {"metric": "rows_added", "season": 24, "k": 5, "severity": "fail"},
        {"metric": "null_fraction", "column": "o_custkey", "k": 5, "min_deviation": 0.01, "max_relative_change": 1.0}
    ]}

Fields: ``metric`` (required), ``column``, ``k`` (MADs, default 5: with the default window, about one false
alarm in 20,000 points of normal noise; null: the relative bound only), ``min_history`` (default 10), ``window``
(default 48), ``season`` (points per period; none by default), ``seasons`` (periods looked back, default 4),
``min_deviation`` (default 0), ``max_relative_change``, ``severity`` (``warn``, the default, or ``fail``),
``judge_last`` (the newest points judged, default 1: a run after several commits judges each).
`parse_anomalies` checks them; a bad one is a `SuiteError` naming the file
and the field (``load_suites`` refuses the project, before anything runs).

**Results.** `anomaly_results` returns one `CheckResult` per configured series (``check`` ``anomaly:<metric>``
or ``anomaly:<metric>:<column>``, the snapshot of the newest point judged). A ``fail`` anomaly is a `Violation`
(``anomaly``): the result is not ok, the run fails and the table is not published. A ``warn`` anomaly is no
violation (as a GX expectation of severity warning): the result passes, its message is in ``details["warnings"]``
and ``details["anomalies"]`` (which the alerts read); the CLI and the report show it as WARN, not as a plain pass
(`CheckResult.warnings`). The series comes from a callable (`SeriesOf`), the metrics
table's ``load_series`` in a run.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, overload

from object_store.errors import LakestreamError
from quality.errors import SuiteError
from quality.results import CheckResult, Violation

__all__ = [
    "ANOMALY",
    "MAD_SIGMA",
    "AnomalySpec",
    "Judgement",
    "SeriesOf",
    "anomaly_results",
    "anomaly_specs",
    "judge",
    "parse_anomalies",
]

#: The kind of check (``CheckResult.check`` is ``anomaly:<metric>[:<column>]``) and the violation code.
ANOMALY = "anomaly"
#: MAD * MAD_SIGMA estimates the standard deviation of normal noise.
MAD_SIGMA = 1.4826
WARN, FAIL = "warn", "fail"

#: ``series_of(table, metric, column)``: (committed_at, snapshot_id, value) per lake commit, oldest first.
SeriesOf = Callable[[str, str, str | None], Sequence[tuple[datetime, int, float]]]

_FIELDS = {
    "metric",
    "column",
    "k",
    "min_history",
    "window",
    "season",
    "seasons",
    "min_deviation",
    "max_relative_change",
    "severity",
    "judge_last",
}


@dataclass(frozen=True)
class AnomalySpec:
    """One series to watch and how (see the module docstring for each field)."""

    table: str
    metric: str
    column: str | None = None
    k: float | None = 5.0
    min_history: int = 10
    window: int = 48
    season: int | None = None
    seasons: int = 4
    min_deviation: float = 0.0
    max_decrease: float | None = None  # from max_relative_change: fractions of the centre
    max_increase: float | None = None
    severity: str = WARN
    judge_last: int = 1
    path: str = ""  # the file it came from (for messages)

    @property
    def check(self) -> str:
        return f"{ANOMALY}:{self.metric}" + (f":{self.column}" if self.column else "")


@dataclass(frozen=True)
class Judgement:
    """How one point was judged: ``anomaly`` iff it is outside [low, high] or beyond the relative bound;
    ``method`` is ``seasonal`` or ``window`` (or ``skipped``, with ``reason``)."""

    value: float
    anomaly: bool
    method: str
    centre: float | None = None
    scale: float | None = None
    low: float | None = None
    high: float | None = None
    relative_change: float | None = None
    reference_points: int = 0
    reason: str | None = None


# -- configuration ----------------------------------------------------------------------------------------------


def parse_anomalies(meta: Any, *, table: str, path: str) -> tuple[AnomalySpec, ...]:
    """The anomaly specs of a suite's ``meta`` (``meta.anomalies``; none if absent). Raises
    `SuiteError` naming ``path`` and the field."""
    if meta is None:
        return ()
    if not isinstance(meta, Mapping):
        raise SuiteError(f"{path}: meta must be an object")
    items = meta.get("anomalies", [])
    if not isinstance(items, list):
        raise SuiteError(f'{path}: meta.anomalies must be a list of {{"metric": ...}} objects')
    specs = [_spec(item, table=table, path=path, at=f"meta.anomalies[{i}]") for i, item in enumerate(items)]
    seen: set[str] = set()
    for i, s in enumerate(specs):
        if s.check in seen:
            raise SuiteError(
                f"{path}: meta.anomalies[{i}]: metric {s.metric!r}"
                + (f" of column {s.column!r}" if s.column else "")
                + " is configured twice; keep one entry"
            )
        seen.add(s.check)
    return tuple(specs)


def _spec(item: Any, *, table: str, path: str, at: str) -> AnomalySpec:
    if not isinstance(item, Mapping):
        raise SuiteError(f'{path}: {at} must be an object such as {{"metric": "rows_added", "k": 4}}')
    unknown = sorted(set(item) - _FIELDS)
    if unknown:
        raise SuiteError(f"{path}: {at} has unknown fields {unknown}; it takes {', '.join(sorted(_FIELDS))}")

    def bad(field: str, what: str) -> SuiteError:
        return SuiteError(f"{path}: {at}.{field} must be {what}, got {item[field]!r}")

    @overload
    def number(
        field: str, default: float, *, minimum: float, strict: bool, nullable: Literal[False] = False
    ) -> float: ...
    @overload
    def number(
        field: str, default: float | None, *, minimum: float, strict: bool, nullable: bool = False
    ) -> float | None: ...
    def number(
        field: str, default: float | None, *, minimum: float, strict: bool, nullable: bool = False
    ) -> float | None:
        if field not in item:
            return default
        v = item[field]
        if v is None and nullable:
            return None
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        if not ok or (v <= minimum if strict else v < minimum):
            raise bad(field, f"a number {'>' if strict else '>='} {minimum:g}" + (" or null" if nullable else ""))
        return float(v)

    @overload
    def integer(field: str, default: int, minimum: int) -> int: ...
    @overload
    def integer(field: str, default: None, minimum: int) -> int | None: ...
    def integer(field: str, default: int | None, minimum: int) -> int | None:
        if field not in item or (item[field] is None and default is None):
            return default
        v = item[field]
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise bad(field, f"a whole number >= {minimum}")
        return v

    metric = item.get("metric")
    if not isinstance(metric, str) or not metric.strip():
        raise SuiteError(f'{path}: {at}.metric is required: the metric\'s name (e.g. "rows_added")')
    column = item.get("column")
    if column is not None and (not isinstance(column, str) or not column):
        raise bad("column", "a column name or null")
    severity = item.get("severity", WARN)
    if severity not in (WARN, FAIL):
        raise bad("severity", '"warn" (alert, still publish) or "fail" (a violation: not published)')
    k = number("k", 5.0, minimum=0, strict=True, nullable=True)
    decrease = increase = None
    if "max_relative_change" in item:
        rel = item["max_relative_change"]
        if isinstance(rel, Mapping):
            extra = sorted(set(rel) - {"decrease", "increase"})
            if extra or not rel:
                raise bad("max_relative_change", 'a fraction > 0 or {"decrease": d, "increase": i}')
            decrease, increase = _fraction(rel.get("decrease")), _fraction(rel.get("increase"))
            if (rel.get("decrease") is not None and decrease is None) or (
                rel.get("increase") is not None and increase is None
            ):
                raise bad("max_relative_change", "fractions > 0 (decrease and increase)")
        else:
            decrease = increase = _fraction(rel)
            if decrease is None:
                raise bad("max_relative_change", 'a fraction > 0 (0.5: half) or {"decrease": d, "increase": i}')
    if k is None and decrease is None and increase is None:
        raise SuiteError(f"{path}: {at}.k is null and there is no max_relative_change: nothing would be judged")
    min_history = integer("min_history", 10, 3)
    window = integer("window", 48, 3)
    if window < min_history:
        raise SuiteError(f"{path}: {at}.window ({window}) must be at least min_history ({min_history})")
    return AnomalySpec(
        table=table,
        metric=metric,
        column=column,
        k=k,
        min_history=min_history,
        window=window,
        season=integer("season", None, 2),
        seasons=integer("seasons", 4, 2),
        min_deviation=number("min_deviation", 0.0, minimum=0, strict=False),
        max_decrease=decrease,
        max_increase=increase,
        severity=severity,
        judge_last=integer("judge_last", 1, 1),
        path=path,
    )


def _fraction(v: Any) -> float | None:
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
        return float(v)
    return None


def points_needed(spec: AnomalySpec) -> int:
    """The newest points of its series that judging ``spec`` looks at: the judged ones and, before them, the
    window and the seasons it looks back over (a loader may read just these: `quality.metrics.load_series`)."""
    return spec.judge_last + max(spec.window, spec.min_history) + (spec.season or 0) * spec.seasons


def anomaly_specs(expectations: Mapping[str, Any] | Iterable[AnomalySpec]) -> list[AnomalySpec]:
    """The specs of ``expectations``: the suites of a project (`quality.expectations.load_suites`), whose
    ``anomalies`` they carry, or specs themselves."""
    if isinstance(expectations, Mapping):
        return [spec for suite in expectations.values() for spec in getattr(suite, "anomalies", ())]
    return list(expectations)


# -- judging ----------------------------------------------------------------------------------------------------


def _mad(values: Sequence[float], centre: float) -> float:
    return statistics.median(abs(v - centre) for v in values)


def _baseline(values: Sequence[float], i: int, spec: AnomalySpec) -> float | None:
    """The median of the points at i's phase before it (at least two), or None."""
    period = spec.season or 0
    same = [values[i - j * period] for j in range(1, spec.seasons + 1) if i - j * period >= 0]
    return statistics.median(same) if len(same) >= 2 else None


def judge(values: Sequence[float], t: int, spec: AnomalySpec) -> Judgement:
    """Judge ``values[t]`` against ``values[:t]`` as ``spec`` says (see the module docstring)."""
    x = float(values[t])
    if t < spec.min_history:
        return Judgement(x, False, "skipped", reason=f"{t} earlier points, {spec.min_history} needed")
    centre = scale = None
    method, points = "window", 0
    if spec.season:
        base = _baseline(values, t, spec)
        residuals = []
        for i in range(max(0, t - spec.window), t):
            b = _baseline(values, i, spec)
            if b is not None:
                residuals.append(values[i] - b)
        if base is not None and len(residuals) >= spec.min_history:
            shift = statistics.median(residuals)
            centre, scale = base + shift, MAD_SIGMA * _mad(residuals, shift)
            method, points = "seasonal", len(residuals)
    if centre is None:
        reference = [float(v) for v in values[max(0, t - spec.window) : t]]
        centre = statistics.median(reference)
        scale, points = MAD_SIGMA * _mad(reference, centre), len(reference)
    assert scale is not None  # set with the centre
    anomaly = False
    low = high = None
    if spec.k is not None:
        band = max(spec.k * scale, spec.min_deviation)
        low, high = centre - band, centre + band
        anomaly = abs(x - centre) > band
    change = None
    if spec.max_decrease is not None or spec.max_increase is not None:
        change = (x - centre) / abs(centre) if centre else (0.0 if x == centre else math.copysign(math.inf, x))
        if spec.max_decrease is not None and change < -spec.max_decrease:
            anomaly = True
        if spec.max_increase is not None and change > spec.max_increase:
            anomaly = True
    return Judgement(x, anomaly, method, centre, scale, low, high, change, points)


def _describe(spec: AnomalySpec, j: Judgement, at: datetime, snapshot_id: int) -> str:
    what = f"{spec.metric}" + (f" of column {spec.column}" if spec.column else "")
    why = []
    if j.low is not None and j.high is not None and not (j.low <= j.value <= j.high):
        basis = (
            f"its phase in a season of {spec.season} commits"
            if j.method == "seasonal"
            else f"the last {j.reference_points} commits"
        )
        why.append(f"outside [{j.low:.6g}, {j.high:.6g}] (median {j.centre:.6g} of {basis} ± {spec.k:g} MADs)")
    if j.relative_change is not None and (
        (spec.max_decrease is not None and j.relative_change < -spec.max_decrease)
        or (spec.max_increase is not None and j.relative_change > spec.max_increase)
    ):
        why.append(f"a change of {j.relative_change:+.1%} from the median {j.centre:.6g}")
    return (
        f"{what} of {spec.table} at snapshot {snapshot_id} (committed {at.isoformat()}) is {j.value:.6g}: "
        f"{'; '.join(why)}. Look at that commit's data; if the new level is normal, the band adapts as it recurs"
    )


def anomaly_results(
    expectations: Mapping[str, Any] | Iterable[AnomalySpec],
    series_of: SeriesOf,
    *,
    now: datetime,
    tables: Iterable[str] | None = None,
    snapshots: Mapping[str, int | None] | None = None,
) -> list[CheckResult]:
    """One `CheckResult` per configured series (of ``tables`` if given): its newest ``judge_last`` points up to
    ``now`` (later ones are not the run's), each against the points before it. See the module docstring for
    what a result holds. A series that cannot be read is a result with ``error`` (the others still run).

    ``snapshots`` (table -> the snapshot the run checked, its reconciliation's) ends each table's series at
    that snapshot's point, and the result is made on that snapshot, so that ``published`` can move there
    (`quality.published_tag` wants every result of a table on one snapshot). A table whose series has no point for
    it (its metrics not recorded yet) is not judged (``details["skipped"]``), which does not hold it back."""
    wanted = set(tables) if tables is not None else None
    out = []
    for spec in anomaly_specs(expectations):
        if wanted is not None and spec.table not in wanted:
            continue
        started = time.perf_counter()
        try:
            series = [p for p in series_of(spec.table, spec.metric, spec.column) if _aware(p[0]) <= _aware(now)]
        except (LakestreamError, OSError) as exc:
            sid = (snapshots or {}).get(spec.table)
            out.append(CheckResult(spec.check, spec.table, snapshot_id=sid, error=f"{type(exc).__name__}: {exc}"))
            continue
        if snapshots is not None and spec.table in snapshots:
            sid = snapshots[spec.table]
            ends = [i for i, p in enumerate(series) if int(p[1]) == sid]
            if not ends:
                result = _result(spec, [], started)
                result.snapshot_id = sid
                result.details["skipped"] = f"no metric point for snapshot {sid} yet"
                out.append(result)
                continue
            series = series[: ends[-1] + 1]
        out.append(_result(spec, series, started))
    return out


def _aware(at: datetime) -> datetime:
    """Naive datetimes are UTC (a series and ``now`` compare either way)."""
    from datetime import UTC

    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _result(spec: AnomalySpec, series: Sequence[tuple[datetime, int, float]], started: float) -> CheckResult:
    details: dict[str, Any] = {
        "metric": spec.metric,
        "column": spec.column,
        "severity": spec.severity,
        "points": len(series),
        "judged": [],
        "anomalies": [],
        "warnings": [],
    }
    result = CheckResult(spec.check, spec.table, rows=len(series), details=details)
    if not series:
        details["skipped"] = "no metric points yet"
        result.seconds = time.perf_counter() - started
        return result
    values = [float(p[2]) for p in series]
    result.snapshot_id = int(series[-1][1])
    for t in range(max(0, len(series) - spec.judge_last), len(series)):
        at, sid, _ = series[t]
        j = judge(values, t, spec)
        entry = {"snapshot_id": sid, "committed_at": at.isoformat(), "value": j.value, "method": j.method}
        if j.reason:
            entry["skipped"] = j.reason
            details["skipped"] = j.reason
        else:
            relative = j.relative_change
            change: float | str | None = relative
            if relative is not None and not math.isfinite(relative):
                change = str(relative)  # from a centre of 0; JSON has no infinity
            entry.update(centre=j.centre, scale=j.scale, low=j.low, high=j.high, relative_change=change)
        details["judged"].append(entry)
        if not j.anomaly:
            continue
        message = _describe(spec, j, at, sid)
        details["anomalies"].append({**entry, "message": message})
        if spec.severity == FAIL:
            result.violations.append(
                Violation(
                    check=ANOMALY,
                    table=spec.table,
                    message=message,
                    snapshot_id=sid,
                    expected={"low": j.low, "high": j.high, "centre": j.centre, "column": spec.column},
                    actual=j.value,
                )
            )
        else:
            details["warnings"].append(message)
    result.seconds = time.perf_counter() - started
    return result
