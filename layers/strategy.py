"""Which incremental strategy each model gets, why, and how its inputs' changed keys reach its output keys.

Strategies (docs/guides/layers.md has the rules):

* ``keyed``: a filter/projection of one table, or an equi-join chain (inner or LEFT joins) from a *driving*
  table through many-to-one joins (each other table joined on its whole primary key; the driving table never the
  right side of a LEFT JOIN), whose output key is the driving table's key. A change in any input recomputes
  exactly the output keys it can affect: for the driving table its changed keys; for another table the driving
  rows that join to its changed keys, found by following `Hop`s.
* ``retract``: GROUP BY whose aggregates are only ``count``, ``sum``, ``avg`` of exact (integer, decimal)
  values: before-images subtract, after-images add, a group whose row count reaches 0 is deleted.
* ``regroup``: GROUP BY with ``min``, ``max``, ``count(DISTINCT)`` (or a sum of floating-point values, a
  HAVING): the groups the changed rows belong to (before and after) are recomputed from their rows.
* ``window``: window functions over one table, every window partitioned by (at least) the same columns of it,
  keyed by the table's key: the window partitions the changed rows belong to (before and after) are recomputed
  from their rows; the output keys they cover are those rows' keys and the recomputed rows' keys.
* ``recompute``: anything else: the whole model is recomputed and diffed against its table (``reason`` says
  what forced it).

Choosing a strategy only reads the project; the runner (`layers.runner`) acts on the `ModelPlan`s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import pyarrow as pa
from sqlglot import exp

from layers.project import Model, Project
from layers.rewrite import merged
from layers.sql import DIALECT

__all__ = [
    "KEYED",
    "RECOMPUTE",
    "REGROUP",
    "RETRACT",
    "STRATEGIES",
    "WINDOW",
    "Aggregate",
    "GroupKey",
    "Hop",
    "InputMapping",
    "ModelPlan",
    "explain",
    "plan_model",
]

KEYED, RETRACT, REGROUP, WINDOW, RECOMPUTE = "keyed", "retract", "regroup", "window", "recompute"
STRATEGIES = (KEYED, RETRACT, REGROUP, WINDOW, RECOMPUTE)
#: Aggregates maintained by retraction (of exact values), and those that need the group's rows.
RETRACTABLE = ("count", "sum", "avg")
REGROUPABLE = ("min", "max", "count_distinct")
#: Aggregates retraction computes from the old row and the changed rows alone (``avg`` would need a hidden sum
#: and count per group: its groups are recomputed from their rows).
RETRACTED = ("count", "sum")

_NONDETERMINISTIC_CLASSES = (
    "Rand",
    "Randn",
    "Randstr",
    "Uuid",
    "CurrentDate",
    "CurrentDatetime",
    "CurrentTime",
    "CurrentTimestamp",
    "CurrentTimestampLTZ",
    "Localtime",
    "Localtimestamp",
)
_NONDETERMINISTIC_NAMES = {
    "rand",
    "randn",
    "random",
    "uuid",
    "shuffle",
    "now",
    "current_date",
    "current_timestamp",
    "localtimestamp",
    "unix_timestamp",
    "monotonically_increasing_id",
    "spark_partition_id",
    "input_file_name",
    "input_file_block_start",
    "input_file_block_length",
}


@dataclass(frozen=True)
class Hop:
    """One step from changed keys towards driving rows: the rows of ``to_table`` (alias ``to_alias``) whose
    ``to_columns`` equal the changed values of ``from_table``'s ``from_columns`` (its primary key, or the key
    of the rows the previous hop found). E.g. ``ods.nation(n_nationkey) -> ods.customer(c_nationkey)``."""

    from_alias: str
    from_table: str
    from_columns: tuple[str, ...]
    to_alias: str
    to_table: str
    to_columns: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.from_table}({', '.join(self.from_columns)}) -> {self.to_table}({', '.join(self.to_columns)})"


@dataclass(frozen=True)
class InputMapping:
    """How one input's changed keys map to the driving table's rows (and so, for ``keyed``, to output keys).

    ``role`` is ``driving`` (``path`` is empty: its changed keys are the affected driving keys) or ``dimension``
    (follow ``path``: each hop's found rows' keys feed the next hop; the last hop finds driving rows). A change
    must be followed both before and after it (a customer moving nation affects its orders under both)."""

    table: str
    alias: str
    role: str
    key: tuple[str, ...]
    path: tuple[Hop, ...] = ()

    def describe(self) -> str:
        if self.role == "driving":
            return f"{self.table}: driving ({', '.join(self.key)})"
        return f"{self.table}: " + ", then ".join(h.describe() for h in self.path)


@dataclass(frozen=True)
class GroupKey:
    """A GROUP BY expression (Spark SQL, columns qualified) and the output column that holds it, if any."""

    expression: str
    output: str | None


@dataclass(frozen=True)
class Aggregate:
    """An aggregate of a GROUP BY model: ``kind`` is count, sum, avg, min, max, count_distinct or another
    function's name; ``argument`` its argument (Spark SQL; None for ``count(*)``); ``output`` the output column
    whose expression holds it; ``retractable`` whether before-images can subtract it exactly."""

    kind: str
    argument: str | None
    output: str
    retractable: bool
    distinct: bool = False

    def describe(self) -> str:
        inner = "*" if self.argument is None else self.argument
        if self.kind == "count_distinct":
            return f"count(DISTINCT {inner})"
        return f"{self.kind}(DISTINCT {inner})" if self.distinct else f"{self.kind}({inner})"


@dataclass(frozen=True)
class ModelPlan:
    """What the executor does for one model each round (see the module)."""

    model: str
    strategy: str
    reason: str
    #: 1-based position in the project's dependency order.
    order: int
    inputs: tuple[str, ...]
    #: keyed: output key column -> driving table column.
    output_key: tuple[tuple[str, str], ...] = ()
    #: keyed and GROUP BY models over a join: the driving table and how each input's changes reach its rows.
    driving: str | None = None
    mappings: tuple[InputMapping, ...] = ()
    #: retract and regroup: the GROUP BY expressions and the aggregates.
    group_by: tuple[GroupKey, ...] = ()
    aggregates: tuple[Aggregate, ...] = ()
    #: retract and regroup: how output columns follow from the old row and the changed rows (None: every
    #: affected group is recomputed from its rows).
    retraction: Retraction | None = None
    #: window: the driving table's columns every window is partitioned by (a partition of the model is a set of
    #: rows with equal values of them)
    partition_by: tuple[str, ...] = ()

    def mapping(self, table: str) -> InputMapping:
        """The mapping of input ``table`` (the first, if the model reads it twice)."""
        return next(m for m in self.mappings if m.table == table)


#: `Retraction.combine`'s answer for a group that must be recomputed from its rows.
RECOMPUTE_GROUP = object()
_EXACT_CASTS = exp.DataType.INTEGER_TYPES | {exp.DataType.Type.DECIMAL}


@dataclass(frozen=True)
class Retraction:
    """How a GROUP BY model's output columns follow from the old row and the changed rows' aggregates:
    ``columns`` pairs each output column with ``key`` (a value of the group), ``count``, ``sum``, ``max`` or
    ``min``; ``group_outputs`` names the output column of each GROUP BY expression; ``count_column`` holds
    ``count(*)`` (how a group is known to be empty)."""

    group_outputs: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]
    count_column: str | None

    def combine(self, old: dict | None, gone: dict | None, came: dict | None) -> dict | None | object:
        """The group's new row, None if it is empty now, or `RECOMPUTE_GROUP`."""
        if old is None and gone is not None:
            return RECOMPUTE_GROUP  # the table lacks a group that had rows: never retract from a wrong base
        if self.count_column is not None:
            rows = sum(sign * r[self.count_column] for sign, r in ((1, old), (-1, gone), (1, came)) if r is not None)
            if rows == 0:
                return None  # every row left the group: nothing to recompute
            if rows < 0:
                return RECOMPUTE_GROUP
        out = {}
        for column, kind in self.columns:
            values = [r[column] if r is not None else None for r in (old, gone, came)]
            o, g, c = values
            if kind == "key":
                out[column] = next(r[column] for r in (came, old, gone) if r is not None)
            elif kind in ("count", "sum"):
                if kind == "sum" and any(r is not None and r[column] is None for r in (old, gone, came)):
                    return RECOMPUTE_GROUP  # a sum over null values: retraction cannot tell null from 0
                total = (o or 0) - (g or 0) + (c or 0)
                if total < 0 or (kind == "sum" and total == 0 and gone is not None):
                    return RECOMPUTE_GROUP
                out[column] = total
            else:  # max, min
                better = (lambda a, b: a >= b) if kind == "max" else (lambda a, b: a <= b)
                if (
                    g is not None
                    and (o is None or better(g, o))
                    and not (c is not None and o is not None and better(c, o))
                ):
                    # the row holding the extreme (or a tie) left, and no new row reaches it: the runner-up is
                    # among the rows that stayed, which only the group's rows can tell
                    return RECOMPUTE_GROUP
                candidates = [v for v in (o, c) if v is not None]
                out[column] = (max if kind == "max" else min)(candidates) if candidates else None
        if self.count_column is None:
            return RECOMPUTE_GROUP if gone is not None else out
        return out if out[self.count_column] > 0 else None


