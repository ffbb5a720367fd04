"""spark-submit entry point: tier tables' logs into their Iceberg tables.

    spark-submit jobs/tiering.py --table ods.orders [--table ods.clicks] [--warehouse s3://bucket/wh]
    spark-submit jobs/tiering.py                      # every table of the warehouse

Settings come from the environment / LAKESTREAM_CONFIG (see `lakehouse.settings`); ``--warehouse``
overrides the warehouse. Prints one JSON line per table and exits non-zero if any table failed.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jobs/tiering.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", action="append", default=[], help="namespace.table (repeatable; default: all)")
    parser.add_argument("--warehouse", help="file:///path or s3://bucket/prefix (default: settings)")
    parser.add_argument("--config", help="YAML settings file (default: LAKESTREAM_CONFIG)")
    parser.add_argument("--max-split-rows", type=int, default=None, help="rows per tiering task (split cap)")
    args = parser.parse_args(argv)

    from lakehouse import Lakehouse
    from lakehouse.spark import spark_session

    spark = spark_session(app_name="lakestream-tiering")
    failed = 0
    with Lakehouse.from_env(args.config, warehouse=args.warehouse) as lh:
        for name in args.table or [str(t) for t in lh.list_tables()]:
            try:
                result = lh.tier(name, spark=spark, max_split_rows=args.max_split_rows)
                print(json.dumps(result.to_dict()), flush=True)
            except Exception as exc:  # noqa: BLE001 - report per table, fail the job at the end
                failed += 1
                print(json.dumps({"table": name, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
