"""``lakestream catalog repair|list|properties``: the Iceberg catalog on the object store."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from lakestream.cli.common import ConfigOpt, JsonOpt, WarehouseOpt, command_errors, console, emit, open_lakehouse

catalog_app = typer.Typer(help="The Iceberg catalog on the object store.", no_args_is_help=True)


@catalog_app.command("repair")
def catalog_repair(warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False) -> None:
    """Finish or roll back renames interrupted by a crash."""
    with command_errors():
        done = open_lakehouse(warehouse, config).catalog.repair()

    def render() -> None:
        for line in done:
            console.print(line, markup=False)
        console.print(f"{len(done)} interrupted rename(s) resolved")

    emit(json_output, {"resolved": list(done)}, render)


@catalog_app.command("list")
def catalog_list(
    namespace: Annotated[
        str | None, typer.Argument(help="a namespace, its parts joined by '.' (default: the top level)")
    ] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """The namespaces and Iceberg tables one level below NAMESPACE, at any depth ("com.organization")."""
    with command_errors():
        catalog = open_lakehouse(warehouse, config).catalog
        parent = tuple(namespace.split(".")) if namespace else ()
        entries = [
            *(("namespace", child) for child in catalog.list_namespaces(parent)),
            *(("table", ident) for ident in (catalog.list_tables(parent) if parent else [])),
        ]

    def render() -> None:
        for kind, ident in entries:
            console.print(Text(f"{kind:10} {'.'.join(ident)}"))

    # the parts too: a part may hold a "."
    records = ({"kind": kind, "name": ".".join(ident), "identifier": list(ident)} for kind, ident in entries)
    emit(json_output, records, render)


@catalog_app.command("properties")
def catalog_properties(
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    show_secrets: Annotated[bool, typer.Option(help="print credentials too")] = False,
    json_output: JsonOpt = False,
) -> None:
    """Print the pyiceberg properties (for load_catalog or .pyiceberg.yaml) of this warehouse's catalog."""
    with command_errors():
        props = open_lakehouse(warehouse, config).catalog_properties()
    shown = {
        k: "****" if k.endswith(("secret-access-key", "session-token")) and not show_secrets else v
        for k, v in props.items()
    }

    def render() -> None:
        for k, v in shown.items():
            print(f"{k}: {v}")

    emit(json_output, shown, render)