def retraction_of(select: exp.Select, aggregates: Sequence[Aggregate]) -> Retraction | None:
    """The retraction of a GROUP BY model, or None when one of its columns is not a group value or a (cast)
    ``count``, exact ``sum``, ``max`` or ``min`` (then its affected groups are recomputed from their rows)."""
    if select.args.get("having") is not None or not select.args.get("group"):
        return None
    outputs = {p.unalias().sql(): p.alias_or_name for p in select.expressions}
    found = [outputs.get(g.sql()) for g in select.args["group"].expressions]
    group_outputs = tuple(o for o in found if o is not None)
    if len(group_outputs) != len(found):
        return None
    exact = {a.output for a in aggregates if a.retractable}
    columns, count_column = [], None
    for projection in select.expressions:
        name, e = projection.alias_or_name, projection.unalias()
        if not e.find(exp.AggFunc):
            columns.append((name, "key"))
            continue
        casts = []
        while isinstance(e, exp.Cast):
            casts.append(e.to.this)
            e = e.this
        if isinstance(e, exp.Count) and not isinstance(e.this, exp.Distinct):
            kind = "count"
            if e.this is None or isinstance(e.this, exp.Star):
                count_column = name
        elif isinstance(e, exp.Sum) and name in exact:
            kind = "sum"
        elif isinstance(e, exp.Max | exp.Min):
            kind = "max" if isinstance(e, exp.Max) else "min"
        else:
            return None
        if kind in ("count", "sum") and any(t not in _EXACT_CASTS for t in casts):
            return None
        columns.append((name, kind))
    return Retraction(group_outputs, tuple(columns), count_column)


