"""Great Expectations 1.x suites per table, kept as files in a layers project and run on a lake snapshot.

Files::

    PROJECT/expectations/<namespace>.<table>.json     one suite per table

Each file is an ExpectationSuite in GX 1.x's own JSON format (what ``suite.to_json_dict()`` writes), so it is
edited as any GX suite::

    {"name": "ods.orders",
     "expectations": [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "o_orderkey"},
                       "meta": {}}, ...],
     "meta": {}}

GX compares one batch with constants; lakestream adds references, resolved from the lake each time the suite
runs. A kwarg value may be one of::

    {"$lakestream": "column_values", "table": "ods.customer", "column": "c_custkey"}
        the distinct non-null values of a column of another table (a list: for
        expect_column_values_to_be_in_set, referential integrity)
    {"$lakestream": "row_count", "table": "ods.orders"}
        the rows of another table (an int: expect_table_row_count_to_equal, row-count agreement between layers)
    {"$lakestream": "now_minus_seconds", "seconds": 86400}
        the time that many seconds before the run, comparable with the lake's ``__timestamp`` (timestamptz):
        freshness with expect_column_max_to_be_between(column="__timestamp", min_value=...)

**Which state of the other table.** The one the validated snapshot was computed from, when that is defined: a
model's snapshot holds whole rounds (tiering stops at round boundaries), the round that produced it recorded
its inputs' positions, and an input that is itself a model leads on to its own round (`upstream_positions`). A
referenced table among them is read as of its positions (an as-of union read); any other (the checked table is
a source, or the referenced one is not upstream of it) from its current lake snapshot. A model's snapshot that
is no retained round boundary (its round records were pruned: tier more often than every `KEEP_ROUNDS` rounds)
(or one holding half a round: tiered by something that ignored the boundaries) makes the suite an error, not a
violation.

Each reference becomes a GX suite parameter (``{"$PARAMETER": "lakestream_<i>"}``) whose value is given to the
validation, so Data Docs show the values used. Columns are the table's columns plus the lake's ``__bucket``,
``__offset`` and ``__timestamp``.

`load_suites` reads and checks every file (JSON, structure, expectation types, kwargs as GX validates them,
references) and `check_suite` checks columns and referenced tables against the warehouse; both raise
`SuiteError` naming the file and what to fix, before anything runs. `run_suite` validates one snapshot and keeps
the validation result and the Data Docs in the warehouse under ``_lakestream/quality/gx/``.

**Where the rows are read.** Work whose size follows the data runs in Spark's executors; the driver holds rows
only under an explicit budget, the setting ``quality_driver_budget_rows`` (``LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS``,
default 1,000,000; `lakehouse.settings`), compared with the records of the snapshot's data files (its summary,
read from metadata alone):

- up to the budget: pyiceberg reads the snapshot into the driver and GX validates it as a pandas DataFrame
  (a small table is validated at once, without Spark's per-job cost);
- above it, with a Spark session: GX's Spark datasource validates a DataFrame the executors read through the
  ``lakestream`` format at exactly the snapshot validated (the source's ``snapshot_id`` option: a lake read of
  that snapshot, whenever Spark plans it). No row passes through the driver; the DataFrame is unpersisted after
  the validation (GX persists it for its metrics);
- above it, without Spark: a sample of at most budget rows, the snapshot's data files streamed in an order
  shuffled by the snapshot id (the same sample each time the same snapshot is validated) until the budget is
  reached: memory and reads follow the budget, not the table. ``details["sample"]`` (``{"rows", "of"}``) and
  a warning (logged and in ``details["warnings"]``) say that the verdict covers a sample: expectations over the
  whole table (row counts, uniqueness, min/max, sums) see the sample only. A budget of 0 without Spark is an
  error (nothing to validate in the driver).

References to other tables follow the run: with Spark (the validated snapshot above the budget), their row count
or distinct values are computed by Spark over the same positions (``count`` / ``distinct`` on the ``lakestream``
format); in the driver, the referenced read is streamed and stops past the budget, to go on with Spark if a
session was given, else to fail the suite naming the setting (a value set or a row count of a sample would be
wrong, not approximate). A value set never brings more values to the driver than the budget allows (or
`VALUE_LIST_FLOOR`, for short lists of codes under a small budget): on Spark, ``expect_column_values_to_be_in_set``
and ``..._not_be_in_set`` with a ``column_values`` reference (kwargs ``column``, ``value_set``, ``mostly``) are
not given to GX but checked by a join of the column with the referenced values (counts and five unexpected values
reach the driver; the kept result marks them in its ``meta``; Data Docs do not show them); for a snapshot the
driver holds, only the referenced values among its column's are listed; any other expectation whose list would
pass the budget fails the suite naming the setting.
"""

