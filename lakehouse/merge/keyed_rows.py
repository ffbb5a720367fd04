"""Changelog primitives shared by tiering, union reads, changes reads and the layers built on them.

A bucket's log is a sequence of changes (``_op`` insert / update_after / delete for primary-key tables);
`reduce_changes` keeps the last change per key, `upserts_of` the ones that leave a row, `KeySet` probes
many rows against the changed keys, and `rewrite_bucket` applies a reduced change set to a bucket's data
files by copy-on-write (the only writer of primary-key lake rows: its input comes from the log alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile

from lakehouse.iceberg.layout import log_to_lake_rows, parse_partition_by, partition_groups
from lakehouse.iceberg.position_deletes import DeleteIndex, in_sorted, sorted_unique, write_position_deletes
from lakehouse.table.definition import TableDefinition


def reduce_changes(data: pa.Table, primary_key: tuple[str, ...]) -> pa.Table:
    """The last change of every key, in offset order. ``data`` holds one bucket's records in offset order
    (offsets are unique within a bucket)."""
    if data.num_rows == 0:
        return data
    if len(primary_key) == 1 and pa.types.is_integer(data.schema.field(primary_key[0]).type):
        keys = data.column(primary_key[0]).to_numpy()
        order = np.argsort(keys, kind="stable")  # equal keys keep offset order: the last one is the newest
        sorted_keys = keys[order]
        last = np.ones(len(keys), dtype=bool)
        last[:-1] = sorted_keys[1:] != sorted_keys[:-1]
        if last.all():
            return data  # every key once (an initial load): nothing to reduce
        keep = np.zeros(len(keys), dtype=bool)
        keep[order[last]] = True
        return data.filter(pa.array(keep))
    last = data.group_by(list(primary_key), use_threads=False).aggregate([("_offset", "max")])
    return data.filter(pc.is_in(data.column("_offset"), value_set=last.column("_offset_max")))


def is_delete(changes: pa.Table) -> pa.BooleanArray:
    """For every change, whether it is a delete, compared on the ``_op`` dictionary's codes."""
    masks = []
    for chunk in changes.column("_op").chunks:
        if not pa.types.is_dictionary(chunk.type):
            masks.append(np.asarray(chunk.to_pylist(), dtype=object) == "delete")
            continue
        codes = chunk.indices.to_numpy(zero_copy_only=False)
        deletes = np.asarray(chunk.dictionary.to_pylist(), dtype=object) == "delete"
        masks.append(deletes[codes] if len(deletes) else np.zeros(len(codes), dtype=bool))
    return pa.array(np.concatenate(masks) if masks else np.zeros(0, dtype=bool))


def upserts_of(changes: pa.Table) -> pa.Table:
    """The changes that leave a row (not deletes)."""
    mask = np.logical_not(is_delete(changes).to_numpy(zero_copy_only=False))
    return changes if mask.all() else changes.filter(pa.array(mask))


def distinct_rows(table: pa.Table) -> pa.Table:
    """``table`` without repeated rows (every column compared)."""
    if table.num_rows == 0:
        return table
    return table.group_by(table.column_names, use_threads=False).aggregate([]).select(table.column_names)


def semi_join(table: pa.Table, keys: pa.Table, columns: Sequence[str]) -> pa.Table:
    """The rows of ``table`` whose ``columns`` match a row of ``keys`` (cast to ``table``'s types)."""
    if table.num_rows == 0:
        return table
    keys = distinct_rows(keys.select(list(columns))).cast(pa.schema([table.schema.field(c) for c in columns]))
    return table.join(keys, keys=list(columns), join_type="left semi").select(table.column_names)


