"""``lakestream log offsets|tail``: a table's log."""

from __future__ import annotations

from typing import Annotated

import typer

from lakestream.cli.common import (
    ConfigOpt,
    JsonOpt,
    WarehouseOpt,
    command_errors,
    console,
    data_table,
    emit,
    open_lakehouse,
)
from lakestream.console import new_table

log_app = typer.Typer(help="Inspect a table's log.", no_args_is_help=True)


@log_app.command("offsets")
def log_offsets(
    name: str, warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False
) -> None:
    """Start and end offsets of every bucket of a table's log."""
    with command_errors():
        log = open_lakehouse(warehouse, config).log(name)
        starts, ends = log.start_offsets(), log.end_offsets()

    def render() -> None:
        table = new_table("bucket", "start offset", "end offset", "records")
        for b, end in ends.items():
            table.add_row(str(b), str(starts[b]), str(end), str(end - starts[b]))
        table.add_row("all", "", "", str(sum(ends.values()) - sum(starts.values())))
        console.print(table)

    buckets = (
        {"bucket": b, "start_offset": starts[b], "end_offset": end, "records": end - starts[b]}
        for b, end in ends.items()
    )
    emit(json_output, buckets, render)


@log_app.command("tail")
def log_tail(
    name: str,
    bucket: Annotated[int, typer.Option(help="bucket to read")],
    from_offset: Annotated[int | None, typer.Option("--from", help="first offset (default: the last --limit)")] = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many records")] = 20,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Print records of one bucket with their offsets, operations and append times (--json: one object per
    record, its columns with _offset, _op and _timestamp)."""
    with command_errors(ValueError):
        log = open_lakehouse(warehouse, config).log(name)
        known = bucket in range(log.definition.buckets)  # else the read below says which buckets exist
        first = log.start_offsets()[bucket] if known else 0  # retention may have removed the oldest records
        end = log.end_offsets()[bucket] if known else 0
        start = max(first, end - limit) if from_offset is None else from_offset
        rows = log.read(bucket, start, start + limit)

    def render() -> None:
        console.print(data_table(rows.column_names, rows.to_pylist()))
        if rows.num_rows:
            console.print(f"bucket {bucket}: records {start}..{start + rows.num_rows - 1} of end offset {end}")
        else:
            console.print(f"bucket {bucket}: no records from offset {start} (end offset {end})")

    emit(json_output, rows.to_pylist(), render)