def explain(project: Project) -> list[ModelPlan]:
    """Every model's plan, in dependency order."""
    return [plan_model(project, name) for name in project.order]


def plan_model(project: Project, name: str) -> ModelPlan:
    model = project.models[name]
    base: dict[str, Any] = {"model": name, "order": project.order.index(name) + 1, "inputs": model.inputs}
    query = model.qualified
    if isinstance(query, exp.SetOperation):
        kind = type(query).__name__.upper()
        return ModelPlan(strategy=RECOMPUTE, reason=f"{kind} of SELECTs: recomputed in full", **base)
    select = cast(exp.Select, merged(query))  # not a set operation: one SELECT
    blocker = _blocker(select)
    if blocker:
        return ModelPlan(strategy=RECOMPUTE, reason=f"{blocker}: recomputed in full", **base)
    if select.find(exp.Window):
        return _plan_window(project, model, select, base)
    if select.args.get("group") or any(select.find_all(exp.AggFunc)):
        plan = _plan_group(project, model, select, base)
        if isinstance(model.query, exp.Select) and model.query.args.get("distinct"):  # `layers.sql.distinct_as_group`
            plan = replace(plan, reason=f"SELECT DISTINCT, planned as a GROUP BY of its columns: {plan.reason}")
        return plan
    return _plan_keyed(project, model, select, base)


# -- what rules out incremental maintenance ------------------------------------------------------------------


