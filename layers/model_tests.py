"""Model tests: a project's ``tests/<name>.yml``, each run on a throwaway warehouse (docs/guides/layers.md, "Model
tests").

A test is a list of steps. A step appends input rows to the sources' logs (inserts, updates, deletes by key),
runs one round of every model (as `lakestream layers run --once` does) and then checks two things:

* the expected rows of the models the step names: a model's whole content, order ignored, compared on the
  columns its expected rows give (the others are not compared);
* that every model's incremental state equals a rebuild: each model's SQL computed in full (Spark SQL, in
  dependency order, each over the rebuilt models before it and the sources as they are now). The expected rows
  check a model's logic; this checks its incremental maintenance (a delete or a dimension change the rounds
  missed) on exactly the changes the test makes.

`load_model_tests` reads and checks the files without Spark (every problem a `ModelTestFormatError` naming the
file and the step); `run_model_tests` runs them with one Spark session given by the caller, each test on its own
``file://`` warehouse in a temporary folder, removed after.
"""

from __future__ import annotations

import datetime
import decimal
import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import yaml

from lakehouse.errors import InvalidArgument, LakestreamError
from layers.errors import ModelTestFormatError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.lakehouse import Lakehouse
    from layers.project import Project
    from layers.runner import Runner
    from layers.spark_sql import SparkSql

__all__ = [
    "ChangedRow",
    "Expectation",
    "InputRows",
    "ModelTest",
    "ModelTestFailure",
    "ModelTestResult",
    "RowDiff",
    "Step",
    "load_model_tests",
    "run_model_test",
    "run_model_tests",
    "select_tests",
]

log = logging.getLogger(__name__)

TESTS_FOLDER = "tests"
#: The kinds of input rows of a step, in the order they are appended.
OPS = ("insert", "update", "delete")
_TEST_SETTINGS = ("description", "steps")
_STEP_SETTINGS = ("description", "input", "expect")


# -- the format --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputRows:
    """Rows of one source appended by a step: ``op`` is the log's change kind (an update is an upsert of the
    whole row, the columns the test left out taken from the row before; a delete holds the key only)."""

    table: str
    op: str
    rows: tuple[dict, ...]

    @property
    def log_op(self) -> str:
        return "delete" if self.op == "delete" else "upsert"


@dataclass(frozen=True)
class Expectation:
    """A model's whole expected content after a step, compared on ``columns`` only (the key among them)."""

    model: str
    columns: tuple[str, ...]
    rows: tuple[dict, ...]


@dataclass(frozen=True)
class Step:
    number: int  # 1-based, as messages show it
    description: str
    inputs: tuple[InputRows, ...]
    expect: tuple[Expectation, ...]

    def title(self) -> str:
        return f"step {self.number}" + (f" ({self.description})" if self.description else "")


@dataclass(frozen=True)
class ModelTest:
    name: str
    path: str
    description: str
    steps: tuple[Step, ...]


def load_model_tests(project: Project) -> list[ModelTest]:
    """The tests in ``<project>/tests/*.yml``, by name (the file's stem); none when there is no such folder.

    Raises:
        ModelTestFormatError: the first problem found, naming the file and the step.
    """
    folder = Path(project.path) / TESTS_FOLDER
    if not folder.is_dir():
        return []
    return [_load_test(project, file) for file in sorted(folder.glob("*.yml"))]


def select_tests(tests: Sequence[ModelTest], name: str | None) -> list[ModelTest]:
    """All ``tests``, or the one named ``name``. Raises `InvalidArgument` (listing the tests) if none is."""
    if name is None:
        return list(tests)
    chosen = [t for t in tests if t.name == name]
    if not chosen:
        raise InvalidArgument(
            f"--test {name}: no such test; the project's tests are {', '.join(t.name for t in tests) or 'none'}"
        )
    return chosen


