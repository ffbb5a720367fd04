"""What every command prints through: rich consoles that never cut a line off a terminal, tables that never cut a
cell, and JSON lines for ``--json``.

rich lays out for 80 columns when its output is not a terminal (a pipe, a log file, Airflow's task log), so
tables were squeezed and their cells cut with an ellipsis ("ads.bi…", offsets, report paths). Off a terminal
these consoles are as wide as the output needs (`OFF_TERMINAL_WIDTH`; ``COLUMNS`` still wins when it is set);
on a terminal they keep its width, and table cells that do not fit fold onto the next line instead of losing
their end.
"""

from __future__ import annotations

import base64
import json
import sys
from datetime import date, datetime, time
from typing import Any

from rich.console import Console, ConsoleDimensions, RenderableType
from rich.table import Table

__all__ = ["OFF_TERMINAL_WIDTH", "OutputConsole", "json_line", "new_table", "to_jsonable"]

#: The width laid out for when the output is not a terminal: wide enough for any table we print, so that each
#: row is one complete line (a cell longer than this folds, it is never cut).
OFF_TERMINAL_WIDTH = 10_000


class OutputConsole(Console):
    """A `rich.console.Console` whose width off a terminal is `OFF_TERMINAL_WIDTH`, not 80.

    Whether the output is a terminal is asked of the file each time (``sys.stdout`` may be replaced, as
    test runners do), and of the file itself, not of rich's colour detection: ``FORCE_COLOR`` in a CI log still
    gets full lines. An explicit ``width=`` or a ``COLUMNS`` variable are obeyed as by rich.
    """

    @property
    def size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)  # type: ignore[attr-defined]
        columns = self._environ.get("COLUMNS", "")
        if self._width is None and not columns.isdigit() and not self._writes_to_terminal():
            return ConsoleDimensions(OFF_TERMINAL_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    def _writes_to_terminal(self) -> bool:
        isatty = getattr(self.file, "isatty", None)
        try:
            return bool(isatty is not None and isatty())
        except ValueError:  # a closed file
            return False


def new_table(*headers: RenderableType, **options: Any) -> Table:
    """A `rich.table.Table` whose columns fold what does not fit instead of cutting it with an ellipsis: names,
    offsets and paths are never shortened (on a narrow terminal they continue on the next line)."""
    table = Table(**options)
    for header in headers:
        table.add_column(header, overflow="fold")
    return table


def to_jsonable(value: Any) -> Any:
    """``json.dumps``'s ``default``: dates and times in ISO 8601, binary in base64 (as Spark's ``to_json``),
    anything else (decimals, UUIDs, paths) as its ``str``."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)


def json_line(obj: Any) -> None:
    """One JSON object on one line of stdout, flushed (what every ``--json`` prints)."""
    sys.stdout.write(json.dumps(obj, default=to_jsonable) + "\n")
    sys.stdout.flush()