def _blocker(select: exp.Select) -> str | None:
    for node in select.walk():
        name = type(node).__name__
        if name in _NONDETERMINISTIC_CLASSES or (
            isinstance(node, exp.Anonymous) and str(node.this).lower() in _NONDETERMINISTIC_NAMES
        ):
            return f"non-deterministic function {_sql(node)} (a recompute would not give the same rows)"
        if isinstance(node, exp.Explode | exp.Lateral | exp.Unnest):
            return f"generator {_sql(node)}"
    if select.args.get("distinct"):
        return "SELECT DISTINCT"
    if select.args.get("limit") or select.args.get("offset"):
        return "LIMIT/OFFSET (which rows it keeps depends on all of them)"
    if select.args.get("with_") or select.args.get("with"):
        return "a CTE that could not be merged into the query"
    if not (select.args.get("from_") or select.args.get("from")):
        return "a SELECT without FROM"
    relations = _relations(select)
    for relation in relations:
        if not isinstance(relation, exp.Table) or not relation.db:
            return f"a subquery in FROM that could not be merged ({_sql(relation)})"
    for node in select.find_all(exp.Select, exp.Subquery, exp.Exists):
        if node is not select:
            return f"a subquery in an expression ({_sql(node)})"
    group = select.args.get("group")
    if group and group.find(exp.Rollup, exp.Cube, exp.GroupingSets):
        return "GROUPING SETS, CUBE or ROLLUP"
    return None


def _from(select: exp.Select) -> exp.From:
    from_ = select.args.get("from_") or select.args.get("from")
    assert from_ is not None  # a SELECT without FROM is recomputed (`_blocker`) before it is looked into
    return from_


def _relations(select: exp.Select) -> list[exp.Expr]:
    return [_from(select).this, *(j.this for j in select.args.get("joins") or [])]


# -- the join tree: a driving table and many-to-one joins ----------------------------------------------------


@dataclass
class _JoinTree:
    aliases: dict[str, str]  # alias -> table
    edges: dict[tuple[str, str], list[tuple[str, str]]]  # (alias a, alias b) -> [(column of a, column of b)]
    left: frozenset[str] = frozenset()  # aliases joined by LEFT [OUTER] JOIN (a row without a match: nulls)


def _join_tree(select: exp.Select) -> _JoinTree | str:
    """The aliases and the equality edges of the FROM/JOIN clause, or why it is not an equi-join of inner and
    left joins."""
    from_ = _from(select)
    aliases = {from_.this.alias_or_name: f"{from_.this.db}.{from_.this.name}"}
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    left: set[str] = set()
    for join in select.args.get("joins") or []:
        table = join.this
        aliases[table.alias_or_name] = f"{table.db}.{table.name}"
        side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
        if kind in ("SEMI", "ANTI"):
            return f"{side} {kind} JOIN {aliases[table.alias_or_name]}".strip()
        if side == "LEFT":
            left.add(table.alias_or_name)
        elif side:
            return f"{side} OUTER JOIN {aliases[table.alias_or_name]} (rows without a match)"
        on = join.args.get("on")
        if kind == "CROSS" or on is None:
            return f"a cross join with {aliases[table.alias_or_name]} (write it as JOIN ... ON equalities)"
        for conjunct in on.flatten() if isinstance(on, exp.And) else [on]:
            tables = {c.table for c in conjunct.find_all(exp.Column)}
            if len(tables) <= 1:
                continue  # a filter on one table
            left_ = conjunct.this if isinstance(conjunct, exp.EQ) else None
            right = conjunct.expression if isinstance(conjunct, exp.EQ) else None
            if not (isinstance(left_, exp.Column) and isinstance(right, exp.Column) and left_.table != right.table):
                return f"a join condition that is not an equality of two tables' columns ({_sql(conjunct)})"
            edges.setdefault((left_.table, right.table), []).append((left_.name, right.name))
            edges.setdefault((right.table, left_.table), []).append((right.name, left_.name))
    return _JoinTree(aliases, edges, frozenset(left))


