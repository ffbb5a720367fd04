"""``lakestream config``: the resolved settings (secrets masked)."""

from __future__ import annotations

from lakestream.cli.common import ConfigOpt, JsonOpt, WarehouseOpt, command_errors, console, emit, resolve_settings


def config(warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False) -> None:
    """Show the resolved settings (secrets masked)."""
    with command_errors():
        settings = resolve_settings(warehouse, config)

    def render() -> None:
        described = settings.describe()
        width = max(map(len, described))
        for k, v in described.items():
            console.print(f"{k:{width}} {v}", markup=False)

    emit(json_output, settings.describe(missing=None), render)
