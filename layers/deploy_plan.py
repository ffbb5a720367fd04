"""A plan before deploy: what a changed project changes in a warehouse, and what each model must do about it.

`plan_deploy` compares the project with what is deployed: the tables themselves (columns and types, key,
buckets: what the rounds write) and the record of the last deploy (`layers.deploy_record`: each model's SQL text, and
which models the deployed project had). A warehouse deployed by an earlier version has no record; the plan then
knows a model's deployed SQL only by the digest its newest round recorded (changed or not, the text unknown),
and a removed model by its round records.

Each table gets an action:

* ``create``: not in the warehouse; deploy creates it and its first round builds it in full.
* ``rebuild``: a breaking change (key or buckets changed, columns removed, retyped or reordered, SQL changed other
  than by columns added at the end of its SELECT), or it reads, directly or not, a table with one: its rows so far
  are no longer what its SQL makes of its inputs, so it is recomputed in full.
* ``carry on``: only columns added at the end (its own SQL's, or a ``SELECT *`` over an input that gained
  them), or SQL changed only in form; the table keeps its rows, deploy adds the new columns (nullable) and the
  model's next rounds fill them (a full round in place when its SQL changed).
* ``unchanged``; ``alter source``: a source declared otherwise than its table (deploy stops with
  `DeployMismatch` until they match); ``removed``: deployed, no longer in the project (deploy leaves it).

The cost of a model to build (``rows_to_read``) is the rows of the tables it reads, from metadata only: the
lake's current snapshot's ``total-records`` plus the log records not tiered yet (an upper bound: a key updated
in the log's tail counts twice).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from lakehouse.errors import TableNotFound
from layers.deploy_record import DeployedTable, Deployment, read_deployment
from layers.rounds import LAYERS_PREFIX, latest_round, sql_digest
from layers.sql import DIALECT

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse
    from lakehouse.table.definition import TableDefinition
    from layers.project import Project

__all__ = [
    "CARRY_ON",
    "CREATE",
    "REBUILD",
    "REMOVED",
    "SOURCE_CHANGED",
    "UNCHANGED",
    "DeployPlan",
    "TablePlan",
    "plan_deploy",
]

CREATE = "create"
REBUILD = "rebuild"
CARRY_ON = "carry on"
UNCHANGED = "unchanged"
SOURCE_CHANGED = "alter source"
REMOVED = "removed"
#: Lines of context around each change in a model's SQL diff, and the diff's longest length in lines.
DIFF_CONTEXT = 1
DIFF_LINES = 40


@dataclass(frozen=True)
class TablePlan:
    """One table's changes and its action (see the module). ``changes`` names the kinds of change found
    (``added``, ``removed``, ``table missing``, ``sql changed``, ``columns added``, ``columns removed``,
    ``column types changed``, ``columns reordered``, ``key changed``, ``buckets changed``, ``merge engine
    changed``, ``upstream rebuilt``); ``sql_changed`` is None when the deployed SQL is unknown (no record and no
    round); ``upstream``: the tables with a breaking change that make this model's rebuild necessary."""

    table: str
    kind: str
    action: str
    why: str
    changes: tuple[str, ...] = ()
    columns_added: tuple[str, ...] = ()
    columns_removed: tuple[str, ...] = ()
    columns_retyped: tuple[tuple[str, str, str], ...] = ()
    primary_key: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    buckets: tuple[int, int] | None = None
    sql_changed: bool | None = False
    sql_diff: str = ""
    upstream: tuple[str, ...] = ()
    rows_to_read: int | None = None

    @property
    def breaking(self) -> bool:
        return self.action == REBUILD

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "kind": self.kind,
            "action": self.action,
            "why": self.why,
            "changes": list(self.changes),
            "columns_added": list(self.columns_added),
            "columns_removed": list(self.columns_removed),
            "columns_retyped": [{"column": c, "deployed": a, "declared": b} for c, a, b in self.columns_retyped],
            "primary_key": None
            if self.primary_key is None
            else {"deployed": list(self.primary_key[0]), "declared": list(self.primary_key[1])},
            "buckets": None if self.buckets is None else {"deployed": self.buckets[0], "declared": self.buckets[1]},
            "sql_changed": self.sql_changed,
            "sql_diff": self.sql_diff,
            "upstream": list(self.upstream),
            "rows_to_read": self.rows_to_read,
        }


