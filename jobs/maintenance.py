"""spark-submit entry point: maintain tables (compaction on Spark, then expiry, orphans, log retention).

    spark-submit jobs/maintenance.py --table ods.orders [--warehouse s3://bucket/wh]
    spark-submit jobs/maintenance.py                   # every table of the warehouse
    spark-submit jobs/maintenance.py --compact-only    # compaction only (jobs/compaction.py does the same)

Prints one JSON line per table and exits non-zero if any table failed. Expiry and log retention keep what the
table's subscriptions need (``pinned`` in the JSON line); subscriptions idle for longer than
--subscription-idle-hours are listed under ``idle_subscriptions`` (and logged as warnings).
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from jobs._common import parser, run_per_table

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse


def main(argv: list[str] | None = None, *, compact_only: bool = False) -> int:
    p = parser("jobs/maintenance.py", __doc__)
    p.add_argument("--compact-only", action="store_true", default=compact_only)
    p.add_argument("--target-file-size-mib", type=int, default=128)
    p.add_argument("--min-input-files", type=int, default=5)
    p.add_argument("--snapshot-age-hours", type=float, default=5 * 24)
    p.add_argument("--orphan-age-hours", type=float, default=3 * 24, help="at least 1 (see --unsafe-orphan-age)")
    p.add_argument(
        "--unsafe-orphan-age",
        action="store_true",
        help="allow --orphan-age-hours below 1: deletes the files of tiering or compaction rounds still running, "
        "whose commits then reference missing files; only when none can run",
    )
    p.add_argument("--retention-hours", type=float, default=7 * 24)
    p.add_argument(
        "--subscription-idle-hours",
        type=float,
        default=7 * 24,
        help="report subscriptions not advanced for longer than this (idle_subscriptions in the JSON line)",
    )
    args = p.parse_args(argv)
    compaction = {"target_file_size": args.target_file_size_mib << 20, "min_input_files": args.min_input_files}

    def work(lh: Lakehouse, name: str, spark: Any) -> object:
        if args.compact_only:
            return lh.compact(name, spark=spark, **compaction)
        return lh.maintain(
            name,
            spark=spark,
            snapshot_age=timedelta(hours=args.snapshot_age_hours),
            orphan_age=timedelta(hours=args.orphan_age_hours),
            retention=timedelta(hours=args.retention_hours),
            subscription_idle=timedelta(hours=args.subscription_idle_hours),
            unsafe_orphan_age=args.unsafe_orphan_age,
            **compaction,
        )

    return run_per_table(args, "lakestream-maintenance", work)


if __name__ == "__main__":
    sys.exit(main())
