"""The errors of the native stack (``stack/``), under lakestream's one root."""

from __future__ import annotations

from object_store.errors import LakestreamError


class StackError(LakestreamError):
    """The native stack could not start, stop or be used; the message says which service and where its log is."""
