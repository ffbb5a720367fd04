"""The merge engine's interface, and the shaping every engine shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.errors import BatchError
from lakehouse.merge.keyed_rows import is_delete, upserts_of
from lakehouse.table.definition import TableDefinition

ORDER = "__order"
DELETE = "__delete"


class MergeEngine(ABC):
    """Combines a key's stored row with its changes (see the package docstring)."""

    name: ClassVar[str]
    #: Whether a key's merged row depends on its stored row (every engine but last-row): readers then look the
    #: stored rows of the changed keys up before merging.
    needs_stored: ClassVar[bool] = True
    accepts_deletes: ClassVar[bool] = True

    def __init__(self, definition: TableDefinition) -> None:
        self.definition = definition
        self.primary_key = tuple(definition.primary_key)
        self.values = [f.name for f in definition.schema if f.name not in self.primary_key]

    def check_append(self, op: str, data: pa.Table) -> None:
        """Refuse an append the engine cannot merge, before anything is written (`BatchError`)."""
        if op == "delete" and not self.accepts_deletes:
            raise BatchError(
                f"{self.definition.name} has the {self.name!r} merge engine, which does not accept deletes (a "
                "delete would undo what the engine keeps); nothing was written. Keep deletes out of this table's "
                "changes, or create the table with the 'last-row', 'partial-update' or 'versioned' engine"
            )

    def stored_columns(self, changes: pa.Table) -> list[str]:
        """The value columns of the stored rows that merging ``changes`` reads (readers look up only these and the
        key columns: a stored value no change can fall back to is never read)."""
        return list(self.values)

    @abstractmethod
    def resolve(self, stored: pa.Table, changes: pa.Table) -> pa.Table:
        """The net change per key of ``changes`` (log records: user columns, ``_op``, ``_offset``, ``_timestamp``;
        in offset order within each bucket) applied to ``stored`` (the rows the keys had before them: their user
        columns at least, at most one per key; rows of other keys are ignored). Returns rows shaped like
        ``changes``, at most one per key, only for keys whose row changed: an upsert carrying the merged row, or
        a delete, to be applied by the last-row rule."""

    # ---- shared by the engines ----

    def combined(self, stored: pa.Table, changes: pa.Table, columns: list[str] | None = None) -> pa.Table:
        """``stored`` (order -1) and ``changes`` (order = their position) as one table of the user columns (or of
        the key columns and ``columns``), with ``__order`` and ``__delete``, in that order: within a key, its
        stored row first, then its changes."""
        names = [f.name for f in self.definition.schema]
        if columns is not None:
            wanted = {*self.primary_key, *columns}
            names = [n for n in names if n in wanted]
        user = changes.select(names)
        order = pa.array(np.arange(changes.num_rows, dtype=np.int64))
        parts = [user.append_column(ORDER, order).append_column(DELETE, is_delete(changes))]
        if stored.num_rows:
            n = stored.num_rows
            kept = pa.table(
                {
                    f.name: stored.column(f.name).cast(f.type) if f.name in stored.column_names else pa.nulls(n, f.type)
                    for f in user.schema
                },
                schema=user.schema.with_metadata(None),
            )
            parts.insert(
                0,
                kept.append_column(ORDER, pa.array(np.full(n, -1, np.int64))).append_column(
                    DELETE, pa.array(np.zeros(n, bool))
                ),
            )
        # no sort: grouping keeps the row order within a group (stored first, then the changes in offset order)
        return pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]

    def aligned(self, stored: pa.Table, changes: pa.Table, columns: list[str]) -> dict[str, pa.Array] | None:
        """Per change, the stored value of each of ``columns`` for its key (null where the key has no stored row),
        if the changes are upserts of distinct keys of one integer key column: a round whose every key changes once
        (the usual round) folds each change with its key's stored row, column by column, with no grouping. None
        otherwise (repeated keys, deletes, another key: the engine groups)."""
        if len(self.primary_key) != 1 or not changes.num_rows:
            return None
        name = self.primary_key[0]
        if not pa.types.is_integer(changes.schema.field(name).type) or pc.any(is_delete(changes)).as_py():
            return None
        keys = changes.column(name).to_numpy()
        ordered = np.sort(keys)
        if (ordered[1:] == ordered[:-1]).any():
            return None
        types = {c: changes.schema.field(c).type for c in columns}
        if not stored.num_rows:
            return {c: pa.nulls(len(keys), types[c]) for c in columns}
        stored_keys = stored.column(name).to_numpy()
        order = np.argsort(stored_keys, kind="stable")
        at = order[np.minimum(np.searchsorted(stored_keys[order], keys), len(order) - 1)]
        index = pa.array(at, mask=stored_keys[at] != keys)  # a null index takes a null: the key had no stored row
        return {
            c: stored.column(c).take(index).combine_chunks().cast(types[c])
            if c in stored.column_names
            else pa.nulls(len(keys), types[c])
            for c in columns
        }

    def replaced(self, changes: pa.Table, values: dict[str, pa.Array]) -> pa.Table:
        """``changes`` with the value columns in ``values`` (aligned with its rows) replaced, cast to their types."""
        return self.picked(changes, np.arange(changes.num_rows), values, ordered=True)

    def picked(
        self, changes: pa.Table, orders: pa.Array, values: dict[str, pa.Array] | None = None, *, ordered: bool = False
    ) -> pa.Table:
        """The change rows at ``orders`` (a position per key), their value columns replaced by ``values`` (aligned
        with ``orders``), in offset order (``ordered``: ``orders`` are every row in order, nothing is taken)."""
        if ordered:
            out, sort = changes, None
        else:
            positions = np.asarray(orders.to_numpy(zero_copy_only=False) if hasattr(orders, "to_numpy") else orders)
            sort = np.argsort(positions, kind="stable")
            out = changes.take(pa.array(positions[sort]))
        for name, column in (values or {}).items():
            column = column.take(pa.array(sort)) if sort is not None else column
            i = out.schema.get_field_index(name)
            field = out.schema.field(i)
            try:
                column = column.cast(field.type) if column.type != field.type else column
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise BatchError(
                    f"{self.definition.name}: the {self.name!r} merge of column {name!r} does not fit its type "
                    f"{field.type} ({exc}); widen the column"
                ) from None
            out = out.set_column(i, field, column)
        return out


