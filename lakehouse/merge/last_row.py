"""``last-row``: a key's last row wins (the default engine)."""

from __future__ import annotations

import pyarrow as pa

from lakehouse.merge.base import MergeEngine
from lakehouse.merge.keyed_rows import reduce_changes


class LastRow(MergeEngine):
    name = "last-row"
    needs_stored = False

    def resolve(self, stored: pa.Table, changes: pa.Table) -> pa.Table:
        return reduce_changes(changes, self.primary_key)
