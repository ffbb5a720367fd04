"""Schema evolution: Iceberg's rules applied to a table's definition, its log and its lake, as one versioned change.

An alter (`Lakehouse.alter_table`, ``lakestream table alter``) adds nullable columns, widens types (int8/16/32 to
a wider integer, float32 to float64, a decimal's precision up with the same scale), renames and drops columns.
Every column has a field id, the lake table's Iceberg field id: a renamed column keeps it, an added one gets the
next id (a name dropped and added again is another column, and old rows of the dropped one never show under it).

Order of an alter: the new definition (version + 1, the earlier versions kept in its history) replaces the old one
with a compare-and-swap (``If-Match`` on its ETag: of two concurrent alters one wins, the other raises
`AlterConflict` and changes nothing); then the lake table's Iceberg schema follows with pyiceberg's
``update_schema`` (`sync_lake_schema`). That second step is idempotent and driven by the definition: if the alter
stops between the two, the next write to the lake (a tiering round, an alter, compaction, or
`Lakehouse.sync_lake_schema`) brings the lake up to date first. Reads never commit: until then they read the lake
under the definition's schema staged in memory (`lake_table_as_defined`).

Nothing is rewritten. Log segments record the schema version they were written with (`SegmentHeader`), and a read
projects an older segment to the current schema by field id (`project`): renamed columns renamed, dropped ones
dropped, added ones null, widened ones cast. Lake data files carry the field ids in their Parquet schema
(``PARQUET:field_id``): lakestream's readers project them the same way (`project`), as pyiceberg's scan does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import pyarrow as pa
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.table.update.schema import UpdateSchema

from lakehouse.errors import InvalidArgument, SchemaError, SchemaEvolutionError
from lakehouse.iceberg.lake_table import LakeTable
from lakehouse.iceberg.layout import check_lake_layout, check_lake_type, lake_schema
from lakehouse.table.definition import SYSTEM_COLUMNS, TableDefinition, parse_schema, parse_type, split_list

FIELD_ID = b"PARQUET:field_id"

ColumnSpecs = str | Sequence[str] | None


def _items(spec: ColumnSpecs | Mapping[str, object]) -> list[str]:
    if spec is None:
        return []
    if isinstance(spec, Mapping):
        return [f"{k}:{v}" for k, v in spec.items()]
    if isinstance(spec, str):
        return split_list(spec)
    return [item for s in spec for item in split_list(s)]


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether ``new`` holds every value of ``old`` the way Iceberg promotes types: int to long (Arrow's
    int8/16/32 to a wider signed integer), float to double, decimal(p, s) to decimal(p' > p, s)."""
    if pa.types.is_signed_integer(old) and pa.types.is_signed_integer(new):
        return new.bit_width > old.bit_width
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return True
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale == old.scale and new.precision > old.precision and new.precision <= 38
    return False


