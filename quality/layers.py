"""Layer checks: a model's table, as its newest finished round left it, equals the model's SQL over its inputs
as of that round's input positions.

``check_layer(lh, project, model, spark=...)`` compares, by default, a *sample*: every key the newest finished
round changed in the model's table plus ``sample`` random keys of the table (seeded); ``full=True`` compares every
row. ``check_layers`` checks several models in dependency order. Differences are `Violation`\\ s
(``layer-row``), named by key with the expected (the SQL's) and actual (the table's) row.

**Which states are compared.** A round ``r`` of model M (`layers.rounds`) records in its intent the
input range (``end``: per input, the offsets the round computed with, as of which its SQL ran) and M's own log
ends when it *began* (``output``: the old rows it diffed against). The round's appends go after ``output``; the
report, written after every append and subscription advance, marks it finished. So the table "after round r" is
M's log read as of its ends once round r's report exists and before round r+1 appends anything:

* if r is the newest intent (nothing started since), M's log end now, read *between* two reads of the newest
  intent that both say r (an intent is created before its round appends anything, so no later round's rows are
  in that end);
* if round r+1 has started (intent without report), its intent's ``output``: M's log end when it began, which
  is the end after round r.

Both are exact as-of reads, so a round running while the check runs never makes a false violation: at worst
the newest round changes between the reads (then they are made again, once more) or an input's retained range
moves (`AsOfUnavailable`: read again once, else the check reports an error, not a violation). Rows appended to
M's log by anything else than its rounds (a bug, a rogue producer) after round r are part of the state checked:
that is what the check is for.

A model whose SQL changed since its newest round (the recorded digest differs) is not compared: its next round
recomputes it in full, and comparing the old table with the new SQL would only report the change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, GreaterThanOrEqual, In, LessThanOrEqual

from lakehouse.merge.keyed_rows import distinct_rows, semi_join
from lakehouse.read.union import IN_LIST_LIMIT
from quality.errors import QualityError
from quality.results import LAYER, CheckResult, Violation, upstream_failure

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.lakehouse import Lakehouse
    from layers.project import Project
    from layers.rounds import RoundRecord

__all__ = [
    "MAX_VIOLATIONS",
    "RoundState",
    "check_layer",
    "check_layers",
    "compare_rows",
    "newest_finished_round",
    "not_evaluated",
]

#: At most this many differences become violations (the count of all is in the last one and in ``details``).
MAX_VIOLATIONS = 10
#: Floating-point columns are equal within this relative tolerance (Spark's sums may add in another order).
FLOAT_TOLERANCE = 1e-9
_ATTEMPTS = 3


@dataclass(frozen=True)
class RoundState:
    """The newest finished round of a model and the positions it defines: ``record`` (its intent: ``end`` is
    each input's offsets the round computed with, ``output`` the model's log ends before it) and ``after``
    (the model's log ends after its appends)."""

    record: RoundRecord
    after: dict[int, int]

    @property
    def number(self) -> int:
        return self.record.number

    @property
    def inputs(self) -> dict[str, dict[int, int]]:
        return self.record.end

    @property
    def before(self) -> dict[int, int]:
        return self.record.output


def newest_finished_round(lh: Lakehouse, model: str) -> RoundState | None:
    """The newest finished round of ``model`` and the model's log ends after it (its newest round boundary:
    `layers.rounds.round_boundary`; a running, dead or abandoned round's appends lie beyond it), or
    None before its first round finished.

    Raises:
        QualityError: rounds kept starting while they were read (three times).
    """
    from layers.rounds import read_intent, round_boundary

    for _ in range(_ATTEMPTS):
        boundary = round_boundary(lh.store, model, lh.log(model).end_offsets)
        if boundary is None or boundary[0] < 0:
            return None
        number, after = boundary
        record = read_intent(lh.store, model, number)
        if record is not None:
            return RoundState(record, after)
        # pruned meanwhile: rounds went on, look again
    raise QualityError(f"model {model}: its rounds kept changing while the check read them; run the check again")


def check_layers(
    lh: Lakehouse,
    project: Project,
    *,
    spark: SparkSession,
    models: Sequence[str] | None = None,
    prior: Sequence[CheckResult] = (),
    **kw: Any,
) -> list[CheckResult]:
    """`check_layer` of each model (all, or ``models``: names as `lakestream layers run --model` takes them),
    in dependency order. Keyword arguments go to `check_layer`.

    A model one of whose inputs has a result that is not ok, in ``prior`` (the run's checks so far: reconcile,
    suites) or among the layer checks made here before it, is not compared: its result is *not evaluated*
    (``not_evaluated`` names the input; see `not_evaluated`). Its SQL over a corrupt input proves nothing
    either way. So it goes on downstream: a model over one not evaluated is not evaluated either.

    Raises:
        InvalidArgument: a name that is no model of the project.
    """
    from layers.physical import live_mapping, physical_project
    from layers.selection import select_models

    # each model checked as its rounds ran it: by the physical table serving it (after a blue/green cutover,
    # `layers.bluegreen`, another table than its name), whose rounds and inputs are named physically; the
    # results name the model
    mapping = live_mapping(lh, project)
    physical, by_table = physical_project(project, mapping), lh.without_aliases()
    out: list[CheckResult] = []
    for name in select_models(project, models):
        why = upstream_failure([*prior, *out], project.models[name].inputs)
        if why is not None:
            out.append(not_evaluated(lh, LAYER, name, why))
        else:
            result = check_layer(by_table, physical, mapping[name], spark=spark, **kw)
            result.table = name
            out.append(result)
    return out


def not_evaluated(lh: Lakehouse, check: str, table: str, why: str) -> CheckResult:
    """The result of ``check`` on ``table`` not run because ``why`` (an input failed its checks), on the table's
    current snapshot (None if it has none or cannot be loaded: the result is not ok either way)."""
    from object_store.errors import LakestreamError

    try:
        snapshot = _snapshot_id(lh, table)
    except (LakestreamError, OSError):  # only the report's snapshot column depends on it
        snapshot = None
    return CheckResult(check=check, table=table, snapshot_id=snapshot, not_evaluated=why)


def check_layer(
    lh: Lakehouse,
    project: Project,
    model: str,
    *,
    spark: SparkSession,
    sample: int = 100,
    full: bool = False,
    seed: int | None = None,
) -> CheckResult:
    """Compare ``model``'s table after its newest finished round with its SQL over its inputs as of that
    round's input positions (see the module): on every key the round changed plus ``sample`` random keys of
    the table (``seed``: the random generator's seed), or every row with ``full``. A model with no finished
    round is skipped (``details["skipped"]``). A check that cannot run (a position no longer readable twice,
    Spark failing) gives a result with ``error``."""
    from lakehouse.errors import AsOfUnavailable

    started = time.perf_counter()
    result = CheckResult(check=LAYER, table=model)
    try:
        result.snapshot_id = _snapshot_id(lh, model)
        for attempt in range(2):
            try:
                _check(lh, project, model, spark, sample, full, seed, result)
                break
            except AsOfUnavailable:
                # retention or expiry moved past a position of a round that finished meanwhile: read again
                if attempt == 1:
                    raise
                result.violations.clear()
                result.details.clear()
                result.rows = 0
    except Exception as exc:  # noqa: BLE001 - a check that could not run is a result, not a crash of the run
        result.error = f"{type(exc).__name__}: {exc}"
    result.seconds = time.perf_counter() - started
    return result


def _snapshot_id(lh: Lakehouse, model: str) -> int | None:
    return lh.lake_table(model).metadata.current_snapshot_id


def _check(
    lh: Lakehouse,
    project: Project,
    model: str,
    spark: SparkSession,
    sample: int,
    full: bool,
    seed: int | None,
    result: CheckResult,
) -> None:
    from layers.runner import sql_digest

    definition = project.models[model]
    state = newest_finished_round(lh, model)
    if state is None:
        result.details.update({"skipped": "no finished round", "full": full})
        return
    result.details.update(
        {
            "round": state.number,
            "full": full,
            "positions": {t: {str(b): o for b, o in sorted(p.items())} for t, p in state.inputs.items()},
            "output": {str(b): o for b, o in sorted(state.after.items())},
        }
    )
    if state.record.sql and state.record.sql != sql_digest(definition.sql):
        result.details["skipped"] = (
            f"the model's SQL changed since round {state.number}; its next round recomputes it in full"
        )
        return
    schema = lh.table(model).schema
    key = list(definition.primary_key)
    sql = _sql(spark, lh)
    views = {t: state.inputs[t] for t in definition.inputs}
    total = None
    if full:
        # compared by Spark: only the (few) keys whose rows differ reach the driver, then read as in a sample
        keys, total, result.rows = _differing_keys(lh, sql, definition.qualified, views, model, state, key)
    else:
        keys = _sample_keys(lh, model, key, state, sample, seed, spark, result)
    actual = _conform(_read_keys(lh, model, state.after, keys), schema)
    expected = _conform(_expected_of_keys(lh, project, model, spark, views, keys), schema)
    if not full:
        result.rows = expected.num_rows + actual.num_rows
    differences = compare_rows(expected, actual, key)
    if total is None:
        total = len(differences)
    elif total and not differences:  # the keys Spark found differ no more: the check raced something
        raise QualityError(f"model {model}: the rows Spark found differing read equal again; run the check again")
    result.details["differences"] = total
    result.violations.extend(_violations(model, state.number, differences, key, total))


def _sql(spark: SparkSession, lh: Lakehouse) -> Any:
    from lakehouse.spark.source import register
    from layers.spark_sql import SparkSql

    register(spark, lh)
    return SparkSql(spark, lh)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns of ``schema`` (the model's table), cast to its types (the SQL's may be wider)."""
    return table.select(schema.names).cast(schema)


def _differing_keys(
    lh: Lakehouse, sql: Any, query: Any, views: dict[str, Any], model: str, state: RoundState, key: list[str]
) -> tuple[pa.Table, int, int]:
    """A full comparison run by Spark (`check_layer` with ``full``): the model's SQL over ``views`` against the
    model's table after the round, joined on the key (null-safe) in executor tasks, columns compared as
    `compare_rows` does (floating point within `FLOAT_TOLERANCE`), plus the keys the table holds more than once.
    Returns the first `MAX_VIOLATIONS` differing keys (by key, nulls last), how many differ, and the rows
    compared: never a table's rows in the driver. A clean table costs one pass over both sides plus one over the
    table's keys (for a key held twice); where rows differ, two more passes count and collect the differing keys."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    from lakehouse.spark import read_table

    names = lh.table(model).schema.names
    values = [c for c in names if c not in key]
    with sql.dataframe(query, views) as expected_df:
        actual_df = read_table(sql.spark, lh, model, as_of=dict(state.after), columns=names)
        types = {f.name: f.dataType for f in actual_df.schema.fields}
        e = expected_df.select([F.col(c).cast(types[c]).alias(f"e_{c}") for c in names])
        a = actual_df.select([F.col(c).alias(f"a_{c}") for c in names])
        e = e.withColumn("__expected_row", F.lit(True))  # null in the join: no row on that side
        a = a.withColumn("__actual_row", F.lit(True))
        e_here, a_here = F.col("__expected_row"), F.col("__actual_row")
        joined = e.join(a, on=[e[f"e_{k}"].eqNullSafe(a[f"a_{k}"]) for k in key], how="full_outer")
        same = F.lit(True)
        for c in values:
            ec, ac = F.col(f"e_{c}"), F.col(f"a_{c}")
            equal = ec.eqNullSafe(ac)
            if types[c].typeName() in ("float", "double"):
                scale = F.greatest(F.abs(ec), F.abs(ac))
                close = F.abs(ec - ac) <= scale * F.lit(FLOAT_TOLERANCE) + F.lit(1e-300)
                equal = equal | F.coalesce(close, F.lit(False)) | (F.isnan(ec) & F.isnan(ac))
            same = same & F.coalesce(equal, F.lit(False))
        differs = ~(e_here.isNotNull() & a_here.isNotNull() & same)
        stats = joined.agg(
            F.count(e_here).alias("expected"),
            F.count(a_here).alias("actual"),
            F.count(F.when(differs, 1)).alias("differs"),
        ).first()
        repeated = actual_df.groupBy(*key).count().filter(F.col("count") > 1).select(*key)
        twice = repeated.limit(1).count()
        rows = int(stats["expected"]) + int(stats["actual"])
        if not stats["differs"] and not twice:
            return pa.schema([lh.table(model).schema.field(k) for k in key]).empty_table(), 0, rows
        keyed = [F.coalesce(F.col(f"e_{k}"), F.col(f"a_{k}")).alias(k) for k in key]
        bad = joined.filter(differs).select(keyed).unionByName(repeated).distinct()
        total = bad.count()
        first = bad.orderBy(*[F.col(k).asc_nulls_last() for k in key]).limit(MAX_VIOLATIONS).toArrow()
    key_schema = pa.schema([lh.table(model).schema.field(k) for k in key])
    return first.select(key).cast(key_schema), total, rows


# ---- the sample --------------------------------------------------------------------------------------------


def _sample_keys(
    lh: Lakehouse,
    model: str,
    key: list[str],
    state: RoundState,
    sample: int,
    seed: int | None,
    spark: SparkSession,
    result: CheckResult,
) -> pa.Table:
    """Every key the round wrote to the model's table (its log records between the log ends before and after
    it) plus ``sample`` random keys of the table after it.

    The keys come from the log records, not from the net changes (`Lakehouse.changes`): a key absent before the
    range and deleted in it is no net change, but a table that lost a row the SQL gives is exactly that. Where
    log retention removed the range already, the net changes (read with the lake's help) are used."""
    from lakehouse.errors import OffsetOutOfRange

    key_schema = pa.schema([lh.table(model).schema.field(k) for k in key])
    parts = []
    if state.before != state.after:
        before = {b: state.before.get(b, 0) for b in state.after}
        log_ = lh.log(model)
        try:
            written = [
                log_.read(b, before[b], end).select(key).cast(key_schema)
                for b, end in sorted(state.after.items())
                if before[b] < end
            ]
        except OffsetOutOfRange:
            written = [lh.changes(model, before, state.after, columns=key).select(key).cast(key_schema)]
        parts.extend(written)
    changed_count = distinct_rows(pa.concat_tables(parts)).num_rows if parts else 0
    random_count = 0
    if sample > 0:
        # chosen by Spark's executors (a random order's first ``sample``): the table's keys never reach the driver
        from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

        from lakehouse.spark import read_table

        every = read_table(spark, lh, model, as_of=dict(state.after), columns=key)
        chosen = every.orderBy(F.rand(seed)).limit(sample).toArrow().select(key).cast(key_schema)
        if chosen.num_rows:
            parts.append(chosen)
            random_count = chosen.num_rows
    keys = distinct_rows(pa.concat_tables(parts)) if parts else key_schema.empty_table()
    result.details.update({"sampled_keys": keys.num_rows, "changed_keys": changed_count, "random_keys": random_count})
    return keys


def _key_filter(values: pa.Array | pa.ChunkedArray, column: str) -> tuple[Any, bool]:
    """A pyiceberg filter keeping at least the rows whose ``column`` is in ``values``, and whether it is exact
    (an IN list) or a range (to be matched exactly after the read)."""
    wanted = pc.unique(values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values).drop_null()
    if len(wanted) <= IN_LIST_LIMIT:
        # mypy reads pyiceberg's pydantic fields as __init__ (the real __init__ takes these arguments)
        return In(column, wanted.to_pylist()), True  # type: ignore[arg-type,call-arg]
    low, high = pc.min_max(wanted).values()
    return And(GreaterThanOrEqual(column, low.as_py()), LessThanOrEqual(column, high.as_py())), False  # type: ignore[arg-type,call-arg]


def _read_keys(lh: Lakehouse, model: str, offsets: Mapping[int, int], keys: pa.Table) -> pa.Table:
    """The model's rows of ``keys`` as of ``offsets`` (the first key column pushed into the read)."""
    schema = lh.table(model).schema
    if keys.num_rows == 0:
        return schema.empty_table()
    first = keys.column_names[0]
    row_filter, _ = _key_filter(keys[first], first)
    found = lh.union_read(model, row_filter=row_filter, as_of=dict(offsets))
    return semi_join(found, keys, keys.column_names)


def _expected_of_keys(
    lh: Lakehouse,
    project: Project,
    model: str,
    spark: SparkSession,
    views: dict[str, Any],
    keys: pa.Table,
) -> pa.Table:
    """The model's SQL over ``views`` (inputs as of the round's positions), rows of ``keys`` only. For a keyed
    model whose driving table is read once, the driving rows are restricted in its read (the output key is the
    driving row's key); otherwise Spark filters the result by the key values (and pushes that down where it
    can). Either way the result is then matched exactly."""
    from layers.spark_sql import Filtered
    from layers.strategy import KEYED, explain

    definition = project.models[model]
    if keys.num_rows == 0:
        return lh.table(model).schema.empty_table()
    first = keys.column_names[0]
    plan = next(p for p in explain(project) if p.model == model)
    views = dict(views)
    if plan.strategy == KEYED and plan.driving is not None:
        column = dict(plan.output_key).get(first)
        if column is not None and sum(m.table == plan.driving for m in plan.mappings) == 1:
            row_filter, _ = _key_filter(keys[first], column)
            views[plan.driving] = Filtered(views[plan.driving], row_filter)
    sql = _sql(spark, lh)
    with sql.dataframe(definition.qualified, views) as df:
        values = pc.unique(keys[first].combine_chunks()).to_pylist()
        if len(values) <= 10_000:
            df = df.filter(df[first].isin(values))
        rows = df.toArrow()
    return semi_join(rows, keys, keys.column_names)


# ---- comparing -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """One key whose rows differ: ``expected`` (the SQL's row) or ``actual`` (the table's) is None when that
    side has no row; ``columns`` names the columns whose values differ (when both have a row); ``times`` is how
    many rows of the key the table holds when it holds more than one (a data file committed twice)."""

    key: tuple[Any, ...]
    expected: dict[str, Any] | None
    actual: dict[str, Any] | None
    columns: tuple[str, ...] = ()
    times: int = 1


def compare_rows(expected: pa.Table, actual: pa.Table, key: Sequence[str]) -> list[Difference]:
    """The keys whose rows differ between ``expected`` (a key at most once) and ``actual`` (the table: a key it
    holds more than once is a difference of its own), sorted by key; vectorized: rows are matched by a hash join
    on the key, values compared column by column (null equals null; floating-point values within
    `FLOAT_TOLERANCE`)."""
    key = list(key)
    order = [(k, "ascending") for k in key]
    if expected.num_rows == actual.num_rows and expected.sort_by(order).equals(actual.sort_by(order)):
        return []
    actual, repeated = _first_of_each_key(actual, key)
    left = expected.select(key).append_column("__e", pa.array(np.arange(expected.num_rows), pa.int64()))
    right = actual.select(key).append_column("__a", pa.array(np.arange(actual.num_rows), pa.int64()))
    joined = left.join(right, keys=key, join_type="full outer")
    e_idx, a_idx = joined["__e"], joined["__a"]
    both = pc.and_(pc.is_valid(e_idx), pc.is_valid(a_idx))
    pairs = joined.filter(both)
    e_rows = expected.take(pairs["__e"])
    a_rows = actual.take(pairs["__a"])
    differs = {}
    any_diff = pa.array(np.zeros(pairs.num_rows, dtype=bool))
    for name in expected.column_names:
        if name in key:
            continue
        mask = pc.invert(_same(e_rows[name], a_rows[name]))
        differs[name] = mask
        any_diff = pc.or_(any_diff, mask)
    out: list[Difference] = []
    changed = np.flatnonzero(any_diff.to_numpy(zero_copy_only=False))
    if len(changed):
        flags = {n: m.to_numpy(zero_copy_only=False) for n, m in differs.items()}
        e_list = e_rows.take(pa.array(changed)).to_pylist()
        a_list = a_rows.take(pa.array(changed)).to_pylist()
        for i, e, a in zip(changed, e_list, a_list, strict=True):
            columns = tuple(n for n in differs if flags[n][i])
            out.append(Difference(tuple(e[k] for k in key), e, a, columns))
    missing = joined.filter(pc.is_null(a_idx))["__e"]
    for row in expected.take(missing).to_pylist():
        out.append(Difference(tuple(row[k] for k in key), row, None))
    extra = joined.filter(pc.is_null(e_idx))["__a"]
    for row in actual.take(extra).to_pylist():
        out.append(Difference(tuple(row[k] for k in key), None, row))
    if repeated:
        by_key = {d.key: d for d in out}
        expected_rows = {
            tuple(r[k] for k in key): r for r in semi_join(expected, _keys_table(repeated, key), key).to_pylist()
        }
        for k, (row, times) in repeated.items():
            by_key[k] = Difference(k, expected_rows.get(k), row, times=times)
        out = list(by_key.values())
    out.sort(key=lambda d: tuple((v is None, v) for v in d.key))
    return out


def _first_of_each_key(rows: pa.Table, key: list[str]) -> tuple[pa.Table, dict[tuple, tuple[dict, int]]]:
    """``rows`` with each key's first row only, and the keys it held more than once: key -> (a row, times)."""
    counts = rows.group_by(key).aggregate([([], "count_all")])
    twice = counts.filter(pc.greater(counts["count_all"], 1))
    if twice.num_rows == 0:
        return rows, {}
    numbered = rows.append_column("__i", pa.array(np.arange(rows.num_rows), pa.int64()))
    first = numbered.group_by(key).aggregate([("__i", "min")])["__i_min"]
    kept = rows.take(pa.array(np.sort(first.to_numpy())))
    samples = semi_join(rows, twice.select(key), key).to_pylist()
    times = {tuple(r[k] for k in key): r["count_all"] for r in twice.to_pylist()}
    repeated: dict[tuple[Any, ...], Any] = {}
    for row in samples:
        k = tuple(row[c] for c in key)
        repeated.setdefault(k, (row, times[k]))
    return kept, repeated


def _keys_table(repeated: dict[tuple, Any], key: list[str]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(key, k, strict=True)) for k in repeated])


