"""Reads that outlive maintenance. A union read, a net changelog or a point lookup whose lake files or log range
snapshot expiry or log retention removed while it read (a newer commit replaced them, or made the records part of
the lake) is planned again from what is retained and read again; a read as of offsets that nothing retained can
serve any more raises `AsOfUnavailable`: never a wrong row. `Lakehouse`'s reads delegate here."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.errors import CorruptDataFileError, InvalidArgument, OffsetOutOfRange
from lakehouse.log import Log
from lakehouse.merge.keyed_rows import distinct_rows
from lakehouse.read.union import AsOf, as_of_unavailable
from lakehouse.table.definition import TableName

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

__all__ = ["CHANGES_WORKERS", "lookup", "read_again", "stream_changes"]

#: Buckets a changes read works on at once (their file reads overlap; pyarrow decodes with its own threads).
CHANGES_WORKERS = 2


def read_again(lh: Lakehouse, name: str | TableName, read: Any, attempts: int = 3, *, as_of: AsOf | None = None) -> Any:
    """Run a union read; if log retention removed the tail's start meanwhile (a newer tiering commit made
    those records part of the lake), or snapshot expiry deleted files of the snapshot being read (a newer
    commit replaced them), reload the lake and read again. A read ``as_of`` offsets that the reloaded lake
    and the retained log cannot serve raises `AsOfUnavailable` at once."""
    for attempt in range(attempts):
        table = lh.lake_table(name)
        try:
            return read(table)
        except OffsetOutOfRange as exc:
            if as_of is not None:
                log = lh.log(name)
                ends = {int(b): int(o) for b, o in as_of.items()}  # checked by the read that failed
                error = as_of_unavailable(lh.lake_table(name), log.definition, ends, log.start_offsets())
                if error is not None:
                    raise error from exc
            if attempt == attempts - 1:
                raise
        except (CorruptDataFileError, OSError):
            # a file of the snapshot read is gone: corruption, unless the table moved on meanwhile
            if attempt == attempts - 1 or lh.lake_table(name).metadata_location == table.metadata_location:
                raise
    raise AssertionError("unreachable")


def stream_changes(lh: Lakehouse, name: str | TableName, plan: Any, attempts: int) -> Iterator[pa.RecordBatch]:
    """The buckets' changes in bucket order, up to ``CHANGES_WORKERS`` buckets read at once."""
    from lakehouse.iceberg.datafiles import LakeContext
    from object_store.usage import ContextThreadPoolExecutor

    ctx = LakeContext.of(lh.store, lh.lake_table(name))
    items = list(plan.buckets)
    with ContextThreadPoolExecutor(CHANGES_WORKERS, thread_name_prefix="lakestream-changes") as pool:
        pending = [
            pool.submit(_bucket_changes, lh, name, plan, item, ctx, attempts) for item in items[:CHANGES_WORKERS]
        ]
        for i in range(len(items)):
            rows = pending[i].result()
            if i + CHANGES_WORKERS < len(items):
                pending.append(pool.submit(_bucket_changes, lh, name, plan, items[i + CHANGES_WORKERS], ctx, attempts))
            pending[i] = None  # type: ignore[call-overload]  # its rows go out now: do not keep them
            yield from rows.to_batches()


def _bucket_changes(lh: Lakehouse, name: str | TableName, plan: Any, item: Any, ctx: Any, attempts: int) -> pa.Table:
    """One bucket's changes; planned again if expiry or retention removed its old rows' snapshot or log
    meanwhile (`AsOfUnavailable` once nothing retained can serve them)."""
    from lakehouse.read.changes import plan_changes, read_bucket_changes

    def replan(table: Any, log: Log) -> Any:
        return plan_changes(table, log, plan.start, plan.end, before_images=plan.before_images, columns=plan.columns)

    return _old_state(lh, name, plan, item, ctx, attempts, replan, read_bucket_changes)


def _bucket_rows(lh: Lakehouse, name: str | TableName, plan: Any, item: Any, ctx: Any, keys: pa.Table) -> pa.Table:
    """One bucket's rows of `lookup`, planned again as `_bucket_changes` is."""
    from lakehouse.read.changes import plan_lookup, read_bucket_rows

    return _old_state(
        lh,
        name,
        plan,
        item,
        ctx,
        3,
        lambda table, log: plan_lookup(table, log, plan.start, [item.bucket]),
        lambda p, i, log, c: read_bucket_rows(p, i, log, c, keys),
    )


