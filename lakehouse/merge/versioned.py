"""``versioned``: the row with the greatest version wins (ties: the later row); older rows are ignored.

A delete removes the row unless it carries a version older than the row's (a delete without a version always
removes it). After a delete the key has no row, so the next row is kept whatever its version: the fold is the
same whether the delete was tiered in between or not.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lakehouse.errors import BatchError
from lakehouse.merge.base import DELETE, ORDER, MergeEngine, group_last


class Versioned(MergeEngine):
    name = "versioned"

    @property
    def column(self) -> str:
        return str(self.definition.version_column)

    def stored_columns(self, changes: pa.Table) -> list[str]:
        return [self.column]  # the winner is a change row or the stored row as it is: only versions are compared

    def check_append(self, op: str, data: pa.Table) -> None:
        super().check_append(op, data)
        if op != "delete" and data.column(self.column).null_count:
            raise BatchError(
                f"{self.definition.name}: version column {self.column!r} has {data.column(self.column).null_count} "
                "null(s); the 'versioned' merge engine compares every row's version. Nothing was written"
            )

    def resolve(self, stored: pa.Table, changes: pa.Table) -> pa.Table:
        if changes.num_rows == 0:
            return changes
        every = self.combined(stored, changes)
        pk = self.primary_key
        deleting = group_last(every, pk, [(DELETE, "any")])
        with_deletes = deleting.filter(deleting.column(f"{DELETE}_any")).select(list(pk))
        if with_deletes.num_rows:
            plain = every.join(with_deletes, keys=list(pk), join_type="left anti")
        else:
            plain = every
        orders: list[int] = []
        if plain.num_rows:  # the greatest version, ties broken by order: one sort, the last row per key
            ranked = plain.sort_by([*((k, "ascending") for k in pk), (self.column, "ascending"), (ORDER, "ascending")])
            last = group_last(ranked, pk, [(ORDER, "last")]).column(f"{ORDER}_last").to_numpy()
            orders.extend(int(o) for o in last if o >= 0)
        if with_deletes.num_rows:  # rare: a sequential fold per key
            rows = every.join(with_deletes, keys=list(pk), join_type="left semi")
            rows = rows.sort_by([*((k, "ascending") for k in pk), (ORDER, "ascending")])
            orders.extend(self._fold(rows))
        return self.picked(changes, pa.array(np.sort(np.array(orders, dtype=np.int64))))

    def _fold(self, rows: pa.Table) -> list[int]:
        pk = self.primary_key
        keys = list(zip(*(rows.column(k).to_pylist() for k in pk), strict=True))
        versions = rows.column(self.column).to_pylist()
        order = rows.column(ORDER).to_pylist()
        deletes = rows.column(DELETE).to_pylist()
        out: list[int] = []
        i = 0
        while i < len(keys):
            j = i
            state: int | None = None  # the index (in rows) of the key's row, None: no row
            last_delete: int | None = None
            while j < len(keys) and keys[j] == keys[i]:
                if deletes[j]:
                    if state is None or versions[j] is None or versions[j] >= versions[state]:
                        state, last_delete = None, j
                elif state is None or versions[j] >= versions[state]:
                    state = j
                j += 1
            if state is not None and order[state] >= 0:
                out.append(order[state])
            elif state is None and last_delete is not None:
                out.append(order[last_delete])
            i = j
        return out
