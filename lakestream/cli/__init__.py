"""The `lakestream` command, assembled: one module per command group (``store``, ``table``, ``log``, ``catalog``,
``subscription``, ``layers``; ``config``, ``tier``/``compact``/``maintain`` in `lakestream.cli.pipeline`, ``demo``),
the quality commands (`lakestream.cli.quality`), and what they share (`lakestream.cli.common`). The console script
and ``python -m lakestream`` run ``app``."""

from __future__ import annotations

import typer

from lakestream.cli import config, demo, pipeline, quality
from lakestream.cli.catalog import catalog_app
from lakestream.cli.common import BoundaryGroup, fail, open_lakehouse
from lakestream.cli.layers import layers_app
from lakestream.cli.log import log_app
from lakestream.cli.store import store_app
from lakestream.cli.subscription import subscription_app
from lakestream.cli.table import table_app
from object_store.moved import keep_old_paths

__all__ = ["app", "fail", "open_lakehouse"]

app = typer.Typer(help="lakestream: a stream-lake pipeline on object storage.", no_args_is_help=True, cls=BoundaryGroup)
# `lakestream --help` lists the commands in the order they are added here, then the groups in theirs.
app.command()(config.config)
app.command()(pipeline.tier)
app.command()(pipeline.compact)
app.command()(pipeline.maintain)
app.command()(demo.demo)
app.add_typer(store_app, name="store")
app.add_typer(table_app, name="table")
app.add_typer(log_app, name="log")
app.add_typer(catalog_app, name="catalog")
app.add_typer(subscription_app, name="subscription")
app.add_typer(layers_app, name="layers")
quality.register(app)  # check, report, published; the metrics group

# Until the next release: the module that held the commands (``from lakestream.cli.core import app, fail,
# open_lakehouse`` still works; its options and output helpers are in `lakestream.cli.common`).
keep_old_paths({"lakestream.cli.core": "lakestream.cli"})