def _mappings(project: Project, tree: _JoinTree, driving: str) -> tuple[InputMapping, ...] | str:
    """Each alias's mapping to the driving alias's rows, walking the join graph from ``driving``; every other
    table must be joined to its parent on its whole primary key (many-to-one), and the graph must be a tree."""
    parents: dict[str, str] = {driving: driving}
    frontier = [driving]
    while frontier:
        nxt = []
        for alias in frontier:
            for (a, b), pairs in sorted(tree.edges.items()):
                if a != alias or b == parents[alias] or b == alias:
                    continue
                if b in parents:
                    return f"join conditions form a cycle through {tree.aliases[b]}"
                key = project.primary_key_of(tree.aliases[b])
                child_columns = [p[1] for p in pairs]
                if not key or not set(key) <= set(child_columns):
                    return (
                        f"{tree.aliases[b]} is joined on {child_columns}, not on its primary key {list(key)}, so a "
                        f"row of {tree.aliases[driving]} may match several of its rows"
                    )
                parents[b] = alias
                nxt.append(b)
        frontier = nxt
    missing = sorted(set(tree.aliases) - set(parents))
    if missing:
        return f"{tree.aliases[missing[0]]} is not joined to {tree.aliases[driving]} by equalities"
    out = []
    for alias, table in tree.aliases.items():
        key = project.primary_key_of(table)
        if alias == driving:
            out.append(InputMapping(table, alias, "driving", key))
            continue
        path, child = [], alias
        while child != driving:
            parent = parents[child]
            # the child's whole primary key, in key order (further equalities only filter joined rows)
            key_of_child = project.primary_key_of(tree.aliases[child])
            pairs = [next(p for p in tree.edges[(child, parent)] if p[0] == k) for k in key_of_child]
            columns = tuple(p[0] for p in pairs)
            to_columns = tuple(p[1] for p in pairs)
            path.append(Hop(child, tree.aliases[child], columns, parent, tree.aliases[parent], to_columns))
            child = parent
        out.append(InputMapping(table, alias, "dimension", key, tuple(path)))
    return tuple(out)


def _driving_candidates(tree: _JoinTree) -> list[str]:
    return list(tree.aliases)  # the FROM table first


# -- keyed ---------------------------------------------------------------------------------------------------


def _plan_keyed(project: Project, model: Model, select: exp.Select, base: dict) -> ModelPlan:
    tree = _join_tree(select)
    if isinstance(tree, str):
        return ModelPlan(strategy=RECOMPUTE, reason=f"{tree}: recomputed in full", **base)
    sources: dict[str, tuple[str, str]] = {}  # output key column -> (alias, column)
    for projection in select.expressions:
        if projection.alias_or_name in model.primary_key:
            e = projection.unalias()
            if not isinstance(e, exp.Column):
                return ModelPlan(
                    strategy=RECOMPUTE,
                    reason=f"key column {projection.alias_or_name} is computed ({_sql(e)}), not a table's key column: "
                    "recomputed in full",
                    **base,
                )
            sources[projection.alias_or_name] = (e.table, e.name)
    aliases = {a for a, _ in sources.values()}
    driving = next(iter(aliases)) if len(aliases) == 1 else None
    driving_key = project.primary_key_of(tree.aliases[driving]) if driving else ()
    if driving is None or not driving_key or sorted(c for _, c in sources.values()) != sorted(driving_key):
        described = ", ".join(f"{o} = {tree.aliases[a]}.{c}" for o, (a, c) in sources.items())
        return ModelPlan(
            strategy=RECOMPUTE,
            reason=f"the output key ({described}) is not the primary key of one input (the driving table): "
            "recomputed in full",
            **base,
        )
    if driving in tree.left:
        return ModelPlan(
            strategy=RECOMPUTE,
            reason=f"{tree.aliases[driving]}, whose key is the output key, is the right side of a LEFT JOIN (rows "
            "of the left side without a match would have no key): recomputed in full",
            **base,
        )
    mappings = _mappings(project, tree, driving)
    if isinstance(mappings, str):
        return ModelPlan(strategy=RECOMPUTE, reason=f"{mappings}: recomputed in full", **base)
    table = tree.aliases[driving]
    others = [m.table for m in mappings if m.role == "dimension"]
    if others:
        # a dimension LEFT JOINed on its whole key is many-to-one like an inner join: a driving row without a
        # match keeps its row with nulls instead of losing it, and still depends on that row and key alone
        joins = "inner and left equi-joins" if tree.left else "inner equi-joins"
        reason = (
            f"{joins} from {table}, whose key is the output key, to {', '.join(others)} on their primary "
            "keys: each change recomputes only the output keys it reaches"
        )
    else:
        reason = f"filter/projection of {table}, keyed by its key: each change recomputes only its own key"
    return ModelPlan(
        strategy=KEYED,
        reason=reason,
        output_key=tuple((o, c) for o, (_, c) in sources.items()),
        driving=table,
        mappings=mappings,
        **base,
    )


