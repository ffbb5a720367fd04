"""``lakestream layers``: the warehouse-layers commands (``explain``, ``validate``; deploy and run come next).

A typer sub-app; the main command adds it with ``app.add_typer(layers_app, name="layers")``. Errors end the
command with one line, as everywhere in ``lakestream`` (``lakehouse.cli._fail``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lakehouse.errors import LakestreamError

layers_app = typer.Typer(
    help="Warehouse layers: a project of Spark SQL models (see docs/layers.md).", no_args_is_help=True
)
console = Console()

ProjectOpt = Annotated[
    Path, typer.Option("--project", "-p", help="the project folder (sources.yml, models/)", show_default=False)
]


def _fail(exc: Exception):
    from lakehouse.cli import _fail as fail  # the one style of error line, and exit code 1

    fail(exc)


@layers_app.command("explain")
def explain_command(project: ProjectOpt) -> None:
    """Each model's incremental strategy and why, in dependency order."""
    from lakehouse.layers.planner import explain
    from lakehouse.layers.project import load_project

    try:
        plans = explain(load_project(project))
    except LakestreamError as exc:
        _fail(exc)
    table = Table(show_lines=True)
    for name in ("order", "model", "inputs", "strategy", "reason", "key mapping"):
        table.add_column(name, overflow="fold")
    for plan in plans:
        lines = [m.describe() for m in plan.mappings]
        if plan.group_by:
            lines.insert(0, f"groups: {', '.join(g.output or g.expression for g in plan.group_by)}")
        mapping = "\n".join(lines) or "-"
        cells = (plan.order, plan.model, "\n".join(plan.inputs), plan.strategy, plan.reason, mapping)
        table.add_row(*(Text(str(c)) for c in cells))
    console.print(table)


@layers_app.command("validate")
def validate_command(project: ProjectOpt) -> None:
    """Check the project (files, SQL, inputs, cycles, keys) without touching any warehouse; exit 1 on the first
    error."""
    from lakehouse.layers.project import load_project

    try:
        loaded = load_project(project)
    except LakestreamError as exc:
        _fail(exc)
    untyped = {name: m.untyped_columns for name, m in loaded.models.items() if m.untyped_columns}
    console.print(
        f"[green]ok[/] {len(loaded.sources)} sources, {len(loaded.models)} models; order: "
        f"{' -> '.join(loaded.order) or '-'}",
        soft_wrap=True,
    )
    for name, columns in untyped.items():
        console.print(Text(f"{name}: types of {', '.join(columns)} are checked at deploy"), soft_wrap=True)
