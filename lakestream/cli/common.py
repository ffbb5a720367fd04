"""What every `lakestream` command shares: the boundary group, the options, opening the settings, the store, the
lakehouse and Spark, and the two helpers each command ends with, `command_errors` (an error: one line, exit 1) and
`emit` (``--json``: JSON lines; else rich output). A command module parses options, calls the library inside
``with command_errors():`` and hands its result to `emit`."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from lakehouse.errors import LakestreamError
from lakehouse.settings import load_settings
from lakestream.console import OutputConsole, json_line, new_table

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from typer import _click  # typer's own copy of click, whose Context TyperGroup.invoke takes

    from lakehouse.executor import TaskExecutor
    from lakehouse.lakehouse import Lakehouse
    from lakehouse.settings import Settings
    from lakehouse.table_runs import TableRun
    from object_store import ObjectStore
    from object_store.pricing import PriceList

#: Errors from below the library that the CLI reports in one line instead of a traceback (the facade
#: translates the ones it knows; these are what gets past it: the OS's, pyiceberg's, Spark's).
FOREIGN_ERROR_MODULES = ("pyiceberg", "pyspark", "py4j", "pyarrow")

console = OutputConsole()
err = OutputConsole(stderr=True)


class BoundaryGroup(TyperGroup):
    """The CLI's boundary: warnings of the library (a retry against a store that does not answer) are shown as
    they happen, and an error of ours, of the OS or of pyiceberg/Spark ends the command with one line."""

    def invoke(self, ctx: _click.Context) -> Any:
        _show_warnings()
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if isinstance(exc, LakestreamError | OSError) or type(exc).__module__.startswith(FOREIGN_ERROR_MODULES):
                fail(exc)
            raise


class _WarningLine(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        err.print(f"[yellow]warning:[/] {escape(record.getMessage())}", soft_wrap=True)


def _show_warnings() -> None:
    """Warnings of lakestream's loggers on stderr, one line each, unless the program configured logging."""
    if logging.getLogger().handlers:
        return
    for name in ("object_store", "lakehouse"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, _WarningLine) for h in logger.handlers):
            handler = _WarningLine(logging.WARNING)
            logger.addHandler(handler)


# -- options ---------------------------------------------------------------------------------------------------

WarehouseOpt = Annotated[
    str | None, typer.Option("--warehouse", "-w", help="file:///path or s3://bucket/prefix (else settings)")
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="YAML settings file (else LAKESTREAM_CONFIG)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine output: one JSON object per line")]
TablesOpt = Annotated[
    list[str] | None, typer.Option("--table", "-t", help="namespace.table (repeatable; default: all)")
]
#: Rows the table view shows unless --limit says otherwise; --json has no such default (a script reading the
#: rows must not get a table cut short without a word).
TABLE_VIEW_ROWS = 20
LimitOpt = Annotated[
    int | None,
    typer.Option(
        min=0,
        help=f"rows to print (0: only count them); default: {TABLE_VIEW_ROWS} in the table view, every row with --json",
        show_default=False,
    ),
]


# -- what a command opens --------------------------------------------------------------------------------------


def resolve_settings(warehouse: str | None, config: Path | None) -> Settings:
    """The settings of ``--warehouse`` and ``--config`` over the environment's."""
    return load_settings(config, warehouse=warehouse)


def open_warehouse_store(settings: Settings, *, create: bool = False, **options: Any) -> ObjectStore:
    """The warehouse's store. Only the commands that create a warehouse (`table create`, `demo`) pass
    ``create=True``: for every other one a missing ``file://`` warehouse is an error naming it, not a new, empty
    warehouse made from a mistyped path."""
    from object_store import WarehouseNotFound

    try:
        return settings.open_store(create=create, **options)
    except WarehouseNotFound as exc:
        raise WarehouseNotFound(
            f"no warehouse at {settings.warehouse}: {exc.path} does not exist or is not a directory; check "
            "--warehouse (or LAKESTREAM_WAREHOUSE, the settings file), or create the warehouse with "
            "`lakestream table create` (or `lakestream demo`)",
            exc.path,
        ) from None


def open_lakehouse(warehouse: str | None, config: Path | None, *, create: bool = False) -> Lakehouse:
    """The warehouse of the settings; a missing one is an error unless ``create`` (see `open_warehouse_store`)."""
    from lakehouse.lakehouse import Lakehouse

    settings = resolve_settings(warehouse, config)
    return Lakehouse(open_warehouse_store(settings, create=create), settings=settings)


def open_spark(spark_master: str | None) -> SparkSession | None:
    """A Spark session for a command's tasks (the facade never starts one), or None without a master."""
    if spark_master is None:
        return None
    from lakehouse.spark import spark_session

    return spark_session(master=spark_master, scheduler_only=True)


def open_executor(spark_master: str | None, workers: int | None) -> TaskExecutor:
    """The tasks' executor: Spark's with a master, else the local one with ``workers`` threads."""
    from lakehouse.executor import task_executor

    return task_executor(spark=open_spark(spark_master), workers=workers)


# -- how a command ends: an error, or its result -----------------------------------------------------------------


