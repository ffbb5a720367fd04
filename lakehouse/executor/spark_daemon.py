"""Spark's Python daemon with lakestream's task modules imported before it forks workers.

Spark starts one daemon per executor and forks a Python worker from it for each concurrent task; with
``spark.python.worker.reuse`` the workers live on, but every new one pays the imports of pyarrow,
pyiceberg and boto3 on its first task (seconds on a small machine). Imported here once, they are
inherited by every forked worker. `lakehouse.spark.spark_session` selects this module through
``spark.python.daemon.module``.
"""

from __future__ import annotations

from pyspark.daemon import manager

import lakehouse.maintenance.compaction  # noqa: F401 - imported for the forked workers
import lakehouse.read.union  # noqa: F401
import lakehouse.tiering.round  # noqa: F401

if __name__ == "__main__":
    manager()