# -- window functions ----------------------------------------------------------------------------------------


def _plan_window(project: Project, model: Model, select: exp.Select, base: dict) -> ModelPlan:
    """Window functions over one table whose every window is partitioned by the same columns (at least): a
    partition holds all the rows any of its windows sees, so recomputing the partitions of the changed rows
    recomputes every row they affect. The output is keyed like a filter of the table (its key)."""
    windows = list(select.find_all(exp.Window))
    first = _sql(windows[0].this)

    def recompute(why: str, function: str = first) -> ModelPlan:
        return ModelPlan(strategy=RECOMPUTE, reason=f"window function {function}: {why}: recomputed in full", **base)

    if select.args.get("group") or any(a.find_ancestor(exp.Window) is None for a in select.find_all(exp.AggFunc)):
        return recompute("over a GROUP BY (the groups' rows, then the windows)")
    tree = _join_tree(select)
    if isinstance(tree, str) or len(tree.aliases) > 1:
        return recompute("over a join (only windows over one table are followed by partition)")
    (table,) = tree.aliases.values()
    shared: set[str] | None = None
    for window in windows:
        partition = window.args.get("partition_by") or []
        if not partition:
            return recompute("no PARTITION BY (each of its rows depends on every row)", _sql(window.this))
        columns = {c.name for c in partition if isinstance(c, exp.Column)}
        shared = columns if shared is None else shared & columns
    if not shared:
        return recompute("its windows share no PARTITION BY column of the table (a partition is then every row)")
    keyed = _plan_keyed(project, model, select, base)
    if keyed.strategy != KEYED:
        return replace(keyed, reason=f"window function {first}: {keyed.reason}")
    partition_by = tuple(sorted(shared))
    return replace(
        keyed,
        strategy=WINDOW,
        partition_by=partition_by,
        reason=f"window functions partitioned by {', '.join(partition_by)} over {table}, keyed by its key: the "
        "partitions the changed rows belong to (before and after) are recomputed from their rows",
    )


# -- GROUP BY ------------------------------------------------------------------------------------------------


