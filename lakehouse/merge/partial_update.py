"""``partial-update``: a row's non-null columns overwrite the stored ones, its null columns keep them (a wide
row built from several streams, each writing its own columns). A delete removes the row: the next row after
it starts from nothing. For this engine an append may leave out value columns (they are null: kept)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.merge.base import DELETE, ORDER, MergeEngine, group_last, last_values, with_nulls


class PartialUpdate(MergeEngine):
    name = "partial-update"

    def stored_columns(self, changes: pa.Table) -> list[str]:
        return with_nulls(changes, self.values)  # a column every change sets never falls back on the stored one

    def resolve(self, stored: pa.Table, changes: pa.Table) -> pa.Table:
        if changes.num_rows == 0:
            return changes
        nulls = with_nulls(changes, self.values)
        old = self.aligned(stored, changes, nulls)
        if old is not None:  # each key upserted once: its null columns take the stored values
            return self.replaced(changes, {c: pc.coalesce(changes.column(c).combine_chunks(), old[c]) for c in nulls})
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
            every = every.sort_by([(ORDER, "ascending")])  # the join lost the order; a key keeps its own
        else:
            deleted = None
        merged, values = last_values(every, self.primary_key, self.values, [(ORDER, "max")])
        with_changes = pc.greater_equal(merged.column(f"{ORDER}_max"), 0)  # keys with changes only
        parts = [
            self.picked(
                changes,
                merged.column(f"{ORDER}_max").filter(with_changes),
                {c: v.filter(with_changes) for c, v in values.items()},
            )
        ]
        if deleted is not None and deleted.num_rows:  # a delete last: the key has no row
            parts.append(changes.take(deleted.column("__reset")))
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]
