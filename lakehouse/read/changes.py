"""Net changelogs: what changed in a table between two per-bucket offset maps.

``changes(table, log_, start, end)`` returns, per bucket, the change of the log range [start, end):

- **Log tables**: the records in the range, each with ``_op = "insert"``.
- **Primary-key tables**: one row per key written in the range (the last change wins), classified against
  the key's state as of ``start`` (the table exactly as the log defines it below ``start``, as
  ``union_read(as_of=start)`` returns it):

  ========================  ========================  ==========================================
  state as of ``start``     last change in the range   rows
  ========================  ========================  ==========================================
  absent                    insert / upsert            ``insert`` (the new row)
  present                   insert / upsert            [``update_before`` (the old row)], ``update_after``
  present                   delete                     ``delete`` (the old row: what was deleted)
  absent                    delete                     nothing
  ========================  ========================  ==========================================

  ``update_before`` rows come only with ``before_images=True`` (Flink's RowKind vocabulary). Before-images
  and deletes carry the old row, including its ``__offset`` and ``__timestamp``; after-images carry the
  change's own. Within a bucket every before-image comes before every after-image, so a consumer applying
  the rows in order never sees a key twice at once. A key rewritten with the same values is reported as an
  update (changes are per key written, not per value compared).

The old state of the changed keys is looked up, not read in full: per bucket, the lake snapshot an as-of
read at ``start`` would use (`plan_as_of`), only its files of that bucket (partition pruning), only files
whose key statistics (lower/upper bounds) can hold a changed key, the key column first and whole rows only
where a key matched; plus the log between that snapshot's offset and ``start``. The cost grows with the
changes in the range (and the lake's lag behind ``start``), not with the table's size.

Applying the rows to the state as of ``start`` (remove the keys of ``update_before``/``delete`` rows, add
``insert``/``update_after`` rows) gives the state as of ``end``: the property the tests check.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import In
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from lakehouse.errors import AsOfUnavailable, InvalidArgument, OffsetOutOfRange, SchemaError
from lakehouse.iceberg.layout import BUCKET_COLUMN, check_lake_layout, lake_arrow_schema, log_to_lake_rows
from lakehouse.iceberg.position_deletes import DeleteIndex
from lakehouse.log import Log
from lakehouse.merge import engine_of
from lakehouse.merge.keyed_rows import KeySet, file_bounds, group_bounds, may_hold, reduce_changes, upserts_of
from lakehouse.read.union import AsOf, check_as_of, plan_as_of
from lakehouse.table.definition import TableDefinition

OP_COLUMN = "_op"
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = "insert", "update_before", "update_after", "delete"
CHANGE_KINDS = (INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE)


@dataclass(frozen=True)
class BucketChanges:
    """One bucket's share of a changes read (picklable: a Spark task runs it with `read_bucket_changes`)."""

    bucket: int
    start: int
    end: int
    base: int = 0  # the offset the lake part of the state as of ``start`` is read at (0: no lake part)
    #: that snapshot's data files of this bucket, each with its delete files
    files: tuple[tuple[DataFile, tuple[DataFile, ...]], ...] = ()


@dataclass(frozen=True)
class ChangesPlan:
    """A changes read, planned once (offsets checked, snapshots chosen) and executed per bucket."""

    definition_json: bytes
    columns: tuple[str, ...]  # the user columns returned (plus the system columns and ``_op``)
    before_images: bool
    buckets: tuple[BucketChanges, ...]  # the buckets with changes
    start: dict[int, int]  # the whole range, checked
    end: dict[int, int]
    schema: pa.Schema = field(compare=False)

    @property
    def definition(self) -> TableDefinition:
        return TableDefinition.from_json(self.definition_json)


def changes_schema(definition: TableDefinition, columns: Sequence[str] | None = None) -> pa.Schema:
    """The schema of a changes read: the chosen user columns (default all), ``__bucket``, ``__offset``,
    ``__timestamp`` and ``_op`` (string)."""
    lake = lake_arrow_schema(definition)
    user = [f.name for f in definition.schema]
    chosen = user if columns is None else list(columns)
    unknown = [c for c in chosen if c not in user]
    if unknown:
        raise SchemaError(f"unknown column(s) {unknown}; {definition.name} has {user}")
    keep = [*chosen, *(c for c in definition.primary_key if c not in chosen)]
    system = [f.name for f in lake if f.name not in user]
    return pa.schema([*(lake.field(c) for c in keep + system), pa.field(OP_COLUMN, pa.string(), False)])