def _same(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.Array:
    """Null-safe equality of two columns of one type (floating point: within `FLOAT_TOLERANCE`)."""
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    if pa.types.is_floating(a.type):
        scale = pc.max_element_wise(pc.abs(a), pc.abs(b))
        close = pc.less_equal(pc.abs(pc.subtract(a, b)), pc.add(pc.multiply(scale, FLOAT_TOLERANCE), 1e-300))
        equal = pc.or_kleene(close, pc.and_(pc.is_nan(a), pc.is_nan(b)))
    else:
        equal = pc.equal(a, b)
    out = pc.or_(pc.fill_null(equal, False), both_null)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _violations(
    model: str, number: int, differences: list[Difference], key: list[str], total: int | None = None
) -> list[Violation]:
    """Violations of the first `MAX_VIOLATIONS` ``differences``; ``total`` (default: as many as given) is how many
    keys differ in all."""
    out = []
    total = len(differences) if total is None else total
    shown = differences[:MAX_VIOLATIONS]
    for i, d in enumerate(shown):
        where = ", ".join(f"{k}={_text(v)}" for k, v in zip(key, d.key, strict=True))
        if d.times > 1:
            what = f"the table holds {d.times} rows of it (a key is one row: a data file committed twice?)"
        elif d.actual is None:
            what = "the table has no row of it (the SQL gives one)"
        elif d.expected is None:
            what = "the table has a row of it that the SQL does not give"
        else:
            what = "; ".join(f"column {c} expected {_text(d.expected[c])}, got {_text(d.actual[c])}" for c in d.columns)
        message = f"row of key ({where}) differs from the model's SQL as of round {number}: {what}"
        if i == len(shown) - 1 and total > len(shown):
            message += f"; {total - len(shown)} more differences, {total} in all"
        out.append(
            Violation(
                check="layer-row",
                table=model,
                message=message,
                keys=(d.key if len(key) > 1 else d.key[0],),
                expected=d.expected,
                actual=d.actual,
            )
        )
    return out


def _text(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)
