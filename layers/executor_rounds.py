"""Incremental rounds on Spark's executors: the round's rows never reach the driver.

A round whose inputs changed by more rows than the driver's budget (`round_input_rows` against the setting
``layers_driver_budget_rows``, ``LAKESTREAM_LAYERS_DRIVER_BUDGET_ROWS``) runs here instead of in the driver
(`layers.incremental`): every step is a Spark DataFrame, computed by executor tasks, and the driver holds the plan,
the offsets and per-bucket counts only.

* **Changed keys**: the keys of each input's log records in the round's range, read by tasks of at most
  `CHANGED_KEYS_RECORDS` records each (a bucket's range split by offsets, so parallelism follows the records, not
  the bucket count); a GROUP BY or a window model over one input reads its net changelog with before-images instead
  (``spark.read.format("lakestream")`` with ``changes``: a task per bucket with changes).
* **Hops** (a dimension's changed keys to the driving rows that join to them) and the **restricted inputs** (the
  driving rows of the affected keys and what they join to, as of the round's end; as of its start too for a
  GROUP BY over a join): left semi joins of the inputs read as of those offsets, with the range of the joined
  values (one aggregation: two values reach the driver) pushed into the read for file and row-group pruning.
* ``keyed``: the model's SQL over the restricted inputs. ``window``: the model's SQL restricted to the window
  partitions of the changed rows (before-images and after), over its input as of the end.
  ``retract``/``regroup``: the groups the changed rows left (before-images, or the restricted inputs as of the
  start) and joined (as of the end), then the model's SQL restricted to those groups over the inputs as of the
  end: every affected group recomputed from its rows (retraction's shortcut, combining old rows and changed rows'
  aggregates one group at a time, stays with the driver's rounds).
* **Diff and appends** (`layers.writer.write_keys`): the new rows and the covered keys, partitioned by the
  model's bucket; each task looks its keys' old rows up (pruned by key statistics), diffs, and appends under the
  round's producer id and sequences, so a retried task or a resumed round writes nothing twice.

The same rows result as the driver's round (tests check both against a rebuild); only where they are computed
differs. Where a round runs is decided when it begins and recorded in its intent (`RoundRecord.on_executors`),
and it reads its range as of fixed offsets: a resumed round computes the same rows again, in the same place.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import pyarrow as pa
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThanOrEqual
from sqlglot import exp

from layers.rewrite import groups_query, merged, restrict_to_groups
from layers.rounds import RoundRecord, producer_of
from layers.spark_sql import Filtered, SparkSql, read_columns, referenced_columns
from layers.strategy import KEYED, WINDOW, ModelPlan
from layers.writer import write_keys

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame

    from lakehouse.lakehouse import Lakehouse
    from layers.project import Project

__all__ = ["CHANGED_KEYS_RECORDS", "ExecutorRound", "LogKeys", "round_input_rows"]

#: The ``_op`` values of a changelog's rows that left a table (before-images and deletes).
_LEFT = ("update_before", "delete")
#: Log records one task reads for a round's changed keys (a bucket's range is split into pieces of this many).
CHANGED_KEYS_RECORDS = 250_000


@dataclass(frozen=True)
class LogKeys:
    """What a Spark task needs to read the keys of log ranges (pickled to the executors): range ``i`` is
    ``ranges[i]`` = (bucket, start, end)."""

    definition_json: bytes
    key: tuple[str, ...]
    ranges: tuple[tuple[int, int, int], ...]
    store_url: str
    store_options: dict[str, str] = field(repr=False)

    def read(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The keys of the records of the ranges whose indexes the task's rows (``id``) hold."""
        from lakehouse.iceberg.datafiles import shared_store
        from lakehouse.log import Log
        from lakehouse.table.definition import TableDefinition

        definition = TableDefinition.from_json(self.definition_json)
        schema = pa.schema([definition.schema.field(k) for k in self.key])
        log_ = Log(shared_store(self.store_url, self.store_options), definition, max_workers=4)
        try:
            for batch in batches:
                for i in batch.column("id").to_pylist():
                    bucket, start, end = self.ranges[i]
                    yield from log_.read(bucket, start, end).select(list(self.key)).cast(schema).to_batches()
        finally:
            log_.close()


