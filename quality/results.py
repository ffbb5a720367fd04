"""What a quality check finds, as plain data: `Violation` (one thing wrong, named precisely), `CheckResult`
(one check of one table) and `QualityRun` (every check of one `lakestream check` run, plus the figures the
report shows). All round-trip through JSON (``to_dict`` / ``from_dict``); runs are kept in the warehouse under
``_lakestream/quality/runs/<run_id>.json`` (see `quality.runs`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from object_store.usage import Usage

#: The kinds of check; ``CheckResult.check`` is one of these (GX results add the suite: ``gx:<suite>``).
RECONCILE = "reconcile"
LAYER = "layer"
GX = "gx"

#: The outcomes of a check (``CheckResult.status``). Only ``passed`` is ok.
PASSED = "passed"
FAILED = "failed"  # it found a violation
ERROR = "error"  # it could not run
NOT_EVALUATED = "not evaluated"  # it was not run: a table it reads failed its own checks in this run


def _jsonable(value: Any) -> Any:
    """Values as JSON can hold them (keys and rows may carry dates, decimals, bytes)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


@dataclass(frozen=True)
class Violation:
    """One thing found wrong. ``check`` is a short stable code (``offsets-backwards``, ``content``,
    ``file-twice``, ``file-missing``, ``file-size``, ``file-corrupt``, ``records-count``, ``log-missing``,
    ``layer-row``, ``gx-expectation``, ...); ``message`` says it in one sentence a person can act on. The other
    fields locate it as far as the check knows: bucket, offset range ``[start, end)``, snapshot, sample keys,
    expected and actual values."""

    check: str
    table: str
    message: str
    bucket: int | None = None
    offsets: tuple[int, int] | None = None
    snapshot_id: int | None = None
    keys: tuple[Any, ...] = ()
    expected: Any = None
    actual: Any = None

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Violation:
        offsets = d.get("offsets")
        return cls(
            check=d["check"],
            table=d["table"],
            message=d["message"],
            bucket=d.get("bucket"),
            offsets=tuple(offsets) if offsets is not None else None,
            snapshot_id=d.get("snapshot_id"),
            keys=tuple(d.get("keys") or ()),
            expected=d.get("expected"),
            actual=d.get("actual"),
        )

    def __str__(self) -> str:
        where = [f"table {self.table}"]
        if self.bucket is not None:
            where.append(f"bucket {self.bucket}")
        if self.offsets is not None:
            where.append(f"offsets [{self.offsets[0]}, {self.offsets[1]})")
        if self.snapshot_id is not None:
            where.append(f"snapshot {self.snapshot_id}")
        text = f"{self.check}: {', '.join(where)}: {self.message}"
        if self.keys:
            text += f" (keys {list(self.keys)[:5]})"
        return text


