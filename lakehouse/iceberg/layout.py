"""How a table lies in Iceberg: its schema, partition spec and sort order, and its rows as lake rows.

Layout (as Fluss does): the log's columns plus ``__bucket`` (int), ``__offset`` (long) and
``__timestamp`` (timestamptz). Partition spec: the table's own transforms (``partition_by``, e.g.
``day(o_orderdate)``), then ``bucket(N, bucket_key)``, the log's own bucketing, so log bucket *i* is
lake partition ``bucket = i`` and tiering needs no shuffle; a table without a bucket key partitions by
``identity(__bucket)``. Data files are sorted by ``__offset``.

Which log offsets a lake snapshot holds is the offsets protocol's (`lakehouse.iceberg.offsets`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ValidationError as PydanticValidationError
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.io.pyarrow import UTC_ALIASES, UnsupportedPyArrowTypeException
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    YearTransform,
)
from pyiceberg.types import NestedField

from lakehouse.errors import LakeStateError, SchemaError
from lakehouse.table.definition import TableDefinition

TABLE_UUID_PROPERTY = "lakestream.table-uuid"


#: Properties of every lake table. Snapshot isolation for overwrites: a compaction must not fail because
#: tiering appended new files meanwhile (pyiceberg's default, serializable, refuses any concurrent append).
#: Tiering rounds are ordered by the tiering fence, and replaced files must still be live (pyiceberg checks).
#: Manifests are merged (see `lakehouse.manifests`), so planning reads a bounded number of them however many
#: rounds were committed; the defaults apply to tables created before these properties were set.
LAKE_TABLE_PROPERTIES = {
    "write.update.isolation-level": "snapshot",
    "write.delete.isolation-level": "snapshot",
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "16",
}

BUCKET_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN = "__bucket", "__offset", "__timestamp"
LAKE_SYSTEM_FIELDS = [
    pa.field(BUCKET_COLUMN, pa.int32(), False),
    pa.field(OFFSET_COLUMN, pa.int64(), False),
    pa.field(TIMESTAMP_COLUMN, pa.timestamp("us", tz="UTC"), False),
]

_TRANSFORM = re.compile(r"(identity|year|month|day|hour)\((.+)\)")
_TIME_TRANSFORMS = {"year": YearTransform, "month": MonthTransform, "day": DayTransform, "hour": HourTransform}


_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def avro_name(name: str) -> str:
    """``name`` as a valid Avro name, for partition fields: manifests are Avro files whose partition struct
    is named by them, and readers that hold to the Avro spec (DuckDB) refuse other names, so a column named
    ``订单号`` or ``order id`` would make the table unreadable there. Replaced as Iceberg's Java
    ``AvroSchemaUtil.makeCompatibleName`` does (``_x`` + the character's hex code, ``_`` before a leading
    digit), but by the Avro spec's ASCII rules; valid names stay as they are."""
    if _AVRO_NAME.fullmatch(name):
        return name
    out = []
    for i, ch in enumerate(name):
        if ch == "_" or ("A" <= ch <= "Z") or ("a" <= ch <= "z") or (i > 0 and "0" <= ch <= "9"):
            out.append(ch)
        elif "0" <= ch <= "9":
            out.append(f"_{ch}")
        else:
            out.append(f"_x{ord(ch):X}")
    return "".join(out)