def alter_definition(
    definition: TableDefinition,
    *,
    add_columns: ColumnSpecs | pa.Schema = None,
    widen: ColumnSpecs | Mapping[str, object] = None,
    rename: ColumnSpecs | Mapping[str, str] = None,
    drop_columns: ColumnSpecs = None,
    last_column_id: int,
) -> TableDefinition:
    """The definition after an alter (version + 1), or `SchemaEvolutionError` naming what cannot change.

    ``add_columns``: ``"name:type, ..."`` (as ``table create --schema``) or an Arrow schema; nullable only.
    ``widen``: ``"name:type"`` items (or {name: type}); ``rename``: ``"old:new"`` items (or {old: new});
    ``drop_columns``: names. ``last_column_id``: the highest field id the lake table has used (new columns get
    the ids after it and after the definition's own). Each column appears in one operation at most."""
    name = definition.name
    if isinstance(add_columns, pa.Schema):
        adds = list(add_columns)
    else:
        adds = list(parse_schema(",".join(_items(add_columns)))) if _items(add_columns) else []
    widens_ = []
    for item in _items(widen):
        column, sep, type_name = item.partition(":")
        if not sep or not column.strip() or not type_name.strip():
            raise SchemaEvolutionError(f"{name}: bad --widen {item!r}: use column:type, e.g. v:int64")
        widens_.append((column.strip(), parse_type(column.strip(), type_name.strip().lower())))
    renames = []
    for item in _items(rename):
        old, sep, new = item.partition(":")
        if not sep or not old.strip() or not new.strip():
            raise SchemaEvolutionError(f"{name}: bad --rename {item!r}: use old:new, e.g. amount:amount_eur")
        renames.append((old.strip(), new.strip()))
    drops = [d.strip() for d in _items(drop_columns)]
    if not (adds or widens_ or renames or drops):
        raise InvalidArgument(f"{name}: nothing to alter: give columns to add, widen, rename or drop")

    names = definition.schema.names
    touched = [c for c, _ in widens_] + [o for o, _ in renames] + drops
    repeated = sorted({c for c in touched if touched.count(c) > 1})
    if repeated:
        raise SchemaEvolutionError(
            f"{name}: column(s) {repeated} appear in more than one change; alter them one at a time"
        )
    fixed = {*definition.primary_key, *([definition.bucket_key] if definition.bucket_key else [])}
    partition_columns = {_partition_column(p, names) for p in definition.partition_by}
    for column in touched:
        if column not in names:
            raise SchemaEvolutionError(f"{name}: no column {column!r} to change (columns: {names})")
        if column in fixed or column in partition_columns:
            role = (
                "primary-key"
                if column in definition.primary_key
                else "bucket-key"
                if column == definition.bucket_key
                else "partition"
            )
            raise SchemaEvolutionError(
                f"{name}: column {column!r} is a {role} column: it cannot be renamed, dropped or widened (the log's "
                "buckets and the lake's partitions are computed from it); create a new table and copy the data"
            )
    engine_columns = {*([definition.version_column] if definition.version_column else []), *dict(definition.aggregates)}
    for column in [o for o, _ in renames] + drops:
        if column in engine_columns:
            raise SchemaEvolutionError(
                f"{name}: column {column!r} is an option of the table's {definition.merge_engine!r} merge engine "
                "(its version column or an aggregated column): it cannot be renamed or dropped; widen it, or create "
                "a new table and copy the data"
            )

    fields = {f.name: f for f in definition.schema}
    ids = dict(zip(names, definition.ids, strict=True))
    order = list(names)
    for column in drops:
        order.remove(column)
    if not order and not adds:
        raise SchemaEvolutionError(f"{name}: dropping {drops} would leave the table without columns")
    for column, t in widens_:
        old = fields[column].type
        if t == old:
            raise SchemaEvolutionError(f"{name}: column {column!r} is {old} already: nothing to widen")
        if not widens(old, t):
            raise SchemaEvolutionError(
                f"{name}: column {column!r} cannot change from {old} to {t}: only widening is allowed (int8/16/32 to "
                "a wider integer, float32 to float64, decimal(p,s) to a larger precision with the same scale); a "
                "narrowing or another type needs a new column (add it, fill it, drop the old one)"
            )
        fields[column] = fields[column].with_type(t)
    taken = set(order)
    for old, new in renames:
        _check_new_name(definition, new, taken - {old})
        taken.discard(old)
        taken.add(new)
        fields[new] = fields.pop(old).with_name(new)
        ids[new] = ids.pop(old)
        order[order.index(old)] = new
    next_id = max(last_column_id, definition.last_column_id, *definition.ids)
    for f in adds:
        _check_new_name(definition, f.name, taken)
        if not f.nullable:
            raise SchemaEvolutionError(
                f"{name}: added column {f.name!r} is NOT NULL; an added column must be nullable (rows written "
                "before it have no value and lakestream has no column defaults): drop the '!' / 'not null'"
            )
        if pa.types.is_nested(f.type):
            raise SchemaEvolutionError(
                f"{name}: added column {f.name!r} has the nested type {f.type}; an alter adds primitive columns "
                "only (a struct or list would need field ids for its children too)"
            )
        check_lake_type(definition, f.name, f.type)
        next_id += 1
        taken.add(f.name)
        fields[f.name], ids[f.name] = f, next_id
        order.append(f.name)
    schema = pa.schema([fields[c] for c in order], metadata=definition.schema.metadata)
    altered = replace(
        definition,
        schema=schema,
        schema_version=definition.schema_version + 1,
        field_ids=tuple(ids[c] for c in order),
        history=(*definition.history, definition.current),
        last_column_id=next_id,
    )
    try:
        lake_schema(altered)
    except SchemaError as exc:
        raise SchemaEvolutionError(str(exc)) from None
    return altered


def _partition_column(spec: str, names: list[str]) -> str:
    entry = spec.strip()
    if entry in names or "(" not in entry:
        return entry
    return entry[entry.index("(") + 1 : entry.rindex(")")].strip()


