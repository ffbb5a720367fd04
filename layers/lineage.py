"""Column-level lineage of a warehouse-layers project: for every output column of every model, the input columns
it derives from (its *direct* sources, columns of the tables the model reads) and, through every model in
between, the columns of the project's sources it derives from in the end (its *ultimate* sources).

Read from each model's qualified query (`layers.project.Model.qualified`: every column names its table, every
``*`` expanded) with sqlglot's scopes, so CTEs, subqueries in FROM, set operations, aliases and joins are followed
to the tables they read. Nothing is executed.

Each source column carries the *kind* of what the output does with it (the OpenLineage column-lineage
transformation subtypes, lower case):

``identity``        copied as it is (through any number of aliases, CTEs and models)
``transformation``  used in an expression (a cast, a function, arithmetic, a CASE)
``aggregation``     used inside an aggregate function (``sum(x)``, ``count(DISTINCT x)``, ``sum(x) OVER (...)``)

Through several models the strongest kind wins (an aggregate of a copied column is an aggregation). A column that
derives from no column (a literal, ``count(*)``, ``current_date()``) has no sources.

Besides, each model lists the input columns that decide *which* rows it has rather than what is in them
(OpenLineage's indirect lineage): ``join`` (a JOIN's ON), ``filter`` (WHERE, HAVING, QUALIFY), ``group_by``
(GROUP BY, and ``SELECT DISTINCT``'s columns), ``window`` (a window's PARTITION BY and ORDER BY) and ``sort``
(ORDER BY).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, build_scope, find_all_in_scope

from lakehouse.errors import InvalidArgument
from layers.project import Model, Project

__all__ = [
    "AGGREGATION",
    "CONSTANT",
    "IDENTITY",
    "TRANSFORMATION",
    "WINDOW",
    "ColumnLineage",
    "Lineage",
    "ModelLineage",
    "SourceColumn",
    "column_lineage",
    "openlineage_facet",
]

IDENTITY = "identity"
TRANSFORMATION = "transformation"
AGGREGATION = "aggregation"
#: Direct kinds, weakest first: where a column reaches an output along several paths, the strongest is kept.
_RANK = {IDENTITY: 0, TRANSFORMATION: 1, AGGREGATION: 2}
#: The kinds of an output column that derives from no column: a window function of none (``row_number()``), or
#: a constant (a literal, ``current_date()``); ``count(*)`` is an aggregation.
WINDOW = "window"
CONSTANT = "constant"


@dataclass(frozen=True, order=True)
class SourceColumn:
    """A column of a table of the project (``table`` canonical, ``namespace.table``) and what is done with it."""

    table: str
    column: str
    kind: str

    def to_json(self) -> dict[str, str]:
        return {"table": self.table, "column": self.column, "kind": self.kind}

    def __str__(self) -> str:
        return f"{self.table}.{self.column} ({self.kind})"


@dataclass(frozen=True)
class ColumnLineage:
    """One output column of a model: the columns of its inputs it derives from (``direct``) and the columns of
    the project's sources they derive from in the end (``ultimate``), each sorted."""

    model: str
    column: str
    #: The strongest of its direct sources' kinds (``identity``, ``transformation``, ``aggregation``); for a
    #: column of no source: ``aggregation`` (``count(*)``), ``window`` (``row_number() OVER (...)``) or
    #: ``constant`` (a literal).
    kind: str
    direct: tuple[SourceColumn, ...]
    ultimate: tuple[SourceColumn, ...]

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "column": self.column,
            "kind": self.kind,
            "direct": [s.to_json() for s in self.direct],
            "ultimate": [s.to_json() for s in self.ultimate],
        }


@dataclass(frozen=True)
class ModelLineage:
    """A model's column lineage: its output columns in output order, and the input columns that only decide its
    rows (joins, filters, groups, windows, sorts; ``indirect``, sorted) and those columns' ultimate sources."""

    model: str
    columns: Mapping[str, ColumnLineage]
    indirect: tuple[SourceColumn, ...]
    indirect_ultimate: tuple[SourceColumn, ...]


