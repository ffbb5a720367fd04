"""``lakestream demo``: the demo (`lakestream.demo.run_demo`) on a warehouse of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lakehouse.settings import load_settings
from lakestream.cli.common import command_errors, console, emit, open_warehouse_store
from lakestream.console import OutputConsole, json_line


def demo(
    warehouse: Annotated[
        str | None, typer.Option("--warehouse", "-w", help="default: ./lakestream-demo (a file:// warehouse)")
    ] = None,
    changes: Annotated[
        int, typer.Option(min=100, help="order changes to produce (half before, half after round 1)")
    ] = 4_000_000,
    spark_master: Annotated[str, typer.Option(help="Spark master for tiering")] = "local[2]",
    local: Annotated[bool, typer.Option("--local", help="tier on the local executor instead of Spark")] = False,
    big_mib: Annotated[int, typer.Option(min=1, help="size of the multipart write")] = 16,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="machine output: one JSON object per step as it passes, then one for the run"),
    ] = False,
) -> None:
    """Run the demo on embedded defaults; exits non-zero if any of its checks fails."""
    from lakestream.demo import Step, run_demo

    def step_json(step: Step) -> None:
        json_line({"step": step.name, "result": step.result, "seconds": round(step.seconds, 3)})

    with command_errors():
        settings = load_settings(None, warehouse=warehouse or str(Path("lakestream-demo").resolve()))
        store = open_warehouse_store(settings, create=True)
        done = run_demo(
            store,
            OutputConsole(quiet=True) if json_output else console,
            big_mib=big_mib,
            changes=changes,
            spark_master=None if local else spark_master,
            on_step=step_json if json_output else None,
        )
    run = {
        "ok": True,
        "warehouse": store.url,
        "namespace": done.namespace,
        "seconds": round(done.seconds, 3),
        "log_end": done.log_end,
        "lake_offsets": done.lake_offsets,
        "metadata_location": done.metadata_location,
    }
    emit(json_output, run, lambda: None)  # for people, each step was printed as it passed