@dataclass
class CheckResult:
    """One check of one table: ``check`` is ``reconcile``, ``layer`` or ``gx:<suite>``; ``ok`` iff it ran and found
    no violation (``status`` says which of passed, failed, error, not evaluated). ``snapshot_id`` is the lake
    snapshot checked (the one `published` may move to), ``seconds`` the check's wall time, ``rows`` the rows it
    read; ``details`` holds what the check wants the report to show (JSON values: e.g. ``data_docs`` link,
    ``commits_checked``, ``expectations``, ``sampled_keys``).

    ``not_evaluated`` says why a check was not run although it could have been: a table it reads failed its own
    checks in this run (``upstream dwd.orders_enriched failed (reconcile)``), so its outcome over that input
    would prove nothing either way. Such a result is not ok (the table is not published) but is no violation of
    its own."""

    check: str
    table: str
    snapshot_id: int | None = None
    seconds: float = 0.0
    rows: int = 0
    violations: list[Violation] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # the check could not run (QualityError message); counts as not ok
    not_evaluated: str | None = None  # why the check was not run (see above); counts as not ok
    #: the check's requests to the store and their bytes (`object_store.usage`; a check giving several results
    #: records them on its first)
    usage: Usage = field(default_factory=Usage)

    @property
    def ok(self) -> bool:
        return not self.violations and self.error is None and self.not_evaluated is None

    @property
    def warnings(self) -> list[str]:
        """What the check warns of (``details["warnings"]``: an anomaly of severity ``warn``, a GX expectation of
        severity warning, a verdict on a sample). A result that passed with warnings is still ok (nothing is held
        back), but the CLI and the report show it as WARN, not as a plain pass."""
        found = self.details.get("warnings")
        return [str(w) for w in found] if isinstance(found, list) else []

    @property
    def status(self) -> str:
        """`PASSED`, `FAILED` (violations), `ERROR` (could not run) or `NOT_EVALUATED`."""
        if self.not_evaluated is not None:
            return NOT_EVALUATED
        if self.error is not None:
            return ERROR
        return FAILED if self.violations else PASSED

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "table": self.table,
            "snapshot_id": self.snapshot_id,
            "seconds": self.seconds,
            "rows": self.rows,
            "ok": self.ok,
            "status": self.status,
            "violations": [v.to_dict() for v in self.violations],
            "details": _jsonable(self.details),
            "error": self.error,
            "not_evaluated": self.not_evaluated,
            "usage": self.usage.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckResult:
        return cls(
            check=d["check"],
            table=d["table"],
            snapshot_id=d.get("snapshot_id"),
            seconds=float(d.get("seconds") or 0.0),
            rows=int(d.get("rows") or 0),
            violations=[Violation.from_dict(v) for v in d.get("violations") or []],
            details=dict(d.get("details") or {}),
            error=d.get("error"),
            not_evaluated=d.get("not_evaluated"),  # absent from runs recorded before it existed
            usage=Usage.from_dict(d.get("usage")),  # absent from runs recorded before it existed
        )


def upstream_failure(results: Iterable[CheckResult], upstream: Iterable[str]) -> str | None:
    """Why a check that reads the tables ``upstream`` is not evaluated, given the ``results`` of this run so far:
    ``upstream dwd.x failed (reconcile, layer not evaluated)``, naming each of those tables with a result that
    is not ok and its checks that are not; None if there is none (a table not checked in this run counts as
    passed: nothing says otherwise)."""
    wanted = list(dict.fromkeys(upstream))
    bad: dict[str, list[str]] = {}
    for r in results:
        if r.table in wanted and not r.ok:
            what = {FAILED: "", ERROR: " could not run", NOT_EVALUATED: " not evaluated"}[r.status]
            bad.setdefault(r.table, []).append(f"{r.check}{what}")
    if not bad:
        return None
    return "; ".join(f"upstream {t} failed ({', '.join(dict.fromkeys(bad[t]))})" for t in wanted if t in bad)


@dataclass
class QualityRun:
    """One run of checks over some tables. ``tables`` holds the figures the report shows per table (see
    `quality.stats.table_stats`: per bucket log end, lake offset, lag in records and seconds; subscriptions'
    lag; file counts and sizes), keyed by table name; ``published`` the snapshot `published` points at per
    table after the run (None: never published)."""

    run_id: str
    started: str  # ISO 8601, UTC
    finished: str
    results: list[CheckResult] = field(default_factory=list)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    published: dict[str, int | None] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def violations(self) -> list[Violation]:
        return [v for r in self.results for v in r.violations]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "started": self.started,
            "finished": self.finished,
            "ok": self.ok,
            "results": [r.to_dict() for r in self.results],
            "tables": _jsonable(self.tables),
            "published": dict(self.published),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QualityRun:
        return cls(
            run_id=d["run_id"],
            started=d["started"],
            finished=d["finished"],
            results=[CheckResult.from_dict(r) for r in d.get("results") or []],
            tables=dict(d.get("tables") or {}),
            published=dict(d.get("published") or {}),
        )


__all__ = [
    "ERROR",
    "FAILED",
    "GX",
    "LAYER",
    "NOT_EVALUATED",
    "PASSED",
    "RECONCILE",
    "CheckResult",
    "QualityRun",
    "Violation",
    "upstream_failure",
]
