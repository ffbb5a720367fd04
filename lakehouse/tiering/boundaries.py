"""Tiering boundaries: a writer that appends one logical change as several appends holds tiering back meanwhile.

A warehouse-layers round writes its model's table bucket by bucket, chunk by chunk: a lake snapshot taken in the
middle would hold a state the table never had. Such a writer *holds* the table's boundary at the log's ends
before its change (``hold``) before its first append, and *releases* it once the change is whole (``release``).
`Lakehouse.tier` tiers a held table up to the held ends (never past the log's end) and any other table to its
log's end (`tiering_end`). The state is one object per table, ``_lakestream/boundaries/<ns>.<table>.json`` =
``{"table-uuid", "held", "ends", "writer"}``, written with compare-and-swaps; a table without one is never held.

Reading the log's end of a released table is a race with the next hold: `tiering_end` reads the boundary, then
the log's ends, then the boundary again, and uses those ends only if the boundary did not change in between (a
writer holds before it appends, so ends read before an unchanged boundary hold none of its change).

A boundary of an earlier table of the same name (another ``table-uuid``: dropped and created again) applies to
nothing; `Lakehouse.drop_table` deletes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lakehouse.table.definition import RESERVED_NAMESPACE, TableDefinition, TableName
from object_store import NotFound, ObjectStore, PreconditionFailed

__all__ = ["BOUNDARIES_PREFIX", "Boundary", "delete_boundary", "hold", "read_boundary", "release", "tiering_end"]

BOUNDARIES_PREFIX = f"{RESERVED_NAMESPACE}/boundaries/"
_ATTEMPTS = 20


@dataclass(frozen=True)
class Boundary:
    """A table's boundary: ``held`` at ``ends`` (a change in progress), or released (``ends`` None)."""

    held: bool
    ends: dict[int, int] | None
    etag: str | None


def _key(name: TableName) -> str:
    return f"{BOUNDARIES_PREFIX}{name}.json"


def read_boundary(store: ObjectStore, definition: TableDefinition) -> Boundary | None:
    """``definition``'s boundary, or None if its table never had one."""
    try:
        obj = store.get(_key(definition.name))
    except NotFound:
        return None
    doc = json.loads(obj.data)
    if doc.get("table-uuid") != definition.table_uuid:  # an earlier table's: replaced by the next write
        return Boundary(False, None, obj.etag)
    ends = {int(b): int(o) for b, o in doc["ends"].items()} if doc.get("held") else None
    return Boundary(bool(doc.get("held")), ends, obj.etag)


def _write(store: ObjectStore, definition: TableDefinition, ends: Mapping[int, int] | None, writer: str) -> None:
    for _ in range(_ATTEMPTS):
        current = read_boundary(store, definition)
        doc = {
            "table-uuid": definition.table_uuid,
            "held": ends is not None,
            "ends": {str(b): int(o) for b, o in sorted((ends or {}).items())},
            "writer": writer,
        }
        body = json.dumps(doc, sort_keys=True).encode()
        try:
            if current is None:
                store.put(_key(definition.name), body, if_none_match=True)
            else:
                store.put(_key(definition.name), body, if_match=current.etag)
            return
        except PreconditionFailed:  # written meanwhile (the writer's own retry): write over what is there now
            continue
    raise PreconditionFailed(f"the tiering boundary of {definition.name} kept changing; write it again")


def hold(store: ObjectStore, definition: TableDefinition, ends: Mapping[int, int], *, writer: str) -> None:
    """Hold tiering of ``definition``'s table at ``ends`` (before ``writer`` appends a change)."""
    _write(store, definition, ends, writer)


def release(store: ObjectStore, definition: TableDefinition, *, writer: str) -> None:
    """Let tiering go to the log's end again (``writer``'s change is whole)."""
    _write(store, definition, None, writer)


def tiering_end(
    store: ObjectStore, definition: TableDefinition, log_end: Callable[[], dict[int, int]]
) -> dict[int, int] | None:
    """The offsets up to which ``definition``'s table may be tiered now: the held ends, the log's ends (``log_end``)
    read while the boundary stayed released, or None (the log's end: a table never held)."""
    for _ in range(_ATTEMPTS):
        before = read_boundary(store, definition)
        if before is None:
            return None
        if before.held:
            return before.ends
        ends = log_end()
        after = read_boundary(store, definition)
        if after is not None and after.etag == before.etag:
            return ends
    raise PreconditionFailed(f"the tiering boundary of {definition.name} kept changing; tier again")


def delete_boundary(store: ObjectStore, name: TableName) -> bool:
    """Delete ``name``'s boundary (its table is dropped); whether there was one."""
    if not store.exists(_key(name)):  # most tables never had one: no delete request for them
        return False
    try:
        store.delete(_key(name))
    except NotFound:
        return False
    return True