@dataclass(frozen=True)
class Lineage:
    """The column lineage of a whole project (`column_lineage`), models in dependency order."""

    models: Mapping[str, ModelLineage]
    #: The project's sources, where lineage ends.
    sources: tuple[str, ...] = ()

    def model(self, name: str) -> ModelLineage:
        """The lineage of model ``name`` (case ignored, as Spark ignores it).

        Raises:
            InvalidArgument: no model has that name; the message lists the models.
        """
        by_lower = {m.lower(): m for m in self.models}
        if name.lower() not in by_lower:
            what = (
                "a source (its columns are where lineage ends: see the models that read it)"
                if name.lower() in {s.lower() for s in self.sources}
                else "no model of this project"
            )
            raise InvalidArgument(f"--model {name}: {what}; the models are {', '.join(self.models) or 'none'}")
        return self.models[by_lower[name.lower()]]

    def column(self, model: str, column: str) -> ColumnLineage:
        """The lineage of output column ``column`` of ``model`` (its exact name, else its name without regard to
        case if that names one column).

        Raises:
            InvalidArgument: no such model, or the model has no such output column (the message lists them).
        """
        lineage = self.model(model)
        if column in lineage.columns:
            return lineage.columns[column]
        same = [c for c in lineage.columns if c.lower() == column.lower()]
        if len(same) == 1:
            return lineage.columns[same[0]]
        raise InvalidArgument(
            f"--column {column}: model {lineage.model} has no output column {column!r}; its columns are "
            f"{', '.join(lineage.columns)}"
        )

    def columns(self, model: str | None = None, column: str | None = None) -> list[ColumnLineage]:
        """The lineage of every output column, models in dependency order; only ``model``'s if given; only
        columns named ``column`` if given (with a model: that one column; without: that column of every model
        that has it).

        Raises:
            InvalidArgument: an unknown model, or a column no model (or not ``model``) has.
        """
        if model is not None:
            if column is not None:
                return [self.column(model, column)]
            return list(self.model(model).columns.values())
        out = [c for m in self.models.values() for c in m.columns.values()]
        if column is None:
            return out
        chosen = [c for c in out if c.column.lower() == column.lower()]
        if not chosen:
            raise InvalidArgument(
                f"--column {column}: no model of this project has an output column {column!r}; give --model to "
                f"list one model's columns (models: {', '.join(self.models) or 'none'})"
            )
        return chosen

    def to_json(self) -> list[dict]:
        """Every output column's lineage (`ColumnLineage.to_json`), models in dependency order."""
        return [c.to_json() for c in self.columns()]


def column_lineage(project: Project) -> Lineage:
    """The column lineage of every model of ``project`` (loaded by `layers.project.load_project`)."""
    models: dict[str, ModelLineage] = {}
    for name in project.order:
        model = project.models[name]
        direct, indirect = _model_sources(model)
        columns = {}
        for column, (sources, sourceless) in direct.items():
            kind = max((s.kind for s in sources), key=_RANK.__getitem__, default=sourceless)
            ultimate = _ultimate(sources, models)
            columns[column] = ColumnLineage(name, column, kind, tuple(sorted(sources)), ultimate)
        models[name] = ModelLineage(name, columns, tuple(sorted(indirect)), _ultimate(indirect, models, keep=True))
    return Lineage(models, tuple(project.sources))


def openlineage_facet(lineage: Lineage, model: str, namespace: str = "lakestream") -> dict:
    """The content of the OpenLineage ``ColumnLineageDatasetFacet`` (spec 1-2-0) of ``model``'s output dataset,
    as a plain dict: ``fields`` maps each output column to its direct input fields (datasets named by the table,
    ``namespace.table``, in OpenLineage namespace ``namespace``), each with a ``DIRECT`` transformation of the
    column's kind; ``dataset`` lists the input fields that only decide the rows (``INDIRECT``: ``JOIN``,
    ``FILTER``, ``GROUP_BY``, ``WINDOW``, ``SORT``).

    The keys are those of the OpenLineage client's classes (``ColumnLineageDatasetFacet(fields=..., dataset=...)``,
    ``Fields``, ``InputField``, ``Transformation``); the client adds ``_producer`` and ``_schemaURL`` when it
    sends the facet, under the name ``columnLineage`` of the model's output dataset.

    Raises:
        InvalidArgument: ``model`` is no model of the project.
    """
    chosen = lineage.model(model)

    def fields(sources: Iterable[SourceColumn], kind: str) -> list[dict]:
        """One input field per column, with a transformation per kind (a column can both join and filter)."""
        by_column: dict[tuple[str, str], list[dict]] = {}
        for s in sources:
            by_column.setdefault((s.table, s.column), []).append(
                {"type": kind, "subtype": s.kind.upper(), "masking": False}
            )
        return [
            {"namespace": namespace, "name": table, "field": column, "transformations": transformations}
            for (table, column), transformations in by_column.items()
        ]

    return {
        "fields": {c.column: {"inputFields": fields(c.direct, "DIRECT")} for c in chosen.columns.values()},
        "dataset": fields(chosen.indirect, "INDIRECT"),
    }


