"""``aggregate``: each value column folds the key's rows with its function (Paimon's aggregation engine).

``sum``, ``max``, ``min`` skip nulls (all null: null); ``count`` is the number of non-null values written to the
column (a stored row contributes its count); ``last_non_null`` (the default for columns not named) keeps the
last non-null value. Deletes are refused: a sum cannot take a row back out.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.merge.base import ORDER, MergeEngine, group_last, skip_nulls

_ARROW = {"sum": "sum", "max": "max", "min": "min", "last_non_null": "last", "count": "sum"}


class Aggregate(MergeEngine):
    name = "aggregate"
    accepts_deletes = False

    def resolve(self, stored: pa.Table, changes: pa.Table) -> pa.Table:
        if changes.num_rows == 0:
            return changes
        functions = dict(self.definition.aggregates)
        every = self.combined(stored, changes)
        from_stored = pc.less(every.column(ORDER), 0)
        for column, function in functions.items():
            if function == "count":  # a change counts 1 if it has a value; a stored row brings its count
                values = every.column(column)
                ones = pc.cast(pc.is_valid(values), pa.int64())
                counted = pc.if_else(from_stored, pc.fill_null(pc.cast(values, pa.int64()), 0), ones)
                every = every.set_column(every.schema.get_field_index(column), column, counted)
        merged = group_last(
            every,
            self.primary_key,
            [
                (ORDER, "max"),
                *((c, _ARROW[functions.get(c, "last_non_null")], skip_nulls()) for c in self.values),
            ],
        )
        merged = merged.filter(pc.greater_equal(merged.column(f"{ORDER}_max"), 0))
        values = {
            c: merged.column(f"{c}_{_ARROW[functions.get(c, 'last_non_null')]}").combine_chunks() for c in self.values
        }
        return self.picked(changes, merged.column(f"{ORDER}_max"), values)