from __future__ import annotations

import copy
import datetime
import json
import logging
import math
import os
import random
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.settings import QUALITY_DRIVER_BUDGET_ENV as BUDGET_SETTING
from quality._gx import DOCS_SITE, ephemeral_context, quiet
from quality.anomaly import AnomalySpec, parse_anomalies
from quality.errors import QualityError, SuiteError
from quality.results import GX, CheckResult, Violation

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from lakehouse.lakehouse import Lakehouse

__all__ = [
    "DOCS_PREFIX",
    "LAKE_COLUMNS",
    "REFERENCE",
    "RESULTS_PREFIX",
    "SUITES_DIR",
    "Suite",
    "check_suite",
    "load_suite",
    "load_suites",
    "run_suite",
    "run_suites",
    "upstream_positions",
]

log = logging.getLogger(__name__)

#: The folder of a project that holds the suites.
SUITES_DIR = "expectations"
#: Where Data Docs and validation results are kept in the warehouse.
DOCS_PREFIX = "_lakestream/quality/gx/docs/"
RESULTS_PREFIX = "_lakestream/quality/gx/results/"
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
_SAMPLE = 5  # unexpected values named in a violation
#: Distinct values of a reference handed to GX as a list even under a smaller driver budget (a short list of
#: codes is not the rows the budget bounds).
VALUE_LIST_FLOOR = 10_000
_LIST_LIMIT = 20  # longer lists are abbreviated in a violation's expected kwargs


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


# -- loading and checking ------------------------------------------------------------------------------------


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
                raise SuiteError(f"{at}: GX refuses its kwargs: {_one_line(exc)}") from None
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


# -- running ------------------------------------------------------------------------------------------------


def run_suites(
    lh: Lakehouse,
    project_dir: str | os.PathLike[str],
    tables: Sequence[str] | None = None,
    *,
    spark: Any = None,
    docs_dir: str | os.PathLike[str] | None = None,
    driver_budget_rows: int | None = None,
) -> list[CheckResult]:
    """Every suite of the project (or those of ``tables``), each on its table's current snapshot. All suites
    are loaded and checked against the warehouse first: a bad one raises `SuiteError` and nothing runs."""
    suites = load_suites(project_dir)
    chosen = [suites[t] for t in tables if t in suites] if tables is not None else list(suites.values())
    for suite in chosen:
        check_suite(lh, suite)
    return [
        run_suite(lh, s.table, s, spark=spark, docs_dir=docs_dir, driver_budget_rows=driver_budget_rows) for s in chosen
    ]


def driver_budget(lh: Lakehouse, rows: int | None = None) -> int:
    """The rows a suite may validate in the driver: ``rows`` if given, else the setting
    ``quality_driver_budget_rows`` of ``lh``'s settings (`Lakehouse.from_env`), else of the environment / YAML
    (`lakehouse.settings.load_settings`).

    Raises:
        ConfigError: the setting is not a whole number >= 0 (the message names it).
        InvalidArgument: ``rows`` is not a whole number >= 0.
    """
    from lakehouse.settings import budget_rows

    return budget_rows(lh.settings, "quality_driver_budget_rows", rows)


