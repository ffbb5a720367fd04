"""``lakestream store probe|ls``: the warehouse's object store."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from lakestream.cli.common import (
    ConfigOpt,
    JsonOpt,
    WarehouseOpt,
    cells,
    command_errors,
    console,
    emit,
    open_warehouse_store,
    resolve_settings,
)
from lakestream.console import json_line, new_table

store_app = typer.Typer(help="Inspect and check the warehouse's object store.", no_args_is_help=True)


@store_app.command("probe")
def store_probe(warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False) -> None:
    """Check that the store enforces If-None-Match and If-Match (lakestream refuses stores that do not)."""
    with command_errors():
        store = open_warehouse_store(resolve_settings(warehouse, config), create_bucket=None)
        store.ensure_conditional_writes()
    emit(
        json_output,
        {"store": store.url, "conditional_writes": True},
        lambda: console.print(f"[green]ok[/] {escape(store.url)}: conditional writes are enforced"),
    )


@store_app.command("ls")
def store_ls(
    prefix: Annotated[str, typer.Argument(help="key prefix")] = "",
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    limit: Annotated[int, typer.Option(help="stop after this many keys")] = 1000,
    json_output: JsonOpt = False,
) -> None:
    """List objects under a prefix, in key order."""
    table = new_table("key", "size", "etag", "last modified")
    with command_errors():
        store = open_warehouse_store(resolve_settings(warehouse, config))
        # --json streams: a key is printed as it is listed, not after the listing
        for n, info in enumerate(store.list(prefix)):
            if n >= limit:
                break
            modified = info.last_modified.isoformat(timespec="seconds")
            if json_output:
                json_line({"key": info.key, "size": info.size, "etag": info.etag, "last_modified": modified})
            else:
                table.add_row(*cells(info.key, info.size, info.etag, modified))
    if not json_output:
        console.print(table)
