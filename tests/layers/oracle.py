"""The warehouse layers' test oracle: a model's expected output computed by DuckDB, independently of Spark and of
the runner, over plain Arrow tables (the replayed ODS state, or an upstream model's oracle result).

::

    ods = OdsReplay(project)                 # a pure-Python model of every source (key -> row)
    ods.apply("ods.orders", "upsert", batch) # ... the same appends the test sends to the log
    expected = oracle_all(project, ods.states())
    assert_same_rows(lh.union_read("dwd.orders_enriched"), expected["dwd.orders_enriched"], ("o_orderkey",))

The model's Spark SQL is transpiled to DuckDB with sqlglot (`duckdb_sql`), with the Spark forms DuckDB reads
differently rewritten: ``trunc(date, 'MM')`` (DuckDB's ``date_trunc`` knows ``month``, not ``MM``). Every input
is a table ``namespace.table`` in an in-memory DuckDB (schemas ``ods``, ``dwd``...), so the SQL's references
resolve as written. The result is cast to the model's table schema and sorted by its primary key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
import sqlglot
from sqlglot import exp

from layers.project import Project

__all__ = [
    "OdsReplay",
    "PkState",
    "assert_same_rows",
    "duckdb_sql",
    "oracle",
    "oracle_all",
    "replay",
    "sort_by_key",
    "strip_internal",
]

#: Spark's ``trunc`` formats and DuckDB's ``date_trunc`` parts for them.
_TRUNC_UNITS = {
    "year": "year",
    "yyyy": "year",
    "yy": "year",
    "quarter": "quarter",
    "month": "month",
    "mon": "month",
    "mm": "month",
    "week": "week",
}


# -- the SQL ---------------------------------------------------------------------------------------------------


def _fix_trunc(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.DateTrunc | exp.TimestampTrunc):
        unit = node.args.get("unit")
        text = unit.name.lower() if isinstance(unit, exp.Literal | exp.Var) else None
        if text is not None:
            if text not in _TRUNC_UNITS:
                raise NotImplementedError(f"the oracle does not know Spark's trunc unit {unit.name!r}")
            node.set("unit", exp.Literal.string(_TRUNC_UNITS[text]))
    return node


def duckdb_sql(spark_sql: str) -> str:
    """``spark_sql`` (one SELECT) as DuckDB SQL: sqlglot's transpilation, and Spark's trunc units spelled out."""
    (tree,) = sqlglot.parse(spark_sql, read="spark")
    assert tree is not None
    tree = tree.transform(_fix_trunc)
    return tree.sql(dialect="duckdb")


# -- Arrow helpers ---------------------------------------------------------------------------------------------


def strip_internal(table: pa.Table) -> pa.Table:
    """``table`` without lakestream's internal columns (``__bucket``, ``__offset``..., anything starting ``__``)."""
    return table.select([c for c in table.column_names if not c.startswith("__")])


def sort_by_key(table: pa.Table, key: Sequence[str]) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in key]) if table.num_rows else table


def _conform(table: pa.Table, schema: pa.Schema | None, what: str) -> pa.Table:
    """``table``'s columns of ``schema``, in its order and types (nullability as declared only where no nulls)."""
    table = strip_internal(table)
    if schema is None:
        return table
    missing = [f.name for f in schema if f.name not in table.column_names]
    extra = [c for c in table.column_names if c not in schema.names]
    if missing or extra:
        raise AssertionError(
            f"{what}: columns {table.column_names} do not match {schema.names} (missing {missing}, extra {extra})"
        )
    table = table.select(schema.names)
    loose = pa.schema([f.with_nullable(True) for f in schema])
    return table.cast(loose)


# -- the oracle ------------------------------------------------------------------------------------------------


def _connection():
    import duckdb

    return duckdb.connect()


def oracle(project: Project, model_name: str, states: Mapping[str, pa.Table]) -> pa.Table:
    """The rows model ``model_name`` must hold when its inputs hold ``states`` (per input table name), computed
    by DuckDB: cast to the model's schema, sorted by its primary key. A key twice in the output fails."""
    model = project.models[model_name]
    con = _connection()
    try:
        for i, name in enumerate(model.inputs):
            if name not in states:
                raise KeyError(f"oracle({model_name}): no state given for its input {name}")
            namespace, table = name.split(".")
            data = _conform(states[name], project.schema_of(name), f"input {name}")
            view = f"input_{i}"
            con.register(view, data)
            con.execute(f'CREATE SCHEMA IF NOT EXISTS "{namespace}"')
            con.execute(f'CREATE TABLE "{namespace}"."{table}" AS SELECT * FROM "{view}"')
            con.unregister(view)
        result = con.sql(duckdb_sql(model.sql)).to_arrow_table()
    finally:
        con.close()
    result = result.select(list(model.column_names))
    schema = model.schema
    if schema is not None:
        result = result.cast(pa.schema([f.with_nullable(True) for f in schema]))
        for f in schema:
            if not f.nullable and result.column(f.name).null_count:
                raise AssertionError(f"oracle({model_name}): key column {f.name} is null in the output")
    key = list(model.primary_key)
    result = sort_by_key(result, key)
    keys = list(zip(*(result.column(k).to_pylist() for k in key), strict=True))
    twice = sorted({k for k, n in _counts(keys).items() if n > 1})
    if twice:
        raise AssertionError(f"oracle({model_name}): output keys {twice[:5]} appear more than once")
    return result


