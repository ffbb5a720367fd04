"""The pyiceberg `Table` our catalog returns: pyiceberg's own, with one cost of its transactions removed.

pyiceberg 0.12's ``Transaction.table_metadata`` replays the staged updates onto the table's metadata and
deep-copies the whole result, snapshot history included, on every read; one append reads it about a
dozen times and a retried commit as often again (apache/iceberg-python#2673). Measured with 8 writers
appending to one table through our catalog, those deep copies took ~60% of the writers' CPU, and the
share grows with the table's history. `CachingTransaction` computes it once per state: the result is
cached on the identity of its two inputs (the table's metadata and the tuple of staged updates), both
rebound, never mutated, whenever they change (a staged update, a refresh, a commit), so a stale value
cannot be served. This is the change the pyiceberg maintainers approved upstream
(apache/iceberg-python#3302, closed unmerged by the stale bot); the only visible difference is that
``last_updated_ms`` of the staged metadata stays the same across reads of one state.

Everything else is pyiceberg's: tables loaded through `lakehouse.catalog.ObjectStoreCatalog` are
`LakeTable` instances, which any pyiceberg code uses as a `Table`.
"""

from __future__ import annotations

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata


class CachingTransaction(Transaction):
    """A pyiceberg `Transaction` whose ``table_metadata`` is computed once per (metadata, updates) state."""

    _cached: tuple[TableMetadata, tuple, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        cached = self._cached
        if cached is not None and cached[0] is base and cached[1] is updates:
            return cached[2]
        metadata = super().table_metadata
        self._cached = (base, updates, metadata)
        return metadata


class LakeTable(Table):
    """pyiceberg's `Table`; its transactions (and so ``append``, ``overwrite``, ...) are `CachingTransaction`s."""

    def transaction(self) -> Transaction:
        return CachingTransaction(self)
