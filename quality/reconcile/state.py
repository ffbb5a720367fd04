"""What a reconciliation keeps between runs, and the record it checks the log's start against.

Its own record: after a run without violations, the snapshot it checked (with the table's uuid, the offsets,
when, how), in the warehouse at ``_lakestream/quality/reconcile/<table>.json``; the next run starts after that
snapshot. An unreadable or missing record means a full check, which writes it again.

The retention record (`lakehouse.maintenance.retention`: how far log retention removed each bucket): a bucket
whose log starts above it lost records to something other than retention.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from lakehouse.maintenance.retention import retention_floors
from object_store.errors import NotFound
from quality.reconcile.checker import Checker

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

STATE_PREFIX = "_lakestream/quality/reconcile/"


def state_key(table: str) -> str:
    """Where the reconciliation of ``table`` records the last snapshot it checked."""
    return f"{STATE_PREFIX}{table}.json"


def load_state(lh: Lakehouse, name: str) -> dict[str, Any] | None:
    """The record of the last clean run of table ``name``; None if there is none or it cannot be read."""
    try:
        return json.loads(lh.store.get(state_key(name)).data)
    except NotFound:
        return None
    except ValueError:
        return None  # unreadable: check in full and write it again


def save_state(lh: Lakehouse, name: str, state: dict[str, Any]) -> None:
    lh.store.put(state_key(name), json.dumps(state, indent=1, sort_keys=True).encode())


def check_retention(c: Checker, start: dict[int, int]) -> None:
    """A bucket whose log starts above the floor retention recorded (`lakehouse.maintenance.retention`) lost
    the records in between to something other than retention. ``start`` must be listed before the record
    is read: a retention that removed what the listing no longer shows recorded that first. A table
    without a record (created before retention recorded its floors, and not retained since) cannot tell
    and is not checked (``details["retention_floors"]`` is None)."""
    floors = retention_floors(c.reader.lh.store, c.reader.definition)
    c.details["retention_floors"] = None if floors is None else {str(b): o for b, o in floors.items()}
    if floors is None:
        return
    for b in range(c.reader.buckets):
        floor, first = floors.get(b, 0), start.get(b, 0)
        if first > floor:
            c.violate(
                "log-missing",
                f"the log of bucket {b} starts at offset {first}, but log retention removed it only below "
                f"offset {floor}: records [{floor}, {first}) were deleted by something other than retention "
                "(restore the segments; docs/guides/quality.md says how to accept the loss)",
                bucket=b,
                offsets=(floor, first),
                expected=floor,
                actual=first,
            )


__all__ = ["STATE_PREFIX", "check_retention", "load_state", "save_state", "state_key"]