class KeySet:
    """A set of primary keys, built once and probed many times. A single integer key column uses a sorted
    numpy array (binary search: no hash table rebuilt per probe, as ``pc.is_in`` would); other keys fall
    back to ``pc.is_in`` / a semi join."""

    def __init__(self, keys: pa.Table, primary_key: tuple[str, ...]) -> None:
        self.primary_key = primary_key
        self.keys = keys.select(list(primary_key))

    def __len__(self) -> int:
        return self.keys.num_rows

    @cached_property
    def _sorted(self) -> np.ndarray | None:
        """The distinct integer keys, sorted (built on first probe: an initial load probes nothing). Sort
        and drop repeats: numpy 2.4's hash-based ``np.unique`` is much slower on int64 keys."""
        if len(self.primary_key) != 1 or not pa.types.is_integer(self.keys.schema.field(0).type):
            return None
        return sorted_unique(self.keys.column(0).to_numpy())

    def hits(self, rows: pa.Table | pa.RecordBatch) -> pa.BooleanArray:
        """For every row, whether its key is in the set."""
        pk = self.primary_key
        if self._sorted is not None:
            values = rows.column(pk[0])
            if isinstance(values, pa.ChunkedArray):
                values = values.combine_chunks()
            if not len(self._sorted):
                return pa.array(np.zeros(len(values), dtype=bool))
            vals = values.fill_null(0).to_numpy() if values.null_count else values.to_numpy()
            found = _hits_in_ascending(self._sorted, vals)
            if found is None:
                found = in_sorted(vals, self._sorted)
            if values.null_count:  # primary keys are never null; be safe for foreign files
                found &= values.is_valid().to_numpy(zero_copy_only=False)
            return pa.array(found)
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        keys = self.keys.cast(pa.schema([rows.schema.field(c) for c in pk]))  # string vs large_string
        if len(pk) == 1:
            return pc.fill_null(pc.is_in(rows.column(pk[0]), value_set=keys.column(0).combine_chunks()), False)
        positions = pa.array(np.arange(rows.num_rows, dtype=np.int64))
        found = rows.select(list(pk)).append_column("__row", positions).join(keys, keys=list(pk), join_type="left semi")
        return pc.is_in(positions, value_set=found.column("__row").combine_chunks())


def _hits_in_ascending(keys: np.ndarray, values: np.ndarray) -> np.ndarray | None:
    """Per value, whether it is in ``keys`` (sorted, distinct), if ``values`` ascend strictly (a data file's key
    column: files are written sorted by key, one row per key): the keys within the values' range searched among
    the values, not every value among the keys, since a round changes a few keys of each file's many. None if
    the values do not ascend."""
    n = len(values)
    if n < 2 or not (values[1:] > values[:-1]).all():  # costs a fraction of a search of every value
        return None
    inside = keys[np.searchsorted(keys, values[0], "left") : np.searchsorted(keys, values[-1], "right")]
    at = np.searchsorted(values, inside)  # inside lies within [values[0], values[-1]]: every index is valid
    found = np.zeros(n, dtype=bool)
    found[at[values[at] == inside]] = True
    return found


Bounds = dict[str, tuple[Any, Any]]


def file_bounds(data_file: DataFile, schema: Any, pk: Sequence[str]) -> Bounds:
    """The key columns' lower and upper bounds in a data file's Iceberg statistics (those it has)."""
    lower, upper = data_file.lower_bounds or {}, data_file.upper_bounds or {}
    out = {}
    for name in pk:
        field_ = schema.find_field(name)
        if field_.field_id in lower and field_.field_id in upper:
            try:
                out[name] = (
                    from_bytes(field_.field_type, lower[field_.field_id]),
                    from_bytes(field_.field_type, upper[field_.field_id]),
                )
            except (ValueError, TypeError, NotImplementedError):  # bounds we cannot decode: no pruning on them
                continue
    return out


def group_bounds(group: Any, names: list[str], pk: Sequence[str]) -> Bounds:
    """The key columns' min and max in a Parquet row group's statistics (those it has)."""
    out = {}
    for name in pk:
        stats = group.column(names.index(name)).statistics
        if stats is not None and stats.has_min_max:
            out[name] = (stats.min, stats.max)
    return out


