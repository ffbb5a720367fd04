"""Errors of the application (`lakestream`), under the project-wide root `LakestreamError`."""

from __future__ import annotations

from object_store.errors import LakestreamError

__all__ = ["DemoCheckFailed"]


class DemoCheckFailed(LakestreamError):
    """A demo step's own check did not hold: a bug, please report it with the demo's output."""
