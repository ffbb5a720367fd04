"""Spark as an executor: one Spark task per item, run by ``mapInArrow`` on the Python workers.

The driver sends the items and the task function (cloudpickled by Spark), each task returns its result
pickled in one binary cell. No JVM-side IO, no jars: the tasks read and write the object store with
pyarrow, exactly like the local executor.

A task's requests to the store are counted in its worker process (`object_store.usage.measured`) and come
back with its result; the driver adds them to its usage scopes, so an operation's usage includes its tasks'.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from lakehouse.executor.base import TaskExecutor
from object_store.usage import Usage, add_to_scopes

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

T = TypeVar("T")
R = TypeVar("R")


class SparkExecutor(TaskExecutor):
    name = "spark"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    @property
    def parallelism(self) -> int:
        return max(1, self.spark.sparkContext.defaultParallelism)

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if not items:
            return []
        items = list(items)

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:  # runs on the Spark Python workers
            import pyarrow as pa

            from object_store.usage import measured

            for batch in batches:
                for i in batch.column(0).to_pylist():
                    value, used = measured(fn, items[i])
                    result = pickle.dumps((value, used.to_dict()), protocol=pickle.HIGHEST_PROTOCOL)
                    yield pa.RecordBatch.from_pydict(
                        {"id": pa.array([i], pa.int64()), "payload": pa.array([result], pa.binary())}
                    )

        df = self.spark.range(0, len(items), 1, numPartitions=len(items))
        rows = df.mapInArrow(run, "id long, payload binary").collect()
        out: list = [None] * len(items)
        for row in rows:
            value, used = pickle.loads(row["payload"])  # noqa: S301 - our own tasks' results
            out[row["id"]] = value
            add_to_scopes(Usage.from_dict(used))
        return out

    def describe(self) -> dict:
        return {**super().describe(), "master": self.spark.sparkContext.master}
