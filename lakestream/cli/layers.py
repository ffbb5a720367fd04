"""``lakestream layers``: the warehouse-layers commands (explain, validate, lineage, plan, deploy, run, rebuild,
status, test; green, cutover, rollback, cleanup: blue/green rebuilds).

A typer sub-app that `lakestream.cli` adds as ``layers``. Errors end the command with one line, as everywhere in
``lakestream`` (`lakestream.cli.common.command_errors`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from lakestream.cli.common import ConfigOpt, JsonOpt, WarehouseOpt, command_errors, console, emit, open_lakehouse
from lakestream.console import json_line, new_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.lakehouse import Lakehouse
    from layers.bluegreen import GreenResult
    from layers.deploy_plan import DeployPlan
    from layers.lineage import ColumnLineage, Lineage
    from layers.model_tests import ModelTestResult
    from layers.project import Project
    from layers.rounds import RoundReport
    from layers.runner import Runner
    from layers.status import ModelStatus
    from layers.strategy import ModelPlan

layers_app = typer.Typer(
    help="Warehouse layers: a project of Spark SQL models (see docs/guides/layers.md).", no_args_is_help=True
)

ProjectOpt = Annotated[
    Path, typer.Option("--project", "-p", help="the project folder (sources.yml, models/)", show_default=False)
]


@layers_app.command("explain")
def explain_command(project: ProjectOpt, json_output: JsonOpt = False) -> None:
    """Each model's incremental strategy and why, in dependency order."""
    from layers.project import load_project
    from layers.strategy import explain

    with command_errors():
        plans = explain(load_project(project))
    records = (
        {
            "order": plan.order,
            "model": plan.model,
            "inputs": list(plan.inputs),
            "strategy": plan.strategy,
            "reason": plan.reason,
            "driving": plan.driving,
            "group_by": [g.output or g.expression for g in plan.group_by],
            "partition_by": list(plan.partition_by),
            "key_mapping": [m.describe() for m in plan.mappings],
        }
        for plan in plans
    )
    emit(json_output, records, lambda: _print_plans(plans))


def _print_plans(plans: list[ModelPlan]) -> None:
    """`layers explain` for people: a row per model, its key mappings, groups and window partitions."""
    table = new_table("order", "model", "inputs", "strategy", "reason", "key mapping", show_lines=True)
    for plan in plans:
        lines = [m.describe() for m in plan.mappings]
        if plan.group_by:
            lines.insert(0, f"groups: {', '.join(g.output or g.expression for g in plan.group_by)}")
        if plan.partition_by:
            lines.insert(0, f"window partitions: {', '.join(plan.partition_by)}")
        mapping = "\n".join(lines) or "-"
        cells = (plan.order, plan.model, "\n".join(plan.inputs), plan.strategy, plan.reason, mapping)
        table.add_row(*(Text(str(c)) for c in cells))
    console.print(table)


@layers_app.command("validate")
def validate_command(project: ProjectOpt, json_output: JsonOpt = False) -> None:
    """Check the project (files, SQL, inputs, cycles, keys) without touching any warehouse; exit 1 on the first
    error."""
    from layers.project import load_project

    with command_errors():
        loaded = load_project(project)
    untyped = {name: m.untyped_columns for name, m in loaded.models.items() if m.untyped_columns}

    def render() -> None:
        console.print(
            f"[green]ok[/] {len(loaded.sources)} sources, {len(loaded.models)} models; order: "
            f"{' -> '.join(loaded.order) or '-'}",
            soft_wrap=True,
        )
        for name, columns in untyped.items():
            console.print(Text(f"{name}: types of {', '.join(columns)} are checked at deploy"), soft_wrap=True)

    record = {
        "ok": True,
        "sources": list(loaded.sources),
        "models": list(loaded.models),
        "order": list(loaded.order),
        "untyped_columns": {name: list(columns) for name, columns in untyped.items()},
    }
    emit(json_output, record, render)


