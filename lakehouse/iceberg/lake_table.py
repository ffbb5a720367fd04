"""The pyiceberg `Table` our catalog returns: pyiceberg's own, with the deep copies of its metadata removed.

pyiceberg 0.12's ``update_table_metadata`` applies updates to a table's metadata and then deep-copies
the whole result, snapshot history included. ``Transaction.table_metadata`` calls it on every read
(about a dozen per append, as many again per retried commit; apache/iceberg-python#2673) and the
catalog once more to stage each commit, so the cost of an append grows with the table's history:
measured with one writer at ~175 snapshots, the deep copies were half of an append's time.

- `apply_updates` is ``update_table_metadata`` without that final copy. Every pyiceberg update builds
  new containers (``base.snapshots + [snapshot]``, ``{**base.refs, ...}``) inside frozen models and
  never mutates its base, so the result can share the untouched parts with it. The catalog stages
  commits with it (`lakehouse.iceberg.catalog.ObjectStoreCatalog._update_and_stage_table`).
- `CachingTransaction` computes ``table_metadata`` once per state: the result is cached on the
  identity of its two inputs (the table's metadata and the tuple of staged updates), both rebound,
  never mutated, whenever they change (a staged update, a refresh, a commit), so a stale value cannot
  be served. The pyiceberg maintainers approved this cache upstream (apache/iceberg-python#3302,
  closed unmerged by the stale bot); the only visible difference is that ``last_updated_ms`` of the
  staged metadata stays the same across reads of one state.

- `metadata_json` is ``model_dump_json`` of a table's metadata with each snapshot's JSON kept from the
  previous commits: every commit rewrites the whole metadata file, whose snapshot list grows by about 1 KiB a
  round until expiry, and serializing all of it again each time made a commit's cost grow with the history.

- After a commit lost to another writer, `LakeTable.refresh` (the reload pyiceberg's retry starts with)
  first waits for the table's pointer to go quiet (`lakehouse.iceberg.contention`).

Everything else is pyiceberg's: tables loaded through `lakehouse.iceberg.catalog.ObjectStoreCatalog` are
`LakeTable` instances, which any pyiceberg code uses as a `Table`. A test checks `apply_updates`
against pyiceberg's own function, so a pyiceberg upgrade that changes the semantics fails loudly.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from datetime import datetime

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.utils.datetime import datetime_to_millis


def apply_updates(
    base: TableMetadata, updates: tuple[TableUpdate, ...], metadata_location: str | None = None
) -> TableMetadata:
    """pyiceberg's ``update_table_metadata`` without its closing deep copy of the result.

    Every update pyiceberg applies builds new containers (``base.snapshots + [snapshot]``,
    ``{**base.refs, ...}``) inside frozen models, never mutating the base, so the result can share the
    untouched parts (the snapshot history) with its base. pyiceberg deep-copies the whole result instead,
    which costs time in proportion to the table's history on every staged read and every commit.
    """
    context = _TableMetadataUpdateContext()
    metadata = base
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    if context.has_changes():
        if metadata_location:
            metadata = _update_table_metadata_log(metadata, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == metadata.last_updated_ms:
            metadata = metadata.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata


#: Committed snapshots' JSON kept for `metadata_json`, by (table uuid, snapshot id): a committed snapshot never
#: changes. About 1 KiB each; the least recently written go first beyond this many.
SNAPSHOT_JSON_KEPT = 20_000
_SNAPSHOTS_IN_JSON = '"snapshots":[]'
_snapshot_json: OrderedDict[tuple[str, int], str] = OrderedDict()
_snapshot_json_lock = threading.Lock()


def metadata_json(metadata: TableMetadata, committed: TableMetadata | None = None) -> str:
    """``metadata.model_dump_json(exclude_none=True)`` (the same text, a test checks it). The snapshots of
    ``committed`` (the metadata the pointer names, which ``metadata`` updates) are taken from, or kept in, the
    JSON this process wrote before: the rest of the metadata is serialized with an empty snapshot list and the
    snapshots' JSON spliced in. A snapshot not committed yet is always serialized: a commit that lost the
    compare-and-swap is rebuilt by pyiceberg with the same snapshot id and another manifest list."""
    if committed is None or not metadata.snapshots:
        return metadata.model_dump_json(exclude_none=True)
    head = metadata.model_copy(update={"snapshots": []}).model_dump_json(exclude_none=True)
    if head.count(_SNAPSHOTS_IN_JSON) != 1:  # cannot happen (property values are strings): serialize it all
        return metadata.model_dump_json(exclude_none=True)
    uuid = str(metadata.table_uuid)
    done = {s.snapshot_id for s in committed.snapshots} if committed.table_uuid == metadata.table_uuid else set()
    parts = []
    with _snapshot_json_lock:
        for snapshot in metadata.snapshots:
            if snapshot.snapshot_id not in done:
                parts.append(snapshot.model_dump_json(exclude_none=True))
                continue
            key = (uuid, snapshot.snapshot_id)
            text = _snapshot_json.get(key)
            if text is None:
                text = _snapshot_json[key] = snapshot.model_dump_json(exclude_none=True)
            else:
                _snapshot_json.move_to_end(key)
            parts.append(text)
        while len(_snapshot_json) > SNAPSHOT_JSON_KEPT:
            _snapshot_json.popitem(last=False)
    return head.replace(_SNAPSHOTS_IN_JSON, '"snapshots":[' + ",".join(parts) + "]", 1)


class CachingTransaction(Transaction):
    """A pyiceberg `Transaction` whose ``table_metadata`` is computed once per (metadata, updates) state."""

    _cached: tuple[TableMetadata, tuple, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        cached = self._cached
        if cached is not None and cached[0] is base and cached[1] is updates:
            return cached[2]
        metadata = apply_updates(base, updates)
        self._cached = (base, updates, metadata)
        return metadata


class LakeTable(Table):
    """pyiceberg's `Table`; its transactions (and so ``append``, ``overwrite``, ...) are `CachingTransaction`s,
    and a refresh after a lost commit waits for the pointer to go quiet first."""

    #: (pointer ETag seen, monotonic time) of this table's last commit that lost to another writer.
    _lost_commit: tuple[str, float] | None = None

    def transaction(self) -> Transaction:
        return CachingTransaction(self)

    def lost_commit(self, etag: str) -> None:
        """The catalog's note that a commit of this table lost to another writer; the pointer had ``etag``."""
        self._lost_commit = (etag, time.monotonic())

    def refresh(self) -> Table:
        lost, self._lost_commit = self._lost_commit, None
        if lost is not None:
            self.catalog.wait_for_quiet_pointer(self, *lost)  # type: ignore[attr-defined]
        return super().refresh()
