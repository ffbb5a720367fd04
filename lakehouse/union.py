"""Union read: the lake snapshot plus, per bucket, the log tail after that snapshot's offsets.

Log tables: the lake's rows, then the tails (a concatenation). Primary-key tables: the tails are reduced
per key (the last change wins); lake rows whose key changed in a tail are dropped, and the tails'
surviving upserts are added (deletes remove the row). Buckets without a tail are not merged.

The offsets come from the same table metadata as the scanned snapshot, so a tiering commit that lands
while we read neither hides nor doubles records. Projection and filters go into the lake scan; the
tail gets the same filter, applied after the merge (a key updated so that it no longer matches still
hides its old lake version).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, parser
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyparsing import ParseException

from lakehouse.errors import CorruptDataFileError, InvalidArgument, SchemaError
from lakehouse.lake import check_lake_layout, lake_offsets, log_to_lake_rows
from lakehouse.log import Log
from lakehouse.tiering import KeySet, reduce_changes, upserts_of

RowFilter = str | BooleanExpression | None


def parse_filter(row_filter: RowFilter, schema: Schema) -> BooleanExpression:
    """``row_filter`` (Iceberg's filter syntax, or a pyiceberg expression), checked against the lake table's
    ``schema`` before anything is read.

    Raises:
        InvalidArgument: the filter does not parse, or is not a filter.
        SchemaError: it names a column the table lacks, or compares a column with a value of another type.
    """
    if row_filter is None:
        return AlwaysTrue()
    if isinstance(row_filter, str):
        try:
            expr = parser.parse(row_filter)
        except ParseException as exc:
            raise InvalidArgument(
                f"cannot parse row_filter {row_filter!r} (at character {exc.loc}): write Iceberg's filter syntax, "
                'e.g. "o_orderstatus = \'F\' and o_totalprice >= 1000" or "o_orderkey in (1, 2)"'
            ) from None
    elif isinstance(row_filter, BooleanExpression):
        expr = row_filter
    else:
        raise InvalidArgument(
            f"row_filter must be a string or a pyiceberg expression, not {type(row_filter).__name__} ({row_filter!r})"
        )
    try:
        bind(schema, expr, case_sensitive=True)
    except (ValueError, TypeError) as exc:  # an unknown column; a literal the column's type cannot hold
        names = [f.name for f in schema.fields]
        raise SchemaError(f"row_filter {str(row_filter)!r}: {exc}; the table has columns {names}") from None
    return expr


def output_columns(table: Table, columns: Sequence[str] | None) -> list[str]:
    names = [f.name for f in table.schema().fields]
    if columns is None:
        return names
    unknown = [c for c in columns if c not in names]
    if unknown:
        raise SchemaError(f"unknown column(s) {unknown}; the table has {names}")
    return list(columns)


def read_tail(log_: Log, offsets: dict[int, int], *, primary_key: Sequence[str] = ()) -> pa.Table:
    """Every bucket's log records from ``offsets`` on, as lake rows with ``_op`` (reduced per key for
    primary-key tables)."""
    parts = []
    for bucket, start in sorted(offsets.items()):
        data = log_.read(bucket, start)
        if data.num_rows == 0:
            continue
        if primary_key:
            data = reduce_changes(data, tuple(primary_key))
        parts.append(log_to_lake_rows(data, bucket, keep_op=True))
    if not parts:
        return log_to_lake_rows(log_.read_schema.empty_table(), 0, keep_op=True)
    return pa.concat_tables(parts)


def merge_batches(
    lake: Iterator[pa.RecordBatch],
    tail: pa.Table,
    *,
    primary_key: Sequence[str],
    columns: list[str],
    tail_filter: BooleanExpression,
    schema: pa.Schema,
) -> Iterator[pa.RecordBatch]:
    """Lake batches minus keys changed in ``tail``, then the tail's rows (see the module docstring)."""
    pk = tuple(primary_key)
    keys = KeySet(tail, pk) if pk and tail.num_rows else None
    target = pa.schema([schema.field(c) for c in columns])
    for batch in lake:
        if keys is not None:
            batch = batch.filter(pc.invert(keys.hits(batch)))
        batch = batch.select(columns)
        yield batch if batch.schema.equals(target) else batch.cast(target)
    if tail.num_rows == 0:
        return
    if pk:
        tail = upserts_of(tail)
    if not isinstance(tail_filter, AlwaysTrue) and tail.num_rows:
        tail = tail.filter(tail_filter)
    yield from tail.select(columns).cast(target).to_batches()


