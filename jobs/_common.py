"""What every spark-submit entry point shares: the common options, one Spark session, one JSON line per
table, a non-zero exit if any table failed."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import lakehouse.spark  # noqa: F401  (first: it silences PySpark's pandas FutureWarning before pyspark is imported)

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse


def parser(prog: str, doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    p.add_argument("--table", action="append", default=[], help="namespace.table (repeatable; default: all)")
    p.add_argument("--warehouse", help="file:///path or s3://bucket/prefix (default: settings)")
    p.add_argument("--config", help="YAML settings file (default: LAKESTREAM_CONFIG)")
    return p


def emit(obj: dict) -> None:
    """One JSON line on stdout (what a spark-submit job reports)."""
    print(json.dumps(obj, default=str), flush=True)


def with_lakehouse(args: argparse.Namespace, work: Callable[[Lakehouse], int]) -> int:
    """``work(lakehouse)`` on the settings' (``--config``, ``--warehouse``) lakehouse; an error of ours becomes one
    line ``{"error": ..., "type": ...}`` and exit code 1. Settings are read before Spark starts (in ``work``),
    so a bad configuration fails at once."""
    from lakehouse import Lakehouse
    from lakehouse.errors import LakestreamError

    try:
        with Lakehouse.from_env(args.config, warehouse=args.warehouse) as lh:
            return work(lh)
    except LakestreamError as exc:
        emit({"error": str(exc), "type": type(exc).__name__})
        return 1


def run_per_table(args: argparse.Namespace, app_name: str, work: Callable[[Lakehouse, str, Any], Any]) -> int:
    """``work(lakehouse, table, spark)`` for each table (``--table`` or all); returns the exit code."""
    from lakehouse import Lakehouse
    from lakehouse.spark import spark_session
    from lakehouse.table_runs import summarize

    # settings first: a bad configuration fails at once, not after Spark's start (~15 s)
    with Lakehouse.from_env(args.config, warehouse=args.warehouse) as lh:
        spark = spark_session(app_name=submitted_app_name(app_name))  # spark-submit's --name wins
        runs = []
        # a table that fails (a broken definition, a lake table that cannot be loaded) does not stop the others
        for run in lh.for_each_table(lambda name: work(lh, name, spark), args.table or None):
            runs.append(run)
            error = {"table": run.table, "error": run.message, "type": type(run.error).__name__}
            print(json.dumps(run.result.to_dict() if run.ok else error, default=str), flush=True)
        failed = [r.table for r in runs if not r.ok]
        print(json.dumps({"summary": summarize(runs), "tables": len(runs), "failed": failed}), flush=True)
    return 1 if failed else 0


def submitted_app_name(default: str) -> str:
    """The name spark-submit's ``--name`` gave the application, else ``default``.

    `lakehouse.spark.spark_session` sets the name it is given, which would override ``--name``. Under
    spark-submit (the Python driver connects to spark-submit's JVM: PYSPARK_GATEWAY_PORT is set) the JVM holds
    ``spark.app.name``: the ``--name`` given, or the script's file name when none was (then ``default``).
    """
    import os
    import sys

    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return default
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM (started already)
    return submitted_name(SparkConf().get("spark.app.name", None), sys.argv[0], default)


def submitted_name(current: str | None, script: str, default: str) -> str:
    """``current`` (spark.app.name in spark-submit's JVM) unless it is spark-submit's default (the script's
    file name, or pyspark-shell), else ``default``."""
    import os

    if not current or current in (os.path.basename(script), "pyspark-shell"):
        return default
    return current
