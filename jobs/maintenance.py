"""spark-submit entry point: maintain tables (compaction on Spark, then expiry, orphans, log retention).

    spark-submit jobs/maintenance.py --table ods.orders [--warehouse s3://bucket/wh]
    spark-submit jobs/maintenance.py                   # every table of the warehouse
    spark-submit jobs/maintenance.py --compact-only    # compaction only (jobs/compaction.py does the same)

Prints one JSON line per table and exits non-zero if any table failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta


def main(argv: list[str] | None = None, *, compact_only: bool = False) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", action="append", default=[], help="namespace.table (repeatable; default: all)")
    parser.add_argument("--warehouse", help="file:///path or s3://bucket/prefix (default: settings)")
    parser.add_argument("--config", help="YAML settings file (default: LAKESTREAM_CONFIG)")
    parser.add_argument("--compact-only", action="store_true", default=compact_only)
    parser.add_argument("--target-file-size-mib", type=int, default=128)
    parser.add_argument("--min-input-files", type=int, default=5)
    parser.add_argument("--snapshot-age-hours", type=float, default=5 * 24)
    parser.add_argument("--orphan-age-hours", type=float, default=3 * 24)
    parser.add_argument("--retention-hours", type=float, default=7 * 24)
    args = parser.parse_args(argv)

    from lakehouse import Lakehouse
    from lakehouse.spark import spark_session

    spark = spark_session(app_name="lakestream-maintenance")
    failed = 0
    with Lakehouse.from_env(args.config, warehouse=args.warehouse) as lh:
        for name in args.table or [str(t) for t in lh.list_tables()]:
            try:
                size = args.target_file_size_mib << 20
                if args.compact_only:
                    doc = lh.compact(name, target_file_size=size, min_input_files=args.min_input_files, spark=spark)
                else:
                    doc = lh.maintain(
                        name,
                        spark=spark,
                        target_file_size=size,
                        min_input_files=args.min_input_files,
                        snapshot_age=timedelta(hours=args.snapshot_age_hours),
                        orphan_age=timedelta(hours=args.orphan_age_hours),
                        retention=timedelta(hours=args.retention_hours),
                    )
                print(json.dumps(doc.to_dict(), default=str), flush=True)
            except Exception as exc:  # noqa: BLE001 - report per table, fail the job at the end
                failed += 1
                print(json.dumps({"table": name, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
