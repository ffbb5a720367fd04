"""What the commands print: whole lines off a terminal (a pipe, a log file), folded cells on a narrow terminal,
never a cell cut with an ellipsis; the commands run as `lakestream`, in a process of their own, so that whether
stdout is a terminal is decided as in real use."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from lakehouse import Lakehouse

LAKESTREAM = os.path.join(os.path.dirname(sys.executable), "lakestream")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tpch"
# long enough that no 80-column layout holds it with the other columns
LONG = "ads.billing_per_customer_and_month_with_the_full_history_of_every_adjustment"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")}
    return {**env, **extra}


@pytest.fixture
def warehouse(tmp_path) -> str:
    wh = tmp_path.as_uri()
    with Lakehouse.open(wh) as lh:
        lh.create_table(
            LONG,
            pa.schema([("customer_id", pa.int64()), ("amount", pa.int64())]),
            buckets=4,
            primary_key=["customer_id"],
        )
        lh.log(LONG).append(pa.table({"customer_id": list(range(5000)), "amount": [1] * 5000}), "upsert")
    return wh


def _piped(*args: str) -> str:
    proc = subprocess.run([LAKESTREAM, *args], capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.subprocess
def test_tables_are_whole_lines_when_stdout_is_not_a_terminal(warehouse) -> None:
    """Piped (as in `make demo > log`, or a scheduler's task log) rich laid tables out for 80 columns and cut the
    cells: "ads.bi…"."""
    listed = _piped("table", "list", "-w", warehouse)
    assert "…" not in listed
    row = next(line for line in listed.splitlines() if LONG in line)  # the name whole, on one line
    assert "primary-key" in row and "customer_id" in row, listed
    offsets = _piped("log", "offsets", LONG, "-w", warehouse)
    assert "…" not in offsets and "5000" in offsets
    described = _piped("table", "describe", LONG, "-w", warehouse)
    assert f"name           {LONG}\n" in described, described


@pytest.mark.subprocess
def test_layers_tables_are_whole_lines_when_stdout_is_not_a_terminal() -> None:
    explained = _piped("layers", "explain", "--project", str(EXAMPLE))
    row = next(line for line in explained.splitlines() if "ads.revenue_by_nation_month" in line)
    assert "regroup" in row and "dwd.orders_enriched" in row, explained  # model and inputs on the row's line


def _on_terminal(args: list[str], columns: int) -> str:
    """The command's output with a pseudo-terminal of ``columns`` columns as its stdin, stdout and stderr."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(
        [LAKESTREAM, *args], stdin=slave, stdout=slave, stderr=slave, env=_env(TERM="xterm"), close_fds=True
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError as exc:  # EIO: the command closed the terminal
            if exc.errno != errno.EIO:
                raise
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=120) == 0, b"".join(chunks).decode(errors="replace")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r\n", "\n")


@pytest.mark.subprocess
def test_cells_fold_on_a_narrow_terminal_and_are_never_cut(warehouse) -> None:
    """On a terminal the table keeps its width; a name that does not fit continues on the next line."""
    out = _on_terminal(["table", "list", "-w", warehouse], columns=60)
    assert "…" not in out, out
    assert max(len(line) for line in out.splitlines()) <= 60, out
    first_column = "".join(line.split("│")[1].strip() for line in out.splitlines() if line.count("│") > 2)
    assert LONG in first_column, out