@dataclass(frozen=True)
class DeployPlan:
    """The plan for every table: the project's sources, its models in dependency order, then removed ones.
    ``recorded``: whether the warehouse had a deployment record (else the plan compared with the tables and
    the rounds' SQL digests only); ``generation``: the record's (0 without one)."""

    tables: tuple[TablePlan, ...]
    recorded: bool
    generation: int = 0
    by_name: dict[str, TablePlan] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {t.table: t for t in self.tables})

    def __getitem__(self, name: str) -> TablePlan:
        return self.by_name[name]

    def actions(self) -> dict[str, str]:
        """Each table's action, by name."""
        return {t.table: t.action for t in self.tables}


def plan_deploy(lh: Lakehouse, project: Project) -> DeployPlan:
    """What deploying ``project`` to ``lh`` changes, per table (see the module). Reads metadata only: the table
    definitions, the deployment record, the newest round records and the tables' snapshot summaries and log
    ends; writes nothing.

    Raises:
        DeploymentRecordError: the warehouse's deployment record is unreadable.
    """
    return _Planner(lh, project).plan()


class _Planner:
    def __init__(self, lh: Lakehouse, project: Project) -> None:
        self.lh = lh
        self.project = project
        self.record: Deployment | None = read_deployment(lh.store)
        self._tables: dict[str, TableDefinition | None] = {}
        self._rows: dict[str, int | None] = {}

    def table(self, name: str) -> TableDefinition | None:
        if name not in self._tables:
            try:
                self._tables[name] = self.lh.table(name)
            except TableNotFound:
                self._tables[name] = None
        return self._tables[name]

    def plan(self) -> DeployPlan:
        own: dict[str, TablePlan] = {}
        for name in self.project.sources:
            own[name] = self._source(name)
        for name in self.project.order:
            own[name] = self._model(name)
        breaking = {n: p for n, p in own.items() if p.action == REBUILD or _source_breaking(p)}
        out = [self._downstream(own[n], breaking) for n in self.project.tables]
        out = [self._costed(p) for p in out]
        out += [self._removed(n, t) for n, t in self._removed_tables().items()]
        record = self.record
        return DeployPlan(tuple(out), recorded=record is not None, generation=record.generation if record else 0)

    # ---- one table ---------------------------------------------------------------------------------

    def _source(self, name: str) -> TablePlan:
        definition = self.project.sources[name].definition
        existing = self.table(name)
        if existing is None:
            return TablePlan(name, "source", CREATE, "not in the warehouse: deploy creates it", changes=("added",))
        declared = [(f.name, f.type) for f in definition.schema]
        diff = _Diff.of(existing, declared, definition.primary_key, definition.buckets, definition.bucket_key)
        engine = (definition.merge_engine, definition.version_column, tuple(definition.aggregates))
        have_engine = (existing.merge_engine, existing.version_column, tuple(existing.aggregates))
        changes = list(diff.changes)
        if definition.primary_key and engine != have_engine:
            changes.append("merge engine changed")
        if not changes:
            return TablePlan(name, "source", UNCHANGED, "its table is as sources.yml declares it")
        why = (
            f"sources.yml declares it otherwise than its table ({'; '.join(diff.words or changes)}): deploy stops "
            f"with DeployMismatch until they match. A source holds ingested data and is never rebuilt: lakestream "
            f"table alter {name} adds, widens, renames and removes its columns"
        )
        return diff.plan(name, "source", SOURCE_CHANGED, why, changes)

    def _model(self, name: str) -> TablePlan:
        model = self.project.models[name]
        existing = self.table(name)
        recorded = self.record.models.get(name) if self.record is not None else None
        if existing is None:
            if recorded is not None:
                why = "deployed, but its table is not in the warehouse (dropped): deploy creates it again and its "
                return TablePlan(name, "model", CREATE, why + "first round builds it in full", ("table missing",))
            why = "new in the project: deploy creates its table and its first round builds it in full"
            return TablePlan(name, "model", CREATE, why, changes=("added",))
        declared = [(c.name, c.type) for c in model.columns]
        diff = _Diff.of(existing, declared, model.primary_key, model.buckets, model.bucket_key)
        changes = list(diff.changes)
        sql_changed, sql_diff, sql_kind = self._sql_change(name, recorded)
        if sql_changed:
            changes.insert(0, "sql changed")
        breaking = list(diff.breaking)
        if sql_kind == "rewritten":
            breaking.insert(0, "its SQL changed (not only by columns added at the end of its SELECT)")
        elif sql_kind == "unknown text":
            breaking.insert(
                0,
                "its SQL changed since its newest round (deployed by an earlier version: the old text "
                "is unknown, so whether only columns were added cannot be told)",
            )
        if breaking:
            why = (
                f"{'; '.join(breaking)}: its rows so far are not what its SQL makes of its inputs, so it is "
                "recomputed in full, and every model reading it after it"
            )
            return diff.plan(name, "model", REBUILD, why, changes, sql_changed, sql_diff)
        if changes:
            parts = []
            if diff.added:
                columns = f"column{'s' if len(diff.added) > 1 else ''} {', '.join(diff.added)}"
                them = "them" if len(diff.added) > 1 else "it"
                if sql_changed:
                    parts.append(
                        f"its SQL adds {columns} at the end: not breaking, its rows so far stay right; deploy adds "
                        f"{them} to its table (nullable) and its next round, a full one in place (its SQL changed), "
                        f"backfills {them}"
                    )
                else:
                    parts.append(
                        f"SELECT * over its inputs gives {columns} at the end: deploy adds {them} to its table "
                        f"(nullable); rows so far get {them} when their keys next change, or all at once by "
                        "lakestream layers rebuild"
                    )
            if sql_kind == "form":
                parts.append(
                    "its SQL changed only in form (spacing, comments): the same query; its next round "
                    "recomputes it in full in place and finds nothing to change"
                )
            return diff.plan(name, "model", CARRY_ON, "; ".join(parts), changes, sql_changed, sql_diff)
        why = "its table and SQL are as deployed"
        if sql_changed is None:
            why = "its table is as declared (its deployed SQL is unknown: no record, and no round yet)"
        return diff.plan(name, "model", UNCHANGED, why, changes, sql_changed, sql_diff)

    def _sql_change(self, name: str, recorded: DeployedTable | None) -> tuple[bool | None, str, str]:
        """(changed, unified diff, kind): kind is ``""`` (unchanged or unknown), ``added`` (only columns added at
        the end of the SELECT), ``form`` (the same query written otherwise), ``rewritten`` or ``unknown text``
        (changed, per a round's digest: no deployed text to compare)."""
        new = self.project.models[name].sql
        if recorded is None or not recorded.sql:
            latest = latest_round(self.lh.store, name)
            if latest is None or not latest.sql:
                return None, "", ""
            changed = latest.sql != sql_digest(new)
            return changed, "", "unknown text" if changed else ""
        old = recorded.sql
        if old == new:
            return False, "", ""
        lines = difflib.unified_diff(
            old.splitlines(), new.splitlines(), f"{name} (deployed)", f"{name} (project)", n=DIFF_CONTEXT, lineterm=""
        )
        diff = list(lines)
        if len(diff) > DIFF_LINES:
            diff = [*diff[:DIFF_LINES], f"... ({len(diff) - DIFF_LINES} more lines)"]
        return True, "\n".join(diff), _sql_kind(old, new)

    def _downstream(self, plan: TablePlan, breaking: dict[str, TablePlan]) -> TablePlan:
        """``plan`` with the breaking changes upstream of it (a model reading, directly or not, a table with one):
        such a model is rebuilt too, unless it is created anyway."""
        if plan.kind != "model" or plan.action == CREATE:
            return plan
        upstream = [u for u in self._upstream(plan.table) if u in breaking]
        if not upstream:
            return plan
        why = f"reads {', '.join(upstream)} (directly or through other models), rebuilt or changed in a breaking way"
        if plan.action == REBUILD:
            why = f"{plan.why}. Also {why}"
        elif plan.action == CARRY_ON:  # its own change is done by the rebuild too
            why = f"{why}. Its own change: {plan.why}"
        changes = plan.changes if plan.action == REBUILD else (*plan.changes, "upstream rebuilt")
        return replace(plan, action=REBUILD, why=why, changes=changes, upstream=tuple(upstream))

    def _upstream(self, name: str) -> list[str]:
        """The tables ``name`` reads, directly or not, in the project's order."""
        seen: set[str] = set()
        todo = list(self.project.models[name].inputs)
        while todo:
            t = todo.pop()
            if t not in seen:
                seen.add(t)
                if t in self.project.models:
                    todo.extend(self.project.models[t].inputs)
        return [t for t in self.project.tables if t in seen]

    def _costed(self, plan: TablePlan) -> TablePlan:
        if plan.kind != "model" or plan.action not in (CREATE, REBUILD, CARRY_ON):
            return plan
        counts = [self.rows(t) for t in self.project.models[plan.table].inputs]
        return replace(plan, rows_to_read=None if None in counts else sum(c for c in counts if c is not None))

    def rows(self, name: str) -> int | None:
        """The rows of table ``name`` from metadata (see the module), or None if it does not exist yet."""
        if name not in self._rows:
            if self.table(name) is None:
                self._rows[name] = None
            else:
                snapshot = self.lh.lake_table(name).current_snapshot()
                lake = int(snapshot.summary["total-records"] or 0) if snapshot and snapshot.summary else 0
                tiered = self.lh.lake_offsets(name)
                ends = self.lh.log(name).end_offsets()
                self._rows[name] = lake + sum(max(0, end - tiered.get(b, 0)) for b, end in ends.items())
        return self._rows[name]

    # ---- tables no longer in the project ---------------------------------------------------------------

    def _removed_tables(self) -> dict[str, str]:
        """Deployed tables the project no longer has, with their kind: from the record, or (without one) the
        models whose rounds are recorded and whose table still exists."""
        project = {t.lower() for t in self.project.tables}
        if self.record is not None:
            return {n: t.kind for n, t in self.record.tables.items() if n.lower() not in project}
        found: dict[str, str] = {}
        for info in self.lh.store.list(LAYERS_PREFIX):
            model, _, rest = info.key[len(LAYERS_PREFIX) :].partition("/")
            if rest.startswith("round-") and model.lower() not in project and self.table(model) is not None:
                found[model] = "model"
        return found

    def _removed(self, name: str, kind: str) -> TablePlan:
        gone = self.table(name) is None
        why = (
            "deployed, no longer in the project: deploy leaves its table and records as they are; drop it "
            f"(lakestream table drop {name} --yes) once nothing reads it"
        )
        if gone:
            why = "deployed, no longer in the project, and its table is gone already"
        return TablePlan(name, kind, REMOVED, why, changes=("removed",))


