"""One table's work at a time over many tables: every failure becomes that table's outcome (`TableRun`), so the
all-tables commands, jobs and DAG tasks report each and fail at the end (`summarize`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse.errors import LakestreamError
from lakehouse.table.definition import TableName

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

__all__ = ["TableRun", "for_each_table", "summarize"]


@dataclass(frozen=True)
class TableRun:
    """The outcome of one table's work in `Lakehouse.for_each_table`: its result, or the error it raised."""

    table: str
    result: Any = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def message(self) -> str:
        """The error, naming the table once (most errors already start with its name)."""
        if self.error is None:
            return ""
        error = self.error
        text = str(error) if isinstance(error, LakestreamError) else f"{type(error).__name__}: {error}"
        return text if text.startswith((f"{self.table}:", f"{self.table} ")) else f"{self.table}: {text}"


def summarize(runs: Sequence[TableRun]) -> str:
    """One line: how many tables failed, and which (``2 of 5 tables failed: ods.a, ods.b``)."""
    failed = [r.table for r in runs if not r.ok]
    if not failed:
        return f"{len(runs)} table{'s' if len(runs) != 1 else ''} done, none failed"
    return f"{len(failed)} of {len(runs)} tables failed: {', '.join(failed)}"


def for_each_table(
    lh: Lakehouse, work: Callable[[str], Any], names: Sequence[str | TableName] | None = None
) -> Iterator[TableRun]:
    """``work(name)`` for each of ``names`` (default: every table of ``lh``), one `TableRun` per table as it ends.
    A table that fails (whatever the error: a broken definition, a lake table that cannot be loaded, a bad
    segment) does not stop the others; the all-tables commands, jobs and DAG tasks report each and fail at
    the end. Only `KeyboardInterrupt` and other `BaseException`s stop the loop."""
    for name in [str(n) for n in names] if names is not None else [str(t) for t in lh.list_tables()]:
        try:
            result = work(name)
        except Exception as exc:  # noqa: BLE001 - reported per table; the caller fails at the end
            yield TableRun(name, error=exc)
        else:
            yield TableRun(name, result=result)
