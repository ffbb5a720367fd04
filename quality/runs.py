"""Quality runs kept in the warehouse: one JSON object per run, written once, under
``_lakestream/quality/runs/<run_id>.json``. Run ids sort by time (``20261125T214601.123456Z-3fa9c2``: UTC
timestamp, then a short random tail), so the newest runs are the last keys of the listing."""

from __future__ import annotations

import json
import logging
import re
import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from object_store import NotFound, PreconditionFailed
from quality.errors import InvalidArgument, QualityError
from quality.results import QualityRun

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

_log = logging.getLogger(__name__)

QUALITY_PREFIX = "_lakestream/quality/"
RUNS_PREFIX = f"{QUALITY_PREFIX}runs/"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


class RunAlreadySaved(QualityError):
    """`save_run`: a run with this id is already kept (runs are written once)."""


def new_run_id(now: datetime | None = None) -> str:
    """A new run id: the UTC time to the microsecond, then 6 random hex digits; ids sort by time."""
    at = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{at:%Y%m%dT%H%M%S.%f}Z-{secrets.token_hex(3)}"


def check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise InvalidArgument(
            f"invalid quality run id {run_id!r}: letters, digits, '_', '.' or '-' (at most 128), e.g. one from "
            "quality.runs.new_run_id()"
        )
    return run_id


def run_key(run_id: str) -> str:
    return f"{RUNS_PREFIX}{check_run_id(run_id)}.json"


def save_run(lh: Lakehouse, run: QualityRun) -> str:
    """Keep ``run`` in the warehouse (create-only); returns its key.

    Raises:
        RunAlreadySaved: a run with this id is already kept; nothing was written.
        InvalidArgument: the run id is not a valid id; nothing was written.
    """
    key = run_key(run.run_id)
    data = json.dumps(run.to_dict(), indent=1, sort_keys=True).encode()
    try:
        lh.store.put(key, data, if_none_match=True)
    except PreconditionFailed:
        raise RunAlreadySaved(
            f"quality run {run.run_id} is already kept at {lh.store.url}/{key}; runs are written once: give this "
            "run a new id (quality.runs.new_run_id())"
        ) from None
    return key


def load_run(lh: Lakehouse, run_id: str) -> QualityRun:
    """The kept run ``run_id``. Raises `QualityError` if there is none or it is unreadable."""
    key = run_key(run_id)
    try:
        obj = lh.store.get(key)
    except NotFound:
        raise QualityError(f"no quality run {run_id} in {lh.store.url} (looked for {key})") from None
    return _parse(obj.data, f"{lh.store.url}/{key}")


def _parse(data: bytes, source: str) -> QualityRun:
    try:
        return QualityRun.from_dict(json.loads(data))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise QualityError(f"quality run {source} is unreadable ({type(exc).__name__}: {exc})") from None


def load_runs(lh: Lakehouse, limit: int | None = 30) -> list[QualityRun]:
    """The newest ``limit`` kept runs (all if None), newest first. An unreadable run is skipped with a
    warning (a listing must not fail on it)."""
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise InvalidArgument(f"limit must be an integer >= 0 or None, got {limit!r}")
    keys = sorted(
        (info.key for info in lh.store.list(RUNS_PREFIX) if info.key.endswith(".json")),
        reverse=True,
    )
    if limit is not None:
        keys = keys[:limit]
    runs = []
    for key in keys:
        try:
            runs.append(_parse(lh.store.get(key).data, f"{lh.store.url}/{key}"))
        except NotFound:
            continue
        except QualityError as exc:
            _log.warning("skipping %s", exc)
    return runs


__all__ = [
    "QUALITY_PREFIX",
    "RUNS_PREFIX",
    "RunAlreadySaved",
    "check_run_id",
    "load_run",
    "load_runs",
    "new_run_id",
    "run_key",
    "save_run",
]