def run_suite(
    lh: Lakehouse,
    table: str,
    suite: Suite | Mapping[str, Any],
    *,
    snapshot_id: int | None = None,
    spark: Any = None,
    docs_dir: str | os.PathLike[str] | None = None,
    driver_budget_rows: int | None = None,
) -> CheckResult:
    """Validate ``suite`` on a lake snapshot of ``table`` (the current one unless ``snapshot_id``). A table with no
    lake snapshot yet is skipped (no violation: ``details["skipped"]`` says why).

    ``suite`` is a `Suite` (from `load_suites`) or a suite document (parsed JSON). The snapshot is validated with
    an in-memory GX context, where the module docstring says: up to ``driver_budget_rows`` (default: the setting,
    `driver_budget`) read by pyiceberg in the driver, as a pandas DataFrame; above it through GX's Spark
    DataFrame datasource over the ``lakestream`` format read by the executors when ``spark`` is given, else on a
    sample of budget rows (``details["sample"]``, and a warning). ``details["engine"]`` says which ("pandas" or
    "spark"). Each failed expectation is a `Violation` (``gx-expectation``), except those of GX severity
    ``warning`` or ``info``: their messages are listed in ``details["warnings"]``. The validation result is kept in
    the warehouse under ``_lakestream/quality/gx/results/<table>/<snapshot>.json`` and the Data Docs (built in
    ``docs_dir`` or a temporary folder) under ``_lakestream/quality/gx/docs/``; ``details["data_docs"]`` is the key
    of this validation's page.

    Raises:
        SuiteError: the suite is invalid or names a column or table that does not exist (nothing ran).
        QualityError: the snapshot cannot be read or validated; a referenced table exceeds the driver's budget
            and no Spark session was given; the budget is 0 and no Spark session was given.
        ConfigError: the budget setting is invalid.
    """
    if not isinstance(suite, Suite):
        suite = parse_suite(dict(suite), table=table, path=f"suite for {table}")
    elif suite.table != table:
        suite = parse_suite(dict(suite.doc), table=table, path=suite.path)
    check_suite(lh, suite)
    budget = driver_budget(lh, driver_budget_rows)
    started = time.perf_counter()
    lake = lh.lake_table(table)
    snapshot = lake.snapshot_by_id(snapshot_id) if snapshot_id is not None else lake.current_snapshot()
    if snapshot_id is not None and snapshot is None:
        raise QualityError(f"{table} has no snapshot {snapshot_id} (expired, or of another table)")
    sid = snapshot.snapshot_id if snapshot is not None else None
    if sid is None:  # nothing tiered yet: no state to validate (or to publish); freshness would fail on NaT
        return CheckResult(
            check=f"{GX}:{suite.name}",
            table=table,
            snapshot_id=None,
            seconds=time.perf_counter() - started,
            rows=0,
            details={
                "expectations": len(suite.expectations),
                "passed": 0,
                "warnings": [],
                "skipped": "the table has no lake snapshot yet: nothing tiered to validate",
            },
        )
    records = _total_records(snapshot)
    use_spark = records > budget and spark is not None
    data: pa.Table | None = None
    sample: dict[str, int] | None = None
    if use_spark:
        pass  # the executors read the snapshot, when GX's first Spark job plans the read
    elif records <= budget:
        data = lake.scan(snapshot_id=sid).to_arrow()
    elif budget == 0:
        raise QualityError(
            f"{table} (snapshot {sid}, {records:,} records) is above the driver's budget of 0 rows "
            f"({BUDGET_SETTING}) and no Spark session was given: give one (lakestream check --spark-master, the "
            "spark= argument) or a budget above 0 to validate a sample in the driver"
        )
    else:
        data = _sample(lh, lake, table, sid, budget)
        sample = {"rows": data.num_rows, "of": _live_records(snapshot)}
    spark_tz = spark.conf.get("spark.sql.session.timeZone") if use_spark else None
    upstream = upstream_positions(lh, table, sid) if any("table" in r.spec for r in suite.references) else {}
    memberships = _memberships(suite)
    joined = memberships if use_spark else {}  # checked by a Spark join below, not by GX
    held = memberships if data is not None else {}  # the validated column's values are in the driver
    params = {
        ref.param: _resolve(
            lh,
            ref,
            spark_tz,
            upstream,
            budget=budget,
            spark=spark,
            use_spark=use_spark,
            within=_values_of(data, suite, memberships[ref.param]) if ref.param in held else None,
        )
        for ref in suite.references
        if ref.param not in joined
    }
    gx_doc = dict(suite.gx_doc)
    gx_doc["expectations"] = [e for i, e in enumerate(suite.gx_doc["expectations"]) if i not in joined.values()]

    with tempfile.TemporaryDirectory(prefix="lakestream-gx-") as tmp, quiet() as gx:
        docs = Path(docs_dir) if docs_dir is not None else Path(tmp)
        docs.mkdir(parents=True, exist_ok=True)
        before = _files(docs)
        context = ephemeral_context(gx, docs)
        source = (
            context.data_sources.add_spark("lakestream") if use_spark else context.data_sources.add_pandas("lakestream")
        )
        batch = source.add_dataframe_asset(table).add_batch_definition_whole_dataframe("snapshot")
        from great_expectations.core.expectation_suite import ExpectationSuite
        from great_expectations.core.run_identifier import RunIdentifier

        gx_suite = context.suites.add(ExpectationSuite(**copy.deepcopy(gx_doc)))
        validation = context.validation_definitions.add(
            gx.ValidationDefinition(name=f"{table}@{sid}", data=batch, suite=gx_suite)
        )
        run_id = RunIdentifier(run_name=f"snapshot-{sid}", run_time=datetime.datetime.now(datetime.UTC))
        frame = None
        try:
            if use_spark:
                from lakehouse.spark import read_table

                frame = read_table(spark, lh, table, union=False, snapshot_id=sid)
            else:
                assert data is not None
                frame = data.to_pandas()
            result = validation.run(
                batch_parameters={"dataframe": frame},
                expectation_parameters=params,
                result_format="SUMMARY",
                run_id=run_id,
            )
            rows = frame.count() if use_spark else len(frame)  # Spark counts what GX persisted
            joins = [
                _membership_result(lh, spark, frame, table, sid, suite, ref, joined[ref.param], upstream)
                for ref in suite.references
                if ref.param in joined
            ]
            context.build_data_docs(site_names=[DOCS_SITE])
        except Exception as exc:  # GX's own errors and the engine's: the check could not run
            raise QualityError(
                f"GX could not validate {table} (snapshot {sid}) with suite {suite.name!r} from {suite.path}: "
                f"{type(exc).__name__}: {_one_line(exc)}"
            ) from exc
        finally:
            if use_spark and frame is not None:
                frame.unpersist()  # GX persists the batch for its metrics and leaves it on the executors
        page = _upload_docs(lh, docs, before)
        result_doc = result.to_json_dict()
        result_doc.setdefault("results", []).extend(j.doc for j in joins)

    result_key = f"{RESULTS_PREFIX}{table}/{sid}.json"
    lh.store.put(result_key, json.dumps(result_doc, indent=1, default=str).encode())
    violations: list[Violation] = []
    warnings: list[str] = []
    for r in result.results:
        if r.success:
            continue
        found = _violation(table, sid, r.expectation_config, r.result, r.exception_info)
        if _severity(r.expectation_config) == "critical":
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
    n = len(result.results) + len(joins)
    passed = n - len(violations) - len(warnings)
    details: dict[str, Any] = {}
    if sample is not None:
        note = (
            f"{table}: validated a sample of {sample['rows']:,} of the snapshot's {sample['of']:,} rows (above "
            f"the driver's budget, {BUDGET_SETTING}={budget:,}, and no Spark session given); expectations over "
            "the whole table (row counts, uniqueness, min/max, sums) saw the sample only. Give a Spark session "
            "to validate every row"
        )
        log.warning("%s", note)
        warnings.append(note)
        details["sample"] = sample
    return CheckResult(
        check=f"{GX}:{suite.name}",
        table=table,
        snapshot_id=sid,
        seconds=time.perf_counter() - started,
        rows=rows,
        violations=violations,
        details={
            "expectations": n,
            "passed": passed,
            "warnings": warnings,
            "data_docs": page,
            "result": result_key,
            "engine": "spark" if use_spark else "pandas",
            **details,
        },
    )