def _load_test(project: Project, file: Path) -> ModelTest:
    name, path = file.stem, str(file)

    def fail(message: str, step: int | None = None) -> ModelTestFormatError:
        where = f"{path}" + (f", step {step}" if step else "")
        return ModelTestFormatError(f"model test {name} ({where}): {message}", path=path, test=name, step=step)

    try:
        doc = yaml.safe_load(file.read_text())
    except yaml.YAMLError as exc:
        raise fail(f"the YAML does not parse: {' '.join(str(exc).split())}") from None
    if not isinstance(doc, dict):
        raise fail("expected a mapping with `steps:` (and an optional `description:`)")
    unknown = sorted(set(doc) - set(_TEST_SETTINGS))
    if unknown:
        raise fail(f"unknown setting {', '.join(map(str, unknown))}; a test has {', '.join(_TEST_SETTINGS)}")
    steps_doc = doc.get("steps")
    if not isinstance(steps_doc, list) or not steps_doc:
        raise fail("`steps:` must be a non-empty list of steps (each with `input:` and/or `expect:`)")
    state = _SourceState(project)
    steps = []
    for number, step_doc in enumerate(steps_doc, start=1):
        try:
            steps.append(_load_step(project, state, number, step_doc))
        except _StepProblem as problem:
            raise fail(str(problem), number) from None
    return ModelTest(name=name, path=path, description=str(doc.get("description") or ""), steps=tuple(steps))


class _StepProblem(Exception):
    """What is wrong in a step; `_load_test` adds the file and the step's number."""


class _SourceState:
    """The sources' rows as the test's steps so far leave them, by key: an update is completed from the row
    before, and an update or delete of a row that is not there is a mistake in the test."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.rows: dict[str, dict[tuple, dict]] = {name: {} for name in project.sources}

    def apply(self, table: str, op: str, rows: list[dict]) -> list[dict]:
        key = self.project.primary_key_of(table)
        current = self.rows[table]
        out = []
        for row in rows:
            k = tuple(row[c] for c in key)
            shown = ", ".join(f"{c}={row[c]!r}" for c in key)
            if op == "insert":
                if k in current:
                    raise _StepProblem(f"{table} insert: a row with {shown} is already there; use `update:`")
                full = {c: row.get(c) for c in self.project.sources[table].schema.names}
                current[k] = full
            elif op == "update":
                if k not in current:
                    raise _StepProblem(f"{table} update: no row with {shown} (insert it in an earlier step)")
                full = {**current[k], **row}
                current[k] = full
            else:
                if k not in current:
                    raise _StepProblem(f"{table} delete: no row with {shown} (insert it in an earlier step)")
                del current[k]
                full = {c: row[c] for c in key}
            out.append(full)
        return out


def _load_step(project: Project, state: _SourceState, number: int, doc: object) -> Step:
    if not isinstance(doc, dict):
        raise _StepProblem(f"a step is a mapping with {', '.join(_STEP_SETTINGS)}, not {doc!r}")
    unknown = sorted(set(doc) - set(_STEP_SETTINGS))
    if unknown:
        raise _StepProblem(f"unknown setting {', '.join(map(str, unknown))}; a step has {', '.join(_STEP_SETTINGS)}")
    inputs: list[InputRows] = []
    for table_name, ops in _mapping(doc.get("input"), "input").items():
        table = _resolve(table_name, project.sources, "input", "source", project)
        for op in _mapping(ops, f"input {table}"):
            if op not in OPS:
                raise _StepProblem(f"input {table}: unknown change {op!r}; use {', '.join(OPS)}")
        for op in OPS:  # appended in this order whatever the file's order
            if op not in ops:
                continue
            where = f"input {table} {op}"
            schema = project.schema_of(table)
            rows = [_row(r, schema, project.primary_key_of(table), where) for r in _rows(ops[op], where)]
            if op == "delete":
                extra = [c for r in rows for c in r if c not in project.primary_key_of(table)]
                if extra:
                    key = ", ".join(project.primary_key_of(table))
                    raise _StepProblem(f"{where}: a delete gives the key only ({key}), not {extra[0]}")
            inputs.append(InputRows(table, op, tuple(state.apply(table, op, rows))))
    expect: list[Expectation] = []
    for model_name, rows_doc in _mapping(doc.get("expect"), "expect").items():
        model = _resolve(model_name, project.models, "expect", "model", project)
        expect.append(_expectation(project, model, _rows(rows_doc, f"expect {model}")))
    if not inputs and not expect:
        raise _StepProblem("a step needs `input:` or `expect:` (or both)")
    return Step(number, str(doc.get("description") or ""), tuple(inputs), tuple(expect))


def _mapping(value: object, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _StepProblem(f"`{where}:` must be a mapping, not {value!r}")
    return value


def _rows(value: object, where: str) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        raise _StepProblem(f"{where}: expected a list of rows (mappings of column: value)")
    return value


def _resolve(name: object, known: Mapping[str, Any], where: str, kind: str, project: Project) -> str:
    """The project's spelling of table ``name`` among ``known`` (the sources or the models; case ignored)."""
    lower = str(name).lower()
    by_lower = {n.lower(): n for n in known}
    if lower in by_lower:
        return by_lower[lower]
    listed = f"the project's {kind}s are {', '.join(known) or 'none'}"
    if lower in {t.lower() for t in project.tables}:
        other = "model" if kind == "source" else "source"
        hint = "a step's `input:` feeds sources, its `expect:` checks models"
        raise _StepProblem(f"`{where}:` {name}: a {other}, not a {kind} ({hint}); {listed}")
    raise _StepProblem(f"`{where}:` {name}: no table of the project; {listed}")


