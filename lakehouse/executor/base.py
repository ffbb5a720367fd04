"""The executor interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class TaskExecutor(ABC):
    """Runs one task function over many items; results come back in item order."""

    name: str = "executor"

    @abstractmethod
    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``[fn(item) for item in items]``, run in parallel. The first task error is raised after the
        other tasks have finished or been cancelled (so the caller can clean up what they wrote)."""

    @property
    @abstractmethod
    def parallelism(self) -> int:
        """How many tasks run at once (cores used)."""

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name, "parallelism": self.parallelism}