def _plan_group(project: Project, model: Model, select: exp.Select, base: dict) -> ModelPlan:
    group = select.args.get("group")
    if not group:
        return ModelPlan(strategy=RECOMPUTE, reason="an aggregate without GROUP BY: recomputed in full", **base)
    tree = _join_tree(select)
    if isinstance(tree, str):
        return ModelPlan(strategy=RECOMPUTE, reason=f"GROUP BY over {tree}: recomputed in full", **base)
    if tree.left:  # the groups of unmatched rows (null dimension columns) are not followed incrementally
        outer = ", ".join(sorted(tree.aliases[a] for a in tree.left))
        return ModelPlan(strategy=RECOMPUTE, reason=f"GROUP BY over a LEFT JOIN of {outer}: recomputed in full", **base)
    mappings: tuple[InputMapping, ...] | str = "no table"
    driving = None
    for candidate in _driving_candidates(tree):
        mappings = _mappings(project, tree, candidate)
        if not isinstance(mappings, str):
            driving = candidate
            break
    if driving is None:
        reason = f"GROUP BY over a join where {mappings}: recomputed in full"
        return ModelPlan(strategy=RECOMPUTE, reason=reason, **base)
    outputs = {p.unalias().sql(): p.alias_or_name for p in select.expressions}
    group_by = tuple(GroupKey(_sql(g), outputs.get(g.sql())) for g in group.expressions)
    schemas = {alias: project.schema_of(table) for alias, table in tree.aliases.items()}
    aggregates = []
    for projection in select.expressions:
        for agg in projection.find_all(exp.AggFunc):
            aggregates.append(_aggregate(agg, projection.alias_or_name, schemas))
    keys = ", ".join(g.output or g.expression for g in group_by)
    other = [a for a in aggregates if a.kind not in RETRACTABLE + REGROUPABLE]
    if other:
        return ModelPlan(
            strategy=RECOMPUTE,
            reason=f"GROUP BY {keys}: aggregate {other[0].describe()} is not maintained incrementally: recomputed "
            "in full",
            group_by=group_by,
            aggregates=tuple(aggregates),
            **base,
        )
    common: dict[str, Any] = {"group_by": group_by, "aggregates": tuple(aggregates), "driving": tree.aliases[driving]}
    common["mappings"] = mappings
    retraction = retraction_of(select, aggregates)
    counted = retraction is not None and retraction.count_column is not None
    blocking = [a for a in aggregates if not a.retractable]
    having = select.args.get("having") is not None
    if having or blocking or not counted:
        if having:
            cause = "HAVING keeps or drops whole groups"
        elif blocking:
            why = ", ".join(a.describe() for a in blocking)
            what = "need" if len(blocking) > 1 else "needs"
            cause = f"{why} {what} the group's rows when a row leaves it"
        elif retraction is None:
            cause = "a GROUP BY expression is not an output column (retraction finds a group's old row by it)"
        else:
            cause = "no count(*) column tells when a group loses its last row (add one to have it retracted)"
        retractable = sorted({a.describe() for a in aggregates if a.retractable})
        also = f" ({', '.join(retractable)} alone would be maintained by retraction)" if retractable else ""
        reason = f"GROUP BY {keys}: {cause}, so the groups the changed rows belong to are recomputed{also}"
        extremes = blocking and all(a.kind in ("min", "max") for a in blocking)
        if not having and counted and extremes:
            reason = (
                f"GROUP BY {keys}: {why} {what} the group's rows only when a row holding the group's extreme leaves "
                "it, so the groups the changed rows belong to are updated by retraction (the old row minus the rows "
                "that left plus those that came) and only a group whose extreme left is recomputed from its rows"
            )
        else:
            retraction = None
        return ModelPlan(strategy=REGROUP, reason=reason, retraction=retraction, **common, **base)
    listed = ", ".join(a.describe() for a in aggregates) or "no aggregates"
    return ModelPlan(
        strategy=RETRACT,
        retraction=retraction,
        reason=f"GROUP BY {keys} with {listed}: before-images subtract, after-images add; a group whose row count "
        "reaches 0 is deleted",
        **common,
        **base,
    )


def _aggregate(agg: exp.AggFunc, output: str, schemas: Mapping[str, pa.Schema | None]) -> Aggregate:
    arg = agg.this
    distinct = isinstance(arg, exp.Distinct)
    if distinct:
        arg = arg.expressions[0] if len(arg.expressions) == 1 else arg
    argument = None if isinstance(arg, exp.Star) or arg is None else _sql(arg)
    name = type(agg).__name__.lower()
    if isinstance(agg, exp.Count):
        kind = "count_distinct" if distinct else "count"
    elif isinstance(agg, exp.Sum | exp.Avg | exp.Min | exp.Max):
        kind = name
    else:
        kind = agg.sql(dialect=DIALECT).split("(")[0].lower()  # Spark's name (collect_list, not array_agg)
    retractable = kind in RETRACTED and not distinct and (kind == "count" or _exact(arg, schemas))
    return Aggregate(kind, argument, output, retractable, distinct)


def _exact(arg: exp.Expr | None, schemas: Mapping[str, pa.Schema | None]) -> bool:
    """Whether a sum of ``arg`` is exact (so retraction equals recompute): every column in it an integer or a
    decimal, and no cast to a floating-point type. Unknown types are not exact."""
    if arg is None:
        return False
    for conversion in arg.find_all(exp.Cast):
        if conversion.to.this not in exp.DataType.INTEGER_TYPES | {exp.DataType.Type.DECIMAL}:
            return False
    for column in arg.find_all(exp.Column):
        schema = schemas.get(column.table)
        if schema is None or column.name not in schema.names:
            return False
        t = schema.field(column.name).type
        if not (pa.types.is_integer(t) or pa.types.is_decimal(t)):
            return False
    return isinstance(arg, exp.Column | exp.Cast | exp.Binary | exp.Paren | exp.Neg | exp.Literal)


def _sql(e: exp.Expr, limit: int = 80) -> str:
    text = " ".join(e.sql(dialect=DIALECT).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_mappings(mappings: Sequence[InputMapping]) -> str:
    return "; ".join(m.describe() for m in mappings)
