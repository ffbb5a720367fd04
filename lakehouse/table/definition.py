"""Table definitions: name, schema, primary key, bucket key, bucket count; and where a table lives.

Warehouse layout (shared by the log and, later, the Iceberg catalog)::

    _lakestream/tables/<ns>.<table>.json          the definition, created once with If-None-Match: *
    <ns>/<table>/log/<bucket:05d>/<offset:020d>.arrow   log segments, named by their base offset
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from lakehouse.errors import InvalidTableName, SchemaError
from lakehouse.table.bucketing import check_bucket_key_type

#: The top-level folder of lakestream's own objects (definitions, the catalog): no namespace may be named so
#: (a table ``_lakestream.tables`` put its log among the definitions, and every table listing failed).
RESERVED_NAMESPACE = "_lakestream"
TABLES_PREFIX = f"{RESERVED_NAMESPACE}/tables/"
MAX_BUCKETS = 4096
#: A primary-key table's write modes (see `TableDefinition.write_mode`).
MERGE_ON_READ, COPY_ON_WRITE = "merge-on-read", "copy-on-write"
WRITE_MODES = (MERGE_ON_READ, COPY_ON_WRITE)
#: How a table's log lies on the store (see `TableDefinition.log_format`); new tables get `DEFAULT_LOG_FORMAT`.
SEGMENTS_LOG, COMMITS_LOG = "segments", "commits"
LOG_FORMATS = (SEGMENTS_LOG, COMMITS_LOG)
DEFAULT_LOG_FORMAT = COMMITS_LOG
#: How a primary-key table combines a new row with the stored one (see `lakehouse.merge`).
LAST_ROW, PARTIAL_UPDATE, VERSIONED, FIRST_ROW, AGGREGATE = (
    "last-row",
    "partial-update",
    "versioned",
    "first-row",
    "aggregate",
)
MERGE_ENGINES = (LAST_ROW, PARTIAL_UPDATE, VERSIONED, FIRST_ROW, AGGREGATE)
#: The per-column functions of the `AGGREGATE` engine (columns not named keep their last non-null value).
AGGREGATE_FUNCTIONS = ("sum", "max", "min", "last_non_null", "count")
_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
#: Columns the log adds on read and the lake adds on tiering; user schemas may not use them.
SYSTEM_COLUMNS = ("_op", "_offset", "_timestamp", "__bucket", "__offset", "__timestamp")


@dataclass(frozen=True, order=True)
class TableName:
    namespace: str
    table: str

    @classmethod
    def parse(cls, name: str | TableName) -> TableName:
        """Parse ``namespace.table``; raise `InvalidTableName` for anything else."""
        if isinstance(name, TableName):
            return name
        parts = name.split(".") if isinstance(name, str) else []
        if len(parts) != 2 or not all(_PART.fullmatch(p) for p in parts):
            raise InvalidTableName(
                f"invalid table name {name!r}: use 'namespace.table', each part starting with a letter or "
                "'_' followed by letters, digits or '_' (at most 128 characters). lakestream's own tables keep "
                "to this rule (Spark SQL and the log's object keys rely on it); Iceberg tables of the catalog "
                "alone (ObjectStoreCatalog) may have any printable name and nested namespaces"
            )
        check_namespace(parts[0])
        return cls(parts[0], parts[1])

    def __str__(self) -> str:
        return f"{self.namespace}.{self.table}"

    @property
    def definition_key(self) -> str:
        return f"{TABLES_PREFIX}{self}.json"

    @property
    def prefix(self) -> str:
        """The table's folder in the warehouse: ``<ns>/<table>/``."""
        return f"{self.namespace}/{self.table}/"

    def bucket_prefix(self, bucket: int) -> str:
        return f"{self.prefix}log/{bucket:05d}/"

    def segment_key(self, bucket: int, base_offset: int) -> str:
        return f"{self.bucket_prefix(bucket)}{base_offset:020d}.arrow"


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a table's schema: its user columns and their field ids (the lake table's Iceberg field
    ids), so a column keeps its identity across renames and a name dropped and added again is another column."""

    version: int
    schema: pa.Schema
    field_ids: tuple[int, ...]

    def id_of(self, name: str) -> int | None:
        return dict(zip(self.schema.names, self.field_ids, strict=True)).get(name)

    def name_of(self, field_id: int) -> str | None:
        return dict(zip(self.field_ids, self.schema.names, strict=True)).get(field_id)

    def to_doc(self) -> dict[str, object]:
        return {
            "version": self.version,
            "field-ids": list(self.field_ids),
            "arrow-schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode(),
        }

    @classmethod
    def from_doc(cls, doc: dict) -> SchemaVersion:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(doc["arrow-schema"])))
        return cls(int(doc["version"]), schema, tuple(int(i) for i in doc["field-ids"]))


@dataclass(frozen=True)
class TableDefinition:
    """What a table is. Its name, keys, buckets and partitions are fixed at creation; its schema evolves by
    versions (`Lakehouse.alter_table`, `lakehouse.table.evolution`)."""

    name: TableName
    schema: pa.Schema
    buckets: int
    primary_key: tuple[str, ...] = ()
    bucket_key: str | None = None
    partition_by: tuple[str, ...] = ()
    table_uuid: str = field(default_factory=lambda: str(uuid.uuid4()))
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="milliseconds"))
    #: How tiering changes a primary-key table's rows in the lake: `MERGE_ON_READ` (new versions in new files,
    #: old ones marked deleted by position delete files) or `COPY_ON_WRITE` (files holding a changed key are
    #: rewritten). Definitions of older versions are copy-on-write; log tables only append.
    write_mode: str = "copy-on-write"
    #: How a key's new row combines with its stored one: one of `MERGE_ENGINES` (`lakehouse.merge`).
    merge_engine: str = LAST_ROW
    #: The `VERSIONED` engine's version column.
    version_column: str | None = None
    #: The `AGGREGATE` engine's functions, as (column, function) pairs.
    aggregates: tuple[tuple[str, str], ...] = ()
    #: Schema evolution (`lakehouse.table.evolution`): the version of ``schema`` (0: as created), the field ids of its
    #: columns (empty: 1..n, as the lake table was created), the earlier versions (oldest first) and the highest
    #: field id any version used (0: none beyond those the lake table was created with).
    schema_version: int = 0
    field_ids: tuple[int, ...] = ()
    history: tuple[SchemaVersion, ...] = ()
    last_column_id: int = 0
    #: How the log lies on the store (`LOG_FORMATS`): ``"segments"``, one object per bucket per append (every
    #: table of earlier versions), or ``"commits"``, one data object and one commit record per append whatever its
    #: buckets (`lakehouse.log.chain`). Fixed at creation.
    log_format: str = "segments"

    @property
    def ids(self) -> tuple[int, ...]:
        """The field id of each column of ``schema``."""
        return self.field_ids or tuple(range(1, len(self.schema) + 1))

    @property
    def current(self) -> SchemaVersion:
        return SchemaVersion(self.schema_version, self.schema, self.ids)

    def schema_at(self, version: int) -> SchemaVersion:
        """The schema of ``version`` (segments record the version they were written with)."""
        if version == self.schema_version:
            return self.current
        for past in self.history:
            if past.version == version:
                return past
        raise SchemaError(
            f"{self.name}: schema version {version} is not one of this definition's (it is at version "
            f"{self.schema_version}): the table was altered since this definition was read; read it again "
            "(Lakehouse.table, or a new Lakehouse)"
        )

    @property
    def original(self) -> SchemaVersion:
        """The schema the table was created with (the lake table's first schema)."""
        return self.history[0] if self.history else self.current

    @property
    def added_columns(self) -> frozenset[str]:
        """Columns an alter added (an append may omit them: they are null)."""
        first = set(self.original.field_ids)
        return frozenset(n for n, i in zip(self.schema.names, self.ids, strict=True) if i not in first)

    def _evolution_json(self) -> dict[str, object]:
        if not self.schema_version:
            return {}
        return {
            "schema-version": self.schema_version,
            "field-ids": list(self.ids),
            "last-column-id": self.last_column_id,
            "schema-history": [v.to_doc() for v in self.history],
        }

    @staticmethod
    def _evolution_fields(doc: dict[str, Any]) -> dict[str, Any]:
        """The schema-evolution fields of a definition document (none: version 0)."""
        if "schema-version" not in doc:
            return {}
        return {
            "schema_version": int(doc["schema-version"]),
            "field_ids": tuple(int(i) for i in doc["field-ids"]),
            "last_column_id": int(doc["last-column-id"]),
            "history": tuple(SchemaVersion.from_doc(v) for v in doc["schema-history"]),
        }

    @property
    def has_primary_key(self) -> bool:
        return bool(self.primary_key)

    @property
    def merge_on_read(self) -> bool:
        return self.has_primary_key and self.write_mode == MERGE_ON_READ

    @classmethod
    def build(
        cls,
        name: str | TableName,
        schema: pa.Schema,
        *,
        buckets: int,
        primary_key: Sequence[str] | None = None,
        bucket_key: str | None = None,
        partition_by: Sequence[str] | None = None,
        write_mode: str | None = None,
        merge_engine: str | None = None,
        version_column: str | None = None,
        aggregates: Mapping[str, str] | None = None,
        log_format: str | None = None,
    ) -> TableDefinition:
        """Validate and normalize a new table's definition. A primary-key table's ``write_mode`` defaults to
        merge-on-read, its ``merge_engine`` to last-row (`check_merge_engine` says what each engine needs).

        The bucket key defaults to the single primary-key column. A primary-key table's bucket key must be
        one of its key columns (so every version of a key lands in one bucket). Primary-key columns become
        non-nullable.

        Raises:
            InvalidTableName, SchemaError: with the offending name or column.
        """
        table_name = TableName.parse(name)
        if not isinstance(schema, pa.Schema):
            raise SchemaError(f"{table_name}: schema must be a pyarrow.Schema, got {type(schema).__name__}")
        if isinstance(buckets, bool) or not isinstance(buckets, int) or not 1 <= buckets <= MAX_BUCKETS:
            raise SchemaError(f"{table_name}: buckets must be an integer from 1 to {MAX_BUCKETS}, got {buckets!r}")
        names = schema.names
        if not names:
            raise SchemaError(f"{table_name}: the schema has no columns")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise SchemaError(f"{table_name}: duplicate column names {duplicates}")
        for n in names:
            if n in SYSTEM_COLUMNS or n.startswith("__"):
                raise SchemaError(f"{table_name}: column name {n!r} is reserved for lakestream's system columns")
        pk = _columns(primary_key)
        for col in pk:
            if col not in names:
                raise SchemaError(f"{table_name}: primary-key column {col!r} is not in the schema {names}")
            t = schema.field(col).type
            if pa.types.is_nested(t) or isinstance(t, pa.BaseExtensionType):
                raise SchemaError(
                    f"{table_name}: primary-key column {col!r} has type {t}, which cannot be part of a key (tiering "
                    "and union reads group and join rows by key, and Arrow cannot for this type); use a primitive "
                    "column (a uuid as fixed_size_binary(16) or string)"
                )
        if len(set(pk)) != len(pk):
            raise SchemaError(f"{table_name}: primary key {list(pk)} repeats a column")
        if bucket_key is None and len(pk) == 1:
            bucket_key = pk[0]
        if pk and bucket_key is None:
            raise SchemaError(
                f"{table_name}: a composite primary key {list(pk)} needs an explicit bucket_key among its columns"
            )
        if pk and bucket_key not in pk:
            raise SchemaError(
                f"{table_name}: bucket_key {bucket_key!r} must be a primary-key column {list(pk)}, so that every "
                "version of a key lands in the same bucket"
            )
        if bucket_key is not None:
            if bucket_key not in names:
                raise SchemaError(f"{table_name}: bucket_key {bucket_key!r} is not in the schema {names}")
            try:
                check_bucket_key_type(schema.field(bucket_key).type)
            except SchemaError as exc:
                raise SchemaError(f"{table_name}: bucket_key {bucket_key!r}: {exc}") from None
        mode = write_mode if write_mode is not None else (MERGE_ON_READ if pk else COPY_ON_WRITE)
        if mode not in WRITE_MODES:
            raise SchemaError(f"{table_name}: write_mode must be one of {list(WRITE_MODES)}, got {write_mode!r}")
        if mode == MERGE_ON_READ and not pk:
            mode = COPY_ON_WRITE  # a log table only appends: nothing to merge
        engine, version_column, aggregates_ = check_merge_engine(
            table_name, schema, pk, merge_engine, version_column, aggregates
        )
        log_format = DEFAULT_LOG_FORMAT if log_format is None else log_format
        if log_format not in LOG_FORMATS:
            raise SchemaError(f"{table_name}: log_format must be one of {list(LOG_FORMATS)}, got {log_format!r}")
        fields = [f.with_nullable(False) if f.name in pk else f for f in schema]
        return cls(
            name=table_name,
            schema=pa.schema(fields, metadata=schema.metadata),
            buckets=buckets,
            primary_key=pk,
            bucket_key=bucket_key,
            partition_by=_columns(partition_by),
            write_mode=mode,
            merge_engine=engine,
            version_column=version_column,
            aggregates=aggregates_,
            log_format=log_format,
        )

    def to_json(self) -> bytes:
        doc: dict[str, object] = {
            "format-version": 1,
            "name": str(self.name),
            "table-uuid": self.table_uuid,
            "created-at": self.created_at,
            "buckets": self.buckets,
            "primary-key": list(self.primary_key),
            "bucket-key": self.bucket_key,
            "partition-by": list(self.partition_by),
            "write-mode": self.write_mode,
            "merge-engine": self.merge_engine,
            "version-column": self.version_column,
            "aggregates": dict(self.aggregates),
            "columns": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in self.schema],
            "arrow-schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode(),
        }
        if self.log_format != SEGMENTS_LOG:  # absent: a definition of an earlier version, or a "segments" log
            doc["log-format"] = self.log_format
        doc.update(self._evolution_json())
        return json.dumps(doc, indent=2).encode()

    @classmethod
    def from_json(cls, data: bytes, *, source: str = "") -> TableDefinition:
        try:
            doc = json.loads(data)
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(doc["arrow-schema"])))
            return cls(
                name=TableName.parse(doc["name"]),
                schema=schema,
                buckets=int(doc["buckets"]),
                primary_key=tuple(doc["primary-key"]),
                bucket_key=doc["bucket-key"],
                partition_by=tuple(doc.get("partition-by", ())),
                table_uuid=doc["table-uuid"],
                created_at=doc["created-at"],
                write_mode=doc.get("write-mode", COPY_ON_WRITE),
                merge_engine=doc.get("merge-engine", LAST_ROW),
                version_column=doc.get("version-column"),
                log_format=doc.get("log-format", "segments"),
                aggregates=tuple((str(c), str(f)) for c, f in (doc.get("aggregates") or {}).items()),
                **cls._evolution_fields(doc),
            )
        except (ValueError, KeyError, TypeError, pa.ArrowException) as exc:
            raise SchemaError(
                f"table definition {source or '(bytes)'} is unreadable: {exc}; restore it, or drop the table "
                "(lakestream table drop NAMESPACE.TABLE)"
            ) from None

    def describe(self) -> dict[str, object]:
        return {
            "name": str(self.name),
            "kind": "primary-key table" if self.has_primary_key else "log table",
            "buckets": self.buckets,
            "primary key": ", ".join(self.primary_key) or "-",
            "bucket key": self.bucket_key or "- (sticky round-robin per append)",
            "partition by": ", ".join(self.partition_by) or "-",
            "write mode": self.write_mode if self.has_primary_key else "- (appends only)",
            "merge engine": self._describe_engine() if self.has_primary_key else "- (appends only)",
            "columns": ", ".join(f"{f.name} {f.type}{'' if f.nullable else ' not null'}" for f in self.schema),
            "uuid": self.table_uuid,
            "created": self.created_at,
            "schema version": self.schema_version,
            "log format": self.log_format,
        }

    def _describe_engine(self) -> str:
        if self.merge_engine == VERSIONED:
            return f"{VERSIONED} (version column {self.version_column})"
        if self.merge_engine == AGGREGATE:
            named = ", ".join(f"{c} {f}" for c, f in self.aggregates)
            return f"{AGGREGATE} ({named or 'every column last_non_null'})"
        return self.merge_engine