def _check_new_name(definition: TableDefinition, column: str, taken: set[str]) -> None:
    if column in SYSTEM_COLUMNS or column.startswith("__"):
        raise SchemaEvolutionError(
            f"{definition.name}: column name {column!r} is reserved for lakestream's system columns; choose another"
        )
    if column in taken:
        raise SchemaEvolutionError(f"{definition.name}: a column {column!r} exists already; choose another name")


# ---- the lake ------------------------------------------------------------------------------------------


def lake_behind(table: Table, definition: TableDefinition) -> bool:
    """Whether the lake table's schema is not yet the definition's (an alter stopped before its lake step)."""
    if definition.schema_version == 0:
        return False
    return table.schema().as_struct() != lake_schema(definition).as_struct()


def sync_lake_schema(table: Table, definition: TableDefinition) -> Table:
    """Bring the lake table's Iceberg schema to the definition's (pyiceberg's ``update_schema``: deletes, renames,
    widenings, then additions in field-id order, so Iceberg gives each added column the id the definition holds),
    and check the result (`check_lake_layout`). Does nothing when they agree (idempotent: after a crash, whoever
    comes next completes it). A concurrent sync that committed first is fine: the table is loaded again.

    This is the explicit roll-forward that every write to the lake runs first (an alter, a tiering round,
    compaction, a commit through `lake_table_as_defined`'s view); reads never run it."""
    if isinstance(table, _DefinitionView):
        table = table.committed()
    if not lake_behind(table, definition):
        return table
    for _ in range(3):
        if not _roll_forward_possible(table, definition):
            break  # a column no version of the definition knows was added: check_lake_layout says so below
        try:
            with table.update_schema() as update:
                _evolve(update, table, definition)
        except Exception:  # noqa: BLE001 - another writer synced first (commit conflict): look again
            table = table.refresh()
            if not lake_behind(table, definition):
                break
            continue
        table = table.refresh()
        break
    check_lake_layout(table.metadata, definition)
    return table


def _roll_forward_possible(table: Table, definition: TableDefinition) -> bool:
    want = {f.field_id for f in lake_schema(definition).fields}
    return not any(f.field_id > max(definition.last_column_id, *want) for f in table.schema().fields)


def _evolve(update: UpdateSchema, table: Table, definition: TableDefinition) -> None:
    """Stage on ``update`` the changes that take ``table``'s schema to the definition's."""
    want = {f.field_id: f for f in lake_schema(definition).fields}
    have = {f.field_id: f for f in table.schema().fields}
    for field_id, field in have.items():
        if field_id not in want:
            update.delete_column(field.name)
    for field_id, field in want.items():
        old = have.get(field_id)
        if old is None:
            continue
        if old.field_type != field.field_type:
            update.update_column(old.name, field_type=field.field_type)
        if old.name != field.name:
            update.rename_column(old.name, field.name)
    for field_id in sorted(want.keys() - have.keys()):
        field = want[field_id]
        update.add_column(field.name, field.field_type, required=False)


def lake_table_as_defined(table: Table, definition: TableDefinition) -> Table:
    """``table`` as its definition reads it, committing nothing: ``table`` itself when its schema is the
    definition's; while it is behind (an alter whose lake step has not run yet: a crash, or a read between an
    alter's two steps), a copy whose current schema is the definition's, staged in memory only (same metadata
    location, snapshots and files; old files are read through field ids as after the lake step). A commit through
    that copy (a tag, an expiry, a transaction) first runs the roll-forward (`sync_lake_schema`), then commits on
    the evolved table. A lake table changed outside lakestream is returned as it is (`check_lake_layout` names
    the change where it matters)."""
    if not lake_behind(table, definition) or not _roll_forward_possible(table, definition):
        return table
    return _DefinitionView(table, definition)


class _DefinitionView(LakeTable):
    """The read view `lake_table_as_defined` returns while the lake's schema is behind its definition."""

    def __init__(self, table: Table, definition: TableDefinition) -> None:
        super().__init__(
            identifier=table.name(),
            metadata=_as_defined(table, definition),
            metadata_location=table.metadata_location,
            io=table.io,
            catalog=table.catalog,
            config=table.config,
        )
        self._definition: TableDefinition | None = definition

    def committed(self) -> Table:
        """The lake table as committed (freshly loaded)."""
        return self.catalog.load_table(self.name())

    def refresh(self) -> Table:
        super().refresh()
        if self._definition is not None:
            if lake_behind(self, self._definition):
                self.metadata = _as_defined(self, self._definition)
            else:
                self._definition = None  # rolled forward meanwhile: the committed table as it is
        return self

    def _do_commit(self, updates: tuple[TableUpdate, ...], requirements: tuple[TableRequirement, ...]) -> None:
        if self._definition is not None:
            # a write after a definition changed: roll the lake forward first (explicitly), then commit on the
            # evolved table, whose schema is the one this view's updates were staged on
            synced = sync_lake_schema(self.committed(), self._definition)
            self.metadata, self.metadata_location, self.io = synced.metadata, synced.metadata_location, synced.io
            self._definition = None
        super()._do_commit(updates, requirements)