def _row(row: dict, schema: pa.Schema, key: Sequence[str], where: str) -> dict:
    """``row`` with each value converted to its column's type (YAML gives floats for decimals, strings for
    timestamps); every key column given and not null."""
    out = {}
    for column, value in row.items():
        if column not in schema.names:
            raise _StepProblem(f"{where}: unknown column {column!r}; the columns are {', '.join(schema.names)}")
        out[column] = _value(value, schema.field(column).type, f"{where}: column {column}")
    missing = [c for c in key if out.get(c) is None]
    if missing:
        raise _StepProblem(f"{where}: the row {row} lacks key column {', '.join(missing)} (every row needs its key)")
    return out


def _value(value: object, type_: pa.DataType, where: str) -> object:
    if value is None:
        return None
    try:
        if pa.types.is_decimal(type_) and isinstance(value, float | int | str):
            value = decimal.Decimal(str(value))
        elif pa.types.is_date(type_) and isinstance(value, str):
            value = datetime.date.fromisoformat(value)
        elif pa.types.is_timestamp(type_) and isinstance(value, str | datetime.date):
            value = datetime.datetime.fromisoformat(str(value))
        return pa.array([value], type_).to_pylist()[0]
    except (pa.ArrowException, ValueError, TypeError, decimal.InvalidOperation) as exc:
        raise _StepProblem(f"{where}: {value!r} is not a {type_} ({' '.join(str(exc).split())})") from None


def _expectation(project: Project, model: str, rows: list[dict]) -> Expectation:
    key = project.primary_key_of(model)
    names = project.models[model].column_names
    where = f"expect {model}"
    columns = tuple(rows[0]) if rows else key
    for row in rows:
        if tuple(row) != columns and set(row) != set(columns):
            raise _StepProblem(
                f"{where}: every expected row gives the same columns (the ones compared): {', '.join(columns)}; "
                f"this one gives {', '.join(row)}"
            )
    schema = project.schema_of(model)
    typed = []
    for row in rows:
        for column in row:
            if column not in names:
                raise _StepProblem(f"{where}: unknown column {column!r}; the model's columns are {', '.join(names)}")
        if schema is not None:
            typed.append(_row(row, schema, key, where))
        else:  # a type only Spark knows: compared as given
            missing = [c for c in key if row.get(c) is None]
            if missing:
                raise _StepProblem(f"{where}: the row {row} lacks key column {', '.join(missing)}")
            typed.append(dict(row))
    seen: set[tuple] = set()
    for row in typed:
        k = tuple(row[c] for c in key)
        if k in seen:
            raise _StepProblem(f"{where}: two expected rows with key {dict(zip(key, k, strict=True))}")
        seen.add(k)
    return Expectation(model, tuple(columns), tuple(typed))