def round_input_rows(record: RoundRecord) -> int:
    """The log records in the round's input ranges (offsets are records: known from the record, nothing read):
    what the driver's budget bounds."""
    assert record.start is not None
    return sum(
        max(0, end - record.start.get(table, {}).get(bucket, 0))
        for table, ends in record.end.items()
        for bucket, end in ends.items()
    )


class ExecutorRound:
    """Computes and writes incremental rounds on Spark's executors (see the module)."""

    def __init__(self, lh: Lakehouse, project: Project, sql: SparkSql) -> None:
        self.lh = lh
        self.project = project
        self.sql = sql
        self._persisted: list[DataFrame] = []

    def run(
        self, record: RoundRecord, plan: ModelPlan, appending: Callable[[], None]
    ) -> tuple[int, int, int, int, str]:
        """Round ``record`` of ``plan``'s model: (upserts, deletes, input changes, keys covered, note). ``appending``
        is called once the rows are checked, before the first append."""
        assert record.start is not None
        try:
            with ExitStack() as views:
                counted = self._covered(record, plan, views)
                if counted is None:
                    return 0, 0, 0, 0, ""
                new, keys, changes, note = counted
                model = self.project.models[record.model]
                upserts, deletes, covered = write_keys(
                    self.lh,
                    record.model,
                    record.number,
                    producer_of(record.model),
                    record.output,
                    new,
                    keys,
                    model.primary_key,
                    before_append=appending,
                )
                return upserts, deletes, changes, covered, note
        finally:
            for frame in self._persisted:
                frame.unpersist()
            self._persisted.clear()

    def _covered(
        self, record: RoundRecord, plan: ModelPlan, views: ExitStack
    ) -> tuple[DataFrame, DataFrame, int, str] | None:
        """(the model's new rows, the model keys they cover, input changes, note), or None when the range holds
        no change. The DataFrames are valid while ``views`` is open."""
        assert record.start is not None
        model = self.project.models[record.model]
        select = cast(exp.Select, merged(model.qualified))  # a model planned incrementally is one SELECT
        key = list(model.primary_key)
        one_input = plan.strategy != KEYED and len(plan.mappings) == 1
        where = "on Spark's executors"
        if one_input:
            table = plan.driving
            assert table is not None
            changed = self._persist(
                self._changes(table, record.start[table], record.end[table], referenced_columns(select, table))
            )
            changes = changed.filter(changed["_op"] != "update_before").count()
            if changes == 0:
                return None
            names = [n for n in self.lh.table(table).schema.names if n in changed.columns]
            before = {table: changed.filter(changed["_op"].isin(*_LEFT)).select(*names)}
            after = {table: changed.filter(~changed["_op"].isin(*_LEFT)).select(*names)}
        else:
            driving_keys, changes = self._affected_driving_keys(plan, record.start, record.end)
            if changes == 0:
                return None
            if plan.strategy == KEYED:
                restricted = self._restricted(plan, driving_keys, record.end, select)
                new = views.enter_context(self.sql.dataframe(select, restricted))
                from pyspark.sql import functions as F

                wanted = driving_keys.select(
                    *(F.col(next(d for o, d in plan.output_key if o == k)).alias(k) for k in key)
                )
                return new, wanted, changes, where
            before = self._restricted(plan, driving_keys, record.start, select)
            after = self._restricted(plan, driving_keys, record.end, select)
        if plan.strategy == WINDOW:
            new, wanted = self._window(record, plan, select, changed, views)
            return (
                new,
                wanted,
                changes,
                f"{where}: the window partitions of the changed rows recomputed from their rows",
            )
        distinct_groups = groups_query(select)
        groups = views.enter_context(self.sql.dataframe(distinct_groups, before)).unionByName(
            views.enter_context(self.sql.dataframe(distinct_groups, after))
        )
        groups = self._persist(groups.distinct())
        inputs = {t: record.end[t] for t in model.inputs}
        new = views.enter_context(
            self.sql.dataframe(restrict_to_groups(select, "__groups"), {**inputs, "__groups": groups})
        )
        index = {g.output: i for i, g in enumerate(plan.group_by) if g.output}
        wanted = groups.select(*(groups[f"__g{index[k]}"].alias(k) for k in key))
        return new, wanted, changes, f"{where}: the groups of the changed rows recomputed from their rows"

    def _window(
        self, record: RoundRecord, plan: ModelPlan, select: exp.Select, changed: DataFrame, views: ExitStack
    ) -> tuple[DataFrame, DataFrame]:
        """A window model's new rows, those of the partitions the ``changed`` rows (its driving table's net
        changelog with before-images) belong to, from all their rows as of the round's end; and the keys they
        cover: the changed rows' (one that left the model is deleted) and the recomputed rows'."""
        (mapping,) = plan.mappings
        columns = list(plan.partition_by)
        partitions = self._persist(
            changed.select(*(changed[c].alias(f"__g{i}") for i, c in enumerate(columns))).distinct()
        )
        expressions = [exp.column(c, table=mapping.alias) for c in columns]
        query = restrict_to_groups(select, "__groups", expressions)
        from pyspark.sql import functions as F

        # the range of the first partition column pushed into the read (one aggregation: three values reach the
        # driver); a null partition value reads everything (a range would skip its rows)
        aggregated = partitions.agg(
            F.min("__g0"), F.max("__g0"), F.count(F.when(F.col("__g0").isNull(), 1))
        ).first()
        assert aggregated is not None  # an aggregation without grouping has one row
        low, high, nulls = aggregated
        ends = dict(record.end[mapping.table])
        view: Filtered | dict[int, int] = ends
        if not nulls and all(isinstance(v, int | str) and not isinstance(v, bool) for v in (low, high)):
            # mypy reads pyiceberg's pydantic fields as __init__ (the real __init__ takes these arguments)
            view = Filtered(dict(ends), And(GreaterThanOrEqual(columns[0], low), LessThanOrEqual(columns[0], high)))  # type: ignore[arg-type,call-arg]
        new = self._persist(
            views.enter_context(self.sql.dataframe(query, {mapping.table: view, "__groups": partitions}))
        )
        key = list(self.project.models[record.model].primary_key)
        changed_keys = changed.select(*(changed[d].alias(o) for o, d in plan.output_key)).select(*key)
        return new, changed_keys.unionByName(new.select(*key)).distinct()

    def _persist(self, frame: DataFrame) -> DataFrame:
        """``frame`` kept on the executors until the round ends (read once, used by several steps)."""
        frame = frame.persist()
        self._persisted.append(frame)
        return frame

    def _changes(
        self, table: str, start: Mapping[int, int], end: Mapping[int, int], columns: Sequence[str] | None
    ) -> DataFrame:
        from lakehouse.spark import read_changes

        return read_changes(self.sql.spark, self.lh, table, dict(start), dict(end), columns=columns, before_images=True)

    def _changed_keys(self, table: str, start: Mapping[int, int], end: Mapping[int, int]) -> DataFrame:
        """The distinct keys of ``table``'s log records in [start, end), read by tasks of at most
        `CHANGED_KEYS_RECORDS` records (whether each was an insert, an update or a delete does not matter here:
        the lake is not consulted)."""
        definition = self.lh.table(table)
        key = tuple(definition.primary_key)
        ranges = tuple(
            (b, first, min(first + CHANGED_KEYS_RECORDS, end[b]))
            for b in sorted(end)
            for first in range(start.get(b, 0), end[b], CHANGED_KEYS_RECORDS)
        )
        reader = LogKeys(definition.to_json(), key, ranges, self.lh.store.url, dict(self.lh.store.connection_options()))
        ddl = ", ".join(f"`{k}` {_ddl(definition.schema.field(k).type)}" for k in key)
        spark = self.sql.spark
        ids = spark.range(0, len(ranges), 1, max(1, len(ranges)))  # one task per range, no rows from the driver
        return ids.mapInArrow(reader.read, ddl).distinct()

    def _affected_driving_keys(
        self, plan: ModelPlan, start: Mapping[str, Mapping[int, int]], end: Mapping[str, Mapping[int, int]]
    ) -> tuple[DataFrame, int]:
        """The driving table's keys a change in the range can affect (`layers.incremental`'s rule, as joins), and
        the number of changed keys read."""
        from pyspark.sql import functions as F

        assert plan.driving is not None
        driving_key = list(self.project.primary_key_of(plan.driving))
        changed: dict[str, DataFrame] = {}
        parts = []
        for mapping in plan.mappings:
            table = mapping.table
            if table not in changed:
                changed[table] = self._persist(self._changed_keys(table, start[table], end[table]))
            keys = changed[table]
            for hop in mapping.path:
                values = keys.select(
                    *(F.col(f).alias(t) for f, t in zip(hop.from_columns, hop.to_columns, strict=True))
                )
                to_key = list(self.project.primary_key_of(hop.to_table))
                columns = [*to_key, *(c for c in hop.to_columns if c not in to_key)]
                keys = self._persist(self._rows_in(hop.to_table, end[hop.to_table], values, columns).select(*to_key))
            parts.append(keys.select(*driving_key))
        changes = sum(frame.count() for frame in changed.values())
        return self._persist(_union(parts).distinct()), changes

    def _restricted(
        self, plan: ModelPlan, driving_keys: DataFrame, offsets: Mapping[str, Mapping[int, int]], select: exp.Select
    ) -> dict[str, DataFrame]:
        """Each input as of ``offsets``, restricted to the driving rows of ``driving_keys`` and the rows they join
        to (a table read under several aliases gets the union of its restrictions), its query's columns only."""
        rows: dict[str, DataFrame] = {}  # alias -> rows
        driving = next(m for m in plan.mappings if m.role == "driving")
        rows[driving.alias] = self._persist(
            self._rows_in(driving.table, offsets[driving.table], driving_keys, self._columns(select, driving.table))
        )
        pending = [m for m in plan.mappings if m.role != "driving"]
        while pending:
            progressed = False
            for mapping in list(pending):
                hop = mapping.path[0]  # towards the driving table: its parent must be read already
                if hop.to_alias not in rows:
                    continue
                parent = rows[hop.to_alias]
                values = parent.select(
                    *(parent[t].alias(f) for t, f in zip(hop.to_columns, hop.from_columns, strict=True))
                )
                columns = self._columns(select, mapping.table)
                rows[mapping.alias] = self._persist(
                    self._rows_in(mapping.table, offsets[mapping.table], values, columns)
                )
                pending.remove(mapping)
                progressed = True
            if not progressed:  # cannot happen for a planned join tree
                raise AssertionError(f"unreachable aliases {[m.alias for m in pending]}")
        by_table: dict[str, list[DataFrame]] = {}
        for mapping in plan.mappings:
            by_table.setdefault(mapping.table, []).append(rows[mapping.alias])
        return {t: _union(parts).distinct() if len(parts) > 1 else parts[0] for t, parts in by_table.items()}

    def _columns(self, select: exp.Select, table: str) -> list[str] | None:
        """`read_columns` of ``table`` for the model's query."""
        return read_columns(select, table, self.project.primary_key_of(table), self.lh.table(table).schema.names)

    def _rows_in(
        self, table: str, offsets: Mapping[int, int], values: DataFrame, columns: Sequence[str] | None = None
    ) -> DataFrame:
        """The rows of ``table`` as of ``offsets`` whose columns ``values.columns`` equal a row of ``values`` (a
        left semi join; nulls match nothing), only ``columns`` (default all; ``values``' columns too). The
        range of ``values``' first column is pushed into the read (files and row groups outside it are
        skipped)."""
        from pyspark.sql import functions as F

        first = values.columns[0]
        bounds = values.agg(F.min(first), F.max(first)).first()
        assert bounds is not None  # an aggregation without grouping has one row
        low, high = bounds
        names = self.lh.table(table).schema.names
        chosen = None if columns is None else [n for n in names if n in columns or n in values.columns]
        view: Filtered | dict[int, int] = dict(offsets)
        if low is None:  # no value: no row joins (Spark plans an empty relation, no task reads)
            return self.sql.frame(table, view, columns=chosen).limit(0)
        if all(isinstance(v, int | str) and not isinstance(v, bool) for v in (low, high)):
            # mypy reads pyiceberg's pydantic fields as __init__ (the real __init__ takes these arguments)
            view = Filtered(dict(offsets), And(GreaterThanOrEqual(first, low), LessThanOrEqual(first, high)))  # type: ignore[arg-type,call-arg]
        frame = self.sql.frame(table, view, columns=chosen)
        return frame.join(values.distinct(), on=list(values.columns), how="left_semi")


def _ddl(arrow_type: pa.DataType) -> str:
    """The Spark SQL type of a key column's Arrow type."""
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow_type).simpleString()


def _union(frames: Sequence[DataFrame]) -> DataFrame:
    """``frames`` one after another, by column name (types widened as Spark's union does)."""
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
