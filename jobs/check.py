"""spark-submit entry point: check tables and publish what passed (docs/guides/quality.md). Not named quality.py:
spark-submit puts this folder first on sys.path, where a quality.py would hide the quality package.

    spark-submit jobs/check.py                                   # reconcile every table; no publishing
    spark-submit jobs/check.py --project examples/tpch           # + the project's suites and layer checks
    spark-submit jobs/check.py --table ods.orders --full         # re-check everything of one table
    spark-submit jobs/check.py --publish                         # move `published` as the latest run allows,
                                                                 # then record the warehouse publication

A check run records itself and its report in the warehouse (_lakestream/quality/) and exits 1 on any
violation. ``--publish`` moves each table's tag ``published`` to the snapshot the latest recorded run passed
on (refused, exit 1, if that run failed): the ``lake_quality`` DAG runs it only after the check task
succeeded. Without ``--project`` only reconciliation runs (the DAG passes the project it found).
Prints one JSON line per
result and a summary line; an error that keeps the job from running is one line ``{"error": ..., "type": ...}``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from jobs._common import emit, submitted_app_name, with_lakehouse
from jobs._common import parser as common_parser

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

APP_NAME = "lakestream-check"


def parser() -> argparse.ArgumentParser:
    p = common_parser("jobs/check.py", __doc__)
    p.add_argument("--full", action="store_true", help="re-check everything, not only what is new")
    p.add_argument("--project", default=None, help="a layers project: its suites and layer checks run too")
    p.add_argument("--publish", action="store_true", help="publish from the latest recorded run; check nothing")
    p.add_argument("--report-dir", default=None, help="also write the report into this local folder")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return with_lakehouse(args, lambda lh: publish_latest(lh, args.table) if args.publish else check(lh, args))


def check(lh: Lakehouse, args: argparse.Namespace) -> int:
    from lakehouse.spark import spark_session
    from quality.check import run_checks

    project = args.project
    # no master: spark-submit's --master; reconciliation reads on its executors, layer checks and suites run on it
    spark = spark_session(app_name=submitted_app_name(APP_NAME))
    run = run_checks(
        lh,
        tables=args.table or None,
        full=args.full,
        project=project,
        spark=spark,
        publish=False,
        report_dir=args.report_dir,
        on_result=lambda r: emit(r.to_dict()),
    )
    emit({"run_id": run.run_id, "ok": run.ok, "violations": len(run.violations)})
    return 0 if run.ok else 1


def publish_latest(lh: Lakehouse, tables: list[str]) -> int:
    from quality.check import publish_run
    from quality.runs import load_runs

    latest = load_runs(lh, limit=1)
    if not latest:
        emit({"error": "no quality run recorded yet: run the checks first", "type": "QualityError"})
        return 1
    run = latest[0]
    from quality.warehouse_publication import read_publication

    moved = publish_run(lh, run, tables=tables or None)
    record = read_publication(lh)
    emit({"run_id": run.run_id, "ok": run.ok, "published": moved, "publication": record and record.generation})
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
