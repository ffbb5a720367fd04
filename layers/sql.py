"""A model's Spark SQL, read with sqlglot (``read="spark"``): parsing, the tables it reads, its output columns and,
where they follow from the inputs' schemas without running anything, their types.

Nothing here executes SQL. Types are inferred only where sqlglot cannot get them wrong: a column passed through
from an input keeps the input's type exactly, a ``CAST(... AS t)`` is ``t``, a ``count`` is ``bigint``. Any other
expression's type is left unknown (``None``) and checked when the model's table is deployed (Spark's analyzer
decides it; sqlglot's own inference differs from Spark for ``sum`` of decimals and ``trunc`` of dates).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from layers.errors import ModelSqlError
from layers.syntax import parse_statements

DIALECT = "spark"
#: Qualification matches column names with their case, as declared (Spark would match them without regard to
#: case; the stricter rule keeps output column names exactly as the inputs and aliases spell them).
_QUALIFY_DIALECT = Dialect.get_or_raise("spark, normalization_strategy = case_sensitive")

__all__ = [
    "DIALECT",
    "OutputColumn",
    "arrow_type",
    "distinct_as_group",
    "output_columns",
    "parse_query",
    "qualify_query",
    "spark_type",
    "table_references",
]


@dataclass(frozen=True)
class OutputColumn:
    """One column of a model's output: its name and, if it could be inferred, its Arrow type."""

    name: str
    type: pa.DataType | None


def parse_query(sql: str, *, where: str, model: str, path: str) -> exp.Query:
    """The one query (a SELECT, or a UNION/INTERSECT/EXCEPT of SELECTs, with or without WITH) in ``sql``.

    ``sql`` is the file's text with everything before the query blanked out, so that lines and columns are the
    file's.

    Raises:
        ModelSqlError: the SQL does not parse (the message says what is wrong in SQL's terms, at which line and
            column of ``path``, with an excerpt), holds several statements, or is not a query.
    """
    statements, problem = parse_statements(sql, DIALECT)
    if problem is not None:
        line, column = problem.position(sql)
        raise ModelSqlError(
            f"{path}:{line}:{column} (model {model}): the SQL does not parse as Spark SQL: {problem.message}\n"
            f"{problem.excerpt(sql)}",
            path=path,
            model=model,
            line=line,
            column=column,
        )
    if len(statements) != 1:
        raise ModelSqlError(
            f"{where}: the file holds {len(statements)} SQL statements; a model is exactly one SELECT (its "
            "output is the model's table): keep one",
            path=path,
            model=model,
        )
    query = statements[0]
    if not isinstance(query, exp.Query) or _first_select(query) is None:
        kind = type(query).__name__.upper()
        raise ModelSqlError(
            f"{where}: the statement is {kind} ({_short(query)}), not a SELECT; a model is one SELECT whose output "
            "is the model's table (lakestream creates and writes the table itself)",
            path=path,
            model=model,
        )
    return query


def table_references(query: exp.Expr) -> list[exp.Table]:
    """Every reference to a table in ``query`` that is not a CTE's name: the tables it reads (a table read twice
    appears twice). Table-valued functions and ``VALUES`` are not tables."""
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    refs = []
    for table in query.find_all(exp.Table):
        if not table.name or isinstance(table.this, exp.Func):
            continue
        if not table.db and not table.catalog and table.name.lower() in ctes:
            continue
        refs.append(table)
    return refs


def written_name(table: exp.Table) -> str:
    """A table reference as written, parts joined with ``.`` (without quotes)."""
    return ".".join(p for p in (table.catalog, table.db, table.name) if p)


def check_output_names(query: exp.Query, *, where: str, model: str, path: str) -> None:
    """Every output column needs a name: an expression other than a column needs ``AS name``."""
    select = _first_select(query)
    for i, projection in enumerate(select.expressions if select else [], start=1):
        if isinstance(projection, exp.Alias | exp.Column | exp.Star):
            continue
        raise ModelSqlError(
            f"{where}: output column {i} ({_short(projection)}) has no name; give it one with AS name (it becomes a "
            "column of the model's table)",
            path=path,
            model=model,
        )


def qualify_query(
    query: exp.Query, schemas: Mapping[str, pa.Schema], *, where: str, model: str, path: str
) -> exp.Query:
    """``query`` with every column qualified by its table and every ``*`` expanded, against ``schemas`` (the
    inputs' names, canonical ``ns.table``, to their schemas). The input references must already be canonical.

    Raises:
        ModelSqlError: a column no input has, an ambiguous column, or SQL sqlglot cannot resolve.
    """
    mapping: dict = {}
    for name, schema in schemas.items():
        ns, table = name.split(".")
        mapping.setdefault(ns, {})[table] = {f.name: spark_type(f.type) for f in schema}
    try:
        return qualify(
            query.copy(),
            schema=MappingSchema(mapping, dialect=_QUALIFY_DIALECT, normalize=False),
            dialect=_QUALIFY_DIALECT,
            validate_qualify_columns=True,
            quote_identifiers=False,
            identify=False,
        )
    except (OptimizeError, SqlglotError) as exc:
        message = " ".join(str(exc).split())
        if "could not be resolved" in message:
            message += " (column names are matched with their case, as declared)"
        raise ModelSqlError(
            f"{where}: {message} (inputs: {', '.join(sorted(schemas)) or 'none'}); use a column of its inputs",
            path=path,
            model=model,
        ) from None