def check_merge_engine(
    name: TableName,
    schema: pa.Schema,
    pk: tuple[str, ...],
    merge_engine: str | None,
    version_column: str | None,
    aggregates: Mapping[str, str] | None,
) -> tuple[str, str | None, tuple[tuple[str, str], ...]]:
    """A new table's merge engine and its options, checked: an engine of `MERGE_ENGINES` (other than last-row
    only with a primary key); ``version_column`` with `VERSIONED` only (required there: a non-key column of an
    integer, floating, decimal, date or timestamp type); ``aggregates`` with `AGGREGATE` only (non-key columns;
    ``sum`` of numbers, ``count`` into an integer column, ``max``/``min`` of orderable types).

    Raises:
        SchemaError: naming the engine, the option or the column.
    """
    engine = merge_engine if merge_engine is not None else LAST_ROW
    if engine not in MERGE_ENGINES:
        raise SchemaError(f"{name}: merge_engine must be one of {list(MERGE_ENGINES)}, got {merge_engine!r}")
    if engine != LAST_ROW and not pk:
        raise SchemaError(
            f"{name}: the {engine!r} merge engine combines rows of one key: give the table a primary key (a log "
            "table without one only appends)"
        )
    if version_column is not None and engine != VERSIONED:
        raise SchemaError(f"{name}: version_column is an option of the {VERSIONED!r} merge engine, not {engine!r}")
    if aggregates and engine != AGGREGATE:
        raise SchemaError(f"{name}: aggregates are the options of the {AGGREGATE!r} merge engine, not {engine!r}")
    if engine == PARTIAL_UPDATE:
        required = [f.name for f in schema if f.name not in pk and not f.nullable]
        if required:
            raise SchemaError(
                f"{name}: the {PARTIAL_UPDATE!r} merge engine keeps a column's value when a row leaves it null, so "
                f"its value columns must be nullable; {required} are not null"
            )
    if engine == VERSIONED:
        if version_column is None:
            raise SchemaError(f"{name}: the {VERSIONED!r} merge engine needs version_column (e.g. an event time)")
        t = _engine_column(name, schema, pk, version_column, "version_column")
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) or pa.types.is_temporal(t)):
            raise SchemaError(
                f"{name}: version_column {version_column!r} has type {t}; use an integer, floating, decimal, date or "
                "timestamp column (versions are compared)"
            )
    pairs: list[tuple[str, str]] = []
    if engine == AGGREGATE:
        if aggregates is not None and not isinstance(aggregates, Mapping):
            raise SchemaError(f"{name}: aggregates map columns to functions ({{'amount': 'sum'}}), got {aggregates!r}")
        for column, function in (aggregates or {}).items():
            t = _engine_column(name, schema, pk, column, "aggregates")
            if function not in AGGREGATE_FUNCTIONS:
                raise SchemaError(
                    f"{name}: aggregate function {function!r} of column {column!r} is not one of "
                    f"{list(AGGREGATE_FUNCTIONS)}"
                )
            numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
            orderable = numeric or pa.types.is_temporal(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            bad = (
                (function == "sum" and not numeric)
                or (function == "count" and not pa.types.is_integer(t))
                or (function in ("max", "min") and not orderable)
            )
            if bad:
                need = {"sum": "a number", "count": "an integer", "max": "an orderable", "min": "an orderable"}
                raise SchemaError(
                    f"{name}: {function} of column {column!r} needs {need[function]} column, it has type {t}"
                )
            pairs.append((column, function))
    return engine, version_column, tuple(pairs)


def _engine_column(name: TableName, schema: pa.Schema, pk: tuple[str, ...], column: object, what: str) -> pa.DataType:
    if not isinstance(column, str) or column not in schema.names:
        raise SchemaError(f"{name}: {what} names column {column!r}, which is not in the schema {schema.names}")
    if column in pk:
        raise SchemaError(f"{name}: {what} names primary-key column {column!r}; a key column identifies the row")
    return schema.field(column).type


def _columns(value: Sequence[str] | str | None) -> tuple[str, ...]:
    """A list of column names (or transforms); one name alone is a list of one, not of its characters."""
    return (value,) if isinstance(value, str) else tuple(value or ())


_TYPES = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int": pa.int32(),
    "int64": pa.int64(),
    "long": pa.int64(),
    "float32": pa.float32(),
    "float": pa.float32(),
    "float64": pa.float64(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "date32": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "uuid": pa.uuid(),
}
#: Arrow's own spellings, as `describe` prints them, so a table's columns can be copied into a new one.
_ARROW_TYPES = {
    str(t).lower(): t
    for t in (
        pa.uint8(),
        pa.uint16(),
        pa.large_string(),
        pa.large_binary(),
        pa.date32(),
        pa.time64("us"),
        pa.uuid(),
        *(pa.timestamp(unit, tz) for unit in ("s", "ms", "us") for tz in (None, "UTC")),
    )
}
_DECIMAL = re.compile(r"decimal(?:128)?\((\d+),\s*(\d+)\)")
_FIXED = re.compile(r"fixed_size_binary\[(\d+)\]")
_NOT_NULL = re.compile(r"(?:\s+not\s+null|\s*!)$")


#: Longest identifier part of the Iceberg catalog, in UTF-8 bytes once encoded for object keys (a file name on
#: most file systems holds 255).
MAX_CATALOG_PART_BYTES = 200


def check_catalog_part(part: object, identifier: object, *, table: bool = False) -> str:
    """The rule for a part of an Iceberg catalog identifier (`ObjectStoreCatalog`): a non-blank string of
    printable characters, without ``.`` in a namespace part (it separates the levels; a table name may hold
    one, as in pyiceberg's SqlCatalog), at most `MAX_CATALOG_PART_BYTES` once encoded (`encode_catalog_part`).
    lakestream's own tables (`TableName`) follow a stricter rule, ``_PART``: Spark SQL and the log's keys rely
    on it. Raises ValueError naming the identifier."""
    if not isinstance(part, str) or not part.strip():
        raise ValueError(f"invalid identifier {identifier!r}: a part is empty or blank")
    if ("." in part and not table) or not part.isprintable():
        raise ValueError(
            f"invalid identifier {identifier!r}: part {part!r} holds a '.' or a character that is not printable"
        )
    if len(encode_catalog_part(part).encode()) > MAX_CATALOG_PART_BYTES:
        raise ValueError(f"invalid identifier {identifier!r}: part {part[:40]!r}... is longer than 200 bytes")
    return part


#: Characters a catalog identifier part cannot hold as they are in object keys and table locations: ``.`` joins
#: a namespace's levels (a table name may hold one: its key would read as one more level), ``/`` makes a
#: new key segment, ``\\`` is one on SeaweedFS, ``#`` and ``?`` end a location's path (pyiceberg parses it as
#: a URL), and ``%`` starts the escapes.
_ENCODED = {c: f"%{ord(c):02X}" for c in "%/\\#?."}


def encode_catalog_part(part: str) -> str:
    """A catalog identifier part as it appears in object keys and default table locations, with the characters
    of ``_ENCODED`` percent-encoded: a part never makes a new key segment, never cuts a location short, and
    decodes exactly (parts hold no ``.`` or control characters, so ``.`` and ``..`` segments cannot arise)."""
    return "".join(_ENCODED.get(c, c) for c in part)


def decode_catalog_part(text: str) -> str:
    """The inverse of `encode_catalog_part` (every ``%`` in an encoded part starts one of its escapes)."""
    return urllib.parse.unquote(text)


def check_namespace(namespace: str) -> None:
    """Raise `InvalidTableName` for the namespace lakestream keeps its own objects under (in any case: a
    case-insensitive disk folds them together)."""
    if namespace.lower() == RESERVED_NAMESPACE:
        raise InvalidTableName(
            f"the namespace {namespace!r} is reserved: lakestream keeps its table definitions and catalog under "
            f"'{RESERVED_NAMESPACE}/'; choose another namespace"
        )


def parse_schema(spec: str) -> pa.Schema:
    """Parse ``"name:type[!], ..."`` (``!`` or `` not null`` = not null) into an Arrow schema, for the CLI.
    ``name type not null`` (as `describe` prints columns) works too.

    Types: bool, int8/16/32/64 (int, long), float32/64 (float, double), string, binary, date (date32),
    timestamp, timestamptz, decimal(p,s), uuid, and Arrow's names for these and for uint8/16, large_string,
    large_binary, time64[us], fixed_size_binary[n], timestamp[s|ms|us] with or without ``tz=UTC``.
    """
    fields = []
    for item in split_list(spec):
        name, sep, type_name = item.partition(":")
        if not sep:
            name, _, type_name = item.partition(" ")
        name, type_name = name.strip(), type_name.strip().lower()
        if not name or not type_name:
            raise SchemaError(f"bad column spec {item!r}: use name:type, e.g. o_orderkey:int64")
        nullable = not _NOT_NULL.search(type_name)
        type_name = _NOT_NULL.sub("", type_name)
        fields.append(pa.field(name, parse_type(name, type_name), nullable))
    if not fields:
        raise SchemaError("empty schema: give at least one column as name:type")
    return pa.schema(fields)


def parse_type(column: str, type_name: str) -> pa.DataType:
    if m := _DECIMAL.fullmatch(type_name):
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            raise SchemaError(
                f"column {column!r}: {type_name} is not a decimal the lake can hold: use decimal(p,s) with a precision "
                "p from 1 to 38 and a scale s from 0 to p, e.g. decimal(12,2)"
            )
        return pa.decimal128(precision, scale)
    if m := _FIXED.fullmatch(type_name):
        return pa.binary(int(m.group(1)))
    if t := _TYPES.get(type_name) or _ARROW_TYPES.get(type_name):
        return t
    raise SchemaError(
        f"unknown type {type_name!r} for column {column!r}; known: {sorted(_TYPES)}, decimal(p,s), and Arrow's "
        f"names {sorted(_ARROW_TYPES)}, decimal128(p, s), fixed_size_binary[n]"
    )


def split_list(spec: str) -> list[str]:
    """Split a comma-separated list on the commas outside brackets (decimal(12,2), timestamp[us, tz=UTC])."""
    parts, depth, current = [], 0, ""
    for ch in spec:
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += ch in "(["
        depth -= ch in ")]"
        current += ch
    parts.append(current.strip())
    return [p for p in parts if p]
