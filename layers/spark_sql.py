"""Running a model's Spark SQL over lakestream tables, each read as of an offset map or given as rows.

`SparkSql.run(query, views)` rewrites the query's table references (``ods.orders``) to temporary views and
returns the result as Arrow. A view is an offset map (the table as of those offsets, read by the
``lakestream`` Spark data source on the executors: one task per bucket), an Arrow table the round already
restricted to the rows it needs (changed keys and what they join to), or a DataFrame of such rows (a round on
the executors, `layers.executor_rounds`: the rows never reach the driver). Names that are not tables of the query
(``__groups``) are registered as they are, for the round's own joins.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa
from sqlglot import exp

from layers.sql import DIALECT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.lakehouse import Lakehouse

__all__ = ["Filtered", "SparkSql"]


@dataclass(frozen=True)
class Filtered:
    """A table as of ``offsets`` with only the rows ``row_filter`` (pyiceberg expression) may keep: pushed into
    the read, so the rows it drops never cross into Spark's JVM (the SQL still decides)."""

    offsets: Mapping[int, int]
    row_filter: Any


if TYPE_CHECKING:
    View: TypeAlias = pa.Table | Mapping[int, int] | Filtered | DataFrame
_counter = itertools.count()
#: The Spark conf that sets how many rows of an Arrow table go into one partition of ``createDataFrame``.
BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"
#: An Arrow view is cut into partitions of at least this many rows.
MIN_PARTITION_ROWS = 10_000
_CONF_LOCK = threading.Lock()


class SparkSql:
    """Spark SQL over lakestream tables (see the module)."""

    def __init__(self, spark: SparkSession, lh: Lakehouse) -> None:
        self.spark = spark
        self.lh = lh

    def frame(
        self, name: str, view: View, schema: pa.Schema | None = None, columns: list[str] | None = None
    ) -> DataFrame:
        """A DataFrame of ``view`` with only ``columns`` (default all; the order of the table's schema)."""
        from pyspark.sql import DataFrame

        if isinstance(view, DataFrame):
            return view if columns is None else view.select(*(c for c in view.columns if c in columns))
        if isinstance(view, pa.Table):
            if view.num_rows == 0 and schema is not None:
                view = schema.empty_table()
            if columns is not None:
                view = view.select([c for c in view.column_names if c in columns])
            return self._create(_spark_friendly(view))
        from lakehouse.spark import read_table

        names = self.lh.table(name).schema.names
        chosen = [c for c in names if columns is None or c in columns]
        if isinstance(view, Filtered):
            return read_table(
                self.spark, self.lh, name, as_of=dict(view.offsets), columns=chosen, row_filter=view.row_filter
            )
        return read_table(self.spark, self.lh, name, as_of=dict(view), columns=chosen)

    def _create(self, table: pa.Table) -> DataFrame:
        """``createDataFrame`` of ``table`` in one partition per core: PySpark cuts an Arrow table into
        partitions of ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (10,000 by default: 38 tasks for
        378,000 rows, each a fixed cost on a small cluster), so that conf is raised for the call."""
        per_partition = max(
            MIN_PARTITION_ROWS, -(-table.num_rows // max(1, self.spark.sparkContext.defaultParallelism))
        )
        conf = self.spark.conf
        with _CONF_LOCK:
            previous = conf.get(BATCH_CONF, None)
            conf.set(BATCH_CONF, str(per_partition))
            try:
                return self.spark.createDataFrame(table)
            finally:
                if previous is None:
                    conf.unset(BATCH_CONF)
                else:
                    conf.set(BATCH_CONF, previous)

    def run(self, query: exp.Query, views: Mapping[str, View]) -> pa.Table:
        """The rows of ``query`` with its tables replaced by ``views`` (see the module), as Arrow."""
        with self.dataframe(query, views) as df:
            return df.toArrow()

    @contextmanager
    def dataframe(self, query: exp.Query, views: Mapping[str, View]) -> Iterator[DataFrame]:
        """``query`` over ``views`` as a DataFrame, usable inside the ``with`` (its views are dropped after)."""
        suffix = next(_counter)
        names: dict[str, str] = {}
        registered = []
        try:
            for name, view in views.items():
                temp = f"__ls_{name.replace('.', '__')}_{suffix}"
                schema = self.lh.table(name).schema if "." in name else None
                columns = referenced_columns(query, name) if "." in name else None
                self.frame(name, view, schema, columns).createOrReplaceTempView(temp)
                registered.append(temp)
                names[name] = temp
            yield self.spark.sql(rewrite_tables(query, names).sql(dialect=DIALECT))
        finally:
            for temp in registered:
                self.spark.catalog.dropTempView(temp)


def referenced_columns(query: exp.Query, name: str) -> list[str] | None:
    """The columns of table ``name`` (``ns.t``) that the (qualified) ``query`` uses, or None for all of them
    (a ``*`` of it, or a column sqlglot could not attribute): a scan reads only these."""
    aliases = set()
    for table in query.find_all(exp.Table):
        if f"{table.db}.{table.name}" == name:
            aliases.add(table.alias_or_name)
    used: set[str] = set()
    for column in query.find_all(exp.Column):
        if isinstance(column.this, exp.Star) or not column.table:
            return None
        if column.table in aliases:
            used.add(column.name)
    for select in query.find_all(exp.Select):
        if any(isinstance(e, exp.Star) for e in select.expressions):
            return None
    return sorted(used)


def read_columns(query: exp.Query, name: str, key: Sequence[str], names: Sequence[str]) -> list[str] | None:
    """The columns of table ``name`` a round reads, in the table's order ``names``: those the model's ``query``
    uses (the join columns among them) and the primary ``key``, or None for all of them."""
    used = referenced_columns(query, name)
    if used is None:
        return None
    return [n for n in names if n in used or n in key]


def rewrite_tables(query: exp.Query, names: Mapping[str, str]) -> exp.Query:
    """``query`` with each table ``ns.t`` in ``names`` replaced by the view ``names[ns.t]`` (alias kept)."""
    out = query.copy()
    for table in list(out.find_all(exp.Table)):
        full = f"{table.db}.{table.name}" if table.db else table.name
        if full not in names:
            continue
        alias = table.alias or table.name
        replacement = exp.Table(
            this=exp.to_identifier(names[full]), alias=exp.TableAlias(this=exp.to_identifier(alias))
        )
        table.replace(replacement)
    return out


def _spark_friendly(table: pa.Table) -> pa.Table:
    """What Spark's ``createDataFrame`` takes whole: one chunk per column (several chunks can lose rows:
    docs/upstream.md), large strings and binaries as their 32-bit forms."""
    table = table.combine_chunks()
    fields = []
    for f in table.schema:
        t: Any = f.type
        if pa.types.is_large_string(t):
            t = pa.string()
        elif pa.types.is_large_binary(t):
            t = pa.binary()
        fields.append(pa.field(f.name, t, f.nullable))
    schema = pa.schema(fields)
    return table if schema == table.schema else table.cast(schema)