def check_range(start: AsOf, end: AsOf, definition: TableDefinition, log_: Log) -> tuple[dict, dict]:
    """``start`` and ``end`` as complete offset maps, checked as `check_as_of` does, ``start`` <= ``end``.

    Raises:
        InvalidArgument: a bad offset map (see `check_as_of`), or ``start`` after ``end`` in some bucket.
    """
    starts = check_as_of(start, definition, log_, what="start")
    ends = check_as_of(end, definition, log_, what="end")
    after = {b: (starts[b], ends[b]) for b in starts if starts[b] > ends[b]}
    if after:
        raise InvalidArgument(
            f"{definition.name}: changes start after their end in "
            + ", ".join(f"bucket {b} (start {s} > end {e})" for b, (s, e) in after.items())
            + "; start is the older position"
        )
    return starts, ends


def plan_changes(
    table: Table,
    log_: Log,
    start: AsOf,
    end: AsOf,
    *,
    before_images: bool = False,
    columns: Sequence[str] | None = None,
) -> ChangesPlan:
    """Check the range and choose, per bucket with changes, where its state as of ``start`` comes from."""
    definition = log_.definition
    check_lake_layout(table.metadata, definition)
    schema = changes_schema(definition, columns)
    starts, ends = check_range(start, end, definition, log_)
    changed = [b for b in starts if ends[b] > starts[b]]
    bases, files = (
        _old_state_files(table, definition, starts, changed)
        if definition.has_primary_key and changed
        else (dict.fromkeys(starts, 0), {b: [] for b in changed})
    )
    user = [f.name for f in definition.schema]
    return ChangesPlan(
        definition_json=definition.to_json(),
        columns=tuple(c for c in schema.names if c in user),
        before_images=before_images,
        buckets=tuple(BucketChanges(b, starts[b], ends[b], bases[b], tuple(files[b])) for b in changed),
        start=starts,
        end=ends,
        schema=schema,
    )


def _old_state_files(
    table: Table, definition: TableDefinition, starts: dict[int, int], buckets: Sequence[int]
) -> tuple[dict[int, int], dict[int, list[tuple[DataFile, tuple[DataFile, ...]]]]]:
    """Per bucket, the offset of the lake snapshot an as-of read at ``starts`` would use (0: no lake part)
    and that snapshot's data files of the bucket, each with its delete files (those of ``buckets`` only:
    partition pruning)."""
    files: dict[int, list[tuple[DataFile, tuple[DataFile, ...]]]] = {b: [] for b in buckets}
    plan = plan_as_of(table, definition, starts)
    bases = plan.bases
    for snapshot_id, keep in plan.scans:
        wanted = [b for b in buckets if bases[b] > 0 and (keep is None or b in keep) and not files[b]]
        if not wanted:
            continue
        # partition pruning: only the wanted buckets' manifest entries
        # mypy reads pyiceberg's pydantic fields as __init__ (the real __init__ takes these arguments)
        scan = table.scan(snapshot_id=snapshot_id, row_filter=In(BUCKET_COLUMN, set(wanted)))  # type: ignore[arg-type,call-arg]
        for task in scan.plan_files():
            partition = task.file.partition
            bucket = partition[len(partition) - 1]
            if bucket in files and bucket in wanted:
                files[bucket].append((task.file, tuple(task.delete_files)))
    return bases, files


def plan_lookup(table: Table, log_: Log, as_of: AsOf, buckets: Sequence[int]) -> ChangesPlan:
    """A point lookup of keys in ``buckets`` as of the offset map ``as_of`` (see `read_bucket_rows`): where
    each bucket's state comes from, as for the old state of a changes read starting at ``as_of``."""
    definition = log_.definition
    if not definition.has_primary_key:
        raise InvalidArgument(f"{definition.name} has no primary key: rows cannot be looked up by key")
    check_lake_layout(table.metadata, definition)
    offsets = check_as_of(as_of, definition, log_)
    chosen = sorted(set(buckets))
    bases, files = _old_state_files(table, definition, offsets, chosen)
    user = [f.name for f in definition.schema]
    return ChangesPlan(
        definition_json=definition.to_json(),
        columns=tuple(user),
        before_images=True,
        buckets=tuple(BucketChanges(b, offsets[b], offsets[b], bases[b], tuple(files[b])) for b in chosen),
        start=offsets,
        end=offsets,
        schema=changes_schema(definition),
    )


def read_bucket_rows(plan: ChangesPlan, item: BucketChanges, log_: Log, ctx: Any, keys: pa.Table) -> pa.Table:
    """The rows of ``keys`` (primary keys of ``item``'s bucket) as the table held them as of ``item.start``,
    user columns only (keys that did not exist then are absent): the lake snapshot's files of the bucket
    whose key statistics can hold one, key column first and whole rows only of row groups holding one, with
    the log between that snapshot and ``item.start`` on top.

    Raises:
        OffsetOutOfRange, OSError: what the state needs was removed since the plan was made: plan again.
    """
    wanted = KeySet(keys, log_.definition.primary_key)
    _, rows = _state_before(log_.definition, item, log_, ctx, wanted, wanted)
    return rows.select(list(plan.columns))