def _severity(config: Any) -> str:
    severity = getattr(config, "severity", None)
    return str(getattr(severity, "value", severity) or "critical").lower()


def _summary_int(snapshot: Any, key: str) -> int:
    if snapshot is None or snapshot.summary is None:
        return 0
    try:
        return int(snapshot.summary.get(key) or 0)
    except (TypeError, ValueError):
        return 0


def _total_records(snapshot: Any) -> int:
    """The records of the snapshot's data files (its summary: metadata only): at least its rows, more by the
    rows position deletes remove (merge-on-read)."""
    return _summary_int(snapshot, "total-records")


def _live_records(snapshot: Any) -> int:
    """The snapshot's rows per its summary: the data files' records less the position deletes'."""
    return max(0, _total_records(snapshot) - _summary_int(snapshot, "total-position-deletes"))


def _sample(lh: Lakehouse, lake: Any, table: str, sid: int, budget: int) -> pa.Table:
    """At most ``budget`` rows of snapshot ``sid``, its data files streamed (`lakehouse.read.filescan`, a few batches
    in memory) in an order shuffled by the snapshot id, until the budget is reached: the files are a random
    choice, so the sample is not only the oldest rows; the same snapshot gives the same sample."""
    import pyarrow as pa

    from lakehouse.read.union import plan_read

    plan = plan_read(lake, lh.table(table), lake_only=True, snapshot_id=sid)
    tasks = list(plan.tasks)
    random.Random(sid).shuffle(tasks)
    plan = replace(plan, tasks=tuple(tasks))
    batches: list[pa.RecordBatch] = []
    kept = 0
    stream = plan.execute_all(None, table=lake, stream=True)
    try:
        for batch in stream:
            take = min(batch.num_rows, budget - kept)
            batches.append(batch.slice(0, take))
            kept += take
            if kept >= budget:
                break
    finally:
        stream.close()  # the files not read yet stay unread
    return pa.Table.from_batches(batches, schema=plan.arrow_schema)