# ---- comparing a table with its declaration -------------------------------------------------------------


@dataclass(frozen=True)
class _Diff:
    """How a table's columns, key and buckets differ from a declaration; ``breaking``: the differences (in
    words) that make the table's rows wrong, ``words``: all of them."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    retyped: tuple[tuple[str, str, str], ...]
    reordered: bool
    appended: bool
    key: tuple[tuple[str, ...], tuple[str, ...]] | None
    buckets: tuple[int, int] | None
    bucket_key: tuple[str | None, str | None] | None

    @classmethod
    def of(
        cls,
        existing: TableDefinition,
        declared: Sequence[tuple[str, pa.DataType | None]],
        primary_key: Sequence[str],
        buckets: int,
        bucket_key: str | None,
    ) -> _Diff:
        have = existing.schema
        names = [n for n, _ in declared]
        added = tuple(n for n in names if n not in have.names)
        removed = tuple(n for n in have.names if n not in names)
        retyped = tuple(
            (n, str(have.field(n).type), str(t))
            for n, t in declared
            if n in have.names and t is not None and not pa.types.is_null(t) and str(have.field(n).type) != str(t)
        )
        appended = bool(added) and not removed and names[: len(have.names)] == list(have.names)
        common = [n for n in names if n in have.names]
        reordered = common != [n for n in have.names if n in names] or (bool(added) and not removed and not appended)
        key = (tuple(existing.primary_key), tuple(primary_key))
        # a single-column key buckets by it when no bucket key is declared (as `table_differences`)
        want_bucket_key = bucket_key or (primary_key[0] if len(primary_key) == 1 else None)
        bkey = (existing.bucket_key, want_bucket_key)
        return cls(
            added=added,
            removed=removed,
            retyped=retyped,
            reordered=reordered,
            appended=appended,
            key=key if key[0] != key[1] else None,
            buckets=(existing.buckets, buckets) if existing.buckets != buckets else None,
            bucket_key=bkey if want_bucket_key is not None and bkey[0] != bkey[1] else None,
        )

    @property
    def changes(self) -> list[str]:
        out = []
        if self.added:
            out.append("columns added")
        if self.removed:
            out.append("columns removed")
        if self.retyped:
            out.append("column types changed")
        if self.reordered:
            out.append("columns reordered")
        if self.key:
            out.append("key changed")
        if self.buckets or self.bucket_key:
            out.append("buckets changed")
        return out

    @property
    def breaking(self) -> list[str]:
        out = []
        if self.removed:
            out.append(f"column{'s' if len(self.removed) > 1 else ''} {', '.join(self.removed)} removed")
        out += [f"column {c} is {a} in its table, {b} now" for c, a, b in self.retyped]
        if self.reordered:
            out.append("its columns are in another order (or columns were added before existing ones)")
        if self.key:
            out.append(f"its primary key changed from {list(self.key[0])} to {list(self.key[1])}")
        if self.buckets:
            out.append(f"its buckets changed from {self.buckets[0]} to {self.buckets[1]}")
        if self.bucket_key:
            out.append(f"its bucket key changed from {self.bucket_key[0]} to {self.bucket_key[1]}")
        return out

    @property
    def words(self) -> list[str]:
        out = [f"column{'s' if len(self.added) > 1 else ''} {', '.join(self.added)} added"] if self.added else []
        return out + self.breaking

    def plan(
        self,
        name: str,
        kind: str,
        action: str,
        why: str,
        changes: Sequence[str],
        sql_changed: bool | None = False,
        sql_diff: str = "",
    ) -> TablePlan:
        return TablePlan(
            name,
            kind,
            action,
            why,
            changes=tuple(changes),
            columns_added=self.added,
            columns_removed=self.removed,
            columns_retyped=self.retyped,
            primary_key=self.key,
            buckets=self.buckets,
            sql_changed=sql_changed,
            sql_diff=sql_diff,
        )


def _source_breaking(plan: TablePlan) -> bool:
    """A source change that makes its readers' rows wrong (anything but columns added)."""
    return plan.action == SOURCE_CHANGED and set(plan.changes) != {"columns added"}


def _sql_kind(old: str, new: str) -> str:
    """How a model's SQL changed: ``form`` (the same query once parsed), ``added`` (the same query with more
    expressions at the end of its SELECT list) or ``rewritten`` (anything else, or SQL that does not parse)."""
    try:
        before = sqlglot.parse_one(old, read=DIALECT)
        after = sqlglot.parse_one(new, read=DIALECT)
    except sqlglot.errors.SqlglotError:
        return "rewritten"

    def text(query: exp.Expr) -> str:
        return query.sql(dialect=DIALECT, comments=False)

    if text(before) == text(after):
        return "form"
    if not isinstance(before, exp.Select) or not isinstance(after, exp.Select):
        return "rewritten"
    kept = len(before.expressions)
    if len(after.expressions) <= kept:
        return "rewritten"
    trimmed = after.copy()
    trimmed.set("expressions", [e.copy() for e in after.expressions[:kept]])
    return "added" if text(trimmed) == text(before) else "rewritten"
