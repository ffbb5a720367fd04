"""``aggregate``: each value column folds the key's rows with its function (Paimon's aggregation engine).

``sum``, ``max``, ``min`` skip nulls (all null: null); ``count`` is the number of non-null values written to the
column (a stored row contributes its count); ``last_non_null`` (the default for columns not named) keeps the
last non-null value. Deletes are refused: a sum cannot take a row back out.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.merge.base import ORDER, MergeEngine, last_values, skip_nulls, with_nulls

_ARROW = {"sum": "sum", "max": "max", "min": "min", "count": "sum"}


class Aggregate(MergeEngine):
    name = "aggregate"
    accepts_deletes = False

    def stored_columns(self, changes: pa.Table) -> list[str]:
        functions = dict(self.definition.aggregates)
        folded = [c for c in self.values if c in functions and functions[c] != "last_non_null"]
        return folded + with_nulls(changes, [c for c in self.values if c not in folded])

    def resolve(self, stored: pa.Table, changes: pa.Table) -> pa.Table:
        if changes.num_rows == 0:
            return changes
        functions = dict(self.definition.aggregates)
        folded = [c for c in self.values if functions.get(c, "last_non_null") != "last_non_null"]
        # a last_non_null column no change leaves null takes the key's last change's value, which `picked` copies
        # with the row: only the columns some change leaves null are looked up by position, and only the key,
        # folded and those columns are grouped (not the whole rows)
        last = with_nulls(changes, [c for c in self.values if c not in folded])
        old = self.aligned(stored, changes, [*folded, *last])
        if old is not None:  # each key changes once: fold each change with its stored row, column by column
            try:
                return self.replaced(changes, _folded(changes, old, functions, folded, last))
            except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # a type an element-wise kernel lacks: grouped
                pass
        every = self.combined(stored, changes, [*folded, *last])
        from_stored = pc.less(every.column(ORDER), 0)
        for column, function in functions.items():
            if function == "count":  # a change counts 1 if it has a value; a stored row brings its count
                values = every.column(column)
                ones = pc.cast(pc.is_valid(values), pa.int64())
                counted = pc.if_else(from_stored, pc.fill_null(pc.cast(values, pa.int64()), 0), ones)
                every = every.set_column(every.schema.get_field_index(column), column, counted)
        merged, values = last_values(
            every,
            self.primary_key,
            last,
            [(ORDER, "max"), *((c, _ARROW[functions[c]], skip_nulls()) for c in folded)],
        )
        values.update({c: merged.column(f"{c}_{_ARROW[functions[c]]}").combine_chunks() for c in folded})
        with_changes = pc.greater_equal(merged.column(f"{ORDER}_max"), 0)
        values = {c: v.filter(with_changes) for c, v in values.items()}
        return self.picked(changes, merged.column(f"{ORDER}_max").filter(with_changes), values)


def _folded(
    changes: pa.Table, old: dict[str, pa.Array], functions: dict[str, str], folded: list[str], last: list[str]
) -> dict[str, pa.Array]:
    """Each change's folded and last-non-null columns with its key's stored values ``old`` (null: no stored row),
    as the grouped fold computes them for a key with one change."""
    out = {}
    for column in folded:
        new, stored = changes.column(column).combine_chunks(), old[column]
        function = functions[column]
        if function == "count":  # the stored count (none: 0) plus one if the change has a value
            out[column] = pc.add(pc.fill_null(pc.cast(stored, pa.int64()), 0), pc.cast(pc.is_valid(new), pa.int64()))
        elif function == "sum":  # in a wide type, as the grouped sum: the cast back to the column's type checks it
            wide = {"i": pa.int64(), "f": pa.float64()}.get(_kind(new.type))
            if wide is not None:
                new, stored = new.cast(wide), stored.cast(wide)
            total = pc.add(stored, new)  # decimals: one digit wider
            out[column] = pc.coalesce(total, stored.cast(total.type), new.cast(total.type))
        else:
            fold = pc.max_element_wise if function == "max" else pc.min_element_wise
            out[column] = fold(stored, new, skip_nulls=True)
    for column in last:
        out[column] = pc.coalesce(changes.column(column).combine_chunks(), old[column])
    return out


def _kind(t: pa.DataType) -> str:
    return "i" if pa.types.is_integer(t) else "f" if pa.types.is_floating(t) else ""