def distinct_as_group(query: exp.Query) -> exp.Query:
    """``SELECT DISTINCT e1 AS a, ...`` (no GROUP BY, aggregate, window or LIMIT) as ``SELECT e1 AS a, ... GROUP BY
    e1, ...``: the same rows, in the shape the planner maintains incrementally (the groups the changed rows
    belong to are recomputed). Any other query is returned as it is."""
    if not isinstance(query, exp.Select) or not isinstance(query.args.get("distinct"), exp.Distinct):
        return query
    if query.args["distinct"].args.get("on") or any(query.args.get(k) for k in ("group", "limit", "offset")):
        return query
    if query.find(exp.AggFunc, exp.Window) or any(isinstance(e, exp.Star) for e in query.expressions):
        return query
    out = query.copy()
    out.set("distinct", None)
    out.set("group", exp.Group(expressions=[p.unalias().copy() for p in out.expressions]))
    return out


def output_columns(qualified: exp.Query, schemas: Mapping[str, pa.Schema]) -> list[OutputColumn]:
    """The output columns of a qualified query, with the types that follow from ``schemas`` (see the module)."""
    if isinstance(qualified, exp.Select):  # CTEs and subqueries in FROM merged away where they can be
        qualified = merge_subqueries(qualified.copy())
    select = _first_select(qualified)
    assert select is not None  # `parse_query` took only a query with a SELECT
    sources = _alias_tables(select) if isinstance(qualified, exp.Select) else {}
    columns = []
    for projection in select.expressions:
        columns.append(OutputColumn(projection.alias_or_name, _infer(projection.unalias(), sources, schemas)))
    return columns


def _infer(e: exp.Expr, sources: Mapping[str, str], schemas: Mapping[str, pa.Schema]) -> pa.DataType | None:
    if isinstance(e, exp.Column):
        table = sources.get(e.table)
        schema = schemas.get(table) if table else None
        if schema is not None and e.name in schema.names:
            t = schema.field(e.name).type
            return None if pa.types.is_null(t) else t  # null: a model's column whose type is not known
        return None
    if isinstance(e, exp.Cast):
        return arrow_type(e.to)
    if isinstance(e, exp.Count):
        return pa.int64()
    return None


def _alias_tables(select: exp.Select) -> dict[str, str]:
    """The aliases of the tables in a SELECT's FROM and JOINs, to their canonical names."""
    out = {}
    for source in [select.args.get("from_") or select.args.get("from"), *(select.args.get("joins") or [])]:
        if source is None:
            continue
        table = source.this
        if isinstance(table, exp.Table) and table.db:
            out[table.alias_or_name] = f"{table.db}.{table.name}"
    return out


def _first_select(query: exp.Expr) -> exp.Select | None:
    while isinstance(query, exp.SetOperation):
        query = query.left
    if isinstance(query, exp.Subquery):
        return _first_select(query.this)
    return query if isinstance(query, exp.Select) else None


def _short(e: exp.Expr, limit: int = 60) -> str:
    text = " ".join(e.sql(dialect=DIALECT).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


_TO_SPARK: list[tuple[Callable[[pa.DataType], bool], str]] = [
    (pa.types.is_boolean, "BOOLEAN"),
    (pa.types.is_int8, "TINYINT"),
    (pa.types.is_int16, "SMALLINT"),
    (pa.types.is_int32, "INT"),
    (pa.types.is_int64, "BIGINT"),
    (pa.types.is_uint8, "SMALLINT"),
    (pa.types.is_uint16, "INT"),
    (pa.types.is_float32, "FLOAT"),
    (pa.types.is_float64, "DOUBLE"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "STRING"),
    (pa.types.is_date32, "DATE"),
]


def spark_type(t: pa.DataType) -> str:
    """The Spark SQL type of an Arrow type, as sqlglot reads it (``UNKNOWN`` where Spark has none)."""
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz else "TIMESTAMP_NTZ"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "BINARY"
    return next((name for test, name in _TO_SPARK if test(t)), "UNKNOWN")


_FROM_SQLGLOT = {
    exp.DataType.Type.BOOLEAN: pa.bool_(),
    exp.DataType.Type.TINYINT: pa.int8(),
    exp.DataType.Type.SMALLINT: pa.int16(),
    exp.DataType.Type.INT: pa.int32(),
    exp.DataType.Type.BIGINT: pa.int64(),
    exp.DataType.Type.FLOAT: pa.float32(),
    exp.DataType.Type.DOUBLE: pa.float64(),
    exp.DataType.Type.TEXT: pa.string(),
    exp.DataType.Type.VARCHAR: pa.string(),
    exp.DataType.Type.BINARY: pa.binary(),
    exp.DataType.Type.DATE: pa.date32(),
    exp.DataType.Type.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    exp.DataType.Type.TIMESTAMPNTZ: pa.timestamp("us"),
}


def arrow_type(t: exp.DataType) -> pa.DataType | None:
    """The Arrow type lakestream stores a Spark SQL type as, or None for types it does not map here."""
    if t.this == exp.DataType.Type.DECIMAL:
        params = [int(p.sql()) for p in t.expressions]
        precision, scale = (params + [10, 0][len(params) :])[:2] if params else (10, 0)
        return pa.decimal128(precision, scale)
    return _FROM_SQLGLOT.get(t.this)
