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

The package, one job per module: `suites` (suite files read, parsed and checked), `reads` (what a suite reads
from the lake besides GX: record counts, a sample, upstream positions, a referenced column), `membership`
(membership expectations checked by a Spark join), `results` (GX's results as violations and warnings; Data Docs
and the result kept in the warehouse). This module runs a suite (`run_suite`, one step per function) and resolves
its references' values.
"""

from __future__ import annotations

import copy
import datetime
import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.settings import QUALITY_DRIVER_BUDGET_ENV as BUDGET_SETTING
from quality._gx import DOCS_SITE, ephemeral_context, quiet
from quality.errors import QualityError, SuiteError
from quality.expectations.membership import membership_result, memberships, values_of
from quality.expectations.reads import (
    driver_column,
    live_records,
    reference_frame,
    sample_rows,
    total_records,
    upstream_positions,
)
from quality.expectations.reads import sample_rows as _sample  # noqa: F401 - this module's name for it before
from quality.expectations.results import (
    DOCS_PREFIX,
    RESULTS_PREFIX,
    Joined,
    files_in,
    keep_result,
    one_line,
    upload_docs,
    verdicts,
)
from quality.expectations.results import LIST_LIMIT as _LIST_LIMIT  # noqa: F401 - this module's name for it before
from quality.expectations.suites import (
    LAKE_COLUMNS,
    REFERENCE,
    REFERENCE_KINDS,
    SUITES_DIR,
    Reference,
    Suite,
    check_suite,
    load_suite,
    load_suites,
    parse_suite,
)
from quality.results import GX, CheckResult

if TYPE_CHECKING:
    import pyarrow as pa

    from lakehouse.lakehouse import Lakehouse

__all__ = [
    "DOCS_PREFIX",
    "LAKE_COLUMNS",
    "REFERENCE",
    "REFERENCE_KINDS",
    "RESULTS_PREFIX",
    "SUITES_DIR",
    "VALUE_LIST_FLOOR",
    "QualityError",
    "Reference",
    "Suite",
    "SuiteError",
    "check_suite",
    "driver_budget",
    "load_suite",
    "load_suites",
    "parse_suite",
    "run_suite",
    "run_suites",
    "upstream_positions",
]

log = logging.getLogger(__name__)

#: Distinct values of a reference handed to GX as a list even under a smaller driver budget (a short list of
#: codes is not the rows the budget bounds).
VALUE_LIST_FLOOR = 10_000


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
    suite = _suite_for(table, suite)
    check_suite(lh, suite)
    budget = driver_budget(lh, driver_budget_rows)
    started = time.perf_counter()
    lake = lh.lake_table(table)
    snapshot = _snapshot(lake, table, snapshot_id)
    if snapshot is None:  # nothing tiered yet: no state to validate (or to publish); freshness would fail on NaT
        return _skipped(table, suite, started)
    sid = snapshot.snapshot_id
    rows = _rows(lh, lake, table, snapshot, budget, spark)
    plan = _plan(lh, table, sid, suite, rows, budget, spark)
    validation = _validate(lh, table, sid, suite, rows, plan, spark, docs_dir)
    result_key = keep_result(lh, table, sid, validation.doc)
    violations, warnings = verdicts(table, sid, validation.results, validation.joins)
    n = len(validation.results) + len(validation.joins)
    passed = n - len(violations) - len(warnings)
    details: dict[str, Any] = {}
    if rows.sample is not None:
        warnings.append(_sample_note(table, rows.sample, budget))
        details["sample"] = rows.sample
    return CheckResult(
        check=f"{GX}:{suite.name}",
        table=table,
        snapshot_id=sid,
        seconds=time.perf_counter() - started,
        rows=validation.rows,
        violations=violations,
        details={
            "expectations": n,
            "passed": passed,
            "warnings": warnings,
            "data_docs": validation.page,
            "result": result_key,
            "engine": "spark" if rows.use_spark else "pandas",
            **details,
        },
    )


def _suite_for(table: str, suite: Suite | Mapping[str, Any]) -> Suite:
    """``suite`` as a `Suite` of ``table``: a document parsed, a suite of another table parsed again for this one.
    Raises `SuiteError`."""
    if not isinstance(suite, Suite):
        return parse_suite(dict(suite), table=table, path=f"suite for {table}")
    if suite.table != table:
        return parse_suite(dict(suite.doc), table=table, path=suite.path)
    return suite


def _snapshot(lake: Any, table: str, snapshot_id: int | None) -> Any:
    """The snapshot to validate: ``snapshot_id``, else the current one (None: nothing tiered yet).

    Raises:
        QualityError: ``table`` has no snapshot ``snapshot_id``.
    """
    snapshot = lake.snapshot_by_id(snapshot_id) if snapshot_id is not None else lake.current_snapshot()
    if snapshot_id is not None and snapshot is None:
        raise QualityError(f"{table} has no snapshot {snapshot_id} (expired, or of another table)")
    return snapshot


def _skipped(table: str, suite: Suite, started: float) -> CheckResult:
    """The result of a suite on a table with no lake snapshot: skipped, no violation."""
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


@dataclass(frozen=True)
class _Rows:
    """Where a snapshot's rows are validated: on Spark (``use_spark``: the executors read them when GX's first
    Spark job plans the read), or held in the driver (``data``: every row, or a sample, ``sample`` saying of how
    many)."""

    use_spark: bool
    data: pa.Table | None = None
    sample: dict[str, int] | None = None


def _rows(lh: Lakehouse, lake: Any, table: str, snapshot: Any, budget: int, spark: Any) -> _Rows:
    """Where the rows of ``snapshot`` are validated (the module docstring): Spark above ``budget`` when given a
    session, else the driver, whole up to the budget, a sample of it above.

    Raises:
        QualityError: above a budget of 0 with no Spark session (nothing to validate in the driver).
    """
    sid = snapshot.snapshot_id
    records = total_records(snapshot)
    if records > budget and spark is not None:
        return _Rows(use_spark=True)
    if records <= budget:
        return _Rows(use_spark=False, data=lake.scan(snapshot_id=sid).to_arrow())
    if budget == 0:
        raise QualityError(
            f"{table} (snapshot {sid}, {records:,} records) is above the driver's budget of 0 rows "
            f"({BUDGET_SETTING}) and no Spark session was given: give one (lakestream check --spark-master, the "
            "spark= argument) or a budget above 0 to validate a sample in the driver"
        )
    data = sample_rows(lh, lake, table, sid, budget)
    return _Rows(use_spark=False, data=data, sample={"rows": data.num_rows, "of": live_records(snapshot)})


@dataclass(frozen=True)
class _Plan:
    """What GX is given and what is checked beside it: the suite parameters' values (``params``), the suite
    document without the expectations a Spark join checks (``joined``: their parameter and index), and the
    positions of the tables upstream of the snapshot."""

    params: dict[str, Any]
    gx_doc: dict[str, Any]
    joined: dict[str, int]
    upstream: Mapping[str, dict[int, int]]


def _plan(lh: Lakehouse, table: str, sid: int, suite: Suite, rows: _Rows, budget: int, spark: Any) -> _Plan:
    """The references of ``suite`` resolved for snapshot ``sid`` (`_resolve`), but for the membership
    expectations a Spark join checks when the rows are validated on Spark.

    Raises:
        QualityError: a reference cannot be resolved within the driver's budget, or its table's snapshot is no
            round boundary.
    """
    spark_tz = spark.conf.get("spark.sql.session.timeZone") if rows.use_spark else None
    upstream = upstream_positions(lh, table, sid) if any("table" in r.spec for r in suite.references) else {}
    members = memberships(suite)
    joined = members if rows.use_spark else {}  # checked by a Spark join, not by GX
    held = members if rows.data is not None else {}  # the validated column's values are in the driver
    params = {
        ref.param: _resolve(
            lh,
            ref,
            spark_tz,
            upstream,
            budget=budget,
            spark=spark,
            use_spark=rows.use_spark,
            within=values_of(rows.data, suite, members[ref.param]) if ref.param in held else None,
        )
        for ref in suite.references
        if ref.param not in joined
    }
    gx_doc = dict(suite.gx_doc)
    gx_doc["expectations"] = [e for i, e in enumerate(suite.gx_doc["expectations"]) if i not in joined.values()]
    return _Plan(params=params, gx_doc=gx_doc, joined=joined, upstream=upstream)


@dataclass(frozen=True)
class _Validation:
    """What one validation gave: GX's results (one per expectation it was given), the membership expectations
    checked by a Spark join, the rows validated, the key of its Data Docs page and the result document kept."""

    results: list[Any]
    joins: list[Joined]
    rows: int
    page: str | None
    doc: dict[str, Any]


def _validate(
    lh: Lakehouse,
    table: str,
    sid: int,
    suite: Suite,
    rows: _Rows,
    plan: _Plan,
    spark: Any,
    docs_dir: str | os.PathLike[str] | None,
) -> _Validation:
    """Validate snapshot ``sid`` with an in-memory GX context (pandas, or Spark over the ``lakestream`` format),
    check the joined memberships, build the Data Docs (in ``docs_dir`` or a temporary folder) and copy them to
    the warehouse.

    Raises:
        QualityError: GX or the engine could not validate the snapshot.
    """
    use_spark, data, joined, upstream = rows.use_spark, rows.data, plan.joined, plan.upstream
    with tempfile.TemporaryDirectory(prefix="lakestream-gx-") as tmp, quiet() as gx:
        docs = Path(docs_dir) if docs_dir is not None else Path(tmp)
        docs.mkdir(parents=True, exist_ok=True)
        before = files_in(docs)
        context = ephemeral_context(gx, docs)
        source = (
            context.data_sources.add_spark("lakestream") if use_spark else context.data_sources.add_pandas("lakestream")
        )
        batch = source.add_dataframe_asset(table).add_batch_definition_whole_dataframe("snapshot")
        from great_expectations.core.expectation_suite import ExpectationSuite
        from great_expectations.core.run_identifier import RunIdentifier

        gx_suite = context.suites.add(ExpectationSuite(**copy.deepcopy(plan.gx_doc)))
        validation = context.validation_definitions.add(
            gx.ValidationDefinition(name=f"{table}@{sid}", data=batch, suite=gx_suite)
        )
        run_id = RunIdentifier(run_name=f"snapshot-{sid}", run_time=datetime.datetime.now(datetime.UTC))
        frame: Any = None  # a Spark DataFrame, or pandas'
        try:
            if use_spark:
                from lakehouse.spark import read_table

                frame = read_table(spark, lh, table, union=False, snapshot_id=sid)
            else:
                assert data is not None
                frame = data.to_pandas()
            result = validation.run(
                batch_parameters={"dataframe": frame},
                expectation_parameters=plan.params,
                result_format="SUMMARY",
                run_id=run_id,
            )
            counted = frame.count() if use_spark else len(frame)  # Spark counts what GX persisted
            joins = [
                membership_result(lh, spark, frame, table, sid, suite, ref, joined[ref.param], upstream)
                for ref in suite.references
                if ref.param in joined
            ]
            context.build_data_docs(site_names=[DOCS_SITE])
        except Exception as exc:  # GX's own errors and the engine's: the check could not run
            raise QualityError(
                f"GX could not validate {table} (snapshot {sid}) with suite {suite.name!r} from {suite.path}: "
                f"{type(exc).__name__}: {one_line(exc)}"
            ) from exc
        finally:
            if use_spark and frame is not None:
                frame.unpersist()  # GX persists the batch for its metrics and leaves it on the executors
        page = upload_docs(lh, docs, before)
        result_doc = result.to_json_dict()
        result_doc.setdefault("results", []).extend(j.doc for j in joins)
    return _Validation(results=result.results, joins=joins, rows=counted, page=page, doc=result_doc)


def _sample_note(table: str, sample: Mapping[str, int], budget: int) -> str:
    """The warning that a verdict covers a sample of the snapshot (logged, and returned for the result)."""
    note = (
        f"{table}: validated a sample of {sample['rows']:,} of the snapshot's {sample['of']:,} rows (above "
        f"the driver's budget, {BUDGET_SETTING}={budget:,}, and no Spark session given); expectations over "
        "the whole table (row counts, uniqueness, min/max, sums) saw the sample only. Give a Spark session "
        "to validate every row"
    )
    log.warning("%s", note)
    return note


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
        values = driver_column(lh, name, column, upstream.get(name), budget)
        if values is not None:
            return len(values) if ref.kind == "row_count" else _distinct(values)
        if spark is None:
            where = f"as of its positions {upstream[name]}" if name in upstream else "at its current lake snapshot"
            raise QualityError(
                f"{REFERENCE} reference {ref.kind} to {name} ({where}) reads more than the driver's budget of "
                f"{budget:,} rows ({BUDGET_SETTING}), and no Spark session was given to read it on the executors: "
                "give one (lakestream check --spark-master, the spark= argument) or raise the budget"
            )
    frame = reference_frame(lh, spark, name, column, upstream)
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


def _distinct(values: pa.ChunkedArray) -> list[Any]:
    import pyarrow.compute as pc

    return sorted(pc.unique(values.drop_null()).to_pylist(), key=lambda v: (str(type(v)), v))
