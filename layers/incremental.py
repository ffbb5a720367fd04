"""The rows of an incremental round (`RoundRows.compute`): which keys or groups the changes in a round's range can
affect, their new rows (the model's SQL over the inputs restricted to them, as of the round's end) and their old
rows (the model's table as of the round's start), and the difference to append.

* ``keyed``: the changed keys of the driving table, plus, for each dimension, the driving rows that join to its
  changed keys (hop by hop, as of the round's end: a row whose join column changed is itself a changed row).
  Every input is read restricted to those rows and what they join to, so a round reads its changes, not the table.
* ``window``: the window partitions of the driving table's changed rows (before and after), recomputed from all
  their rows as of the round's end; the keys covered are the changed rows' and the recomputed rows'.
* ``retract``/``regroup``: the groups of those driving rows' joined rows, both as of the round's start (where
  they were) and as of its end (where they are); retraction settles what it can from the old row and the changed
  rows' aggregates, the model's SQL recomputes the rest (a ``LEFT SEMI JOIN`` on the group expressions).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, BooleanExpression, GreaterThanOrEqual, In, LessThanOrEqual
from sqlglot import exp

from lakehouse.merge.keyed_rows import distinct_rows, semi_join
from lakehouse.read.union import IN_LIST_LIMIT
from layers.group_rows import group_rows, groups_filter, partitions_filter
from layers.rewrite import SIDE, groups_query, merged, restrict_to_groups, sided
from layers.rounds import RoundRecord
from layers.spark_sql import Filtered, SparkSql, read_columns, referenced_columns
from layers.strategy import KEYED, RECOMPUTE_GROUP, WINDOW, ModelPlan, Retraction
from layers.writer import check_keys, diff_rows

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse
    from layers.project import Project

__all__ = ["Handover", "RoundRows", "contiguous_end"]

Positions = dict[str, dict[int, int]]


class RoundRows:
    """Computes incremental rounds' rows for a project's models over one warehouse; ``sql`` gives the Spark SQL
    engine (started by the runner on first need). ``handed`` holds, per model, what its last incremental round of
    the current `layers.runner.Runner.run_once` changed (`Handover`)."""

    def __init__(self, lh: Lakehouse, project: Project, sql: Callable[[], SparkSql]) -> None:
        self.lh = lh
        self.project = project
        self._sql = sql
        self.handed: dict[str, Handover] = {}

    @property
    def sql(self) -> SparkSql:
        return self._sql()

    def compute(self, record: RoundRecord, plan: ModelPlan) -> tuple[pa.Table, pa.Table, pa.Table, int, int, str]:
        """(upserts, key-only deletes, the old rows they replace or delete, input changes, affected, note)."""
        assert record.start is not None
        model = self.project.models[record.model]
        driving_keys, changes = self._affected_driving_keys(plan, record.start, record.end)
        key = model.primary_key
        empty = self._output_schema(record.model).empty_table()
        if driving_keys.num_rows == 0:
            return empty, empty.select(list(key)), empty, changes, 0, ""
        select = cast(exp.Select, merged(model.qualified))  # a model planned incrementally is one SELECT
        note = ""
        old: pa.Table | None = None  # the old rows of the keys the round covers, once read
        if plan.strategy == KEYED:
            views = self._restricted(plan, driving_keys, record.end)
            new = self.sql.run(select, views)
            wanted = driving_keys.rename_columns(
                [next(o for o, d in plan.output_key if d == c) for c in driving_keys.column_names]
            ).select(list(key))
        elif plan.strategy == WINDOW:
            new, partitions = self._partitions(record, select, plan)
            driving = driving_keys.rename_columns(
                [next(o for o, d in plan.output_key if d == c) for c in driving_keys.column_names]
            ).select(list(key))
            # the changed rows' keys (one that left the model is deleted) and every row of their partitions
            wanted = distinct_rows(pa.concat_tables([driving, new.select(list(key)).cast(driving.schema)]))
            note = f"this round: {partitions} window partition(s) recomputed from their rows"
        else:
            if len(plan.mappings) == 1:
                # one input: its before-images are the rows that left, its new rows those that came
                d = plan.driving
                assert d is not None  # every incremental plan has a driving table
                before, after = self._images(d, record.start[d], record.end[d], referenced_columns(select, d))
            else:
                before = self._restricted(plan, driving_keys, record.start)
                after = self._restricted(plan, driving_keys, record.end)
            retraction = plan.retraction
            if retraction is not None:
                new, wanted, old, regrouped = self._retract(record, select, retraction, before, after)
                note = (
                    f"this round: {wanted.num_rows} group(s) by retraction, {regrouped} of them recomputed from their "
                    "rows"
                )
            else:
                distinct_groups = groups_query(select)
                groups = distinct_rows(
                    pa.concat_tables(
                        [self.sql.run(distinct_groups, before), self.sql.run(distinct_groups, after)],
                        promote_options="permissive",
                    )
                )
                new = self._regroup(record, select, groups)
                index = {g.output: i for i, g in enumerate(plan.group_by) if g.output}
                wanted = pa.table({k: groups[f"__g{index[k]}"] for k in key})
                note = f"this round: {groups.num_rows} group(s) recomputed from their rows"
        check_keys(record.model, new, key)  # before the semi join, which would drop null keys unseen
        new = semi_join(new, wanted, key)  # keys outside the round's (a table read under two aliases)
        if old is None:
            old = self._read_rows(record.model, record.output, wanted)
        upserts, deletes = self._diff(record.model, new, old)
        left = semi_join(old, pa.concat_tables([upserts.select(list(key)), deletes]), key) if old.num_rows else old
        return upserts, deletes, left.select(empty.schema.names).cast(empty.schema), changes, wanted.num_rows, note

    def _images(
        self, table: str, start: Mapping[int, int], end: Mapping[int, int], columns: Sequence[str] | None = None
    ) -> tuple[dict, dict]:
        """The rows of ``table`` that changes in [start, end) replaced (as of ``start``) and those that replaced
        them (as of ``end``), from its net changelog with before-images: the old rows are looked up once, pruned
        by key statistics, and the new ones come from the log. Only ``columns`` (default all; the key too).
        When ``table`` is a model whose round in this `run_once` wrote exactly [start, end), that round's old and
        new rows are those images already (`Handover`): nothing is read."""
        handed = self.handed.get(table)
        if handed is not None and handed.covers(start, end):
            key = self.project.primary_key_of(table)
            names = [n for n in self.lh.table(table).schema.names if columns is None or n in columns or n in key]
            return {table: handed.before.select(names)}, {table: handed.after.select(names)}
        changes = self.lh.changes(table, start, end, before_images=True, columns=columns)
        names = [n for n in self.lh.table(table).schema.names if n in changes.column_names]
        op = changes["_op"]
        left = pc.is_in(op, pa.array(["update_before", "delete"]))
        return {table: changes.filter(left).select(names)}, {table: changes.filter(pc.invert(left)).select(names)}

    def _partitions(self, record: RoundRecord, select: exp.Select, plan: ModelPlan) -> tuple[pa.Table, int]:
        """A window model's rows of the partitions the round's changed rows belong to, before and after (their
        values of ``plan.partition_by``), from all their rows as of the round's end (read here by the values of
        the first partition column, or by Spark with them pushed into its read when one is null); and the number
        of partitions."""
        assert record.start is not None  # an incremental round has a start
        (mapping,) = plan.mappings
        table, columns = mapping.table, list(plan.partition_by)
        before, after = self._images(table, record.start[table], record.end[table], columns)
        partitions = distinct_rows(
            pa.concat_tables([before[table].select(columns), after[table].select(columns)])
        ).rename_columns([f"__g{i}" for i in range(len(columns))])
        views: dict[str, Any] = {table: record.end[table], "__groups": partitions}
        if partitions["__g0"].null_count == 0:
            # the partitions' rows read here (the first partition column matched as each batch is read: an IN
            # list or a range pushed into the read, then a hash lookup), so Spark gets only them; the rows the
            # round writes are theirs anyway. The semi join still decides (the other partition columns)
            values = partitions.select(["__g0"]).rename_columns([columns[0]])
            views[table] = self._read_in(table, record.end[table], values, self._columns(select, table))
        else:  # a null partition value: Spark reads, with a filter of the values (and IS NULL) pushed
            views[table] = Filtered(record.end[table], partitions_filter(columns[0], partitions["__g0"]))
        expressions = [exp.column(c, table=mapping.alias) for c in columns]
        return self.sql.run(restrict_to_groups(select, "__groups", expressions), views), partitions.num_rows

    def _columns(self, select: exp.Select, table: str) -> list[str] | None:
        """`read_columns` of ``table`` for the model's query."""
        return read_columns(select, table, self.project.primary_key_of(table), self.lh.table(table).schema.names)

    def _regroup(self, record: RoundRecord, select: exp.Select, groups: pa.Table) -> pa.Table:
        """The model's rows of ``groups`` (``__g0``, ... in GROUP BY order), from all their rows as of the
        round's end. A one-input model whose group expressions can be inverted reads only the groups' rows, in
        the driver (`group_rows`); otherwise the input is read by Spark, with a filter of the groups' rows
        pushed into the read where one can be built (`groups_filter`)."""
        inputs = self.project.models[record.model].inputs
        views: dict[str, Any] = {t: record.end[t] for t in inputs}
        if len(inputs) == 1:
            (table,) = inputs
            rows = group_rows(self.lh, table, record.end[table], select, groups)
            if rows is not None:
                views[table] = rows
            else:
                pushed = groups_filter(select, groups)
                if pushed is not None:  # only the groups' rows cross into Spark (the semi join still decides)
                    views[table] = Filtered(record.end[table], pushed)
        views["__groups"] = groups
        return self.sql.run(restrict_to_groups(select, "__groups"), views)

    def _retract(
        self,
        record: RoundRecord,
        select: exp.Select,
        retraction: Retraction,
        before: Mapping[str, pa.Table],
        after: Mapping[str, pa.Table],
    ) -> tuple[pa.Table, pa.Table, pa.Table, int]:
        """New rows of the groups the changed rows left or joined: the old row minus the aggregates of the
        changed rows as of the start plus those as of the end (the model's own SQL over the restricted inputs
        computes both). A group is recomputed from its rows when retraction cannot settle it: the row holding
        its max/min left, a sum reached zero from rows that may be null, no ``count(*)`` says it emptied.
        Returns (new rows, the keys they cover, those keys' old rows, groups recomputed)."""
        model = record.model
        schema = _nullable(self._output_schema(model))  # a null key is reported by `check_keys`, not by a cast
        key = list(self.project.models[model].primary_key)
        gone, came = self._aggregates(select, before, after, schema)
        keys = distinct_rows(pa.concat_tables([gone.select(key), came.select(key)]))
        old = self._read_rows(model, record.output, keys)
        group_of = retraction.group_outputs

        def by_group(table: pa.Table) -> dict[tuple, dict]:
            return {tuple(r[c] for c in group_of): r for r in table.to_pylist()}

        olds, befores, afters = by_group(old), by_group(gone), by_group(came)
        rows, regroup = [], []
        for group in {**olds, **befores, **afters}:
            row = retraction.combine(olds.get(group), befores.get(group), afters.get(group))
            if row is RECOMPUTE_GROUP:
                regroup.append(group)
            elif row is not None:
                rows.append(row)
        new = pa.Table.from_pylist(rows, schema=schema)
        if regroup:
            types = [schema.field(c).type for c in group_of]
            groups = pa.table({f"__g{i}": pa.array([g[i] for g in regroup], t) for i, t in enumerate(types)})
            recomputed = self._regroup(record, select, groups).select(schema.names).cast(schema)
            new = pa.concat_tables([new, recomputed])
        return new, keys, old, len(regroup)

    def _aggregates(
        self, select: exp.Select, before: Mapping[str, pa.Table], after: Mapping[str, pa.Table], schema: pa.Schema
    ) -> tuple[pa.Table, pa.Table]:
        """The model's SQL over the changed rows as of the start (``before``) and as of the end (``after``).
        A one-input model runs it once, over both sides tagged with a ``__side`` column added to its GROUP BY
        (one Spark job, not two)."""
        both_sides = sided(select)
        if both_sides is None or len(before) != 1 or set(before) != set(after):
            return tuple(self.sql.run(select, v).select(schema.names).cast(schema) for v in (before, after))
        (table,) = before
        if before[table].num_rows + after[table].num_rows == 0:
            return schema.empty_table(), schema.empty_table()
        both = pa.concat_tables(
            [
                rows.append_column(SIDE, pa.array(np.full(rows.num_rows, side, np.int8)))
                for side, rows in enumerate((before[table], after[table].cast(before[table].schema)))
            ]
        )
        out = self.sql.run(both_sides, {table: both})
        side = out[SIDE]
        return tuple(
            out.filter(pc.equal(side, i)).select(schema.names).cast(schema) for i in (0, 1)
        )

    def _affected_driving_keys(self, plan: ModelPlan, start: Positions, end: Positions) -> tuple[pa.Table, int]:
        """The driving table's keys a change in the range can affect (see the module), and the number of
        change rows read."""
        assert plan.driving is not None  # every incremental plan has a driving table
        driving_key = self.project.primary_key_of(plan.driving)
        changed: dict[str, pa.Table] = {}
        parts = []
        for mapping in plan.mappings:
            table = mapping.table
            if table not in changed:
                changed[table] = self._changed_keys(table, start[table], end[table])
            keys = changed[table]
            for hop in mapping.path:
                values = keys.select(list(hop.from_columns)).rename_columns(list(hop.to_columns))
                to_key = list(self.project.primary_key_of(hop.to_table))
                columns = [*to_key, *(c for c in hop.to_columns if c not in to_key)]
                keys = self._read_in(hop.to_table, end[hop.to_table], values, columns).select(to_key)
            parts.append(keys.select(list(driving_key)))
        schema = self.lh.table(plan.driving).schema
        key_schema = pa.schema([schema.field(k) for k in driving_key])
        keys = pa.concat_tables([p.cast(key_schema) for p in parts]) if parts else key_schema.empty_table()
        return distinct_rows(keys), sum(t.num_rows for t in changed.values())

    def _changed_keys(self, table: str, start: Mapping[int, int], end: Mapping[int, int]) -> pa.Table:
        """The keys written to ``table``'s log in [start, end): read from the log alone (whether each was an
        insert, an update or a delete does not matter here, so the lake is not consulted)."""
        key = list(self.project.primary_key_of(table))
        schema = self.lh.table(table).schema
        key_schema = pa.schema([schema.field(k) for k in key])
        log_ = self.lh.log(table)
        parts = [
            log_.read(b, start[b], end[b]).select(key).cast(key_schema) for b in sorted(end) if start.get(b, 0) < end[b]
        ]
        return distinct_rows(pa.concat_tables(parts)) if parts else key_schema.empty_table()

    def _restricted(self, plan: ModelPlan, driving_keys: pa.Table, offsets: Positions) -> dict[str, pa.Table]:
        """Each input as of ``offsets``, restricted to the driving rows of ``driving_keys`` and the rows they
        join to (a table read under several aliases gets the union of its restrictions)."""
        rows: dict[str, pa.Table] = {}  # alias -> rows
        by_table: dict[str, list[pa.Table]] = {}
        driving = next(m for m in plan.mappings if m.role == "driving")
        rows[driving.alias] = self._read_in(driving.table, offsets[driving.table], driving_keys)
        pending = [m for m in plan.mappings if m.role != "driving"]
        while pending:
            progressed = False
            for mapping in list(pending):
                # this alias's hop towards the driving table: its parent must be read already
                hop = mapping.path[0]
                if hop.to_alias not in rows:
                    continue
                values = rows[hop.to_alias].select(list(hop.to_columns)).rename_columns(list(hop.from_columns))
                rows[mapping.alias] = self._read_in(mapping.table, offsets[mapping.table], values)
                pending.remove(mapping)
                progressed = True
            if not progressed:  # cannot happen for a planned join tree
                raise AssertionError(f"unreachable aliases {[m.alias for m in pending]}")
        for mapping in plan.mappings:
            by_table.setdefault(mapping.table, []).append(rows[mapping.alias])
        return {
            t: distinct_rows(pa.concat_tables(parts)) if len(parts) > 1 else parts[0] for t, parts in by_table.items()
        }

    def _read_in(
        self, table: str, offsets: Mapping[int, int], values: pa.Table, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The rows of ``table`` as of ``offsets`` whose columns ``values.column_names`` equal a row of
        ``values`` (the first column pushed into the read as an IN filter, the rest matched here; many values
        of the primary key: `Lakehouse.lookup`); only ``columns`` (default all) are read."""
        definition = self.lh.table(table)
        names = list(columns) if columns is not None else definition.schema.names
        empty = pa.schema([definition.schema.field(n) for n in names]).empty_table()
        if values.num_rows == 0:
            return empty
        first = values.column_names[0]
        wanted = pc.unique(
            values[first].drop_null().combine_chunks()
            if isinstance(values[first], pa.ChunkedArray)
            else values[first].drop_null()
        )
        if len(wanted) == 0:
            return empty
        if len(wanted) > IN_LIST_LIMIT and sorted(values.column_names) == sorted(definition.primary_key):
            # many keys: a point lookup (only the row groups holding one decoded, no filter or merge pass)
            return self.lh.lookup(table, values, as_of=dict(offsets), columns=names).select(names)
        keep = None
        if len(wanted) <= IN_LIST_LIMIT:
            # mypy reads pyiceberg's pydantic fields as __init__ (the real __init__ takes these arguments)
            row_filter: BooleanExpression = In(first, wanted.to_pylist())  # type: ignore[call-arg]
        else:
            # pyiceberg binds and evaluates an IN list literal by literal, per data file (thousands of keys cost
            # seconds of planning): push the range for file and row-group pruning, match exactly each batch as it
            # is read (only matching rows are held). A hash lookup per batch (`is_in`): a `KeySet`'s binary
            # search was several times slower on a hop's read
            low, high = pc.min_max(wanted).values()
            row_filter = And(GreaterThanOrEqual(first, low.as_py()), LessThanOrEqual(first, high.as_py()))  # type: ignore[call-arg]
            cast = functools.cache(wanted.cast)

            def keep(rows: pa.Table) -> pa.Table:
                return rows.filter(pc.is_in(rows[first], value_set=cast(rows.schema.field(first).type)))

        found = self.lh.union_read(table, columns=names, row_filter=row_filter, as_of=dict(offsets), keep=keep)
        if len(values.column_names) > 1:
            found = semi_join(found, values, values.column_names)
        return found.select(names)

    def _read_rows(self, model: str, offsets: Mapping[int, int], keys: pa.Table) -> pa.Table:
        return self._read_in(model, offsets, keys) if keys.num_rows else self._output_schema(model).empty_table()

    def _output_schema(self, model: str) -> pa.Schema:
        return self.lh.table(model).schema

    def _diff(self, model: str, new: pa.Table, old: pa.Table) -> tuple[pa.Table, pa.Table]:
        return diff_rows(model, new, old, self._output_schema(model), self.project.models[model].primary_key)


@dataclass(frozen=True)
class Handover:
    """What a model's incremental round changed in its table: its log's [start, end) holds exactly these
    appends, ``before`` the rows they replaced or deleted (as of ``start``), ``after`` the rows they wrote. A
    later model of the same `Runner.run_once` reading that range takes its before- and after-images from here
    instead of looking them up in the table (`Runner._images`): the same rows, already in memory."""

    start: Mapping[int, int]
    end: Mapping[int, int]
    before: pa.Table
    after: pa.Table

    def covers(self, start: Mapping[int, int], end: Mapping[int, int]) -> bool:
        return _same_offsets(self.start, start) and _same_offsets(self.end, end)


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema])


def _same_offsets(a: Mapping[int, int], b: Mapping[int, int]) -> bool:
    return all(a.get(bucket, 0) == b.get(bucket, 0) for bucket in {*a, *b})


def contiguous_end(start: Mapping[int, int], landed: Sequence[tuple[int, int, int]]) -> dict[int, int] | None:
    """The offsets after appends that landed at ``landed`` (bucket, first, last) from ``start`` on, or None when
    they leave a gap (another writer's rows between them)."""
    end = dict(start)
    for bucket, first, last in sorted(landed):
        if first != end.get(bucket, 0):
            return None
        end[bucket] = last + 1
    return end
