"""Suite files: read, parsed and checked (`load_suites`, `load_suite`, `parse_suite`, `check_suite`), each
lakestream reference found and replaced by its GX suite parameter. Nothing here reads a table's rows."""

from __future__ import annotations

import copy
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quality._gx import quiet
from quality.anomaly import AnomalySpec, parse_anomalies
from quality.errors import SuiteError
from quality.expectations.results import one_line

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

#: The folder of a project that holds the suites.
SUITES_DIR = "expectations"


#: The key that marks a lakestream reference in a kwarg value.
REFERENCE = "$lakestream"


#: The columns the lake adds to every table (see `lakehouse.iceberg.layout`).
LAKE_COLUMNS = ("__bucket", "__offset", "__timestamp")


#: Reference kinds and the fields each takes (required, optional).
REFERENCE_KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "column_values": (("table", "column"), ()),
    "row_count": (("table",), ()),
    "now_minus_seconds": (("seconds",), ()),
}


#: kwargs that name a column of the table (checked against its definition).
_COLUMN_KWARGS = ("column", "column_A", "column_B")


_COLUMN_LIST_KWARGS = ("column_list",)


_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\.[A-Za-z_][A-Za-z0-9_]{0,127}")


_SUITE_KEYS = {"name", "expectations", "meta", "id", "notes", "suite_parameters", "data_asset_type"}


@dataclass(frozen=True)
class Reference:
    """A kwarg value resolved from the lake at run time: ``param`` is the GX suite parameter standing for it."""

    param: str
    kind: str
    spec: Mapping[str, Any]

    @property
    def table(self) -> str | None:
        return self.spec.get("table")


@dataclass(frozen=True)
class Suite:
    """One suite file: ``doc`` is the file's JSON as read; ``gx_doc`` the same with each lakestream reference
    replaced by its GX suite parameter (what GX is given)."""

    table: str
    name: str
    path: str
    doc: Mapping[str, Any] = field(repr=False)
    gx_doc: Mapping[str, Any] = field(repr=False)
    references: tuple[Reference, ...] = ()
    #: The series of the table's metrics watched for anomalies (``meta.anomalies``, `quality.anomaly`).
    anomalies: tuple[AnomalySpec, ...] = ()

    @property
    def expectations(self) -> list[Mapping[str, Any]]:
        return list(self.doc["expectations"])

    def columns(self) -> list[tuple[int, str]]:
        """(expectation index, column) for every column of the table the expectations name."""
        found = []
        for i, e in enumerate(self.doc["expectations"]):
            kwargs = e.get("kwargs") or {}
            for k in _COLUMN_KWARGS:
                if isinstance(kwargs.get(k), str):
                    found.append((i, kwargs[k]))
            for k in _COLUMN_LIST_KWARGS:
                if isinstance(kwargs.get(k), list):
                    found.extend((i, c) for c in kwargs[k] if isinstance(c, str))
        return found


def load_suites(project_dir: str | os.PathLike[str]) -> dict[str, Suite]:
    """Every suite of the project in ``project_dir`` (``expectations/<ns>.<table>.json``), keyed by table, in
    name order; ``{}`` if the project has no expectations folder. Raises `SuiteError` at the first bad file."""
    folder = Path(project_dir) / SUITES_DIR
    if not folder.is_dir():
        return {}
    suites: dict[str, Suite] = {}
    for path in sorted(folder.iterdir()):
        if path.is_dir() or path.name.startswith("."):
            continue
        suite = load_suite(path)
        suites[suite.table] = suite
    return suites