# -- results -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangedRow:
    """A key on both sides whose compared columns differ: ``columns`` maps each to (expected, actual)."""

    key: dict
    columns: dict[str, tuple[object, object]]


@dataclass(frozen=True)
class RowDiff:
    """What the model holds against what it should: rows ``missing`` from it, ``extra`` rows in it, and
    ``changed`` rows (same key, other values)."""

    missing: tuple[dict, ...] = ()
    extra: tuple[dict, ...] = ()
    changed: tuple[ChangedRow, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.missing or self.extra or self.changed)

    def lines(self) -> list[str]:
        """One line per row: ``- missing``, ``+ extra``, ``~ changed`` (column: expected -> actual)."""
        out = [f"- missing {_show(r)}" for r in self.missing]
        out += [f"+ extra   {_show(r)}" for r in self.extra]
        for c in self.changed:
            cols = ", ".join(f"{n}: {_text(e)} -> {_text(a)}" for n, (e, a) in c.columns.items())
            out.append(f"~ changed {_show(c.key)}: {cols}")
        return out


@dataclass(frozen=True)
class ModelTestFailure:
    """Why a test failed: at ``step`` (None: before its steps, e.g. deploy), ``model``'s rows differ from the
    expected ones (``check`` "expected") or from a rebuild (``check`` "rebuild": expected = the rebuild,
    actual = the incremental state), or a round failed (``error``)."""

    test: str
    step: Step | None
    model: str | None
    check: str
    diff: RowDiff = field(default_factory=RowDiff)
    error: str | None = None

    def headline(self) -> str:
        where = f"{self.test}, {self.step.title() if self.step else 'before the steps'}"
        if self.error is not None:
            return f"{where}: {self.error}"
        what = "rows differ from the expected ones" if self.check == "expected" else "incremental state != rebuild"
        return f"{where}, {self.model}: {what}"

    def lines(self) -> list[str]:
        return [self.headline(), *("  " + line for line in self.diff.lines())]


@dataclass(frozen=True)
class ModelTestResult:
    test: ModelTest
    failures: tuple[ModelTestFailure, ...]
    seconds: float

    @property
    def passed(self) -> bool:
        return not self.failures


def _text(value: object) -> str:
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    return "null" if value is None else str(value)


def _show(row: Mapping) -> str:
    return "{" + ", ".join(f"{c}: {_text(v)}" for c, v in row.items()) + "}"


def row_diff(expected: Sequence[dict], actual: Sequence[dict], key: Sequence[str], columns: Sequence[str]) -> RowDiff:
    """``actual`` against ``expected``, rows matched by ``key``, compared on ``columns``."""

    def by_key(rows: Sequence[dict]) -> dict[tuple, dict]:
        return {tuple(r[k] for k in key): {c: r.get(c) for c in columns} for r in rows}

    want, got = by_key(expected), by_key(actual)
    changed = []
    for k in sorted(want.keys() & got.keys(), key=_sort_key):
        differs = {c: (want[k][c], got[k][c]) for c in columns if want[k][c] != got[k][c]}
        if differs:
            changed.append(ChangedRow(dict(zip(key, k, strict=True)), differs))
    return RowDiff(
        missing=tuple(want[k] for k in sorted(want.keys() - got.keys(), key=_sort_key)),
        extra=tuple(got[k] for k in sorted(got.keys() - want.keys(), key=_sort_key)),
        changed=tuple(changed),
    )


def _sort_key(key: tuple) -> tuple:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in key)


