"""spark-submit entry point: tier tables' logs into their Iceberg tables.

    spark-submit jobs/tiering.py --table ods.orders [--table ods.clicks] [--warehouse s3://bucket/wh]
    spark-submit jobs/tiering.py                      # every table of the warehouse

Settings come from the environment / LAKESTREAM_CONFIG (see `lakehouse.settings`); ``--warehouse``
overrides the warehouse. Prints one JSON line per table and exits non-zero if any table failed.
"""

from __future__ import annotations

import sys

from jobs._common import parser, run_per_table


def main(argv: list[str] | None = None) -> int:
    p = parser("jobs/tiering.py", __doc__)
    p.add_argument("--max-split-rows", type=int, default=None, help="rows per tiering task (split cap)")
    args = p.parse_args(argv)
    return run_per_table(
        args,
        "lakestream-tiering",
        lambda lh, name, spark: lh.tier(name, spark=spark, max_split_rows=args.max_split_rows),
    )


if __name__ == "__main__":
    sys.exit(main())
