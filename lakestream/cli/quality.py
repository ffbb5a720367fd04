"""`lakestream check`, `lakestream report`, `lakestream published` and
`lakestream metrics collect|show|maintain`: the quality commands (`register` adds them to the command)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from lakehouse.errors import LakestreamError
from lakestream.cli.common import (
    ConfigOpt,
    JsonOpt,
    TablesOpt,
    WarehouseOpt,
    command_errors,
    console,
    emit,
    err,
    fail,
    open_lakehouse,
)
from lakestream.console import new_table
from quality.results import ERROR, FAILED, NOT_EVALUATED, PASSED, CheckResult

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse
    from quality.warehouse_publication import Publication

__all__ = ["register"]


_STATUS = {
    PASSED: "[green]ok[/]",
    FAILED: "[bold red]FAIL[/]",
    ERROR: "[bold red]ERROR[/]",
    NOT_EVALUATED: "[bold yellow]NOT EVALUATED[/]",
}
#: A check that passed with warnings (an anomaly of severity warn, ...): still ok, but not shown as a plain `ok`,
#: which hid the warning that the run's JSON and page carried.
_WARN = "[bold yellow]WARN[/]"


def _row(out: Table, r: CheckResult) -> None:
    status = _STATUS[r.status]
    if r.not_evaluated is not None:
        what = f"not evaluated: {r.not_evaluated}"
    elif r.ok and r.warnings:
        status = _WARN
        what = "; ".join(r.warnings[:3]) + (f" (+{len(r.warnings) - 3} more)" if len(r.warnings) > 3 else "")
    else:
        what = r.error or "; ".join(str(v) for v in r.violations[:3]) or _summary(r)
    if len(r.violations) > 3:
        what += f" (+{len(r.violations) - 3} more)"
    out.add_row(r.table, r.check, status, str(r.snapshot_id or "-"), f"{r.rows:,}", f"{r.seconds:.2f}", escape(what))


def _summary(r: CheckResult) -> str:
    d = r.details
    if r.check == "reconcile":
        return f"{d.get('mode', '')}: {d.get('commits_checked', 0)} commits"
    if r.check.startswith("gx"):
        return f"{d.get('passed', '?')}/{d.get('expectations', '?')} expectations"
    if r.check.startswith("anomaly:"):
        return _anomaly_summary(d)
    return ", ".join(f"{k} {v}" for k, v in d.items() if isinstance(v, int | float | str) and k != "data_docs")


def _anomaly_summary(d: dict) -> str:
    """The newest judged point of an anomaly check in words: its value and the band it is within, or why it was
    not judged."""
    judged = [j for j in d.get("judged") or [] if isinstance(j, dict)]
    if d.get("skipped") or not judged:
        return f"not judged: {d.get('skipped') or 'no metric points yet'}"
    last = judged[-1]
    value = f"{last.get('value', '?'):.6g}" if isinstance(last.get("value"), int | float) else "?"
    if isinstance(last.get("low"), int | float) and isinstance(last.get("high"), int | float):
        return f"{value} within [{last['low']:.6g}, {last['high']:.6g}] ({d.get('points', '?')} points)"
    return f"{value}, within the relative bound ({d.get('points', '?')} points)"


def check(
    table: TablesOpt = None,
    full: Annotated[bool, typer.Option("--full", help="re-check everything, not only what is new")] = False,
    project: Annotated[
        Path | None, typer.Option(help="a layers project: its expectation suites and layer checks run too")
    ] = None,
    spark_master: Annotated[
        str | None,
        typer.Option(
            help="Spark, e.g. local[2] or spark://host:7077: reconciliation (and with --project the layer checks "
            "and suites above the driver's budget) read on its executors"
        ),
    ] = None,
    publish: Annotated[
        bool,
        typer.Option(
            "--publish/--no-publish", help="move each passing table's tag 'published' and the warehouse publication"
        ),
    ] = True,
    out: Annotated[Path | None, typer.Option(help="also write the run's HTML report into this folder")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the run as JSON")] = False,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Check tables: lake == log at every committed offset (incrementally unless --full), and with --project
    its expectation suites and layers. Exit code 1 if anything failed. Records the run and its report in the
    warehouse (_lakestream/quality/)."""
    from quality.check import run_checks

    with command_errors():
        lh = open_lakehouse(warehouse, config)
        spark = None
        if spark_master:
            from lakehouse.spark import spark_session

            spark = spark_session(master=spark_master, app_name="lakestream-check")
        run = run_checks(lh, tables=table, full=full, project=project, spark=spark, publish=publish, report_dir=out)
    if as_json:
        console.print_json(json.dumps(run.to_dict(), default=str))
    else:
        result = new_table("table", "check", "status", "snapshot", "rows", "seconds", "details")
        result.columns[2].no_wrap = True  # "NOT EVALUATED" stays one word on a narrow terminal
        for r in run.results:
            _row(result, r)
        console.print(result)
        moved = ", ".join(f"{t}: {s}" for t, s in run.published.items() if s is not None) or "none"
        warned = sum(len(r.warnings) for r in run.results if r.ok)
        warnings = f", [bold yellow]{warned} warning{'s' if warned != 1 else ''}[/] (WARN rows)" if warned else ""
        outcome = "[green]passed[/]" if run.ok else "[bold red]failed[/]"
        console.print(f"run {run.run_id}: {outcome}{warnings}; published {moved}")
        if publish:
            _print_publication(lh)
    if not run.ok:
        page = f"_lakestream/quality/reports/{run.run_id}.html"
        failed = [r for r in run.results if not r.ok]
        errors = sum(1 for r in failed if r.status == ERROR)
        skipped = sum(1 for r in failed if r.status == NOT_EVALUATED)
        err.print(
            f"[bold red]{len(failed)} check(s) failed[/] ({len(run.violations)} violation(s), {errors} could not run, "
            f"{skipped} not evaluated because an upstream table failed); report: {page} in the warehouse"
        )
        raise typer.Exit(1)