# -- running -----------------------------------------------------------------------------------------------


def run_model_tests(
    project: Project,
    tests: Sequence[ModelTest],
    spark: SparkSession,
    *,
    on_result: Callable[[ModelTestResult], None] | None = None,
) -> list[ModelTestResult]:
    """Run ``tests`` with ``spark`` (not stopped here), each on a throwaway warehouse; a test stops at its first
    failing step (the later ones build on it). ``on_result`` is called after each test."""
    results = []
    for test in tests:
        result = run_model_test(project, test, spark)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def run_model_test(project: Project, test: ModelTest, spark: SparkSession) -> ModelTestResult:
    """One test (see `run_model_tests`)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    from lakehouse.lakehouse import Lakehouse
    from layers.runner import Runner

    started = time.monotonic()
    failures: list[ModelTestFailure] = []
    step: Step | None = None
    with tempfile.TemporaryDirectory(prefix=f"lakestream-test-{test.name}-") as folder:
        with Lakehouse.open(Path(folder).as_uri()) as lh:
            runner = Runner(lh, project, spark)
            try:
                runner.deploy()
                for step in test.steps:
                    for rows in step.inputs:
                        _append(lh, project, rows)
                    runner.run_once()
                    failures = _check_step(lh, project, runner, test, step)
                    if failures:
                        break
            except (LakestreamError, PySparkException, Py4JJavaError) as exc:
                # a round that fails (a key held twice, a type that does not fit, SQL Spark refuses) fails this
                # test, not the run
                message = str(exc) if isinstance(exc, LakestreamError) else _first_line(exc)
                failures = [ModelTestFailure(test.name, step, None, "error", error=f"{type(exc).__name__}: {message}")]
            finally:
                runner.close()
    return ModelTestResult(test, tuple(failures), time.monotonic() - started)


def _first_line(exc: BaseException) -> str:
    """A Spark error's message without the JVM stack trace it carries."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def _append(lh: Lakehouse, project: Project, rows: InputRows) -> None:
    schema = project.sources[rows.table].schema  # inputs are sources
    if rows.op == "delete":
        schema = pa.schema([schema.field(k) for k in project.primary_key_of(rows.table)])
    lh.log(rows.table).append(pa.Table.from_pylist(list(rows.rows), schema=schema), rows.log_op)


def _check_step(lh: Lakehouse, project: Project, runner: Runner, test: ModelTest, step: Step) -> list[ModelTestFailure]:
    actual = {m: _current(lh, m).to_pylist() for m in project.order}
    failures = []
    for expectation in step.expect:
        key = project.primary_key_of(expectation.model)
        diff = row_diff(expectation.rows, actual[expectation.model], key, expectation.columns)
        if diff:
            failures.append(ModelTestFailure(test.name, step, expectation.model, "expected", diff))
    for model, rebuilt in _rebuild(lh, project, runner.sql).items():
        columns = rebuilt.column_names
        diff = row_diff(rebuilt.to_pylist(), actual[model], project.primary_key_of(model), columns)
        if diff:
            failures.append(ModelTestFailure(test.name, step, model, "rebuild", diff))
    return failures


def _current(lh: Lakehouse, name: str) -> pa.Table:
    """The table now (its union read: lake and log tail), without the system columns."""
    return lh.union_read(name).select(lh.table(name).schema.names)


def _rebuild(lh: Lakehouse, project: Project, sql: SparkSql) -> dict[str, pa.Table]:
    """Every model computed in full over the sources now, in dependency order, each model over the rebuilt
    models it reads (not their incremental tables: a wrong DWD must not hide behind an ADS built from it)."""
    tables: dict[str, pa.Table] = {name: _current(lh, name) for name in project.sources}
    out = {}
    for name in project.order:
        model = project.models[name]
        schema = lh.table(name).schema
        rows = sql.run(model.qualified, {t: tables[t] for t in model.inputs})
        tables[name] = out[name] = rows.select(schema.names).cast(schema)
    return out