def _counts(items: Iterable) -> dict:
    counts: dict = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def oracle_all(project: Project, ods_states: Mapping[str, pa.Table]) -> dict[str, pa.Table]:
    """Every model's oracle result, in dependency order (a model's inputs: sources' states, earlier results)."""
    states: dict[str, pa.Table] = dict(ods_states)
    results: dict[str, pa.Table] = {}
    for name in project.order:
        results[name] = states[name] = oracle(project, name, states)
    return results


# -- replayed sources -----------------------------------------------------------------------------------------


class PkState:
    """A primary-key table as a dict key -> row: what its log's appends leave (insert and upsert replace the
    whole row, delete removes it; within a batch later rows win, as in the log)."""

    def __init__(self, schema: pa.Schema, key: Sequence[str]) -> None:
        self.schema = schema
        self.key = tuple(key)
        self.rows: dict[tuple, dict] = {}

    def apply(self, op: str, batch: pa.Table | Sequence[dict]) -> None:
        for row in batch.to_pylist() if isinstance(batch, pa.Table) else batch:
            k = tuple(row[c] for c in self.key)
            if op == "delete":
                self.rows.pop(k, None)
            elif op in ("insert", "upsert"):
                self.rows[k] = {f.name: row.get(f.name) for f in self.schema}
            else:
                raise ValueError(f"unknown op {op!r}")

    def __contains__(self, key: object) -> bool:
        return (key if isinstance(key, tuple) else (key,)) in self.rows

    def get(self, key: object) -> dict | None:
        return self.rows.get(key if isinstance(key, tuple) else (key,))

    def keys(self) -> list:
        return [k[0] if len(k) == 1 else k for k in sorted(self.rows)]

    def table(self) -> pa.Table:
        rows = [self.rows[k] for k in sorted(self.rows)]
        return pa.Table.from_pylist(rows, schema=self.schema)


class OdsReplay:
    """Every source of ``project`` as a `PkState`, fed the appends the test sends to the log."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.tables = {name: PkState(s.schema, s.primary_key) for name, s in project.sources.items()}

    def apply(self, table: str, op: str, batch: pa.Table | Sequence[dict]) -> None:
        self.tables[table].apply(op, batch)

    def apply_all(self, changes: Iterable[tuple[str, str, pa.Table | Sequence[dict]]]) -> None:
        for table, op, batch in changes:
            self.apply(table, op, batch)

    def states(self) -> dict[str, pa.Table]:
        return {name: state.table() for name, state in self.tables.items()}


def replay(project: Project, changes: Iterable[tuple[str, str, pa.Table]]) -> dict[str, pa.Table]:
    """The sources' states after ``changes`` ((table, op, batch) appends, in order), starting empty."""
    ods = OdsReplay(project)
    ods.apply_all(changes)
    return ods.states()


# -- comparison -----------------------------------------------------------------------------------------------


def assert_same_rows(actual: pa.Table, expected: pa.Table, key: Sequence[str], *, what: str = "", show: int = 5):
    """``actual`` (e.g. a union read) holds exactly ``expected``'s rows: compared sorted by ``key``, without
    lakestream's ``__`` columns, cast to ``expected``'s schema. On failure, the first differing keys."""
    label = f"{what}: " if what else ""
    expected = strip_internal(expected)
    actual = _conform(actual, expected.schema, f"{label}actual")
    expected = _conform(expected, expected.schema, f"{label}expected")
    key = list(key)
    a_rows = sort_by_key(actual, key).to_pylist()
    e_rows = sort_by_key(expected, key).to_pylist()
    if a_rows == e_rows:
        return
    by_key = lambda rows: {tuple(r[k] for k in key): r for r in rows}  # noqa: E731
    a, e = by_key(a_rows), by_key(e_rows)
    lines = [f"{label}{len(a_rows)} rows, expected {len(e_rows)}"]
    if len(a) < len(a_rows):
        dupes = [k for k, n in _counts(tuple(r[k] for k in key) for r in a_rows).items() if n > 1]
        lines.append(f"  keys twice in actual: {dupes[:show]}")
    missing = sorted(set(e) - set(a), key=repr)
    extra = sorted(set(a) - set(e), key=repr)
    changed = sorted((k for k in set(a) & set(e) if a[k] != e[k]), key=repr)
    if missing:
        lines.append(f"  {len(missing)} missing, first: " + "; ".join(f"{k} {e[k]}" for k in missing[:show]))
    if extra:
        lines.append(f"  {len(extra)} unexpected, first: " + "; ".join(f"{k} {a[k]}" for k in extra[:show]))
    for k in changed[:show]:
        diff = {c: (a[k][c], e[k][c]) for c in e[k] if a[k][c] != e[k][c]}
        lines.append(f"  key {k}: (actual, expected) {diff}")
    if len(changed) > show:
        lines.append(f"  ... {len(changed) - show} more differing keys")
    raise AssertionError("\n".join(lines))