def load_suite(path: str | os.PathLike[str]) -> Suite:
    """Read and check one suite file (its name says the table: ``<ns>.<table>.json``). Raises `SuiteError`."""
    path = Path(path)
    where = str(path)
    table = path.name.removesuffix(".json")
    if not path.name.endswith(".json") or not _TABLE_NAME.fullmatch(table):
        raise SuiteError(
            f"{where}: a suite file is named <namespace>.<table>.json after the table it checks "
            f"(e.g. ods.orders.json); rename it or move it out of {SUITES_DIR}/"
        )
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{where}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise SuiteError(f"{where}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    return parse_suite(doc, table=table, path=where)


def parse_suite(doc: Any, *, table: str, path: str = "<suite>") -> Suite:
    """Check a suite document (parsed JSON) for ``table``. Raises `SuiteError` naming ``path``."""
    where = path
    if not isinstance(doc, dict):
        raise SuiteError(f"{where}: expected a JSON object with name, expectations and meta (GX's suite format)")
    unknown = set(doc) - _SUITE_KEYS
    if unknown:
        raise SuiteError(f"{where}: unknown keys {sorted(unknown)}; a suite has name, expectations and meta")
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SuiteError(f'{where}: the suite needs a "name" (a non-empty string, e.g. "{table}")')
    expectations = doc.get("expectations")
    if not isinstance(expectations, list):
        raise SuiteError(f'{where}: "expectations" must be a list of {{"type", "kwargs", "meta"}} objects')
    gx_doc = copy.deepcopy(doc)
    references: list[Reference] = []
    with quiet():
        from great_expectations.core.expectation_suite import ExpectationSuite
        from great_expectations.exceptions import ExpectationNotFoundError
        from great_expectations.expectations.registry import get_expectation_impl

        for i, e in enumerate(expectations):
            at = f"{where}: expectation {i + 1}"
            if not isinstance(e, dict) or not isinstance(e.get("type"), str):
                raise SuiteError(f'{at}: expected an object with "type" (e.g. "expect_column_values_to_not_be_null")')
            at = f"{at} ({e['type']})"
            if not isinstance(e.get("kwargs", {}), dict):
                raise SuiteError(f'{at}: "kwargs" must be an object')
            try:
                get_expectation_impl(e["type"])
            except ExpectationNotFoundError:
                raise SuiteError(
                    f"{at}: GX {_gx_version()} has no expectation type {e['type']!r}; see the gallery "
                    "(https://greatexpectations.io/expectations) for the names"
                ) from None
            for key, value in (e.get("kwargs") or {}).items():
                if isinstance(value, dict) and REFERENCE in value:
                    ref = _reference(value, f"lakestream_{len(references)}", f"{at}: kwarg {key}")
                    references.append(ref)
                    gx_doc["expectations"][i]["kwargs"][key] = {"$PARAMETER": ref.param}
            try:
                ExpectationSuite(name=name, expectations=[gx_doc["expectations"][i]])
            except Exception as exc:  # noqa: BLE001 - GX raises pydantic and its own errors; all mean "fix the file"
                raise SuiteError(f"{at}: GX refuses its kwargs: {one_line(exc)}") from None
    anomalies = parse_anomalies(doc.get("meta"), table=table, path=where)
    return Suite(
        table=table,
        name=name,
        path=where,
        doc=doc,
        gx_doc=gx_doc,
        references=tuple(references),
        anomalies=anomalies,
    )


def _reference(value: dict[str, Any], param: str, at: str) -> Reference:
    kind = value[REFERENCE]
    if kind not in REFERENCE_KINDS:
        raise SuiteError(f"{at}: unknown {REFERENCE} reference {kind!r}; one of {sorted(REFERENCE_KINDS)}")
    required, optional = REFERENCE_KINDS[kind]
    fields = set(value) - {REFERENCE}
    missing = [f for f in required if f not in fields]
    extra = sorted(fields - set(required) - set(optional))
    if missing or extra:
        raise SuiteError(
            f"{at}: a {kind!r} reference takes {', '.join(required + optional)}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(extra)}" if extra else "")
        )
    if "table" in value and not (isinstance(value["table"], str) and _TABLE_NAME.fullmatch(value["table"])):
        raise SuiteError(f"{at}: table must be a table name <namespace>.<table>, got {value['table']!r}")
    if "column" in value and not isinstance(value["column"], str):
        raise SuiteError(f"{at}: column must be a column name, got {value['column']!r}")
    if "seconds" in value:
        s = value["seconds"]
        if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s) or s < 0:
            raise SuiteError(f"{at}: seconds must be a number >= 0, got {s!r}")
    return Reference(param=param, kind=kind, spec={k: v for k, v in value.items() if k != REFERENCE})


def check_suite(lh: Lakehouse, suite: Suite) -> None:
    """Check ``suite`` against the warehouse: its table exists, every column it names is one of the table's
    (or the lake's ``__bucket``/``__offset``/``__timestamp``), every referenced table and column exists.
    Raises `SuiteError` naming the file."""
    from lakehouse.errors import TableNotFound

    def columns_of(table: str, at: str) -> set[str]:
        try:
            return set(lh.table(table).schema.names) | set(LAKE_COLUMNS)
        except TableNotFound:
            raise SuiteError(f"{at}: no table {table} in {lh.url}; create it or fix the name") from None

    own = columns_of(suite.table, f"{suite.path}: the suite's table")
    for i, column in suite.columns():
        if column not in own:
            kind = suite.doc["expectations"][i]["type"]
            raise SuiteError(
                f"{suite.path}: expectation {i + 1} ({kind}) names column {column!r}, which {suite.table} lacks; "
                f"its columns are {', '.join(sorted(own))}"
            )
    for i, spec in enumerate(suite.anomalies):
        if spec.column is not None and spec.column not in own:
            raise SuiteError(
                f"{suite.path}: meta.anomalies[{i}].column names column {spec.column!r}, which "
                f"{suite.table} lacks; its columns are {', '.join(sorted(own))}"
            )
    for ref in suite.references:
        if ref.table is None:
            continue
        at = f"{suite.path}: {REFERENCE} reference {ref.kind} to {ref.table}"
        cols = columns_of(ref.table, at)
        if "column" in ref.spec and ref.spec["column"] not in cols:
            raise SuiteError(
                f"{at}: {ref.table} has no column {ref.spec['column']!r}; its columns are {', '.join(sorted(cols))}"
            )


def _gx_version() -> str:
    with quiet() as gx:
        return str(gx.__version__)