@dataclass(frozen=True)
class UserPartition:
    """One of the table's own partition transforms, e.g. ``day(o_orderdate)``."""

    transform: str  # identity | year | month | day | hour
    column: str

    @property
    def field_name(self) -> str:
        return avro_name(self.column if self.transform == "identity" else f"{self.column}_{self.transform}")

    def iceberg_transform(self) -> Transform:
        return IdentityTransform() if self.transform == "identity" else _TIME_TRANSFORMS[self.transform]()

    def values(self, column: pa.ChunkedArray | pa.Array) -> pa.Array:
        """The partition values of ``column``, in Iceberg's partition representation (ints for time)."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        t = column.type
        if self.transform == "identity":
            if pa.types.is_date32(t):
                return column.view(pa.int32())
            if pa.types.is_timestamp(t):
                return column.cast(pa.timestamp("us", tz=t.tz)).view(pa.int64())
            return column
        if self.transform == "day" and pa.types.is_date32(t):
            return column.view(pa.int32())
        if self.transform == "hour":
            micros = column.cast(pa.timestamp("us", tz=getattr(t, "tz", None))).view(pa.int64())
            return pc.floor(pc.divide(micros.cast(pa.float64()), 3_600_000_000.0)).cast(pa.int32())
        if self.transform == "day":
            micros = column.cast(pa.timestamp("us", tz=t.tz)).view(pa.int64())
            return pc.floor(pc.divide(micros.cast(pa.float64()), 86_400_000_000.0)).cast(pa.int32())
        years = pc.subtract(pc.year(column), 1970)
        if self.transform == "year":
            return years.cast(pa.int32())
        return pc.add(pc.multiply(years, 12), pc.subtract(pc.month(column), 1)).cast(pa.int32())


def parse_partition_by(definition_or_specs: TableDefinition | Sequence[str], schema: pa.Schema) -> list[UserPartition]:
    """Parse and check ``partition_by`` entries (``col``, ``identity(col)``, ``year|month|day|hour(col)``).

    Raises:
        SchemaError: an entry is malformed, names an unknown column, or does not fit the column's type.
    """
    specs = (
        definition_or_specs.partition_by
        if isinstance(definition_or_specs, TableDefinition)
        else tuple(definition_or_specs)
    )
    out = []
    for spec in specs:
        entry = spec.strip()
        m = _TRANSFORM.fullmatch(entry)
        if entry in schema.names:  # a column's own name, whatever it holds (any language, spaces)
            part = UserPartition("identity", entry)
        elif m:
            part = UserPartition(m.group(1), m.group(2).strip())
        elif not entry or "(" in entry or ")" in entry:
            raise SchemaError(
                f"partition_by entry {spec!r} is not understood; use col, identity(col), year(col), month(col), "
                "day(col) or hour(col) (the bucket transform is added from the bucket key)"
            )
        else:
            part = UserPartition("identity", entry)
        if part.column not in schema.names:
            raise SchemaError(f"partition_by {spec!r}: no column {part.column!r} in {schema.names}")
        t = schema.field(part.column).type
        if part.transform in ("year", "month", "day") and not (pa.types.is_date32(t) or pa.types.is_timestamp(t)):
            raise SchemaError(f"partition_by {spec!r}: {part.transform}() needs a date or timestamp column, not {t}")
        if part.transform == "hour" and not pa.types.is_timestamp(t):
            raise SchemaError(f"partition_by {spec!r}: hour() needs a timestamp column, not {t}")
        if part.transform == "identity" and not (
            pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_date32(t) or pa.types.is_boolean(t)
        ):
            raise SchemaError(f"partition_by {spec!r}: identity partitions need an integer, string or date column")
        if part in out:
            raise SchemaError(f"partition_by repeats {spec!r}")
        out.append(part)
    return out


def lake_arrow_schema(definition: TableDefinition) -> pa.Schema:
    return pa.schema([*definition.schema, *LAKE_SYSTEM_FIELDS])


def lake_schema(definition: TableDefinition) -> Schema:
    """The Iceberg schema of the lake table: as created, field ids 1..n in column order (the user columns, then
    the system columns); after schema evolution (`lakehouse.table.evolution`) the columns of the definition's current
    version under their field ids, in field-id order (Iceberg adds a column after the others): a kept column as
    created (its nested ids too), renamed or widened; an added one optional, under the id the alter gave it.

    Raises:
        SchemaError: a column's type has no Iceberg type.
    """
    if definition.schema_version == 0:
        return _fresh_lake_schema(definition.name, lake_arrow_schema(definition))
    original = definition.original
    created = _fresh_lake_schema(definition.name, pa.schema([*original.schema, *LAKE_SYSTEM_FIELDS]))
    by_id = {f.field_id: f for f in created.fields}
    system = [by_id[i] for i in range(len(original.schema) + 1, len(original.schema) + 1 + len(LAKE_SYSTEM_FIELDS))]
    fields = list(system)
    for column, field_id in zip(definition.schema, definition.ids, strict=True):
        iceberg = _fresh_lake_schema(definition.name, pa.schema([column])).fields[0]
        if field_id in by_id:  # a column of the created table: its nested ids stay; renamed or widened
            kept = by_id[field_id]
            field_type = kept.field_type if not iceberg.field_type.is_primitive else iceberg.field_type
            fields.append(NestedField(field_id, column.name, field_type, required=kept.required))
        else:
            fields.append(NestedField(field_id, column.name, iceberg.field_type, required=False))
    return Schema(*sorted(fields, key=lambda f: f.field_id))


def _fresh_lake_schema(name: object, arrow: pa.Schema) -> Schema:
    try:
        converted = Catalog._convert_schema_if_needed(arrow)  # noqa: SLF001 - pyiceberg's converter
    except (UnsupportedPyArrowTypeException, ValueError) as exc:
        raise SchemaError(f"{name}: the lake (Iceberg) cannot store this schema: {exc}") from None
    return assign_fresh_schema_ids(converted)


@functools.lru_cache(maxsize=256)
def _created_layout(definition: TableDefinition) -> tuple[Schema, PartitionSpec]:
    """The schema and partition spec lakestream creates the lake table with; kept (building them is a
    noticeable part of an empty union read)."""
    schema = lake_schema(definition)
    return schema, lake_partition_spec(definition, schema)


def check_lake_layout(metadata: TableMetadata, definition: TableDefinition) -> None:
    """Raise `LakeStateError` unless the lake table's current schema and partition spec are the ones
    lakestream created. Tiering, union reads and compaction write and merge the log's columns under those
    field ids, into those partitions: after another engine evolved the lake table they failed every round
    ("Field ... does not exist", "list index out of range"), and a column dropped and added again would
    have taken new rows under an id readers no longer map."""
    schema, spec = _created_layout(definition)
    actual = metadata.schema()
    changes = []
    if actual.as_struct() != schema.as_struct():
        want, have = {f.name: f for f in schema.fields}, {f.name: f for f in actual.fields}

        def describe(f: Any) -> str:
            return f"{f.field_type}, {'required' if f.required else 'optional'}, field id {f.field_id}"

        changes += [f"column {n!r} added" for n in have if n not in want]
        changes += [f"column {n!r} dropped" for n in want if n not in have]
        changes += [
            f"column {n!r} changed ({describe(want[n])} -> {describe(have[n])})"
            for n in want
            if n in have and have[n] != want[n]
        ]
        changes = changes or ["its schema differs"]
        kept = [s.schema_id for s in metadata.schemas if s.as_struct() == schema.as_struct()]
        if kept:
            changes[-1] += f" (the table's metadata still holds the original as schema {kept[0]})"
    if tuple(metadata.spec().fields) != tuple(spec.fields):
        changes.append(f"partition spec {_describe_spec(metadata.spec())}, created as {_describe_spec(spec)}")
    if changes:
        raise LakeStateError(
            f"the lake table {definition.name} was changed outside lakestream: {'; '.join(changes)}. Tiering, "
            "union reads and compaction write and merge the log's columns into the layout of the table's "
            "definition (evolve a lakestream table with `lakestream table alter`, which changes both). Restore it, "
            "or create a new lakestream table with the new layout and copy the data into it"
        )


def _describe_spec(spec: PartitionSpec) -> str:
    return "[" + ", ".join(f"{f.name}: {f.transform}" for f in spec.fields) + "]"


#: Arrow types Iceberg has no type for, or that pyiceberg would map to a narrower one (uint32 to int and
#: uint64 to long overflow: the log would accept rows that tiering can never write), and what to use.
_LAKE_TYPE_ADVICE = {
    pa.types.is_uint32: "int64",
    pa.types.is_uint64: "int64 or decimal128(20, 0)",
    pa.types.is_date64: "date32",
    pa.types.is_duration: "int64 (a count of its unit)",
    pa.types.is_null: "a typed, nullable column",
}


def check_lake_types(definition: TableDefinition) -> None:
    """Raise `SchemaError` naming the column, and what to use instead, if a column's type has no Iceberg type
    that holds all its values. `Lakehouse.create_table` checks this before anything is written."""
    for field in definition.schema:
        check_lake_type(definition, field.name, field.type)
    schema = lake_schema(definition)
    try:  # what the catalog will write must load again (a lake table that cannot be loaded cannot be used)
        Schema.model_validate_json(schema.model_dump_json())
    except (PydanticValidationError, IcebergValidationError, ValueError) as exc:
        raise SchemaError(f"{definition.name}: the lake (Iceberg) cannot store this schema: {exc}") from None


def check_lake_type(definition: TableDefinition, column: str, t: pa.DataType) -> None:
    advice = next((use for test, use in _LAKE_TYPE_ADVICE.items() if test(t)), None)
    if pa.types.is_timestamp(t) and t.tz is not None and t.tz not in UTC_ALIASES:
        advice = (
            f"timestamp('{'us' if t.unit == 'ns' else t.unit}', tz='UTC') (Iceberg stores instants in UTC: cast the "
            "column, the instants stay the same)"
        )
    elif pa.types.is_timestamp(t) and t.unit == "ns":
        advice = f"timestamp('us'{', tz=' + repr(t.tz) if t.tz else ''}) (Iceberg format v2 stores microseconds)"
    elif pa.types.is_time32(t) or (pa.types.is_time64(t) and t.unit == "ns"):
        advice = "time64('us')"
    elif pa.types.is_decimal(t) and t.precision > 38:
        advice = "a decimal of precision 38 or less"
    elif pa.types.is_decimal(t) and not 0 <= t.scale <= t.precision:
        # Arrow makes decimal(5, 7) and decimal(5, -2); Iceberg has neither: pyiceberg wrote a lake table it
        # could not load again (-2), or one every tiering round failed to write to (7)
        same = f"decimal128({t.scale}, {t.scale})" if t.scale > 0 else f"decimal128({t.precision - t.scale}, 0)"
        advice = f"a decimal whose scale is from 0 to its precision ({same} holds its values)"
    elif pa.types.is_struct(t) and t.num_fields == 0:
        advice = "a struct with at least one field (Parquet cannot write an empty group)"
    elif pa.types.is_fixed_size_binary(t) and t.byte_width == 0:
        advice = "fixed_size_binary of at least 1 byte, or binary"
    if advice is not None:
        raise SchemaError(
            f"{definition.name}: column {column!r} of type {t} cannot be stored in the lake; use {advice}"
        )
    children = (
        [t.value_type]
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
        else [t.key_type, t.item_type]
        if pa.types.is_map(t)
        else [t.field(i).type for i in range(t.num_fields)]
        if pa.types.is_struct(t)
        else []
    )
    for child in children:
        check_lake_type(definition, column, child)


def lake_partition_spec(definition: TableDefinition, schema: Schema) -> PartitionSpec:
    fields = []
    for i, part in enumerate(parse_partition_by(definition, definition.schema)):
        source = schema.find_field(part.column).field_id
        fields.append(PartitionField(source, 1000 + i, part.iceberg_transform(), part.field_name))
    if definition.bucket_key is not None:
        source = schema.find_field(definition.bucket_key).field_id
        name = avro_name(f"{definition.bucket_key}_bucket")
        fields.append(PartitionField(source, 1000 + len(fields), BucketTransform(definition.buckets), name))
    else:
        source = schema.find_field(BUCKET_COLUMN).field_id
        fields.append(PartitionField(source, 1000 + len(fields), IdentityTransform(), BUCKET_COLUMN))
    return PartitionSpec(*fields)


def lake_sort_order(schema: Schema) -> SortOrder:
    return SortOrder(SortField(source_id=schema.find_field(OFFSET_COLUMN).field_id, transform=IdentityTransform()))


def partition_groups(
    definition: TableDefinition, table: pa.Table, bucket: int, parts: Sequence[UserPartition]
) -> list[tuple[tuple, pa.Table]]:
    """Split rows of one bucket into (partition values, rows) groups, rows keeping their order.
    The bucket partition value is the bucket id itself (the log's bucketing is Iceberg's)."""
    if not parts:
        return [((bucket,), table)]
    keys = [part.values(table.column(part.column)) for part in parts]
    if len(keys) == 1:
        uniques = pc.unique(keys[0])
        if len(uniques) == 1:
            return [((uniques[0].as_py(), bucket), table)]
    names = [f"k{i}" for i in range(len(keys))]
    index = pa.table([*keys, pa.array(np.arange(table.num_rows, dtype=np.int64))], names=[*names, "row"])
    grouped = index.group_by(names, use_threads=False).aggregate([("row", "list")])
    groups = []
    for i in range(grouped.num_rows):
        values = tuple(grouped.column(n)[i].as_py() for n in names)
        groups.append(((*values, bucket), table.take(grouped.column("row_list")[i].values)))
    return groups


def log_to_lake_rows(data: pa.Table | pa.RecordBatch, bucket: int, *, keep_op: bool = False) -> pa.Table:
    """Log rows (user columns, ``_op``, ``_offset``, ``_timestamp``) as lake rows (user columns,
    ``__bucket``, ``__offset``, ``__timestamp``; plus ``_op`` if ``keep_op``)."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    user = [n for n in data.column_names if n not in ("_op", "_offset", "_timestamp")]
    n = data.num_rows
    arrays = [
        *(data.column(c) for c in user),
        pa.repeat(pa.scalar(bucket, pa.int32()), n),
        data.column("_offset"),
        data.column("_timestamp"),
    ]
    names = [*user, BUCKET_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN]
    if keep_op:
        arrays.append(data.column("_op"))
        names.append("_op")
    return pa.Table.from_arrays(arrays, names=names)


__all__ = [
    "BUCKET_COLUMN",
    "LAKE_TABLE_PROPERTIES",
    "OFFSET_COLUMN",
    "TABLE_UUID_PROPERTY",
    "TIMESTAMP_COLUMN",
    "lake_arrow_schema",
    "lake_partition_spec",
    "lake_schema",
    "lake_sort_order",
    "log_to_lake_rows",
    "parse_partition_by",
    "partition_groups",
]
