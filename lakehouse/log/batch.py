"""Validate an incoming batch against its table and split it by bucket, before anything is written."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lakehouse.errors import BatchError, SchemaError
from lakehouse.log.segment import OPS
from lakehouse.merge import engine_of
from lakehouse.table.bucketing import bucket_ids
from lakehouse.table.definition import PARTIAL_UPDATE, TableDefinition

DEFAULT_MAX_BATCH_ROWS = 1_000_000
DEFAULT_MAX_BATCH_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Limits:
    max_rows: int = DEFAULT_MAX_BATCH_ROWS
    max_bytes: int = DEFAULT_MAX_BATCH_BYTES


def conform(definition: TableDefinition, data: pa.Table | pa.RecordBatch, op: str, limits: Limits) -> pa.Table:
    """Return ``data`` with exactly the table's columns, order and types, or raise naming the problem.

    Deletes may carry only the primary-key columns; the other columns are filled with nulls.

    Raises:
        BatchError: empty or oversized batch, an operation the table does not accept, a null key, a string
            that is not valid UTF-8.
        SchemaError: missing or extra columns, a type that cannot be cast safely, strings for a number column
            or numbers for a string column (`check_cast`).
    """
    name = definition.name
    if op not in OPS:
        raise BatchError(f"{name}: unknown operation {op!r}; use one of {list(OPS)}")
    if op != "insert" and not definition.has_primary_key:
        raise BatchError(f"{name} is a log table (no primary key): it accepts inserts only, not {op!r}")
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if not isinstance(data, pa.Table):
        raise BatchError(f"{name}: append a pyarrow Table or RecordBatch, not {type(data).__name__}")
    if data.num_rows == 0:
        raise BatchError(f"{name}: empty batch, nothing to append")
    if data.num_rows > limits.max_rows:
        raise BatchError(
            f"{name}: batch of {data.num_rows} rows exceeds the limit of {limits.max_rows} rows per append; "
            "split it into smaller appends"
        )
    if data.nbytes > limits.max_bytes:
        raise BatchError(
            f"{name}: batch of {data.nbytes} bytes exceeds the limit of {limits.max_bytes} bytes per append; "
            "split it into smaller appends"
        )
    expected = definition.schema.names
    given = data.column_names
    dupes = sorted({c for c in given if given.count(c) > 1})
    if dupes:
        raise SchemaError(f"{name}: the batch repeats columns {dupes}")
    extra = [c for c in given if c not in expected]
    if extra:
        raise SchemaError(f"{name}: the batch has columns the table does not: {extra} (table: {expected})")
    missing = [c for c in expected if c not in given]
    # a delete may carry only the key; so may any row of a partial-update table (absent columns keep their values)
    partial = op == "delete" or definition.merge_engine == PARTIAL_UPDATE
    key_only_delete = partial and missing and not set(missing) & set(definition.primary_key)
    # columns an alter added may be missing: rows of a producer that has not seen the alter (they are null)
    if missing and not key_only_delete and not set(missing) <= definition.added_columns:
        raise SchemaError(f"{name}: the batch lacks columns {missing} (table: {expected})")
    columns = []
    for field in definition.schema:
        if field.name in missing:
            columns.append(pa.nulls(data.num_rows, field.type))
            continue
        column = data.column(field.name)
        if column.type != field.type:
            check_cast(name, field.name, column.type, field.type)
            try:
                column = column.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise SchemaError(
                    f"{name}: column {field.name!r} of type {column.type} cannot be cast safely to {field.type}: {exc}"
                ) from None
        if _holds_strings(column.type):
            _check_utf8(name, field.name, column)
        if column.null_count and (not field.nullable or field.name == definition.bucket_key):
            first = int(np.flatnonzero(np.asarray(column.is_null()))[0])
            what = (
                "primary-key"
                if field.name in definition.primary_key
                else "bucket-key"
                if field.name == definition.bucket_key
                else "non-nullable"
            )
            raise BatchError(
                f"{name}: {what} column {field.name!r} has {column.null_count} null(s), first at row {first}"
            )
        columns.append(column)
    schema = definition.schema if not key_only_delete else _nullable(definition.schema, missing)
    table = pa.Table.from_arrays(columns, schema=schema)
    if definition.has_primary_key:
        engine_of(definition).check_append(op, table)
    return table


def check_cast(name: object, column: str, given: pa.DataType, target: pa.DataType, what: str = "column") -> None:
    """Refuse a cast between strings and numbers (`SchemaError`), anywhere in ``given`` and ``target`` (list
    items, struct fields, map keys and values, dictionary values).

    Arrow casts the string '3' to the number 3 and 42 to the string '42' without a word, and both change what
    the value means: a key '3' read from a text file is a bug upstream that the table would hide, and a code
    42 in a name column is not a name. The caller converts on purpose instead. Casts that keep the meaning
    still happen: widening (int32 -> int64, int -> float or decimal), string <-> large_string, dictionary ->
    plain, and anything Arrow-typed that already matches.
    """
    pair = _text_number(given, target)
    if pair is None:
        return
    source, dest = pair
    inner = "" if (source, dest) == (given, target) else f" (its {source} values into {dest})"
    raise SchemaError(
        f"{name}: {what} {column!r} is given {given} values and the table's column is {target}{inner}: lakestream "
        "does not cast strings to numbers or numbers to strings, as that changes what a value means (the string "
        "'3' would become the number 3, 42 the string '42'); nothing was written. Convert the values on purpose "
        f"before appending (e.g. with pyarrow.compute.cast to {target})"
    )


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _text_number(given: pa.DataType, target: pa.DataType) -> tuple[pa.DataType, pa.DataType] | None:
    """The first (given, target) pair, at the top or nested, where a cast would turn text into a number or a
    number into text; None if there is none."""
    if pa.types.is_dictionary(given):
        return _text_number(given.value_type, target)
    if pa.types.is_dictionary(target):
        return _text_number(given, target.value_type)
    if (_is_text(given) and _is_number(target)) or (_is_number(given) and _is_text(target)):
        return given, target
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list, pa.types.is_list_view)
    if any(f(given) for f in lists) and any(f(target) for f in lists):
        return _text_number(given.value_type, target.value_type)
    if pa.types.is_map(given) and pa.types.is_map(target):
        return _text_number(given.key_type, target.key_type) or _text_number(given.item_type, target.item_type)
    if pa.types.is_struct(given) and pa.types.is_struct(target):
        fields = {given.field(i).name: given.field(i).type for i in range(given.num_fields)}
        for i in range(target.num_fields):
            inner = target.field(i)
            if inner.name in fields and (pair := _text_number(fields[inner.name], inner.type)):
                return pair
    return None


def _holds_strings(t: pa.DataType) -> bool:
    """Whether values of ``t`` are or contain strings (in lists, structs, maps, dictionaries)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return True
    if pa.types.is_dictionary(t):
        return _holds_strings(t.value_type)
    if pa.types.is_map(t):
        return _holds_strings(t.key_type) or _holds_strings(t.item_type)
    if pa.types.is_nested(t):
        return any(_holds_strings(t.field(i).type) for i in range(t.num_fields))
    return False