def corrupt_file_error(table: Table, exc: Exception) -> Exception:
    """The error of a lake read that failed inside pyarrow ("Could not open Parquet input source '<Buffer>'":
    pyiceberg opens files as streams, so the path is lost): a `CorruptDataFileError` naming the first live data
    file whose footer cannot be read, or ``exc`` itself if every footer reads."""
    if table.current_snapshot() is None:
        return exc
    for task in table.scan().plan_files():
        path = task.file.file_path
        try:
            with table.io.new_input(path).open() as stream:
                pq.ParquetFile(stream).metadata  # noqa: B018 - reads the footer
        except (pa.ArrowInvalid, FileNotFoundError) as bad:
            what = "is missing" if isinstance(bad, FileNotFoundError) else "cannot be read as Parquet"
            return CorruptDataFileError(
                f"lake table {'.'.join(table.name())}: data file {path} {what} ({' '.join(str(bad).split())}). "
                "Restore it from a backup, or roll the table back to a snapshot that does not reference it"
            )
        except OSError:  # the store, not the file (unreachable, no permission): the original error says it
            return exc
    return exc


def _named(table: Table, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    try:
        yield from batches
    except (pa.ArrowInvalid, OSError) as exc:
        raise corrupt_file_error(table, exc) from exc


def _union(
    table: Table, log_: Log, columns: Sequence[str] | None, row_filter: RowFilter, *, stream: bool
) -> Iterator[pa.RecordBatch]:
    definition = log_.definition
    check_lake_layout(table.metadata, definition)
    pk = definition.primary_key
    out = output_columns(table, columns)
    scan_cols = out + [c for c in pk if c not in out]
    expr = parse_filter(row_filter, table.schema())
    offsets = lake_offsets(table.metadata, definition.buckets, name=str(definition.name))
    tail = read_tail(log_, offsets, primary_key=pk)
    tail_filter = expression_to_pyarrow(bind(table.schema(), expr, case_sensitive=True))
    scan = table.scan(row_filter=expr, selected_fields=tuple(scan_cols))
    if table.current_snapshot() is None:
        lake, schema = iter(()), scan.projection().as_arrow()
    elif stream:
        reader = _read(table, scan.to_arrow_batch_reader)
        lake, schema = _named(table, iter(reader)), reader.schema
    else:  # pyiceberg reads the files in parallel
        data = _read(table, scan.to_arrow)
        lake, schema = iter(data.to_batches()), data.schema
    return merge_batches(lake, tail, primary_key=pk, columns=out, tail_filter=tail_filter, schema=schema)


def union_batches(
    table: Table, log_: Log, *, columns: Sequence[str] | None = None, row_filter: RowFilter = None
) -> Iterator[pa.RecordBatch]:
    """Union read as a stream of record batches (memory: one lake batch plus the log tail)."""
    return _union(table, log_, columns, row_filter, stream=True)


def union_read(
    table: Table, log_: Log, *, columns: Sequence[str] | None = None, row_filter: RowFilter = None
) -> pa.Table:
    batches = _union(table, log_, columns, row_filter, stream=False)
    first = next(batches, None)
    if first is None:
        out = output_columns(table, columns)
        return table.scan(selected_fields=tuple(out)).projection().as_arrow().empty_table()
    return pa.Table.from_batches([first, *batches])


def lake_read(table: Table, *, columns: Sequence[str] | None = None, row_filter: RowFilter = None) -> pa.Table:
    """The lake only: what any Iceberg reader sees."""
    out = output_columns(table, columns)
    scan = table.scan(row_filter=parse_filter(row_filter, table.schema()), selected_fields=tuple(out))
    return _read(table, scan.to_arrow)


def _read(table: Table, read: Any) -> Any:
    try:
        return read()
    except (pa.ArrowInvalid, OSError) as exc:
        raise corrupt_file_error(table, exc) from exc
