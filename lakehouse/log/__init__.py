"""The log: bucketed, offset-addressed changelog tables on the object store."""

from __future__ import annotations

from lakehouse.log.batch import Limits
from lakehouse.log.log import AppendIncomplete, AppendResult, Log, append_until_complete
from lakehouse.log.producer import Producer, ProducerCheckpoint

__all__ = [
    "AppendIncomplete",
    "AppendResult",
    "Limits",
    "Log",
    "Producer",
    "ProducerCheckpoint",
    "append_until_complete",
]
