"""SQL rewrites of a model's query for its incremental rounds (sqlglot, Spark dialect): subqueries merged, the
distinct groups of a GROUP BY, the query restricted to given groups (or window partitions), the query over two
sides at once, and the group expressions that invert to a condition on an input column."""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

from sqlglot import exp
from sqlglot.optimizer.merge_subqueries import merge_subqueries

__all__ = ["SIDE", "group_terms", "groups_query", "merged", "restrict_to_groups", "sided", "windows_inlined"]

#: The column tagging the two sides (0: as of the start, 1: as of the end) of a retraction's one query.
SIDE = "__side"


@overload
def merged(query: exp.Select) -> exp.Select: ...
@overload
def merged(query: exp.Query) -> exp.Query: ...
def merged(query: exp.Query) -> exp.Query:
    """``query`` with its subqueries in FROM merged where sqlglot can, and a filter over windowed rows written as
    the windows' QUALIFY (`windows_inlined`)."""
    return windows_inlined(merge_subqueries(query.copy())) if isinstance(query, exp.Select) else query


def windows_inlined(select: exp.Select) -> exp.Select:
    """``SELECT <columns of s> FROM (SELECT ..., <window> AS w FROM t ...) AS s WHERE <condition on s>`` (the
    usual "latest row per key" shape, which sqlglot does not merge: its WHERE must see the windows' values) as
    the one SELECT it means: the inner query with the outer projections and the outer condition as a ``QUALIFY``
    (a filter after the windows, as the outer WHERE is). Any other shape is returned as it is."""
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None:
        return select
    with_ = select.args.get("with_") or select.args.get("with")
    relation = from_.this
    if isinstance(relation, exp.Subquery) and isinstance(relation.this, exp.Select) and with_ is None:
        inner, alias = relation.this, relation.alias_or_name
    elif (  # WITH w AS (SELECT ... windows ...) SELECT ... FROM w WHERE ...: the same shape
        with_ is not None
        and len(with_.expressions) == 1
        and isinstance(relation, exp.Table)
        and not relation.db
        and relation.name == with_.expressions[0].alias_or_name
        and isinstance(with_.expressions[0].this, exp.Select)
    ):
        inner, alias = with_.expressions[0].this, relation.alias_or_name
    else:
        return select
    outer_parts = ("joins", "group", "having", "qualify", "distinct", "limit", "offset", "order")
    inner_parts = ("group", "having", "distinct", "limit", "offset", "order", "with_", "with")
    where = select.args.get("where")
    outer = [*select.expressions, *([where] if where is not None else [])]
    if (
        not inner.find(exp.Window)
        or any(select.args.get(p) for p in outer_parts)
        or any(inner.args.get(p) for p in inner_parts)
        or any(e.find(exp.Window, exp.AggFunc, exp.Subquery, exp.Select) for e in outer)
        or any(isinstance(p, exp.Star) for p in (*select.expressions, *inner.expressions))
    ):
        return select
    outputs = {p.alias_or_name: p.unalias() for p in inner.expressions}
    if any(c.table != alias or c.name not in outputs for e in outer for c in e.find_all(exp.Column)):
        return select

    def inline(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column):
            value = outputs[node.name].copy()
            return value if isinstance(value, exp.Column | exp.Literal) else exp.Paren(this=value)
        return node

    out = inner.copy()
    out.set("expressions", [exp.alias_(p.unalias().transform(inline), p.alias_or_name) for p in select.expressions])
    if where is not None:
        condition = where.this.transform(inline)
        existing = out.args.get("qualify")
        out.set("qualify", exp.Qualify(this=exp.and_(existing.this, condition) if existing else condition))
    return out


def group_terms(select: exp.Select) -> list[tuple[int, str, str]]:
    """The group expressions of a one-input GROUP BY that can be inverted to a condition on an input column:
    (group index, column, kind) with kind ``eq`` (the group expression is the column itself) or ``month``
    (``trunc(col, 'MM')``, possibly cast). A cast column is not inverted: a cast may merge values."""
    terms: list[tuple[int, str, str]] = []
    for i, g in enumerate(select.args["group"].expressions):
        if isinstance(g, exp.Column):
            terms.append((i, g.name, "eq"))
            continue
        inner = g
        while isinstance(inner, exp.Cast):
            inner = inner.this
        if (
            isinstance(inner, exp.DateTrunc | exp.TimestampTrunc)
            and isinstance(inner.this, exp.Column)
            and str(unit.name if (unit := inner.args.get("unit")) else "").upper() in ("MM", "MON", "MONTH")
        ):
            terms.append((i, inner.this.name, "month"))
    return terms


def groups_query(select: exp.Select) -> exp.Select:
    """``SELECT DISTINCT <group expressions> AS __g0, ... FROM ... WHERE ...`` of a GROUP BY model."""
    out = select.copy()
    groups = out.args["group"].expressions
    out.set("expressions", [exp.alias_(g.copy(), f"__g{i}") for i, g in enumerate(groups)])
    for part in ("group", "having", "order", "limit"):
        out.set(part, None)
    out.set("distinct", exp.Distinct())
    return out


def restrict_to_groups(
    select: exp.Select, view: str, expressions: Sequence[exp.Expr] | None = None
) -> exp.Select:
    """The model's query restricted to the groups in ``view`` (``__g0``, ...): a LEFT SEMI JOIN on the group
    expressions (or on ``expressions``: a window model's partition columns), null-safe. The join restricts the
    rows FROM gives, before any WHERE, GROUP BY or window sees them."""
    out = select.copy()
    groups = expressions if expressions is not None else out.args["group"].expressions
    condition = exp.and_(
        *(
            exp.NullSafeEQ(this=exp.column(f"__g{i}", table="__groups"), expression=g.copy())
            for i, g in enumerate(groups)
        )
    )
    join = exp.Join(
        this=exp.Table(this=exp.to_identifier(view), alias=exp.TableAlias(this=exp.to_identifier("__groups"))),
        side="LEFT",
        kind="SEMI",
        on=condition,
    )
    out.set("joins", [*(out.args.get("joins") or []), join])
    return out


def sided(select: exp.Select) -> exp.Select | None:
    """``select`` (a GROUP BY over one table, no join) with a column ``__side`` of its table added to its
    output and its GROUP BY, or None for other shapes."""
    from_ = select.args.get("from_") or select.args.get("from")
    if (
        select.args.get("joins")
        or not select.args.get("group")
        or select.args.get("limit")  # a LIMIT would cut across both sides
        or from_ is None
        or not isinstance(from_.this, exp.Table)
        or any(isinstance(e, exp.Star) for e in select.expressions)
    ):
        return None
    side = exp.column(SIDE, table=from_.this.alias_or_name)
    out = select.copy()
    out.set("expressions", [*out.expressions, side.copy()])
    out.set("group", exp.Group(expressions=[*out.args["group"].expressions, side.copy()]))
    return out