def fail(exc: Exception) -> NoReturn:
    """End the command with exit code 1 and one line on stderr saying what went wrong (``error: ...``)."""
    if isinstance(exc, LakestreamError):
        message = str(exc)
    else:  # not ours: one line, with what it is
        message = " ".join(f"{type(exc).__name__}: {exc}".split())
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(1)


@contextmanager
def command_errors(*also: type[Exception]) -> Iterator[None]:
    """Around a command's work: an error of ours, or of a kind in ``also`` (``ValueError`` where the library
    parses an argument), ends the command with `fail`'s one line. Any other error goes on to `BoundaryGroup`,
    which reports the OS's, pyiceberg's and Spark's, and lets a bug keep its traceback."""
    caught: tuple[type[Exception], ...] = (LakestreamError, *also)
    try:
        yield
    except caught as exc:
        fail(exc)


def emit(
    json_output: bool, record: Mapping[str, Any] | Iterable[Mapping[str, Any]], render: Callable[[], object]
) -> None:
    """A command's result: with ``--json`` the ``record`` as one JSON line (an iterable of records: one line
    each, a generator being read only then), else ``render()`` prints it for people."""
    if not json_output:
        render()
        return
    for one in [record] if isinstance(record, Mapping) else record:
        json_line(one)


# -- output ----------------------------------------------------------------------------------------------------


def cells(*values: object) -> list[Text]:
    """Table cells shown as they are: data is never read as rich markup (``[b]`` or ``timestamp[us]``)."""
    return [Text(str(v)) for v in values]


def data_table(names: list[str], rows: list[dict]) -> Table:
    """Rows (dicts in column order) as a table with the column ``names`` as headers."""
    table = new_table(*(Text(name) for name in names))
    for row in rows:
        table.add_row(*cells(*row.values()))
    return table


def rows_json(rows: list[dict]) -> None:
    """--json of a command that prints data: one object per row, column names as keys."""
    for row in rows:
        json_line(row)


def print_rows(data: pa.Table, limit: int | None, json_output: bool, summary: str) -> None:
    """The rows of ``data`` (a pyarrow table) as JSON lines (all of them unless ``limit``), or as a table view of
    at most ``limit`` (default `TABLE_VIEW_ROWS`) rows, then ``summary``, saying so if the view was cut."""
    if json_output:
        rows_json((data if limit is None else data.slice(0, limit)).to_pylist())
        return
    shown = min(TABLE_VIEW_ROWS if limit is None else limit, data.num_rows)
    if limit != 0:  # 0: only count them
        console.print(data_table(data.column_names, data.slice(0, shown).to_pylist()))
    if 0 < shown < data.num_rows:
        summary += f"; showing the first {shown:,} (--limit N shows more)"
    console.print(summary, markup=False)


def print_mapping(mapping: dict) -> None:
    """``key value`` lines, the values aligned."""
    for k, v in mapping.items():
        console.print(f"{k:14} {v}", markup=False)


# -- commands over tables (lakehouse.table_runs) -----------------------------------------------------------------


def run_json(run: TableRun, prices: PriceList | None = None) -> None:
    """--json of a command over tables: the table's result, or what went wrong (as the jobs print it). With
    ``prices``, a result's ``usage`` is priced too (``cost``: dollars by what they pay for, and ``total``)."""
    if run.ok:
        doc = run.result.to_dict()
        if prices is not None and getattr(run.result, "usage", None) is not None:
            doc["cost"] = prices.price(run.result.usage).to_dict()
        json_line(doc)
    else:
        json_line({"table": run.table, "error": run.message, "type": type(run.error).__name__})


def report_if_failed(run: TableRun) -> bool:
    """Report a table's error as it happens; True if it failed."""
    if not run.ok:
        err.print(f"[bold red]error:[/] {escape(run.message)}")
    return not run.ok


def emit_runs(
    runs: Iterable, json_output: bool, render: Callable[[Any], object], prices: PriceList | None = None
) -> list:
    """The runs of a command over tables as they come: with ``--json`` each as one JSON line (`run_json`); a
    failed one's error on stderr (`report_if_failed`); else ``render(run)`` for each that succeeded. Returns the
    runs, for `finish_runs`."""
    done = []
    for run in runs:
        done.append(run)
        if json_output:
            run_json(run, prices)
        if report_if_failed(run) or json_output:
            continue
        render(run)
    return done


def finish_runs(runs: list) -> None:
    """After an all-tables command: the summary and exit code 1 if any table failed (each was reported)."""
    from lakehouse.table_runs import summarize

    if any(not r.ok for r in runs):
        err.print(f"[bold red]{escape(summarize(runs))}[/]")
        raise typer.Exit(1)


def parse_duration(text: str) -> timedelta:
    """'90s', '15m', '12h', '7d' or a number of seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise LakestreamError(f"bad duration {text!r}: use e.g. 90s, 15m, 12h or 7d")
    return timedelta(seconds=float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """A point in time: an ISO 8601 time (UTC unless it says otherwise) or a duration ago ('12h': 12 hours
    before ``now``)."""
    now = now or datetime.now(UTC)
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        try:
            return now - parse_duration(text)
        except LakestreamError:
            raise LakestreamError(
                f"bad time {text!r}: give a duration ago (90s, 15m, 12h, 7d) or an ISO time (2026-11-29T08:00)"
            ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