def with_nulls(changes: pa.Table, columns: list[str]) -> list[str]:
    """Those of ``columns`` where some change that is not a delete has a null (a merge falls back on the stored
    value only there)."""
    upserts = upserts_of(changes)  # no copy of the changes when none is a delete
    return [c for c in columns if upserts.column(c).null_count]


def last_values(
    every: pa.Table, keys: tuple[str, ...], columns: list[str], aggregations: list
) -> tuple[pa.Table, dict]:
    """``every`` grouped by ``keys`` with ``aggregations``, and for each of ``columns`` its last non-null value per
    group (in ``every``'s row order), as {column: values aligned with the groups}. Found by position (the greatest
    row number where the column is valid), so any type works (pyarrow's ``last`` has no decimal kernel)."""
    rows = pa.array(np.arange(every.num_rows, dtype=np.int64))
    positions = []
    for i, column in enumerate(columns):
        name = f"__pos{i}"
        every = every.append_column(name, pc.if_else(pc.is_valid(every.column(column)), rows, None))
        positions.append((name, "max"))
    grouped = group_last(every, keys, [*aggregations, *positions])
    return grouped, {
        c: every.column(c).take(grouped.column(f"__pos{i}_max")).combine_chunks() for i, c in enumerate(columns)
    }


def group_last(every: pa.Table, keys: tuple[str, ...], aggregations: list) -> pa.Table:
    """``every`` grouped by ``keys`` in its row order (ordered aggregations: ``first``/``last`` follow it)."""
    return every.group_by(list(keys), use_threads=False).aggregate(aggregations)


def skip_nulls() -> pc.ScalarAggregateOptions:
    return pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)