def read_bucket_changes(plan: ChangesPlan, item: BucketChanges, log_: Log, ctx: Any) -> pa.Table:
    """One bucket's changes (see the module docstring). ``ctx`` reads the lake's data files
    (`lakehouse.iceberg.datafiles.LakeContext`).

    Raises:
        AsOfUnavailable: log retention removed records of the range.
        OffsetOutOfRange, OSError: what the old state needs (log records before ``start``, a snapshot's data
            files) was removed since the plan was made: plan again (`Lakehouse.changes` does).
    """
    definition = log_.definition
    pk = definition.primary_key
    try:
        data = log_.read(item.bucket, item.start, item.end)
    except OffsetOutOfRange as exc:
        raise changes_unavailable(log_, item, exc) from exc
    if not pk:
        rows = log_to_lake_rows(data, item.bucket)
        return _shaped(rows, plan.schema, INSERT)
    engine = engine_of(definition)
    if engine.needs_stored:  # the changes merge into the rows as of start: look them all up first
        written = KeySet(data, pk)
        existing, before = _state_before(definition, item, log_, ctx, written, written)
        changes = engine.resolve(before, data)
        keys = KeySet(changes, pk)
        existing, before = existing.filter(keys.hits(existing)), before.filter(keys.hits(before))
        deleted = pc.equal(changes.column("_op").cast(pa.string()), "delete")
    else:
        changes = reduce_changes(data, pk)
        deleted = pc.equal(changes.column("_op").cast(pa.string()), "delete")
        keys = KeySet(changes, pk)
        # whole old rows are needed for deletes (what was deleted) and before-images; for the rest, existence
        wanted = keys if plan.before_images else KeySet(changes.filter(deleted), pk)
        existing, before = _state_before(definition, item, log_, ctx, keys, wanted)
    existed = KeySet(existing, pk).hits(changes) if existing.num_rows else pa.array(np.zeros(changes.num_rows, bool))
    after = log_to_lake_rows(changes.filter(pc.invert(deleted)), item.bucket)
    after_ops = pc.if_else(existed.filter(pc.invert(deleted)), UPDATE_AFTER, INSERT)
    parts = []
    if before.num_rows:
        gone = KeySet(changes.filter(deleted), pk).hits(before)
        parts.append(_shaped(before.filter(gone), plan.schema, DELETE))
        if plan.before_images:
            parts.append(_shaped(before.filter(pc.invert(gone)), plan.schema, UPDATE_BEFORE))
    parts.append(_shaped(after, plan.schema, after_ops))
    return pa.concat_tables(parts)


def _shaped(rows: pa.Table, schema: pa.Schema, op: str | pa.Array) -> pa.Table:
    ops = pa.repeat(pa.scalar(op, pa.string()), rows.num_rows) if isinstance(op, str) else op.cast(pa.string())
    names = schema.names[:-1]
    return pa.Table.from_arrays([*(rows.column(n) for n in names), ops], names=schema.names).cast(schema)


def _state_before(
    definition: TableDefinition, item: BucketChanges, log_: Log, ctx: Any, keys: KeySet, wanted: KeySet
) -> tuple[pa.Table, pa.Table]:
    """Which of ``keys`` existed as of ``item.start`` (their key columns), and the rows then of those also in
    ``wanted`` (lake rows: user columns and the system columns)."""
    pk = definition.primary_key
    engine = engine_of(definition)
    if engine.needs_stored and item.start > item.base:
        # the log between the snapshot and start merges into the snapshot's rows: those first, every column
        _, stored = _state_before(definition, replace(item, start=item.base), log_, ctx, keys, keys)
        between = log_.read(item.bucket, item.base, item.start)
        resolved = engine.resolve(stored, between.filter(keys.hits(between)))
        changed = KeySet(resolved, pk)
        kept = stored.filter(pc.invert(changed.hits(stored))) if stored.num_rows and len(changed) else stored
        live = log_to_lake_rows(upserts_of(resolved), item.bucket)
        state = pa.concat_tables([kept, live.select(kept.column_names)], promote_options="permissive")
        return state.select(list(pk)), state.filter(wanted.hits(state)) if len(wanted) else state.slice(0, 0)
    between = log_.read(item.bucket, item.base, item.start) if item.start > item.base else None
    found: list[pa.Table] = []
    rows: list[pa.Table] = []
    overridden = None
    if between is not None and between.num_rows:
        between = reduce_changes(between, pk)
        between = between.filter(keys.hits(between))
        overridden = KeySet(between, pk)
        live = log_to_lake_rows(upserts_of(between), item.bucket)
        found.append(live.select(list(pk)))
        rows.append(live.filter(wanted.hits(live)) if len(wanted) else live.slice(0, 0))
    deletes = DeleteIndex(ctx)
    for data_file, delete_files in item.files:
        if may_hold(keys, file_bounds(data_file, ctx.schema, pk)):
            deleted = deletes.positions(data_file, delete_files) if delete_files else None
            _look_up(ctx, data_file.file_path, keys, wanted, overridden, found, rows, deleted)
    empty = log_to_lake_rows(log_.read_schema.empty_table(), item.bucket)
    existing = (
        pa.concat_tables([f.cast(empty.select(list(pk)).schema) for f in found]) if found else empty.select(list(pk))
    )
    if not rows:
        return existing, empty
    names = rows[0].schema.names
    return existing, pa.concat_tables([r.select(names) for r in rows], promote_options="permissive")


