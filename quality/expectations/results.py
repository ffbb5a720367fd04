"""What a validation's results become: each failed expectation a `Violation` (or a warning, for GX's
``warning`` and ``info`` severities), and the Data Docs GX built copied to the warehouse."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quality.results import Violation

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

#: Where Data Docs and validation results are kept in the warehouse.
DOCS_PREFIX = "_lakestream/quality/gx/docs/"


RESULTS_PREFIX = "_lakestream/quality/gx/results/"


SAMPLE_VALUES = 5  # unexpected values named in a violation


LIST_LIMIT = 20  # longer lists are abbreviated in a violation's expected kwargs


@dataclass(frozen=True)
class Joined:
    """A membership expectation checked by a Spark join: its GX-shaped result document, its violation if it
    failed, and its severity."""

    doc: dict[str, Any]
    violation: Violation | None
    severity: str


def keep_result(lh: Lakehouse, table: str, sid: int, doc: Mapping[str, Any]) -> str:
    """Keep a validation's result document in the warehouse (``<RESULTS_PREFIX><table>/<snapshot>.json``, replacing
    an earlier one of the same snapshot); its key."""
    key = f"{RESULTS_PREFIX}{table}/{sid}.json"
    lh.store.put(key, json.dumps(doc, indent=1, default=str).encode())
    return key


def verdicts(
    table: str, sid: int, results: Sequence[Any], joins: Sequence[Joined]
) -> tuple[list[Violation], list[str]]:
    """The violations and warnings of a validation: GX's failed ``results`` and the failed ``joins``, each a
    violation if its severity is critical, else (GX's "warning" and "info") a warning's message."""
    violations: list[Violation] = []
    warnings: list[str] = []
    for r in results:
        if r.success:
            continue
        found = violation_of(table, sid, r.expectation_config, r.result, r.exception_info)
        if severity_of(r.expectation_config) == "critical":
            violations.append(found)
        else:  # GX's "warning" and "info" severities: reported, never a violation
            warnings.append(found.message)
    for j in joins:
        if j.violation is None:
            continue
        if j.severity == "critical":
            violations.append(j.violation)
        else:
            warnings.append(j.violation.message)
    return violations, warnings


def severity_of(config: Any) -> str:
    severity = getattr(config, "severity", None)
    return str(getattr(severity, "value", severity) or "critical").lower()


def violation_of(table: str, sid: int | None, config: Any, result: Mapping[str, Any], exc: Any) -> Violation:
    kind = config.type
    kwargs = {k: v for k, v in dict(config.kwargs).items() if k != "batch_id"}
    on = (
        f" on {kwargs['column']}"
        if "column" in kwargs
        else (f" on {', '.join(kwargs['column_list'])}" if "column_list" in kwargs else "")
    )
    expected = {k: _abbreviate(v) for k, v in kwargs.items()}
    error = _exception_message(exc)
    if error is not None:
        detail = one_line(error)
        message = f"{kind}{on} could not be evaluated: {detail}"
        return Violation("gx-expectation", table, message, snapshot_id=sid, expected=expected, actual=detail)
    result = dict(result or {})
    if "unexpected_count" in result and "observed_value" not in result:
        sample = list(result.get("partial_unexpected_list") or [])[:SAMPLE_VALUES]
        count, total = result.get("unexpected_count"), result.get("element_count")
        pct = result.get("unexpected_percent")
        share = f" ({pct:.1f}%)" if isinstance(pct, int | float) else ""
        message = f"{kind}{on} failed: {count} of {total} values unexpected{share}, e.g. {show(sample)}"
        actual: Any = {"unexpected_count": count, "element_count": total, "unexpected_values": sample}
    else:
        observed = result.get("observed_value")
        wanted = ", ".join(f"{k}={show(v)}" for k, v in expected.items() if k not in ("column", "result_format"))
        message = f"{kind}{on} failed: observed {show(observed)}, expected {wanted or 'otherwise'}"
        mismatched = (result.get("details") or {}).get("mismatched")
        if isinstance(mismatched, Mapping) and mismatched:
            message += " (" + "; ".join(f"{k}: {show(list(v))}" for k, v in mismatched.items()) + ")"
        actual = observed
    return Violation("gx-expectation", table, message, snapshot_id=sid, expected=expected, actual=actual)


def _exception_message(info: Any) -> str | None:
    """The message of the error GX hit evaluating an expectation, if any: ``exception_info`` is either one
    ``{raised_exception, exception_message, ...}`` or such a dict per metric that failed."""
    if not isinstance(info, Mapping):
        return None
    if "raised_exception" in info:
        return (info.get("exception_message") or "an error") if info.get("raised_exception") else None
    for value in info.values():
        if isinstance(value, Mapping) and (value.get("raised_exception") or value.get("exception_message")):
            return value.get("exception_message") or "an error"
    return None


def _abbreviate(value: Any) -> Any:
    if isinstance(value, list | tuple | set) and len(value) > LIST_LIMIT:
        items = list(value)
        return [*items[:LIST_LIMIT], f"... ({len(items)} values)"]
    return value


def show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, float) and math.isnan(value):
        return "null"
    if value is None:
        return "null"
    return str(value)


def one_line(exc: Any) -> str:
    return " ".join(str(exc).split())[:400]


def files_in(folder: Path) -> dict[str, float]:
    return {p.relative_to(folder).as_posix(): p.stat().st_mtime for p in folder.rglob("*") if p.is_file()}


def upload_docs(lh: Lakehouse, docs: Path, before: Mapping[str, float]) -> str | None:
    """Copy the Data Docs GX built in ``docs`` to the warehouse; the key of this run's validation page."""
    files = files_in(docs)
    static_there = lh.store.exists(f"{DOCS_PREFIX}static/styles/data_docs_default_styles.css")
    page = None
    newest = -1.0
    for rel, mtime in sorted(files.items()):
        if rel.startswith("static/") and static_there:
            continue
        if before.get(rel) == mtime:  # unchanged in a docs_dir kept between runs
            continue
        lh.store.put(DOCS_PREFIX + rel, (docs / rel).read_bytes())
        if rel.startswith("validations/") and rel.endswith(".html") and rel not in before and mtime > newest:
            page, newest = DOCS_PREFIX + rel, mtime
    return page