def _as_defined(table: Table, definition: TableDefinition) -> TableMetadata:
    """``table``'s metadata with the definition's schema staged as current (never committed); its
    ``last_updated_ms`` kept, so two views of one committed state are equal (a read plan checks it)."""
    transaction = Transaction(table, autocommit=False)
    with transaction.update_schema() as update:  # staged on the transaction, which is never committed
        _evolve(update, table, definition)
    staged = transaction.table_metadata
    return staged.model_copy(update={"last_updated_ms": table.metadata.last_updated_ms})


# ---- projection ----------------------------------------------------------------------------------------


def field_ids_of(schema: pa.Schema) -> dict[int, int] | None:
    """{field id: column index} from Parquet field-id metadata; None if the schema carries none."""
    out = {}
    for i, f in enumerate(schema):
        if f.metadata and FIELD_ID in f.metadata:
            out[int(f.metadata[FIELD_ID])] = i
    return out or None


def project(
    data: pa.Table | pa.RecordBatch, target: pa.Schema, target_ids: Sequence[int], source_ids: Mapping[int, int]
) -> pa.Table:
    """``data`` as columns ``target`` (field ids ``target_ids``), each taken from the column of ``data`` with the
    same field id (``source_ids``: {id: index in ``data``}) and cast, or null where ``data`` has none."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    columns = []
    for f, field_id in zip(target, target_ids, strict=True):
        at = source_ids.get(field_id)
        if at is None:
            columns.append(pa.nulls(data.num_rows, f.type))
            continue
        column = data.column(at)
        columns.append(column if column.type == f.type else column.cast(f.type))
    return pa.Table.from_arrays(columns, schema=target)


def project_lake_file(data: pa.Table | pa.RecordBatch, target: pa.Schema) -> pa.Table | pa.RecordBatch:
    """Rows read from a lake data file (its Arrow schema carries ``PARQUET:field_id``) as ``target`` (also with
    field ids: the current lake schema, or some of its columns) by field id. Files written since the last alter
    are returned as they are (names and ids agree)."""
    source = field_ids_of(data.schema)
    wanted = field_ids_of(target)
    if source is None or wanted is None:
        return data
    same = all(
        (at := source.get(field_id)) is not None and data.schema.field(at).name == target.field(i).name
        for field_id, i in wanted.items()
    )
    if same:
        return data.select(target.names) if data.schema.names != target.names else data
    ids = [int(f.metadata[FIELD_ID]) for f in target]
    out = project(data, pa.schema([f.remove_metadata() for f in target]), ids, source)
    return (
        pa.Table.from_arrays(out.columns, schema=target)
        if isinstance(data, pa.Table)
        else pa.RecordBatch.from_arrays([c.combine_chunks() for c in out.columns], schema=target)
    )


def upgrade_batch(definition: TableDefinition, data: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
    """An append's rows written with an earlier schema version's column names (a producer that has not seen the
    alter) as the current schema's names: renamed columns renamed, dropped ones dropped, by field id. Types,
    nulls and added columns are left to `conform`. Rows already in the current names are returned as they are."""
    if not definition.history or not isinstance(data, pa.Table | pa.RecordBatch):
        return data  # `conform` refuses what is not a table
    given = list(data.schema.names)
    if set(given) <= set(definition.schema.names):
        return data
    for past in reversed(definition.history):
        if not set(given) <= set(past.schema.names):
            continue
        keep, names = [], []
        for column in given:
            current = definition.current.name_of(past.id_of(column))  # type: ignore[arg-type]
            if current is not None:
                keep.append(column)
                names.append(current)
        if not keep:
            return data
        return data.select(keep).rename_columns(names)
    return data


def check_segment_version(definition: TableDefinition, version: int, key: str) -> None:
    if version > definition.schema_version:
        raise SchemaError(
            f"segment {key} was written with schema version {version}, newer than this reader's definition "
            f"(version {definition.schema_version}): the table was altered since; open it again (Lakehouse.table)"
        )