def upstream_positions(lh: Lakehouse, table: str, snapshot_id: int | None) -> dict[str, dict[int, int]]:
    """The log positions of every table upstream of ``table`` that its lake snapshot ``snapshot_id`` (None: no
    snapshot, the empty table) was computed from: the inputs of the model round that produced it, and so on up
    through inputs that are models. Empty for a source (a table no round writes).

    Raises:
        QualityError: the snapshot of a model is no retained round boundary.
    """
    from lakehouse.read.union import snapshot_offsets
    from lakehouse.table.aliases import read_aliases
    from layers.errors import RoundUnknown
    from layers.physical import logical_inputs
    from layers.rounds import boundary_round, latest_round

    aliases = read_aliases(lh.store)  # rounds are kept by the physical table serving a model (blue/green)

    definition = lh.table(table)
    if snapshot_id is None:
        ends = dict.fromkeys(range(definition.buckets), 0)
    else:
        ends = snapshot_offsets(lh.lake_table(table).metadata, snapshot_id, definition.buckets)
    positions: dict[str, dict[int, int]] = {}
    todo = [(table, ends)]
    while todo:
        model, at = todo.pop()
        physical = aliases.physical(model)
        latest = latest_round(lh.store, physical)
        if latest is None:
            continue  # a source: nothing upstream
        latest = logical_inputs(aliases, latest)
        try:
            record = boundary_round(lh.store, physical, at, lh.log(model).end_offsets)
        except RoundUnknown as exc:
            raise QualityError(
                f"{table}: which state of its inputs its lake snapshot {snapshot_id} reflects is unknown, so its "
                f"suite's references to them cannot be resolved: {exc}. Tier the tables again (tiering stops at "
                "round boundaries)"
            ) from None
        if record is not None:
            inputs = logical_inputs(aliases, record).end
        else:  # before its first round: computed from nothing yet
            inputs = {i: dict.fromkeys(range(lh.table(i).buckets), 0) for i in latest.end}
        for name, offsets in inputs.items():
            if name not in positions:  # the nearest path wins (a diamond reaches one table twice)
                positions[name] = dict(offsets)
                todo.append((name, dict(offsets)))
    return positions