# -- one model's query ---------------------------------------------------------------------------------------------


def _model_sources(model: Model) -> tuple[dict[str, tuple[set[SourceColumn], str]], set[SourceColumn]]:
    """Per output column: its direct sources and its kind should it have none; and the model's indirect sources."""
    root = build_scope(model.qualified.copy())
    assert root is not None  # a query has a scope
    direct = {}
    for index, name in enumerate(model.column_names):
        sources = _resolve(root, index)
        direct[name] = (_strongest(sources), _sourceless_kind(root, index))
    indirect: set[SourceColumn] = set()
    for scope in root.traverse():
        indirect |= _indirect(scope)
    return direct, _strongest(indirect)


def _resolve(scope: Scope, index: int) -> set[SourceColumn]:
    """The input-table columns output column ``index`` of ``scope`` derives from, with their kinds."""
    query = scope.expression
    if isinstance(query, exp.SetOperation) or scope.set_operation_scopes:
        return {s for branch in scope.set_operation_scopes for s in _resolve(branch, index)}
    if isinstance(query, exp.Subquery) and scope.subquery_scopes:
        return {s for inner in scope.subquery_scopes for s in _resolve(inner, index)}
    assert isinstance(query, exp.Selectable)  # a scope's expression: a SELECT, a set operation, a subquery, a UDTF
    projection = query.selects[index]
    expression = projection.unalias() if isinstance(projection, exp.Alias) else projection
    out: set[SourceColumn] = set()
    for column in find_all_in_scope(expression, exp.Column):
        if _in_window_spec(column, expression):
            continue  # a window's PARTITION BY / ORDER BY: indirect (`_indirect`)
        kind = (
            IDENTITY if column is expression else AGGREGATION if _in_aggregate(column, expression) else TRANSFORMATION
        )
        out |= {SourceColumn(s.table, s.column, _compose(kind, s.kind)) for s in _column_sources(scope, column)}
    # a scalar subquery in the expression: its outputs feed this one through the expression
    subqueries = {id(s.expression): s for s in scope.subquery_scopes}
    for subquery in find_all_in_scope(expression, *exp.UNWRAPPED_QUERIES):
        inner = subqueries.get(id(subquery))
        if inner is not None:
            for i in range(len(subquery.selects)):
                out |= {SourceColumn(s.table, s.column, _compose(TRANSFORMATION, s.kind)) for s in _resolve(inner, i)}
    return out


def _column_sources(scope: Scope, column: exp.Column) -> set[SourceColumn]:
    """What a (qualified) column of ``scope`` is: an input table's column (identity), or a CTE's or a derived
    table's output column (followed). A column sqlglot could not place has no source."""
    source = scope.sources.get(column.table)
    if isinstance(source, exp.Table):
        return {SourceColumn(f"{source.db}.{source.name}", column.name, IDENTITY)}
    if isinstance(source, Scope) and source.is_udtf:  # LATERAL VIEW explode(...): a function of its arguments
        arguments = source.expression.this.find_all(exp.Column)
        return {
            SourceColumn(s.table, s.column, _compose(TRANSFORMATION, s.kind))
            for c in arguments
            for s in _column_sources(scope, c)
        }
    if isinstance(source, Scope):
        assert isinstance(source.expression, exp.Selectable)
        names = source.expression.named_selects
        if column.name in names:
            return _resolve(source, names.index(column.name))
    return set()


