"""``first-row``: a key's first row stays; later rows are ignored (deduplication). Deletes are refused."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.merge.base import ORDER, MergeEngine, group_last


class FirstRow(MergeEngine):
    name = "first-row"
    accepts_deletes = False

    def stored_columns(self, changes: pa.Table) -> list[str]:
        return []  # whether a key has a row is all that counts

    def resolve(self, stored: pa.Table, changes: pa.Table) -> pa.Table:
        if changes.num_rows == 0:
            return changes
        every = self.combined(stored, changes)
        first = group_last(every, self.primary_key, [(ORDER, "first")]).column(f"{ORDER}_first")
        # a key with a stored row keeps it (its first order is -1): no change
        return self.picked(changes, pc.filter(first, pc.greater_equal(first, 0)))
