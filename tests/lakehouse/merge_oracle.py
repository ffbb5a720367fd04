"""The merge engines' oracle: a key's row folded over its changes one at a time, in offset order (the
definition `lakehouse.merge` implements vectorized)."""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]


def fold(
    engine: str,
    state: Row | None,
    op: str,
    row: Row,
    *,
    value_columns: list[str],
    version: str | None = None,
    aggregates: dict[str, str] | None = None,
) -> Row | None:
    """The key's row after one change (``state``: its row before, None: no row)."""
    if engine == "last-row":
        return None if op == "delete" else dict(row)
    if engine == "partial-update":
        if op == "delete":
            return None
        new = dict(state) if state is not None else {c: None for c in value_columns}
        new.update({k: v for k, v in row.items() if v is not None or k not in value_columns})
        return new
    if engine == "versioned":
        if op == "delete":
            return None if state is None or row.get(version) is None or row[version] >= state[version] else state
        return dict(row) if state is None or row[version] >= state[version] else state
    if engine == "first-row":
        return dict(row) if state is None else state
    if engine == "aggregate":
        functions = aggregates or {}
        if state is None:
            new = dict(row)
            for c, f in functions.items():
                if f == "count":
                    new[c] = 1 if row.get(c) is not None else 0
            return new
        new = dict(state)
        for k, v in row.items():
            if k not in value_columns:
                new[k] = v
                continue
            f = functions.get(k, "last_non_null")
            old = state.get(k)
            if f == "count":
                new[k] = (old or 0) + (1 if v is not None else 0)
            elif v is None:
                new[k] = old
            elif old is None or f == "last_non_null":
                new[k] = v
            elif f == "sum":
                new[k] = old + v
            elif f == "max":
                new[k] = max(old, v)
            elif f == "min":
                new[k] = min(old, v)
        return new
    raise ValueError(engine)


def fold_all(engine: str, changes: list[tuple[str, Row]], key: str, **options: Any) -> dict[Any, Row]:
    """Every key's row after ``changes`` ((op, row) in offset order)."""
    state: dict[Any, Row | None] = {}
    for op, row in changes:
        state[row[key]] = fold(engine, state.get(row[key]), op, row, **options)
    return {k: v for k, v in state.items() if v is not None}
