"""The suite's tiers, derived once at collection (tests/conftest.py), never kept by hand.

A test is **fast** (``make test-fast``) when it needs nothing but this Python process: no JVM, no S3 server, no
subprocess. What it needs is read from what it asks for: a fixture that starts one of them (by name, through the
whole fixture closure), the ``s3`` value of a backend parameter, or a marker a module sets when it starts a
process itself (``pytest.mark.subprocess``) or is long (``slow``, ``stack``). Everything else is fast.

The fast tier keeps itself honest: under ``make test-fast`` (``LAKESTREAM_TEST_TIER=fast``) starting a process fails
the test with a message saying how to mark it, so a test that outgrows the tier cannot slow it down unseen.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess

import pytest

TIER_ENV = "LAKESTREAM_TEST_TIER"

# Fixtures that start something outside this process, and what they start.
PROCESS_FIXTURES = {
    "seaweedfs": "an S3 server (SeaweedFS)",
    "spark": "a JVM (Spark)",
    "airflow_db": "Airflow in a subprocess",
    "run_probe": "Airflow in a subprocess",
}
PROCESS_MARKERS = ("subprocess", "slow", "stack")


def needs_a_process(item: pytest.Item) -> str | None:
    """What ``item`` starts beyond this process (a reason), or None when it runs in the fast tier."""
    for name in getattr(item, "fixturenames", ()):
        if name in PROCESS_FIXTURES:
            return PROCESS_FIXTURES[name]
    callspec = getattr(item, "callspec", None)
    # The suite's convention: a backend-like parameter (`backend`, `any_catalog`, ...) names SeaweedFS "s3".
    if callspec is not None and any(isinstance(v, str) and v == "s3" for v in callspec.params.values()):
        return "an S3 server (SeaweedFS)"
    for marker in PROCESS_MARKERS:
        if item.get_closest_marker(marker) is not None:
            return f"marked {marker}"
    return None


def mark_tiers(items: list[pytest.Item]) -> None:
    """Adds ``fast`` to every item that needs no process (``-m fast`` selects them, ``-m 'not fast'`` the rest)."""
    for item in items:
        if needs_a_process(item) is None:
            item.add_marker(pytest.mark.fast)


class ProcessStarted(AssertionError):
    """A test of the fast tier started a process."""


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise ProcessStarted(
            f"a fast-tier test started {what}: the fast tier (make test-fast) runs in one process. Give the test "
            "the fixture that starts it (tests/support/tiers.py PROCESS_FIXTURES) or mark it "
            "`pytest.mark.subprocess` (module: `pytestmark = pytest.mark.subprocess`)."
        )

    return refuse


def guard_fast_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``make test-fast``: any subprocess, fork or multiprocessing start fails the test (see the module doc)."""
    if os.environ.get(TIER_ENV) != "fast":
        return
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("a subprocess"))
    monkeypatch.setattr(os, "fork", _refuse("a fork"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", _refuse("a multiprocessing process"))
