"""Where lakestream's data tasks run: a local thread pool, or Spark executors through ``mapInArrow``.

Tiering, union reads and compaction describe their work as a list of picklable items and one task
function; an executor runs the function on every item and returns the results in order. The data
never crosses into the JVM: Spark ships the function and items to its Python workers, which do their
IO with pyarrow, and only the (small) results come back to the driver.
"""

from typing import Any

from lakehouse.executor.base import TaskExecutor
from lakehouse.executor.local import LocalExecutor
from lakehouse.executor.spark import SparkExecutor

__all__ = ["LocalExecutor", "SparkExecutor", "TaskExecutor", "task_executor"]


def task_executor(
    *, spark: Any = None, executor: TaskExecutor | None = None, workers: int | None = None
) -> TaskExecutor:
    """``executor`` if given; else Spark's executors if a session is given; else ``workers`` local threads. Never
    starts Spark (the caller owns its session: `lakehouse.spark.spark_session`)."""
    if executor is not None:
        return executor
    return SparkExecutor(spark) if spark is not None else LocalExecutor(workers)