def _resolve(
    lh: Lakehouse,
    ref: Reference,
    spark_tz: str | None,
    upstream: Mapping[str, dict[int, int]],
    *,
    budget: int,
    spark: Any = None,
    use_spark: bool = False,
    within: pa.Array | None = None,
) -> Any:
    """The value of a reference: from the referenced table as of its position in ``upstream``
    (`upstream_positions`) or else its current lake snapshot; or from the clock. A table is read by Spark when
    the run validates on Spark (``use_spark``), else in the driver up to ``budget`` rows, past which it goes on
    with ``spark`` if given (see the module docstring). Distinct values read by Spark come to the driver (GX's
    kwarg) only up to ``budget``; ``within`` (the validated column's values, for a membership expectation of a
    snapshot the driver holds) keeps only the referenced values among them, so as many as the driver holds."""
    if ref.kind == "now_minus_seconds":
        at = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=float(ref.spec["seconds"]))
        if spark_tz is not None:  # Spark hands GX naive timestamps in the session's time zone
            from zoneinfo import ZoneInfo

            return at.astimezone(ZoneInfo(spark_tz)).replace(tzinfo=None)
        return at
    name = ref.spec["table"]
    column = ref.spec["column"] if ref.kind == "column_values" else lh.table(name).schema.names[0]
    if not use_spark:
        values = _driver_column(lh, name, column, upstream.get(name), budget)
        if values is not None:
            return len(values) if ref.kind == "row_count" else _distinct(values)
        if spark is None:
            where = f"as of its positions {upstream[name]}" if name in upstream else "at its current lake snapshot"
            raise QualityError(
                f"{REFERENCE} reference {ref.kind} to {name} ({where}) reads more than the driver's budget of "
                f"{budget:,} rows ({BUDGET_SETTING}), and no Spark session was given to read it on the executors: "
                "give one (lakestream check --spark-master, the spark= argument) or raise the budget"
            )
    frame = _reference_frame(lh, spark, name, column, upstream)
    if ref.kind == "row_count":
        return frame.count()
    distinct = frame.where(frame[column].isNotNull()).select(column).distinct()
    if within is not None:
        import pyarrow as pa
        from pyspark.sql import functions as F

        held = spark.createDataFrame(pa.table({"v": within}))  # at most the rows the driver validates
        distinct = distinct.join(held, F.col(column) == held["v"], "left_semi")
    else:
        count = distinct.count()
        if count > max(budget, VALUE_LIST_FLOOR):
            raise QualityError(
                f"{REFERENCE} reference {ref.kind} to {name}.{column} holds {count:,} distinct values, more than "
                f"the driver's budget of {max(budget, VALUE_LIST_FLOOR):,} ({BUDGET_SETTING}) that GX would be "
                "handed as a list; "
                "expect_column_values_to_be_in_set and expect_column_values_to_not_be_in_set (with column, "
                "value_set and mostly only) are checked by a Spark join instead when the suite runs on Spark; "
                "for other expectations raise the budget"
            )
    return _distinct(distinct.toArrow().column(column))


def _reference_frame(
    lh: Lakehouse, spark: Any, name: str, column: str, upstream: Mapping[str, dict[int, int]]
) -> DataFrame:
    """``column`` of table ``name`` as a Spark DataFrame: as of its position in ``upstream``, else at its current
    lake snapshot (pinned now)."""
    from lakehouse.spark import read_table

    if name in upstream:
        return read_table(spark, lh, name, columns=[column], as_of=upstream[name])
    current = lh.lake_table(name).current_snapshot()
    snapshot = current.snapshot_id if current is not None else None
    return read_table(spark, lh, name, union=False, columns=[column], snapshot_id=snapshot)


