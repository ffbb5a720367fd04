"""spark-submit entry point: compact tables' small data files (compaction tasks run on Spark).

    spark-submit jobs/compaction.py --table ods.orders [--target-file-size-mib 128] [--min-input-files 5]

The same options as jobs/maintenance.py, with --compact-only implied.
"""

from __future__ import annotations

import sys

from jobs.maintenance import main

if __name__ == "__main__":
    sys.exit(main(compact_only=True))
