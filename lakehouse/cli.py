"""The `lakestream` command. Thin: parse options, build settings, call the library, print."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from lakehouse.errors import LakestreamError
from lakehouse.settings import load_settings

app = typer.Typer(help="lakestream: a stream-lake pipeline on object storage.", no_args_is_help=True)
store_app = typer.Typer(help="Inspect and check the warehouse's object store.", no_args_is_help=True)
app.add_typer(store_app, name="store")
console = Console()
err = Console(stderr=True)

WarehouseOpt = Annotated[
    str | None, typer.Option("--warehouse", "-w", help="file:///path or s3://bucket/prefix (else settings)")
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="YAML settings file (else LAKESTREAM_CONFIG)")]


def _settings(warehouse: str | None, config: Path | None):
    return load_settings(config, warehouse=warehouse)


def _fail(exc: LakestreamError) -> None:
    err.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(1)


@app.command()
def config(warehouse: WarehouseOpt = None, config: ConfigOpt = None) -> None:
    """Show the resolved settings (secrets masked)."""
    try:
        settings = _settings(warehouse, config)
    except LakestreamError as exc:
        _fail(exc)
    for k, v in settings.describe().items():
        console.print(f"{k:18} {v}")


@store_app.command("probe")
def store_probe(warehouse: WarehouseOpt = None, config: ConfigOpt = None) -> None:
    """Check that the store enforces If-None-Match and If-Match (lakestream refuses stores that do not)."""
    try:
        store = _settings(warehouse, config).open_store(create_bucket=None)
        store.ensure_conditional_writes()
    except LakestreamError as exc:
        _fail(exc)
    console.print(f"[green]ok[/] {store.url}: conditional writes are enforced")


@store_app.command("ls")
def store_ls(
    prefix: Annotated[str, typer.Argument(help="key prefix")] = "",
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    limit: Annotated[int, typer.Option(help="stop after this many keys")] = 1000,
) -> None:
    """List objects under a prefix, in key order."""
    try:
        store = _settings(warehouse, config).open_store()
        table = Table("key", "size", "etag", "last modified")
        for n, info in enumerate(store.list(prefix)):
            if n >= limit:
                break
            table.add_row(info.key, str(info.size), info.etag, info.last_modified.isoformat(timespec="seconds"))
    except LakestreamError as exc:
        _fail(exc)
    console.print(table)


@app.command()
def demo(
    warehouse: Annotated[
        str | None, typer.Option("--warehouse", "-w", help="default: ./lakestream-demo (a file:// warehouse)")
    ] = None,
    big_mib: Annotated[int, typer.Option(help="size of the multipart write")] = 64,
) -> None:
    """Run the demo on embedded defaults; exits non-zero if any of its checks fails."""
    from lakehouse.demo import run_demo

    try:
        settings = load_settings(None, warehouse=warehouse or str(Path("lakestream-demo").resolve()))
        store = settings.open_store()
        run_demo(store, console, big_mib=big_mib)
    except LakestreamError as exc:
        _fail(exc)


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover
    app()
