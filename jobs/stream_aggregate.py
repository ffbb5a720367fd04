"""spark-submit entry point: keep an aggregate of a table's changes in another table, with a Structured
Streaming query (`lakehouse.spark.aggregate.aggregate_changes`).

    spark-submit jobs/stream_aggregate.py --source ods.orders --target ads.orders_by_status \\
        --group-by o_orderstatus --sum o_totalprice --checkpoint /var/lib/lakestream/checkpoints/orders_by_status
    spark-submit jobs/stream_aggregate.py ... --follow      # run until SIGTERM instead of availableNow

By default the query reads what the source holds (the lake's snapshot, then the log; from the checkpoint on
after the first run), updates the target, and stops (``trigger(availableNow=True)``): a scheduled task runs it
again later and it continues where it stopped. Settings come from the environment / LAKESTREAM_CONFIG
(`lakehouse.settings`); ``--warehouse`` overrides the warehouse. Prints one JSON line when the query ends, and
for an error one line ``{"error": ..., "type": ...}`` and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from jobs._common import emit, submitted_app_name, with_lakehouse

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

APP_NAME = "lakestream-stream-aggregate"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/stream_aggregate.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--source", required=True, help="namespace.table whose changes are aggregated")
    p.add_argument("--target", required=True, help="namespace.table that holds the aggregate (created if missing)")
    p.add_argument("--group-by", required=True, help="comma-separated group columns")
    p.add_argument("--sum", action="append", default=[], help="a numeric column to sum (repeatable)")
    p.add_argument("--checkpoint", required=True, help="the query's checkpoint directory (keep it across runs)")
    p.add_argument("--follow", action="store_true", help="run until SIGTERM instead of stopping when caught up")
    p.add_argument("--warehouse", help="file:///path or s3://bucket/prefix (default: settings)")
    p.add_argument("--config", help="YAML settings file (default: LAKESTREAM_CONFIG)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    group_by = [c.strip() for c in args.group_by.split(",") if c.strip()]

    def work(lh: Lakehouse) -> int:
        from lakehouse.spark import spark_session
        from lakehouse.spark.aggregate import aggregate_changes
        from lakehouse.spark.source import register

        spark = spark_session(app_name=submitted_app_name(APP_NAME))
        register(spark, lh)  # the format opens this lakehouse's store (its credentials ride in the source)
        query = aggregate_changes(
            spark,
            args.source,
            args.target,
            group_by=group_by,
            sums=args.sum,
            checkpoint=args.checkpoint,
            lakehouse=lh,
            available_now=not args.follow,
        )
        query.awaitTermination()
        if query.exception() is not None:
            emit({"error": str(query.exception()), "type": "StreamingQueryException"})
            return 1
        progress = query.recentProgress
        emit(
            {
                "source": args.source,
                "target": args.target,
                "micro_batches": len(progress),
                "input_rows": sum(p["numInputRows"] for p in progress),
            }
        )
        return 0

    return with_lakehouse(args, work)


if __name__ == "__main__":
    sys.exit(main())