def _look_up(
    ctx: Any,
    location: str,
    keys: KeySet,
    wanted: KeySet,
    overridden: KeySet | None,
    found: list[pa.Table],
    rows: list[pa.Table],
    deleted: np.ndarray | None = None,
) -> None:
    """One data file's keys in ``keys`` and not in ``overridden`` (appended to ``found``), and the rows of those
    also in ``wanted`` (to ``rows``): only row groups whose key statistics may hold one are read, their key
    column first, whole rows only of row groups holding a wanted key. Rows at the ``deleted`` positions (the
    file's position deletes) are no rows."""
    pk = list(keys.primary_key)
    with ctx.open_parquet(location) as parquet:
        metadata = parquet.metadata
        names = parquet.schema_arrow.names
        first = 0  # the file position of the row group's first row
        for i in range(metadata.num_row_groups):
            count = metadata.row_group(i).num_rows
            first, start = first + count, first
            if not may_hold(keys, group_bounds(metadata.row_group(i), names, pk)):
                continue
            group_keys = parquet.read_row_group(i, columns=pk)
            hits = keys.hits(group_keys)
            if deleted is not None and deleted.size:
                gone = deleted[(deleted >= start) & (deleted < start + count)] - start
                if gone.size:
                    alive = np.ones(count, dtype=bool)
                    alive[gone] = False
                    hits = pc.and_(hits, pa.array(alive))
            if overridden is not None and len(overridden):  # the log after the snapshot has the newer version
                hits = pc.and_(hits, pc.invert(overridden.hits(group_keys)))
            if not pc.any(hits).as_py():
                continue
            found.append(group_keys.filter(hits))
            if len(wanted):
                want = pc.and_(hits, wanted.hits(group_keys)) if wanted is not keys else hits
                if pc.any(want).as_py():
                    rows.extend(ctx.project(r) for r in _rows_where(parquet, i, want))


#: Rows decoded at a time when whole rows of a row group are read (`_rows_where`).
LOOKUP_BATCH_ROWS = 65_536


def _rows_where(parquet: pq.ParquetFile, group: int, want: pa.BooleanArray) -> Iterator[pa.Table]:
    """The rows of row group ``group`` where ``want`` (one value per row) is true, decoded batch by batch: a
    lookup's memory is the rows it keeps, not a row group's (1,048,576 rows of every column)."""
    position = 0
    for batch in parquet.iter_batches(batch_size=LOOKUP_BATCH_ROWS, row_groups=[group], use_threads=True):
        mask = want.slice(position, batch.num_rows)
        position += batch.num_rows
        if pc.any(mask).as_py():
            yield pa.Table.from_batches([batch]).filter(mask)


def changes_unavailable(log_: Log, item: BucketChanges, exc: Exception) -> AsOfUnavailable:
    """The error of a changes read whose log range retention removed."""
    first = log_.start_offsets()[item.bucket]
    return AsOfUnavailable(
        f"{log_.definition.name}: cannot read the changes of bucket {item.bucket} from offset {item.start}: the log "
        f"holds it from offset {first} on (log retention removed the rest; {' '.join(str(exc).split())}). Changes "
        f"can be read from offset {first}; a subscription pins the log it still needs",
        unavailable={item.bucket: first},
    )


def apply_changes(state: pa.Table, changes: pa.Table, primary_key: Sequence[str]) -> pa.Table:
    """``state`` (rows of a primary-key table) with ``changes`` applied: the keys of ``update_before`` and
    ``delete`` rows removed, ``insert`` and ``update_after`` rows added (the columns ``state`` has). For
    consumers and tests."""
    pk = tuple(primary_key)
    ops = changes.column(OP_COLUMN)
    removed = changes.filter(pc.is_in(ops, pa.array([UPDATE_BEFORE, DELETE, UPDATE_AFTER])))
    added = changes.filter(pc.is_in(ops, pa.array([INSERT, UPDATE_AFTER])))
    kept = state.filter(pc.invert(KeySet(removed, pk).hits(state))) if removed.num_rows else state
    return pa.concat_tables([kept, added.select(state.column_names).cast(kept.schema)])