def _old_state(
    lh: Lakehouse, name: str | TableName, plan: Any, item: Any, ctx: Any, attempts: int, replan: Any, read: Any
) -> pa.Table:
    """``read(plan, item, log, ctx)`` of a read that needs the state as of ``plan.start`` (a snapshot's
    files and the log after it); if expiry or retention removed them meanwhile, ``replan(table, log)`` and
    read again (`AsOfUnavailable` once nothing retained can serve ``plan.start``)."""
    from lakehouse.iceberg.datafiles import LakeContext

    log = lh.log(name)
    for attempt in range(attempts):
        try:
            return read(plan, item, log, ctx)
        except (OffsetOutOfRange, OSError) as exc:
            table = lh.lake_table(name)
            error = as_of_unavailable(table, log.definition, plan.start, log.start_offsets())
            if error is not None:
                raise error from exc
            if attempt == attempts - 1:
                raise
            plan = replan(table, log)
            item = next(b for b in plan.buckets if b.bucket == item.bucket)
            ctx = LakeContext.of(lh.store, table)
    raise AssertionError("unreachable")


def lookup(
    lh: Lakehouse, name: str | TableName, keys: pa.Table, *, as_of: AsOf, columns: Sequence[str] | None = None
) -> pa.Table:
    """The rows of a primary-key table whose keys are rows of ``keys`` (its primary-key columns), as of the
    offset map ``as_of``, as `union_read` with ``as_of`` holds them (keys absent then are absent here; a
    key given twice comes once). A point lookup: per bucket of the keys, only the lake files whose key
    statistics can hold one, their key column first and whole rows only of row groups holding one, plus the
    log between that snapshot and ``as_of`` (see `lakehouse.read.changes.read_bucket_rows`); for keys spread
    over the table it decodes the row groups once, without union reads' filter and merge passes.

    Raises:
        InvalidArgument: a table without a primary key, ``keys`` without its columns, a bad offset map.
        AsOfUnavailable: snapshot expiry and log retention removed what ``as_of`` needs.
    """
    from lakehouse.read.changes import plan_lookup

    log = lh.log(name)
    definition = log.definition
    pk = list(definition.primary_key)
    if not pk:
        raise InvalidArgument(f"{definition.name} has no primary key: rows cannot be looked up by key")
    missing = [c for c in pk if c not in keys.column_names]
    if missing:
        raise InvalidArgument(f"{definition.name}: lookup keys lack primary-key column(s) {missing}")
    names = [f.name for f in definition.schema]
    chosen = names if columns is None else [c for c in names if c in columns]
    keys = keys.select(pk)
    valid = [pc.is_valid(keys[c]) for c in pk]  # a null matches no key
    keys = keys.filter(functools.reduce(pc.and_, valid)) if keys.num_rows else keys
    keys = distinct_rows(keys.cast(pa.schema([definition.schema.field(c).with_nullable(True) for c in pk])))
    table = lh.lake_table(name)
    empty = table.scan(selected_fields=tuple(chosen)).projection().as_arrow().empty_table()  # union_read's types
    if keys.num_rows == 0:
        plan_lookup(table, log, as_of, [])  # the offsets are checked all the same
        return empty
    ids = log.bucket_of(keys.column(definition.bucket_key)).to_numpy(zero_copy_only=False)
    by_bucket = {int(b): keys.filter(pa.array(ids == b)) for b in np.unique(ids)}
    plan = plan_lookup(table, log, as_of, list(by_bucket))
    from lakehouse.iceberg.datafiles import LakeContext
    from object_store.usage import ContextThreadPoolExecutor

    ctx = LakeContext.of(lh.store, table)
    with ContextThreadPoolExecutor(CHANGES_WORKERS, thread_name_prefix="lakestream-lookup") as pool:
        parts = list(
            pool.map(lambda item: _bucket_rows(lh, name, plan, item, ctx, by_bucket[item.bucket]), plan.buckets)
        )
    parts = [p.select(chosen).cast(empty.schema) for p in parts if p.num_rows]
    return pa.concat_tables(parts) if parts else empty
