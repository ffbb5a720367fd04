"""The crash harness: start a worker process, have it killed with SIGKILL (kill -9) at a named point, rerun.

A worker is a module of the suite run as ``python -m tests.<pkg>._<x>_worker ARGS``: it wraps the real code
with its fault injection (the named points stay in the worker) and calls `die` when it reaches the point it was
given. The test launches it with `run_worker` (or `crash`: run it and check it was killed), then reruns the real
code in its own process and checks nothing was lost or done twice.

- `die`: SIGKILL of the current process, at once (no ``finally``, no ``atexit``, no flush: a lost machine).
- `kill`: SIGKILL of another pid, e.g. the driver's from inside a Spark task (the task's class carries the pid).
- `start_worker`: the worker as a `subprocess.Popen` (for a test that kills it from outside, or races several).
- `run_worker`: the worker run to its end (or its death), as a `subprocess.CompletedProcess` (text output).
- `assert_killed`: its return code is -SIGKILL; the message has the tail of its output.
- `crash`: `run_worker` then `assert_killed`: "kill at this point"; the test reruns and checks what is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[2]
KILLED = -signal.SIGKILL  # a CompletedProcess' returncode after SIGKILL


def die() -> NoReturn:
    """SIGKILL of this process: it ends here, as a machine losing power would end it."""
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: SIGKILL was sent to this process")  # pragma: no cover


def kill(pid: int) -> None:
    """SIGKILL of process ``pid`` (from a Spark task: the driver, whose pid the task's class carries)."""
    os.kill(pid, signal.SIGKILL)


def worker_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process' environment with the repo first on PYTHONPATH (a worker, and its Spark tasks, import
    ``tests``), then ``env``."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **(env or {})}


def command(module: str, *args: object) -> list[str]:
    return [sys.executable, "-m", module, *(str(a) for a in args)]


def start_worker(
    module: str,
    *args: object,
    env: dict[str, str] | None = None,
    own_group: bool = False,
    capture_stderr: bool = True,
) -> subprocess.Popen:
    """``python -m module args...`` from the repo's root, stdout (and stderr) piped as text. ``own_group``: in a
    process group of its own (a worker starting a JVM: `run_worker` kills what is left of the group after)."""
    return subprocess.Popen(
        command(module, *args),
        cwd=REPO,
        env=worker_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if capture_stderr else None,
        text=True,
        start_new_session=own_group,
    )


def run_worker(
    module: str,
    *args: object,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    own_group: bool = False,
) -> subprocess.CompletedProcess:
    """Run the worker to its end, or its death; on timeout it is killed and `subprocess.TimeoutExpired` raised.
    ``own_group``: whatever is left of its process group (a JVM, Spark's Python workers) is killed after."""
    proc = start_worker(module, *args, env=env, own_group=own_group)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # the group's other members, if any, below: none may hold the pipes open
        raise
    finally:
        if own_group:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.returncode is None:  # timed out: reaped here
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def tail(proc: subprocess.CompletedProcess, chars: int = 3000) -> str:
    """The end of a finished worker's stdout and stderr, for an assertion's message."""

    def text(value: str | bytes | None) -> str:
        return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")

    return f"stdout: ...{text(proc.stdout)[-chars:]}\nstderr: ...{text(proc.stderr)[-chars:]}"


def assert_killed(proc: subprocess.CompletedProcess, context: object = "") -> None:
    """The worker died of SIGKILL (it reached its point); else the message says how it ended and what it said."""
    assert proc.returncode == KILLED, (
        f"{context}: " if context else ""
    ) + f"the worker ended with {proc.returncode}, not killed at its point ({KILLED})\n{tail(proc)}"


def crash(
    module: str,
    *args: object,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    own_group: bool = False,
    context: object = "",
) -> subprocess.CompletedProcess:
    """Kill at a named point: run the worker (its args name the point) and check it died of SIGKILL there. The
    test then reruns the real code and checks what the dead run left."""
    proc = run_worker(module, *args, env=env, timeout=timeout, own_group=own_group)
    assert_killed(proc, context)
    return proc
