"""spark-submit entry point: run the warehouse layers of a project (docs/guides/layers.md). Not named layers.py:
spark-submit puts this folder first on sys.path, where a layers.py would hide the layers package.

    spark-submit jobs/run_layers.py --project examples/tpch                      # one round of every model
    spark-submit jobs/run_layers.py --project DIR --model dwd.orders_enriched    # one round of one model
    spark-submit jobs/run_layers.py --project DIR --rebuild --model M            # recompute M in full
    spark-submit jobs/run_layers.py --project DIR --rebuild --abandon --model M  # ... giving up a stuck round
    spark-submit jobs/run_layers.py --project DIR --follow                       # rounds until SIGTERM
    spark-submit jobs/run_layers.py --project NEW --green                        # blue/green: build the changed
    spark-submit jobs/run_layers.py --project NEW --cutover                      # ... models, then switch to them

The project folder defaults to LAKESTREAM_LAYERS_PROJECT, else examples/tpch of this repository. Tables the
project declares that do not exist yet are created first (as `lakestream layers deploy`). Settings come from
the environment / LAKESTREAM_CONFIG (see `lakehouse.settings`); ``--warehouse`` overrides the warehouse. The
Spark master is spark-submit's (``--master``), and so is the application name if ``--name`` was given.
Prints one JSON line per round (`RoundReport.to_json`), and for an error one line
``{"error": ..., "type": ...}`` and exits 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from jobs._common import emit, submitted_app_name, with_lakehouse

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

REPO = Path(__file__).resolve().parents[1]
APP_NAME = "lakestream-layers"


def default_project() -> str:
    return os.environ.get("LAKESTREAM_LAYERS_PROJECT") or str(REPO / "examples" / "tpch")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/run_layers.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--project", default=None, help="the project folder (default: LAKESTREAM_LAYERS_PROJECT, else examples/tpch)"
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        help="namespace.table of a model (repeatable; default: all, in dependency order)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--rebuild", action="store_true", help="recompute the models in full (exactly once)")
    mode.add_argument("--follow", action="store_true", help="run rounds as inputs advance until SIGTERM/SIGINT")
    mode.add_argument("--green", action="store_true", help="blue/green: build the changed models beside the live ones")
    mode.add_argument("--cutover", action="store_true", help="blue/green: switch to the green tables (if caught up)")
    p.add_argument(
        "--abandon",
        action="store_true",
        help="--rebuild: give up an unfinished round instead of finishing it first (one that cannot finish)",
    )
    p.add_argument("--poll-seconds", type=float, default=0.2, help="--follow: how often inputs are checked")
    p.add_argument("--max-rounds", type=int, default=None, help="--follow: stop after this many rounds")
    p.add_argument("--warehouse", help="file:///path or s3://bucket/prefix (default: settings)")
    p.add_argument("--config", help="YAML settings file (default: LAKESTREAM_CONFIG)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # settings and the project first: a bad configuration or model fails at once, not after Spark's start
    return with_lakehouse(args, lambda lh: run(lh, args))


def run(lh: Lakehouse, args: argparse.Namespace) -> int:
    from layers.project import load_project
    from layers.selection import select_models

    project = load_project(args.project or default_project())
    models = select_models(project, args.model)
    if args.cutover:  # metadata only: no Spark
        from layers.bluegreen import cutover

        emit({"cutover": cutover(lh, project).to_json()})
        return 0
    from lakehouse.spark import spark_session
    from layers.runner import Runner

    spark = spark_session(app_name=submitted_app_name(APP_NAME))  # no master: spark-submit's --master
    if args.green:  # the live tables and their deployment record are left as they are
        from layers.bluegreen import build_green

        result = build_green(lh, project, spark)
        for report in result.reports:
            emit(report.to_json())
        emit({"green": result.to_json()})
        return 0
    layers = Runner(lh, project, spark)
    try:
        created = layers.deploy()
        if created:
            emit({"deployed": created})
        if args.rebuild:
            for model in models:
                emit(layers.rebuild(model, abandon=args.abandon).to_json())
        elif args.follow:
            stop = threading.Event()  # SIGTERM (Airflow, spark-submit's kill) or SIGINT: after the round, exit 0
            previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                layers.follow(
                    poll_seconds=args.poll_seconds,
                    stop=stop,
                    max_rounds=args.max_rounds,
                    on_round=lambda report: emit(report.to_json()),  # rounds that did work
                    models=models if args.model else None,
                )
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        else:
            for report in layers.run_once(models if args.model else None):
                emit(report.to_json())
    finally:
        layers.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