@layers_app.command("lineage")
def lineage_command(
    project: ProjectOpt,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="namespace.table of a model (default: every model)")
    ] = None,
    column: Annotated[
        str | None, typer.Option("--column", "-c", help="one output column (of --model, else of every model)")
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Column lineage: the input columns each model's output column derives from, and the sources' columns it
    derives from through every model; exit 1 on an unknown model or column."""
    from layers.lineage import column_lineage
    from layers.project import load_project

    with command_errors():
        lineage = column_lineage(load_project(project))
        columns = lineage.columns(model, column)
    emit(json_output, (c.to_json() for c in columns), lambda: _print_lineage(lineage, columns, column))


def _print_lineage(lineage: Lineage, columns: list[ColumnLineage], column: str | None) -> None:
    """`layers lineage` for people: a row per output column, then what decides each model's rows."""
    table = new_table("model", "column", "kind", "direct sources", "ultimate sources", show_lines=True)
    for c in columns:
        cells = (
            c.model,
            c.column,
            c.kind,
            "\n".join(map(str, c.direct)) or "-",
            "\n".join(map(str, c.ultimate)) or "-",
        )
        table.add_row(*(Text(cell) for cell in cells))
    console.print(table)
    if column is None:  # what decides the rows, per model shown
        for name in dict.fromkeys(c.model for c in columns):
            indirect = lineage.models[name].indirect
            if indirect:
                console.print(Text(f"{name} rows decided by: {', '.join(map(str, indirect))}"), soft_wrap=True)


# -- running the layers (layers.runner) ------------------------------------------------------------

ModelOpt = Annotated[
    list[str] | None,
    typer.Option("--model", "-m", help="namespace.table of a model (repeatable; default: every model)"),
]
SparkMasterOpt = Annotated[
    str, typer.Option("--spark-master", help="Spark master for the rounds (local[N], spark://host:port, ...)")
]


def _open_layers(
    project: Path,
    warehouse: str | None,
    config: Path | None,
    spark_master: str | None = "local[2]",
    *,
    create: bool = False,
) -> tuple[Lakehouse, Project, Runner]:
    """(Lakehouse, Project, Runner): settings first, then the project, so that either fails before Spark. Only
    ``deploy`` creates a missing warehouse (``create``): it creates the project's tables."""
    from layers.project import load_project
    from layers.runner import Runner

    lh = open_lakehouse(warehouse, config, create=create)
    try:
        loaded = load_project(project)
        return lh, loaded, Runner(lh, loaded, spark_master=spark_master)
    except BaseException:
        lh.close()
        raise


def _count(n: int) -> str:
    return f"{n:,}"


def _rounds_table(reports: Sequence[RoundReport]) -> Table:
    table = new_table()
    for name in ("model", "round", "strategy", "input changes", "affected", "upserts", "deletes", "seconds"):
        table.add_column(name, justify="left" if name in ("model", "strategy") else "right", overflow="fold")
    for r in reports:
        strategy = f"{r.strategy} (idle)" if r.idle else f"{r.strategy} (resumed)" if r.resumed else r.strategy
        cells = (
            r.model,
            "-" if r.round < 0 else r.round,
            strategy,
            _count(r.input_changes),
            _count(r.affected),
            _count(r.upserts),
            _count(r.deletes),
            f"{r.seconds:.2f}",
        )
        table.add_row(*(Text(str(c)) for c in cells))
    return table


@layers_app.command("deploy")
def deploy_command(
    project: ProjectOpt, warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False
) -> None:
    """Create every table the project declares (sources and models) that does not exist yet; idempotent."""
    with command_errors():
        lh, loaded, layers = _open_layers(project, warehouse, config, create=True)
        with lh:
            try:
                created = set(layers.deploy())
            finally:
                layers.close()

    def render() -> None:
        table = new_table("table", "kind", "state")
        for name in loaded.tables:
            kind = "source" if name in loaded.sources else "model"
            table.add_row(Text(name), kind, "[green]created[/]" if name in created else "already there")
        console.print(table)
        console.print(f"{len(created)} created, {len(loaded.tables) - len(created)} already there")

    records = (
        {"table": name, "kind": "source" if name in loaded.sources else "model", "created": name in created}
        for name in loaded.tables
    )
    emit(json_output, records, render)


_ACTION_STYLE = {"rebuild": "red", "alter source": "red", "carry on": "yellow", "create": "green", "removed": "dim"}


@layers_app.command("plan")
def plan_command(
    project: ProjectOpt, warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False
) -> None:
    """What deploying the project would change since the deployed version, per table: the change, the action
    (create, rebuild, carry on, unchanged, ...), why, and the rows a rebuild reads. Writes nothing."""
    from layers.deploy_plan import plan_deploy
    from layers.project import load_project

    with command_errors():
        loaded = load_project(project)
        with open_lakehouse(warehouse, config) as lh:
            plan = plan_deploy(lh, loaded)
    compared_with = "record" if plan.recorded else "tables"
    emit(json_output, ({**t.to_json(), "compared_with": compared_with} for t in plan.tables), lambda: _print_plan(plan))


def _print_plan(plan: DeployPlan) -> None:
    """`layers plan` for people: a row per table, then what the plan was compared with."""
    from layers.deploy_plan import CREATE, UNCHANGED

    table = new_table("table", "change", "action", "why", "rows to read", show_lines=True)
    for t in plan.tables:
        action = Text(t.action, style=_ACTION_STYLE.get(t.action, ""))
        why = t.why if not t.sql_diff else f"{t.why}\n{t.sql_diff}"
        rows = "-" if t.rows_to_read is None else _count(t.rows_to_read)
        table.add_row(Text(t.table), Text(", ".join(t.changes) or "-"), action, Text(why), Text(rows))
    console.print(table)
    changed = [t for t in plan.tables if t.action != UNCHANGED]
    if plan.recorded:
        against = f"the deployment record (deploy {plan.generation})"
    elif all(t.action == CREATE for t in plan.tables):
        against = "an empty warehouse (nothing deployed yet)"
    else:
        against = "the tables and their rounds (no deployment record: deployed by an earlier version)"
    console.print(Text(f"{len(changed)} of {len(plan.tables)} tables change; compared with {against}"))


@layers_app.command("run")
def run_command(
    project: ProjectOpt,
    once: Annotated[bool, typer.Option("--once", help="one round per model, in dependency order")] = False,
    follow: Annotated[
        bool, typer.Option("--follow", help="rounds as soon as inputs advance, until Ctrl+C (SIGINT/SIGTERM)")
    ] = False,
    model: ModelOpt = None,
    spark_master: SparkMasterOpt = "local[2]",
    poll_seconds: Annotated[float, typer.Option("--poll-seconds", help="--follow: how often inputs are checked")] = 0.2,
    max_rounds: Annotated[
        int | None, typer.Option("--max-rounds", help="--follow: stop after N rounds that did work")
    ] = None,
    json_output: JsonOpt = False,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Run the models' rounds: each consumes what its inputs appended since its last round, exactly once."""
    from lakehouse.errors import InvalidArgument
    from layers.selection import select_models

    with command_errors():
        if once == follow:
            raise InvalidArgument("give one of --once (one round per model) and --follow (rounds until Ctrl+C)")
        if poll_seconds <= 0:
            raise InvalidArgument(f"--poll-seconds {poll_seconds}: must be > 0")
        if max_rounds is not None and max_rounds < 1:
            raise InvalidArgument(f"--max-rounds {max_rounds}: must be >= 1")
        lh, loaded, layers = _open_layers(project, warehouse, config, spark_master)
        with lh:
            try:
                models = select_models(loaded, model)
                if once:
                    reports = layers.run_once(models if model else None)
                    if json_output:
                        for report in reports:
                            json_line(report.to_json())
                    else:
                        console.print(_rounds_table(reports))
                else:
                    _follow(layers, models, bool(model), poll_seconds, max_rounds, json_output)
            finally:
                layers.close()


def _follow(
    layers: Runner, models: list[str], chosen: bool, poll_seconds: float, max_rounds: int | None, json_output: bool
) -> None:
    """``layers.follow`` until SIGINT/SIGTERM or ``max_rounds`` rounds that did work (exit 0): a table per pass
    over the models that did work (or a JSON line per round); idle rounds are not shown."""
    import signal
    import threading

    stop = threading.Event()
    pending: list[RoundReport] = []

    def flush() -> None:
        if pending:
            console.print(_rounds_table(pending))
            pending.clear()

    def on_round(report: RoundReport) -> None:
        if report.idle:
            return
        if json_output:
            json_line(report.to_json())
            return
        if any(r.model == report.model for r in pending):
            flush()
        pending.append(report)
        if report.model == models[-1]:  # the last model of a pass
            flush()

    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    if not json_output:
        console.print(f"following {len(models)} models; Ctrl+C stops", style="dim")
    try:
        layers.follow(
            poll_seconds=poll_seconds,
            stop=stop,
            max_rounds=max_rounds,
            on_round=on_round,
            models=models if chosen else None,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if not json_output:
            flush()


@layers_app.command("rebuild")
def rebuild_command(
    project: ProjectOpt,
    model: Annotated[str, typer.Option("--model", "-m", help="namespace.table of the model", show_default=False)],
    abandon: Annotated[
        bool,
        typer.Option(
            "--abandon",
            help="give up the model's unfinished round instead of finishing it first (a round that cannot finish: "
            "its SQL changed or fails); the rebuild makes the table right whatever that round appended",
        ),
    ] = False,
    spark_master: SparkMasterOpt = "local[2]",
    json_output: JsonOpt = False,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Recompute one model in full and write the difference to its table (the same exactly-once write path)."""
    from layers.selection import select_models

    with command_errors():
        lh, loaded, layers = _open_layers(project, warehouse, config, spark_master)
        with lh:
            try:
                (name,) = select_models(loaded, [model])
                report = layers.rebuild(name, abandon=abandon)
            finally:
                layers.close()
    emit(json_output, report.to_json(), lambda: console.print(_rounds_table([report])))


def _positions(positions: dict[str, dict[int, int]]) -> str:
    """Per input: the records consumed (the sum of the bucket offsets) and the bucket count."""
    lines = []
    for table, offsets in positions.items():
        lines.append(f"{table} @ {_count(sum(offsets.values()))} ({len(offsets)} buckets)")
    return "\n".join(lines) or "-"


@layers_app.command("status")
def status_command(
    project: ProjectOpt,
    json_output: JsonOpt = False,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Each model's position, lag (records appended after it, age of the oldest one) and last round."""
    with command_errors():
        lh, _, layers = _open_layers(project, warehouse, config)
        with lh:
            try:
                statuses = layers.status()
            finally:
                layers.close()
    emit(json_output, (status.to_json() for status in statuses), lambda: _print_statuses(statuses))


def _print_statuses(statuses: list[ModelStatus]) -> None:
    """`layers status` for people: a row per model, then each model's problem if it has one."""
    table = new_table("model", "strategy", "position", "lag records", "lag seconds", "last round", show_lines=True)
    for s in statuses:
        lag = "\n".join(f"{t}: {_count(n)}" for t, n in s.lag_records.items()) or "-"
        seconds = "caught up" if s.lag_seconds is None else f"{s.lag_seconds:.1f}"
        last = s.last_round
        if last is None:
            last_text = "-"
        else:
            last_text = (
                f"round {last.round} {last.strategy}: {_count(last.input_changes)} changes -> "
                f"{_count(last.upserts)} upserts, {_count(last.deletes)} deletes in {last.seconds:.2f} s"
            )
        table.add_row(*(Text(str(c)) for c in (s.model, s.strategy, _positions(s.positions), lag, seconds, last_text)))
    console.print(table)
    for s in statuses:
        if getattr(s, "problem", None):
            console.print(Text(f"{s.model}: {s.problem}", style="yellow"), soft_wrap=True)


# -- model tests (layers.model_tests) --------------------------------------------------------------


@layers_app.command("test")
def test_command(
    project: ProjectOpt,
    test: Annotated[
        str | None, typer.Option("--test", "-t", help="run only this test (the name of tests/<name>.yml)")
    ] = None,
    spark_master: SparkMasterOpt = "local[2]",
) -> None:
    """Run the project's model tests (tests/*.yml), each on a throwaway warehouse: the expected rows after each
    step, and every model's incremental state against a rebuild; exit 1 on any failure."""
    import time

    from lakehouse.errors import InvalidArgument
    from layers.model_tests import load_model_tests, run_model_tests, select_tests
    from layers.project import load_project

    with command_errors():
        loaded = load_project(project)
        tests = select_tests(load_model_tests(loaded), test)
        if not tests:  # an empty tests/ folder is a mistake more often than a choice: say so, and fail
            raise InvalidArgument(
                f"no model tests in {Path(project) / 'tests'} (*.yml): add one (docs/guides/layers.md, 'Model tests')"
            )
        started = time.monotonic()
        spark = _test_session(spark_master)
        spark_seconds = time.monotonic() - started
        results = run_model_tests(loaded, tests, spark, on_result=_print_test_result)
    failed = [r for r in results if not r.passed]
    seconds = sum(r.seconds for r in results)
    summary = (
        f"{len(results) - len(failed)} passed, {len(failed)} failed in {seconds:.1f} s "
        f"(Spark started in {spark_seconds:.1f} s)"
    )
    console.print(Text(summary, style="red" if failed else "green"), soft_wrap=True)
    if failed:
        raise typer.Exit(1)


def _test_session(spark_master: str) -> SparkSession:
    """The tests' one Spark session (an active one in this process is reused, and then not stopped)."""
    from lakehouse.spark import spark_session

    return spark_session(master=spark_master, app_name="lakestream-layers-test")


def _print_test_result(result: ModelTestResult) -> None:
    status = Text("PASS", style="bold green") if result.passed else Text("FAIL", style="bold red")
    console.print(Text.assemble(status, f" {result.test.name} ({result.seconds:.1f} s)"), soft_wrap=True)
    for failure in result.failures:
        console.print(Text(f"  {failure.headline()}", style="red"), soft_wrap=True)
        for line in failure.diff.lines():
            style = {"-": "yellow", "+": "magenta", "~": "cyan"}[line[0]]
            console.print(Text(f"    {line}", style=style), soft_wrap=True)


# -- blue/green rebuilds (layers.bluegreen) ------------------------------------------------------------


def _emit_green(result: GreenResult, what: str, json_output: bool) -> None:
    """A blue/green step's result: the tables by logical and physical name, the rounds, what is behind."""

    def render() -> None:
        table = new_table("model", "physical table")
        for logical, physical in result.tables.items():
            table.add_row(Text(logical), Text(physical))
        console.print(table)
        if result.reports:
            console.print(_rounds_table(result.reports))
        for line in result.behind:
            console.print(Text(f"behind: {line}", style="yellow"), soft_wrap=True)
        console.print(Text(f"{what}: generation {result.generation}", style="yellow" if result.behind else "green"))

    emit(json_output, {"step": what, **result.to_json()}, render)


@layers_app.command("green")
def green_command(
    project: ProjectOpt,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    spark_master: SparkMasterOpt = "local[2]",
    json_output: JsonOpt = False,
) -> None:
    """Build the changed models and everything downstream of them as green tables beside the live ones (or
    resume that build) until they have caught up; readers and live rounds keep the live tables. Then cutover."""
    from layers.bluegreen import build_green
    from layers.project import load_project

    with command_errors():
        loaded = load_project(project)
        with open_lakehouse(warehouse, config) as lh:
            from lakehouse.spark import spark_session

            spark = spark_session(master=spark_master, app_name="lakestream-layers-green")
            try:
                result = build_green(lh, loaded, spark)
            finally:
                spark.stop()
    _emit_green(result, "green built" if not result.behind else "green still behind (run green again)", json_output)


def _green_step(
    step: str, project: Path, warehouse: str | None, config: Path | None, json_output: bool
) -> None:
    from layers import bluegreen
    from layers.project import load_project

    with command_errors():
        loaded = load_project(project)
        with open_lakehouse(warehouse, config) as lh:
            if step == "cleanup":
                dropped = bluegreen.cleanup(lh, loaded)
            else:
                result = getattr(bluegreen, step)(lh, loaded)
    if step != "cleanup":
        _emit_green(result, {"cutover": "switched to", "rollback": "rolled back to"}[step], json_output)
        return

    def render() -> None:
        for name in dropped:
            console.print(Text(f"dropped {name}"))
        console.print(f"{len(dropped)} tables dropped")

    emit(json_output, {"step": "cleanup", "dropped": dropped}, render)


@layers_app.command("cutover")
def cutover_command(
    project: ProjectOpt, warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False
) -> None:
    """Switch readers and rounds to the green tables, all at once (refused while they are behind the live ones);
    the live tables are kept for rollback."""
    _green_step("cutover", project, warehouse, config, json_output)


@layers_app.command("rollback")
def rollback_command(
    project: ProjectOpt, warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False
) -> None:
    """Switch back to the tables the last cutover replaced (again: forward), all at once."""
    _green_step("rollback", project, warehouse, config, json_output)


@layers_app.command("cleanup")
def cleanup_command(
    project: ProjectOpt, warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False
) -> None:
    """Drop the project's physical tables that no alias, no rollback target and no green build names."""
    _green_step("cleanup", project, warehouse, config, json_output)
