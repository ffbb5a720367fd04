"""The `lakestream` command, assembled: its own commands (`lakestream.cli.core`), then ``layers``
(`lakestream.cli.layers`) and ``check`` / ``report`` (`lakestream.cli.quality`). The console script and
``python -m lakestream`` run ``app``."""

from __future__ import annotations

from lakestream.cli import quality
from lakestream.cli.core import app
from lakestream.cli.layers import layers_app

app.add_typer(layers_app, name="layers")
quality.register(app)

__all__ = ["app"]
