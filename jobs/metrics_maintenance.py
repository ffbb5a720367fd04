"""spark-submit entry point: maintain the metrics table ``_lakestream.metrics`` (no Spark work: a small table).

    spark-submit jobs/metrics_maintenance.py [--warehouse s3://bucket/wh] [--retention-days 90]

Compacts its small data files (one per `lakestream metrics collect`) keeping what was recorded, drops rows
older than --retention-days if given, expires old snapshots and deletes unreferenced files
(`quality.metrics.table.maintain_metrics`). Prints one JSON line; exits non-zero on an error.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from typing import TYPE_CHECKING

from jobs._common import emit, with_lakehouse

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/metrics_maintenance.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", help="file:///path or s3://bucket/prefix (default: settings)")
    p.add_argument("--config", help="YAML settings file (default: LAKESTREAM_CONFIG)")
    p.add_argument("--snapshot-age-hours", type=float, default=24.0)
    p.add_argument("--keep-snapshots", type=int, default=5)
    p.add_argument("--target-file-rows", type=int, default=1_000_000)
    p.add_argument("--retention-days", type=float, default=None, help="drop older metric rows (default: keep all)")
    p.add_argument("--orphan-age-hours", type=float, default=3 * 24, help="at least 1")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def work(lh: Lakehouse) -> int:
        from quality.metrics.table import maintain_metrics

        result = maintain_metrics(
            lh,
            older_than=timedelta(hours=args.snapshot_age_hours),
            keep_snapshots=args.keep_snapshots,
            target_file_rows=args.target_file_rows,
            retention=None if args.retention_days is None else timedelta(days=args.retention_days),
            orphan_age=timedelta(hours=args.orphan_age_hours),
        )
        emit(result.to_dict())
        return 0

    return with_lakehouse(args, work)


if __name__ == "__main__":
    sys.exit(main())