def _sourceless_kind(scope: Scope, index: int) -> str:
    """The kind of output column ``index`` of ``scope`` if it derives from no column: an aggregate (``count(*)``),
    a window function (``row_number() OVER (...)``) or a constant."""
    while scope.set_operation_scopes or scope.subquery_scopes and isinstance(scope.expression, exp.Subquery):
        scope = (scope.set_operation_scopes or scope.subquery_scopes)[0]
    assert isinstance(scope.expression, exp.Selectable)
    projection = scope.expression.selects[index]
    return WINDOW if projection.find(exp.Window) else AGGREGATION if projection.find(exp.AggFunc) else CONSTANT


_INDIRECT_CLAUSES = (("where", "filter"), ("having", "filter"), ("qualify", "filter"), ("group", "group_by"))


def _indirect(scope: Scope) -> set[SourceColumn]:
    """The input columns ``scope``'s own clauses use to decide its rows (joins, filters, groups, windows, sorts)."""
    query = scope.expression
    if not isinstance(query, exp.Select):
        return set()
    clauses: list[tuple[exp.Expr, str]] = [
        (query.args[k], kind) for k, kind in _INDIRECT_CLAUSES if query.args.get(k)
    ]
    clauses += [(join.args["on"], "join") for join in query.args.get("joins") or [] if join.args.get("on")]
    if query.args.get("order"):
        clauses.append((query.args["order"], "sort"))
    for window in find_all_in_scope(query, exp.Window):
        clauses += [(e, "window") for e in window.args.get("partition_by") or []]
        if window.args.get("order"):
            clauses.append((window.args["order"], "window"))
    subqueries = {id(s.expression): s for s in scope.subquery_scopes}
    out: set[SourceColumn] = set()
    for clause, kind in clauses:
        for column in find_all_in_scope(clause, exp.Column):
            out |= {SourceColumn(s.table, s.column, kind) for s in _column_sources(scope, column)}
        for subquery in find_all_in_scope(clause, *exp.UNWRAPPED_QUERIES):  # x IN (SELECT y ...): y decides too
            inner = subqueries.get(id(subquery))
            if inner is not None:
                for i in range(len(subquery.selects)):
                    out |= {SourceColumn(s.table, s.column, kind) for s in _resolve(inner, i)}
    return out


def _in_aggregate(column: exp.Column, top: exp.Expr) -> bool:
    node = column.parent
    while node is not None and node is not top.parent:
        if isinstance(node, exp.AggFunc):
            return True
        node = node.parent
    return False


def _in_window_spec(column: exp.Column, top: exp.Expr) -> bool:
    child: exp.Expr = column
    node = column.parent
    while node is not None and child is not top:
        if isinstance(node, exp.Window) and child is not node.this:
            return True
        child, node = node, node.parent
    return False


def _compose(outer: str, inner: str) -> str:
    """The kind of a column used as ``inner`` by a column used as ``outer``: the stronger."""
    return outer if _RANK[outer] >= _RANK[inner] else inner


def _strongest(sources: Iterable[SourceColumn]) -> set[SourceColumn]:
    """One entry per (table, column, kind class): a direct column keeps only its strongest kind; indirect columns
    keep one entry per kind (a column can both join and filter)."""
    best: dict[tuple[str, str], SourceColumn] = {}
    others: set[SourceColumn] = set()
    for s in sources:
        if s.kind not in _RANK:
            others.add(s)
            continue
        key = (s.table, s.column)
        if key not in best or _RANK[s.kind] > _RANK[best[key].kind]:
            best[key] = s
    return {*best.values(), *others}


def _ultimate(
    sources: Iterable[SourceColumn], models: Mapping[str, ModelLineage], *, keep: bool = False
) -> tuple[SourceColumn, ...]:
    """``sources`` with every model's column replaced by its ultimate sources (kinds composed; with ``keep``, the
    indirect kind of ``sources`` is kept as it is)."""
    out: set[SourceColumn] = set()
    for s in sources:
        model = models.get(s.table)
        if model is None:
            out.add(s)
            continue
        for u in model.columns[s.column].ultimate:
            out.add(SourceColumn(u.table, u.column, s.kind if keep else _compose(s.kind, u.kind)))
    return tuple(sorted(_strongest(out)))