def _check_utf8(name: object, column_name: str, column: pa.ChunkedArray) -> None:
    """Refuse strings that are not valid UTF-8 (an unsafe cast from binary makes them): the log would keep
    them, and union reads and tiering would then fail on them for good (UnicodeDecodeError). Arrow's full
    validation checks every string, nested ones too, vectorized: a small part of an append's CPU."""
    try:
        column.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise BatchError(
            f"{name}: column {column_name!r} holds a string that is not valid UTF-8 ({exc}); nothing was written. "
            "Decode the bytes (e.g. with errors='replace'), cast them with safe=True, which checks, or declare the "
            "column binary"
        ) from None


def _nullable(schema: pa.Schema, names: list[str]) -> pa.Schema:
    return pa.schema([f.with_nullable(True) if f.name in names else f for f in schema], metadata=schema.metadata)


def split_by_bucket(
    definition: TableDefinition, table: pa.Table, sticky_bucket: int, *, own_buffers: bool = False
) -> dict[int, pa.Table]:
    """Rows per bucket, in input order within each bucket. Keyless tables put the whole batch in
    ``sticky_bucket`` (the caller rotates it per append).

    One ``take`` sorts the batch by bucket and each bucket's rows are a zero-copy slice of it (a take per
    bucket cost 25-30% more for four buckets of a 10,000-row batch); the slices encode to the same records.
    With ``own_buffers`` each bucket gets its own take instead, so a part kept after the others are gone
    holds only its rows' memory (the `Producer` queues parts per bucket)."""
    if definition.bucket_key is None:
        return {sticky_bucket: table}
    ids = bucket_ids(table.column(definition.bucket_key), definition.buckets).to_numpy(zero_copy_only=False)
    counts = np.bincount(ids, minlength=definition.buckets)
    present = np.flatnonzero(counts)
    if len(present) == 1:
        return {int(present[0]): table}
    # a stable sort of 16-bit ids is a radix sort, much faster than sorting the int32 ids
    narrow = ids.astype(np.int16) if definition.buckets <= np.iinfo(np.int16).max else ids
    order = np.argsort(narrow, kind="stable")
    starts = np.cumsum(counts) - counts
    if own_buffers:
        return {int(b): table.take(order[starts[b] : starts[b] + counts[b]]) for b in present}
    ordered = table.take(order)
    return {int(b): ordered.slice(int(starts[b]), int(counts[b])) for b in present}