#: Expectations a ``column_values`` reference can be checked for by a Spark join (the kwargs they may have):
#: in the set (True) or not in it (False).
_MEMBERSHIP = {"expect_column_values_to_be_in_set": True, "expect_column_values_to_not_be_in_set": False}
_MEMBERSHIP_KWARGS = {"column", "value_set", "mostly", "result_format"}


def _memberships(suite: Suite) -> dict[str, int]:
    """The suite parameters of ``column_values`` references that a membership expectation takes as its value
    set, and that expectation's index: on Spark these are checked by a join, the values never listed."""
    found = {}
    for i, e in enumerate(suite.gx_doc["expectations"]):
        kwargs = e.get("kwargs") or {}
        value_set = kwargs.get("value_set")
        if e["type"] not in _MEMBERSHIP or not isinstance(value_set, dict) or "$PARAMETER" not in value_set:
            continue
        [ref] = [r for r in suite.references if r.param == value_set["$PARAMETER"]]
        if ref.kind == "column_values" and set(kwargs) <= _MEMBERSHIP_KWARGS and isinstance(kwargs.get("column"), str):
            found[ref.param] = i
    return found


def _values_of(data: pa.Table, suite: Suite, index: int) -> pa.Array:
    """The distinct non-null values of the column expectation ``index`` checks, in rows the driver holds."""
    import pyarrow.compute as pc

    return pc.unique(data.column(suite.expectations[index]["kwargs"]["column"]).drop_null())


@dataclass(frozen=True)
class _Joined:
    """A membership expectation checked by a Spark join: its GX-shaped result document, its violation if it
    failed, and its severity."""

    doc: dict[str, Any]
    violation: Violation | None
    severity: str


def _membership_result(
    lh: Lakehouse,
    spark: Any,
    frame: DataFrame,
    table: str,
    sid: int,
    suite: Suite,
    ref: Reference,
    index: int,
    upstream: Mapping[str, dict[int, int]],
) -> _Joined:
    """Expectation ``index`` of ``suite`` (a membership whose value set is ``ref``) over the validated ``frame``:
    its column's non-null values joined with the referenced column's in Spark (an anti join for "in the set", a
    semi join for "not in it"); counts and at most `_SAMPLE` unexpected values reach the driver. Success as GX's:
    the share of expected values among the non-null ones at least ``mostly`` (default 1)."""
    from types import SimpleNamespace

    from pyspark.sql import functions as F

    expectation = suite.expectations[index]
    kwargs = dict(expectation.get("kwargs") or {})
    column = kwargs["column"]
    rows = frame.count()
    values = frame.select(F.col(column).alias("v")).where(F.col("v").isNotNull())
    known = _reference_frame(lh, spark, ref.spec["table"], ref.spec["column"], upstream)
    known = known.select(F.col(ref.spec["column"]).alias("r")).where(F.col("r").isNotNull()).distinct()
    how = "left_anti" if _MEMBERSHIP[expectation["type"]] else "left_semi"  # the unexpected values
    bad = values.join(known, values["v"] == known["r"], how)
    total = values.count()
    unexpected = bad.count()
    sample = [r["v"] for r in bad.limit(_SAMPLE).collect()]
    mostly = kwargs.get("mostly")
    success = total == 0 or (total - unexpected) / total >= (1.0 if mostly is None else float(mostly))
    result = {
        "element_count": rows,
        "missing_count": rows - total,
        "unexpected_count": unexpected,
        "unexpected_percent": 100.0 * unexpected / total if total else None,
        "partial_unexpected_list": sample,
    }
    severity = str(expectation.get("severity") or "critical").lower()
    config = {"type": expectation["type"], "kwargs": kwargs, "meta": dict(expectation.get("meta") or {})}
    doc = {
        "success": success,
        "expectation_config": config,
        "result": result,
        "meta": {
            "lakestream": f"checked by a Spark join of {column} with {ref.spec['table']}.{ref.spec['column']} "
            "(the referenced values are not listed)"
        },
    }
    violation = None
    if not success:
        violation = _violation(table, sid, SimpleNamespace(type=config["type"], kwargs=kwargs), result, None)
    return _Joined(doc=doc, violation=violation, severity=severity)