def _print_publication(lh: Lakehouse) -> None:
    from quality.warehouse_publication import read_publication

    try:
        record = read_publication(lh)
    except LakestreamError as exc:
        err.print(f"publication: {escape(str(exc))}")
        return
    if record is not None:
        console.print(
            f"publication generation {record.generation}: {len(record.entries)} table(s)"
            + (f", {len(record.left_out)} left out" if record.left_out else "")
            + " (lakestream published)"
        )


def report(
    out: Annotated[Path | None, typer.Option(help="write the latest run's page and the index into this folder")] = None,
    runs: Annotated[int, typer.Option(help="runs shown in the index and the trends")] = 30,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Write the data-quality report of the latest `lakestream check` run (and the index of runs) to the warehouse
    under _lakestream/quality/, and to --out if given."""
    from quality.report import write_report
    from quality.runs import load_runs

    with command_errors():
        lh = open_lakehouse(warehouse, config)
        history = load_runs(lh, limit=runs)
        if not history:
            raise LakestreamError("no quality run recorded yet in this warehouse: run `lakestream check` first")
        written = write_report(lh, history[0], history=history, out_dir=out)

    def render() -> None:
        console.print(f"report: {written['report_key']} in the warehouse {lh.url}", soft_wrap=True)
        console.print(f"index: {written['index_key']} in the warehouse", soft_wrap=True)
        for name in ("report_path", "index_path"):
            if written[name] is not None:
                console.print(f"{name.split('_')[0]}: {written[name]}", soft_wrap=True)

    emit(json_output, {"run_id": history[0].run_id, **written}, render)


def published(
    generation: Annotated[
        int | None, typer.Option(help="show this generation from the publication's history, not the current one")
    ] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """The warehouse publication: the consistent set of checked snapshots (generation, time, per table its
    snapshot, metadata file and, for a model, its round), and the tables left out with why."""
    from quality.warehouse_publication import read_history, read_publication

    with command_errors():
        lh = open_lakehouse(warehouse, config)
        record = read_publication(lh) if generation is None else read_history(lh, generation)
    if record is None:
        what = "no publication yet" if generation is None else f"no generation {generation} in the history"
        fail(LakestreamError(f"{what} in {lh.url}: `lakestream check --publish` publishes what passed"))
    emit(json_output, record.to_dict(), lambda: _print_published(record))


def _print_published(record: Publication) -> None:
    """The publication for people: its generation, a table of its entries, the tables left out."""
    from datetime import UTC, datetime

    at = datetime.fromtimestamp(record.published_at, UTC).isoformat(timespec="seconds")
    run = f", run {record.run_id}" if record.run_id else ""
    console.print(f"publication generation {record.generation}, recorded {at}{run}")
    out = new_table("table", "snapshot", "round", "metadata file")
    for name, entry in record.entries.items():
        out.add_row(
            name, str(entry.snapshot_id), "-" if entry.round is None else str(entry.round), entry.metadata_location
        )
    console.print(out)
    for name, why in record.left_out.items():
        console.print(f"[yellow]left out[/] {name}: {escape(why)}", soft_wrap=True)


metrics_app = typer.Typer(
    help="Metrics per lake commit (rows, changes, freshness, column profiles).", no_args_is_help=True
)


@metrics_app.command("collect")
def metrics_collect(
    table: TablesOpt = None,
    spark_master: Annotated[
        str | None,
        typer.Option(
            help="Spark, e.g. local[2]: commits above the driver's budget (quality_driver_budget_rows changed "
            "records) are read on its executors; without it they are not collected"
        ),
    ] = None,
    max_commits: Annotated[int, typer.Option(help="commits per table collected at most (the next run goes on)")] = 100,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Compute the metrics of every lake commit not recorded yet, from each commit's changes, and append them to
    the warehouse's Iceberg table _lakestream.metrics (incremental; running it again records nothing twice)."""
    from quality.metrics import collect_metrics

    with command_errors():
        lh = open_lakehouse(warehouse, config)
        spark = None
        if spark_master:
            from lakehouse.spark import spark_session

            spark = spark_session(master=spark_master, app_name="lakestream-metrics")
        written = collect_metrics(lh, tables=table, spark=spark, max_commits=max_commits)
    emit(
        json_output,
        {"rows_written": written},
        lambda: console.print(f"{written:,} metric rows written to _lakestream.metrics"),
    )


@metrics_app.command("show")
def metrics_show(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    metric: Annotated[
        str | None, typer.Option("--metric", "-m", help="one metric's series (e.g. inserts, null_fraction)")
    ] = None,
    column: Annotated[
        str | None, typer.Option("--column", "-c", help="a column's metrics (default: the table's)")
    ] = None,
    last: Annotated[int, typer.Option(help="the newest commits shown (0: all)")] = 20,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Show the recorded metrics of TABLE: one row per commit (its table-level metrics, or with --column that
    column's), or with --metric that metric's series."""
    from quality.metrics import load_commits, load_series
    from quality.metrics.partials import COLUMN_METRICS, TABLE_METRICS

    with command_errors():
        lh = open_lakehouse(warehouse, config)
        lh.table(table)  # an unknown table fails naming it
        if metric is not None:
            series = load_series(lh, table, metric, column)
            series = series[-last:] if last > 0 else series
            commits: list[dict[str, Any]] = [
                {"committed_at": at, "snapshot_id": sid, metric: value} for at, sid, value in series
            ]
            names = [metric]
        else:
            commits = load_commits(lh, table, column=column, last=last)
            names = list(COLUMN_METRICS if column else TABLE_METRICS)
    emit(
        json_output,
        ({"table": table, "column": column, **c} for c in commits),
        lambda: _print_metrics(table, column, metric, names, commits),
    )


def _print_metrics(table: str, column: str | None, metric: str | None, names: list[str], commits: list[dict]) -> None:
    """`metrics show` for people: a row per commit, or a note that nothing was recorded."""
    if not commits:
        err.print(
            f"no metrics recorded for {table}{f' column {column}' if column else ''}: run `lakestream metrics collect`"
        )
        return
    out = new_table("committed at", "snapshot", *(["kind"] if metric is None else []), *names)
    for c in commits:
        values = [_number(c.get(n)) for n in names]
        kind = [c.get("kind", "")] if metric is None else []
        out.add_row(c["committed_at"].isoformat(timespec="seconds"), str(c["snapshot_id"]), *kind, *values)
    console.print(out)


@metrics_app.command("maintain")
def metrics_maintain(
    snapshot_age_hours: Annotated[
        float, typer.Option(help="expire the metrics table's snapshots older than this (hours)")
    ] = 24.0,
    keep_snapshots: Annotated[int, typer.Option(help="the newest snapshots always kept")] = 5,
    target_file_rows: Annotated[int, typer.Option(help="rows per compacted data file")] = 1_000_000,
    retention_days: Annotated[
        float | None,
        typer.Option(help="drop metric rows of commits older than this (days; default: keep all)"),
    ] = None,
    orphan_age_hours: Annotated[
        float, typer.Option(help="delete unreferenced files older than this (hours; at least 1)")
    ] = 72.0,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Compact the metrics table's small files (keeping what was recorded, so collection goes on where it
    was), drop rows older than --retention-days if given, expire old snapshots and delete unreferenced files."""
    from datetime import timedelta

    from quality.metrics.table import maintain_metrics

    with command_errors():
        lh = open_lakehouse(warehouse, config)
        result = maintain_metrics(
            lh,
            older_than=timedelta(hours=snapshot_age_hours),
            keep_snapshots=keep_snapshots,
            target_file_rows=target_file_rows,
            retention=None if retention_days is None else timedelta(days=retention_days),
            orphan_age=timedelta(hours=orphan_age_hours),
        )

    def render() -> None:
        console.print(
            f"_lakestream.metrics: {result.files_before} -> {result.files_after} data files, "
            f"{result.rows_dropped:,} rows dropped, {len(result.expiry.get('expired', []))} snapshots expired, "
            f"{result.expiry.get('files_deleted', 0) + result.orphans.get('count', 0)} files deleted"
        )

    emit(json_output, result.to_dict(), render)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:,.4g}"


def register(app: typer.Typer) -> None:
    """Add ``check``, ``report``, ``published`` and ``metrics`` to the command ``app``."""
    app.command("check")(check)
    app.command("report")(report)
    app.command("published")(published)
    app.add_typer(metrics_app, name="metrics")
