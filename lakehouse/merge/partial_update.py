"""``partial-update``: a row's non-null columns overwrite the stored ones, its null columns keep them (a wide
row built from several streams, each writing its own columns). A delete removes the row: the next row after
it starts from nothing. For this engine an append may leave out value columns (they are null: kept)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.merge.base import DELETE, ORDER, MergeEngine, group_last, skip_nulls


class PartialUpdate(MergeEngine):
    name = "partial-update"

    def resolve(self, stored: pa.Table, changes: pa.Table) -> pa.Table:
        if changes.num_rows == 0:
            return changes
        pk = list(self.primary_key)
        every = self.combined(stored, changes)
        # the rows after each key's last delete (a delete resets the row)
        resets = group_last(every.filter(every.column(DELETE)), self.primary_key, [(ORDER, "max")])
        if resets.num_rows:
            resets = resets.rename_columns([*pk, "__reset"])
            every = every.join(resets, keys=pk, join_type="left outer")
            after = pc.or_kleene(pc.is_null(every.column("__reset")), pc.greater(every.column(ORDER), every["__reset"]))
            deleted = resets.join(every.filter(after).select(pk), keys=pk, join_type="left anti")
            every = every.filter(after).drop_columns(["__reset"])
            every = every.sort_by([*((k, "ascending") for k in pk), (ORDER, "ascending")])
        else:
            deleted = None
        merged = group_last(
            every, self.primary_key, [(ORDER, "max"), *((c, "last", skip_nulls()) for c in self.values)]
        )
        merged = merged.filter(pc.greater_equal(merged.column(f"{ORDER}_max"), 0))  # keys with changes only
        parts = [
            self.picked(
                changes,
                merged.column(f"{ORDER}_max"),
                {c: merged.column(f"{c}_last").combine_chunks() for c in self.values},
            )
        ]
        if deleted is not None and deleted.num_rows:  # a delete last: the key has no row
            parts.append(changes.take(deleted.column("__reset")))
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]
