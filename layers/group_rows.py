"""The rows of a regroup's groups: a filter of them pushed into the input's read (`groups_filter`, for Spark's
read), or, for a one-input GROUP BY, read by the driver with only the groups' rows kept (`group_rows`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, GreaterThanOrEqual, In, LessThanOrEqual
from sqlglot import exp

from lakehouse.merge.keyed_rows import semi_join
from layers.rewrite import group_terms
from layers.spark_sql import referenced_columns

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

__all__ = ["GROUPS_FILTER_LIMIT", "MONTHS_AS_DAYS_LIMIT", "group_rows", "groups_filter", "partitions_filter"]


#: Regroups of at most this many groups push a filter of their rows into the input's read.
GROUPS_FILTER_LIMIT = 256
#: A regroup's months of a date column are pushed into its read as their days (an IN list) up to this many
#: months (about 1,800 days); more as the range from the first to the last.
MONTHS_AS_DAYS_LIMIT = 60


def partitions_filter(column: str, values: pa.ChunkedArray | pa.Array) -> Any:
    """A pyiceberg filter keeping (at least) the rows whose ``column`` holds one of ``values`` (a window model's
    first partition column, over the partitions a round recomputes): an IN list of up to `GROUPS_FILTER_LIMIT`
    values, else their range; ``OR column IS NULL`` when a value is null. None when there are no values."""
    from pyiceberg.expressions import IsNull, Or

    values = pc.unique(values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values)
    present = values.drop_null()
    out: Any = None
    if len(present) and len(present) <= GROUPS_FILTER_LIMIT:
        # mypy reads pyiceberg's pydantic fields as __init__ (the real __init__ takes these arguments)
        out = In(column, present.to_pylist())  # type: ignore[arg-type,call-arg]
    elif len(present):
        low, high = pc.min_max(present).values()
        out = And(GreaterThanOrEqual(column, low.as_py()), LessThanOrEqual(column, high.as_py()))  # type: ignore[arg-type,call-arg]
    if values.null_count:
        out = IsNull(column) if out is None else Or(out, IsNull(column))  # type: ignore[arg-type,call-arg]
    return out


def groups_filter(select: exp.Select, groups: pa.Table) -> Any:
    """A pyiceberg filter keeping (at least) the input rows of ``groups`` (``__g0``, ...) of a one-input GROUP
    BY, from the group expressions it can invert (`group_terms`): a column (``col = value``) and a month of a
    date (``value <= col < next month``). None when none can be, or the groups are too many."""
    import datetime

    from pyiceberg.expressions import AlwaysTrue, EqualTo, IsNull, LessThan, Or

    if groups.num_rows == 0 or groups.num_rows > GROUPS_FILTER_LIMIT:
        return None
    terms = group_terms(select)
    if not terms:
        return None
    disjuncts = []
    for row in groups.to_pylist():
        conjunct: Any = AlwaysTrue()
        for i, column, kind in terms:
            value = row[f"__g{i}"]
            if kind == "eq":
                part: Any = IsNull(column) if value is None else EqualTo(column, value)  # type: ignore[arg-type,call-arg]
            elif isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
                first = value.replace(day=1)
                following = (first + datetime.timedelta(days=32)).replace(day=1)
                part = And(GreaterThanOrEqual(column, first.isoformat()), LessThan(column, following.isoformat()))  # type: ignore[arg-type,call-arg]
            else:
                continue
            conjunct = part if isinstance(conjunct, AlwaysTrue) else And(conjunct, part)
        if isinstance(conjunct, AlwaysTrue):
            return None
        disjuncts.append(conjunct)
    out = disjuncts[0]
    for d in disjuncts[1:]:
        out = Or(out, d)
    return out


def group_rows(
    lh: Lakehouse, table: str, offsets: Mapping[int, int], select: exp.Select, groups: pa.Table
) -> pa.Table | None:
    """The rows of ``table`` (the one input of a GROUP BY ``select``) as of ``offsets`` that belong to
    ``groups`` (``__g0``, ...) as far as the invertible group expressions tell (`group_terms`; the model's
    semi join on all of them still decides), read by the driver: a coarse filter pushed into the read (each
    ``eq`` column IN the groups' values, each month column within the groups' months: file and row-group
    pruning, cheap to evaluate), then the exact groups matched by a hash join on the inverted terms (a
    disjunction per group costs a comparison per group and row: several times the read itself). Only the
    columns the SQL uses are read. None (the caller reads through Spark)
    when no term can be inverted, a group's value there is null or of another type, or the groups are more
    than `GROUPS_FILTER_LIMIT`."""
    import datetime

    from pyiceberg.expressions import LessThan

    if groups.num_rows == 0 or groups.num_rows > GROUPS_FILTER_LIMIT:
        return None
    terms = group_terms(select)
    schema = lh.table(table).schema
    if not terms or any(c not in schema.names for _, c, _ in terms):
        return None
    wanted: dict[str, pa.Array] = {}
    conditions: list[Any] = []
    for i, column, kind in terms:
        values = groups[f"__g{i}"].combine_chunks()
        if values.null_count:
            return None
        column_type = schema.field(column).type
        if kind == "month":
            if not pa.types.is_date32(column_type) or not pa.types.is_date(values.type):
                return None
            months = pc.floor_temporal(values.cast(pa.date32()), unit="month")
            distinct = sorted(pc.unique(months).to_pylist())
            if len(distinct) <= MONTHS_AS_DAYS_LIMIT:
                # every day of those months: a range from the first to the last would keep most of a table
                # whose groups span its years
                days = [
                    (month + datetime.timedelta(days=d)).isoformat()
                    for month in distinct
                    for d in range(31)
                    if (month + datetime.timedelta(days=d)).month == month.month
                ]
                conditions.append(In(column, days))  # type: ignore[arg-type,call-arg]
            else:
                following = (distinct[-1] + datetime.timedelta(days=32)).replace(day=1)
                conditions.append(GreaterThanOrEqual(column, distinct[0].isoformat()))  # type: ignore[arg-type,call-arg]
                conditions.append(LessThan(column, following.isoformat()))  # type: ignore[arg-type,call-arg]
            wanted[f"__k{i}"] = months
        else:
            try:
                values = values.cast(column_type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
            conditions.append(In(column, set(pc.unique(values).to_pylist())))  # type: ignore[arg-type,call-arg]
            wanted[f"__k{i}"] = values
    columns = referenced_columns(select, table)
    row_filter = conditions[0]
    for c in conditions[1:]:
        row_filter = And(row_filter, c)
    groups_keys = pa.table(wanted)

    def keep(rows: pa.Table) -> pa.Table:  # each batch as it is read: only the groups' rows are held
        keyed = rows
        for i, column, kind in terms:
            key = rows[column] if kind == "eq" else pc.floor_temporal(rows[column], unit="month")
            keyed = keyed.append_column(f"__k{i}", key)
        return semi_join(keyed, groups_keys, list(wanted)).select(rows.column_names)

    return lh.union_read(table, columns=columns, row_filter=row_filter, as_of=dict(offsets), keep=keep)