def _driver_column(
    lh: Lakehouse, name: str, column: str, as_of: Mapping[int, int] | None, budget: int
) -> pa.ChunkedArray | None:
    """``column`` of table ``name`` (as of ``as_of``, else at its current lake snapshot), streamed; None once
    it passes ``budget`` rows (what was read is dropped)."""
    import pyarrow as pa

    from lakehouse.read.union import plan_read

    if as_of is not None:
        batches = lh.union_batches(name, columns=[column], as_of=as_of)
    else:
        lake = lh.lake_table(name)
        current = lake.current_snapshot()
        if current is None:  # nothing tiered yet: no rows
            return pa.chunked_array([], pa.null())
        if _live_records(current) > budget:  # its summary says so: nothing need be read to know
            return None
        plan = plan_read(lake, lh.table(name), columns=[column], lake_only=True, snapshot_id=current.snapshot_id)
        batches = plan.execute_all(None, table=lake, stream=True)
    chunks: list[pa.Array] = []
    kept = 0
    try:
        for batch in batches:
            kept += batch.num_rows
            if kept > budget:
                return None
            chunks.append(batch.column(column))
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    return pa.chunked_array(chunks) if chunks else pa.chunked_array([], pa.null())


def _distinct(values: pa.ChunkedArray) -> list[Any]:
    import pyarrow.compute as pc

    return sorted(pc.unique(values.drop_null()).to_pylist(), key=lambda v: (str(type(v)), v))


def _files(folder: Path) -> dict[str, float]:
    return {p.relative_to(folder).as_posix(): p.stat().st_mtime for p in folder.rglob("*") if p.is_file()}


def _upload_docs(lh: Lakehouse, docs: Path, before: Mapping[str, float]) -> str | None:
    """Copy the Data Docs GX built in ``docs`` to the warehouse; the key of this run's validation page."""
    files = _files(docs)
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


def _violation(table: str, sid: int | None, config: Any, result: Mapping[str, Any], exc: Any) -> Violation:
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
        detail = _one_line(error)
        message = f"{kind}{on} could not be evaluated: {detail}"
        return Violation("gx-expectation", table, message, snapshot_id=sid, expected=expected, actual=detail)
    result = dict(result or {})
    if "unexpected_count" in result and "observed_value" not in result:
        sample = list(result.get("partial_unexpected_list") or [])[:_SAMPLE]
        count, total = result.get("unexpected_count"), result.get("element_count")
        pct = result.get("unexpected_percent")
        share = f" ({pct:.1f}%)" if isinstance(pct, int | float) else ""
        message = f"{kind}{on} failed: {count} of {total} values unexpected{share}, e.g. {_show(sample)}"
        actual = {"unexpected_count": count, "element_count": total, "unexpected_values": sample}
    else:
        observed = result.get("observed_value")
        wanted = ", ".join(f"{k}={_show(v)}" for k, v in expected.items() if k not in ("column", "result_format"))
        message = f"{kind}{on} failed: observed {_show(observed)}, expected {wanted or 'otherwise'}"
        mismatched = (result.get("details") or {}).get("mismatched")
        if isinstance(mismatched, Mapping) and mismatched:
            message += " (" + "; ".join(f"{k}: {_show(list(v))}" for k, v in mismatched.items()) + ")"
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
    if isinstance(value, list | tuple | set) and len(value) > _LIST_LIMIT:
        items = list(value)
        return [*items[:_LIST_LIMIT], f"... ({len(items)} values)"]
    return value


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, float) and math.isnan(value):
        return "null"
    if value is None:
        return "null"
    return str(value)


def _one_line(exc: Any) -> str:
    return " ".join(str(exc).split())[:400]


def _gx_version() -> str:
    with quiet() as gx:
        return str(gx.__version__)