def may_hold(keys: KeySet, bounds: Bounds) -> bool:
    """Whether some key of ``keys`` lies within ``bounds`` in every bounded key column (no bounds: it may)."""
    sorted_keys = keys._sorted  # noqa: SLF001 - one integer key column: a binary search of the sorted keys
    if sorted_keys is not None and len(bounds) == 1:
        (lo, hi), name = next(iter(bounds.values())), keys.primary_key[0]
        if name in bounds and _is_int(lo) and _is_int(hi):
            at = int(np.searchsorted(sorted_keys, lo, "left"))
            return at < len(sorted_keys) and int(sorted_keys[at]) <= hi
    mask = None
    for name, (lo, hi) in bounds.items():
        values = keys.keys.column(name)
        try:
            inside = pc.and_(pc.greater_equal(values, pa.scalar(lo)), pc.less_equal(values, pa.scalar(hi)))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):  # not comparable: no pruning
            continue
        inside = pc.fill_null(inside, True)
        mask = inside if mask is None else pc.and_(mask, inside)
    return mask is None or pc.any(mask).as_py() is True


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def key_hits(
    ctx: Any, location: str, keys: KeySet, columns: Sequence[str] | None = ()
) -> tuple[np.ndarray, pa.Table | None]:
    """The row positions of the data file at ``location`` whose key is one of ``keys`` (only row groups whose
    key statistics may hold one are read), and the rows there (None if no row matched): their key columns and
    ``columns`` (None: every column; default: none), read with the key columns (one pass over the file)."""
    pk = list(keys.primary_key)
    found, rows = [], []
    with ctx.open_parquet(location) as parquet:
        metadata = parquet.metadata
        names = parquet.schema_arrow.names
        wanted = None if columns is None else [*pk, *columns]
        # a file written before an alter holds other names for some ids: read it whole, project by field id
        direct = wanted is not None and _same_ids(parquet.schema_arrow, ctx.arrow_schema, wanted)
        first = 0
        for i in range(metadata.num_row_groups):
            count = metadata.row_group(i).num_rows
            first, start = first + count, first
            if not may_hold(keys, group_bounds(metadata.row_group(i), names, pk)):
                continue
            # the other columns in the same read: its columns decode in parallel, and a row group whose key
            # range holds a changed key mostly holds one (rounds spread over the keys hit every row group)
            # one thread: a task is one core of its executor (its columns decoded on Arrow's pool, two tasks
            # on two cores queue behind each other's decoding)
            group = (
                parquet.read_row_group(i, columns=wanted, use_threads=False)
                if direct
                else ctx.project(parquet.read_row_group(i))
            )
            if wanted is not None and not direct:
                group = group.select(wanted)
            hits = keys.hits(group)
            if not pc.any(hits).as_py():
                continue
            found.append(np.flatnonzero(hits.to_numpy(zero_copy_only=False)) + start)
            rows.append(group.filter(hits))
    if not found:
        return np.empty(0, np.int64), None
    return np.concatenate(found), pa.concat_tables(rows)


def _same_ids(file_schema: pa.Schema, table_schema: pa.Schema, names: Sequence[str]) -> bool:
    """Whether the file holds each of ``names`` under the field id the table's current schema gives it."""
    for name in names:
        if name not in file_schema.names:
            return False
        have, want = file_schema.field(name).metadata or {}, table_schema.field(name).metadata or {}
        if have.get(FIELD_ID) != want.get(FIELD_ID):
            return False
    return True


FIELD_ID = b"PARQUET:field_id"
FILE, POSITION = "__file", "__pos"


