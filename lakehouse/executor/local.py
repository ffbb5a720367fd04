"""A local in-process executor: a thread pool (pyarrow releases the GIL for IO, encoding and compute).

Each task runs in a copy of the caller's context, so what it asks of the store counts in the caller's usage
scopes (`object_store.usage`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

from lakehouse.errors import InvalidArgument
from lakehouse.executor.base import TaskExecutor
from object_store.usage import ContextThreadPoolExecutor

T = TypeVar("T")
R = TypeVar("R")


class LocalExecutor(TaskExecutor):
    """Runs tasks on ``workers`` threads of this process (default: one per core)."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        if workers is not None and workers < 1:
            raise InvalidArgument(f"workers must be >= 1, got {workers}")
        self.workers = workers or os.cpu_count() or 1

    @property
    def parallelism(self) -> int:
        return self.workers

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if len(items) <= 1 or self.workers == 1:
            return [fn(item) for item in items]
        with ContextThreadPoolExecutor(self.workers, thread_name_prefix="lakestream-task") as pool:
            futures = [pool.submit(fn, item) for item in items]
            errors = []
            for f in futures:
                if (exc := f.exception()) is not None:
                    errors.append(exc)
            if errors:
                raise errors[0]
            return [f.result() for f in futures]