def stored_rows(
    ctx: Any,
    candidates: Sequence[tuple[DataFile, Sequence[DataFile]]],
    keys: KeySet,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """The live rows of ``keys`` in ``candidates`` (data files, each with its delete files): a merge engine's
    stored rows, their key columns and ``columns`` (default: every column), with where each is (``__file``: the
    index of its data file in ``candidates``, ``__pos``: its position there). Only files and row groups whose
    key statistics may hold a key are read, the key columns first and the other columns only of row groups
    where one matched."""
    pk = list(keys.primary_key)
    extra = None if columns is None else [c for c in columns if c not in pk]
    found = []
    deletes = DeleteIndex(ctx)
    for index, (data_file, delete_files) in enumerate(candidates):
        if not len(keys) or not may_hold(keys, file_bounds(data_file, ctx.schema, pk)):
            continue
        positions, rows = key_hits(ctx, data_file.file_path, keys, extra)
        if rows is None:
            continue
        if delete_files:
            alive = ~in_sorted(positions, deletes.positions(data_file, delete_files))
            positions, rows = positions[alive], rows.filter(pa.array(alive))
        if not positions.size:
            continue
        n = len(positions)
        found.append(
            rows.append_column(FILE, pa.array(np.full(n, index, np.int32))).append_column(POSITION, pa.array(positions))
        )
    if not found:
        schema = ctx.arrow_schema
        names = [f.name for f in schema] if columns is None else [*pk, *(extra or [])]
        fields = [schema.field(c) for c in names]
        return pa.schema([*fields, pa.field(FILE, pa.int32()), pa.field(POSITION, pa.int64())]).empty_table()
    return pa.concat_tables(found, promote_options="permissive")


class FoundKeys:
    """Counts, over one round's bucket, of the changed keys found live in the lake: those the round updates and
    those it deletes (every live key is at one position of one file, so the counts of a bucket's parts add up).
    With the number of keys the round upserts they classify the round as a net changelog does (`round_counts`),
    without a second look at the lake."""

    def __init__(self, changes: pa.Table, primary_key: tuple[str, ...]) -> None:
        deletes = is_delete(changes) if changes.num_rows else pa.array([], pa.bool_())
        self.deleted = KeySet(changes.filter(deletes), primary_key) if changes.num_rows else None
        self.upsert_keys = changes.num_rows - (int(pc.sum(deletes.cast(pa.int64())).as_py() or 0))

    def add(self, result: Any, rows: pa.Table | None) -> None:
        """Count the key rows ``rows`` (live rows of changed keys) into ``result``'s ``found_updates`` and
        ``found_deletes``."""
        if rows is None or not rows.num_rows or self.deleted is None:
            return
        deleted = int(pc.sum(self.deleted.hits(rows).cast(pa.int64())).as_py() or 0) if len(self.deleted) else 0
        result.found_deletes += deleted
        result.found_updates += rows.num_rows - deleted


def round_counts(upsert_keys: int, found_updates: int, found_deletes: int) -> dict[str, int]:
    """A round's net changes, as `lakehouse.read.changes` classifies them: upserted keys that were live are updates,
    the others inserts; deleted keys that were live are deletes (a delete of an absent key changes nothing)."""
    return {"inserts": upsert_keys - found_updates, "updates": found_updates, "deletes": found_deletes}


def rewrite_bucket(
    ctx: Any,
    definition: TableDefinition,
    bucket: int,
    changes: pa.Table,
    candidates: Sequence[DataFile],
    stem: str,
    result: Any,
) -> None:
    """Apply ``changes`` (one bucket's, reduced per key) to the bucket's data files ``candidates`` by
    copy-on-write: every file holding a changed key is rewritten without those keys (same row order) and
    listed in ``result.removed``; the surviving upserts are written as new files. New files go to
    ``result.added``."""
    pk = definition.primary_key
    keys = KeySet(changes, pk)
    found = FoundKeys(changes, pk)
    result.upsert_keys += found.upsert_keys
    for data_file in candidates:  # copy-on-write: only files that hold a changed key
        key_rows = ctx.read(data_file.file_path, columns=list(pk))
        hits = keys.hits(key_rows)
        if not pc.any(hits).as_py():
            continue
        found.add(result, key_rows.filter(hits))
        keep = ctx.read(data_file.file_path).filter(pc.invert(hits))  # same file, same row order
        result.removed.append(data_file.file_path)
        if keep.num_rows:
            partition = tuple(data_file.partition[i] for i in range(len(data_file.partition)))
            result.added.append(ctx.write(keep, partition, stem))
    _write_upserts(ctx, definition, bucket, changes, stem, result)


def _write_upserts(
    ctx: Any,
    definition: TableDefinition,
    bucket: int,
    changes: pa.Table,
    stem: str,
    result: Any,
    *,
    by_key: bool = False,
) -> None:
    """The new versions of the changed keys that leave a row, as new data files (``by_key``: sorted by key, so
    the row groups' key statistics let later rounds and lookups skip what cannot hold a key)."""
    upserts = upserts_of(changes)
    if by_key and upserts.num_rows:
        upserts = upserts.sort_by([(k, "ascending") for k in definition.primary_key])
    if upserts.num_rows:
        parts = parse_partition_by(definition, definition.schema)
        new_rows = log_to_lake_rows(upserts, bucket)
        for partition, rows in partition_groups(definition, new_rows, bucket, parts):
            result.added.append(ctx.write(rows, partition, stem))


def mark_bucket(
    ctx: Any,
    definition: TableDefinition,
    bucket: int,
    changes: pa.Table,
    candidates: Sequence[tuple[DataFile, Sequence[DataFile]]],
    stem: str,
    result: Any,
    *,
    write_rows: bool = True,
    stored: pa.Table | None = None,
) -> None:
    """Apply ``changes`` (one bucket's, reduced per key) to the bucket by merge-on-read: the live rows of the
    changed keys in ``candidates`` (each data file with its delete files) are marked deleted in position delete
    files (one per partition), and the surviving upserts are written as new data files (unless not
    ``write_rows``: a bucket split by file writes them once); no data file is rewritten. Only the key columns of
    the candidates are read (none if ``stored``, the `stored_rows` of a superset of the changed keys, says where
    they are). New files go to ``result.added``."""
    pk = definition.primary_key
    keys = KeySet(changes, pk)
    found = FoundKeys(changes, pk)
    if write_rows:  # the part that writes the rows counts them (once per bucket)
        result.upsert_keys += found.upsert_keys
    marks: dict[tuple, list[tuple[str, np.ndarray]]] = {}
    if stored is not None:
        stored = stored.filter(keys.hits(stored)) if stored.num_rows else stored
        found.add(result, stored.select(list(pk)))
        files = stored.column(FILE).to_numpy()
        positions = stored.column(POSITION).to_numpy()
        for index in np.unique(files):
            data_file = candidates[int(index)][0]
            partition = tuple(data_file.partition[i] for i in range(len(data_file.partition)))
            marks.setdefault(partition, []).append((data_file.file_path, np.sort(positions[files == index])))
        candidates = ()
    deletes = DeleteIndex(ctx)
    for data_file, delete_files in candidates:
        if not may_hold(keys, file_bounds(data_file, ctx.schema, pk)):
            continue  # its key range holds no changed key: not read at all
        positions, rows = key_hits(ctx, data_file.file_path, keys)
        if positions.size and delete_files:
            alive = ~in_sorted(positions, deletes.positions(data_file, delete_files))
            positions, rows = positions[alive], rows.filter(pa.array(alive)) if rows is not None else None
        found.add(result, rows)
        if positions.size:
            partition = tuple(data_file.partition[i] for i in range(len(data_file.partition)))
            marks.setdefault(partition, []).append((data_file.file_path, positions))
    for partition, marked in marks.items():
        result.added.append(write_position_deletes(ctx, partition, stem, marked))
    if write_rows:
        _write_upserts(ctx, definition, bucket, changes, stem, result, by_key=True)
