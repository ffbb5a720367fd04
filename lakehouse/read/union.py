"""Union read: the lake snapshot plus, per bucket, the log tail after that snapshot's offsets.

Log tables: the lake's rows, then the tails (a concatenation). Primary-key tables: the tails are reduced
per key (the last change wins); lake rows whose key changed in a tail are dropped, and the tails'
surviving upserts are added (deletes remove the row). Buckets without a tail are not merged.

The offsets come from the same table metadata as the scanned snapshot, so a tiering commit that lands
while we read neither hides nor doubles records. Projection and filters go into the lake scan; the
tail gets the same filter, applied after the merge (a key updated so that it no longer matches still
hides its old lake version).

Reads as of log offsets (``as_of={bucket: offset}``, every bucket named) return the table exactly as the
log defines it below those offsets. Per bucket, the lake part comes from the retained snapshot holding
the most of that bucket without passing ``as_of`` (the current snapshot where the lake is at or behind
``as_of``, else the newest tiering snapshot at or below it: time travel), and the log tail from that
snapshot's offset up to ``as_of``. Buckets are grouped by snapshot (one scan each, filtered on
``__bucket`` only if other buckets of that snapshot hold rows). A bucket neither can serve raises
`AsOfUnavailable`, never an approximate state.

Reads at a ref (``ref="published"``: an Iceberg tag or branch of the lake table) return the lake exactly at the
snapshot the ref points at, and nothing of the log: a published state (`quality.published_tag`) is a lake snapshot
whose checks passed, and the log after it was not checked. So a union read at a ref equals a lake read at it;
``ref`` and ``as_of`` together are refused (`InvalidArgument`), an unknown ref raises `RefNotFound`.

Reads at a snapshot id (`plan_read`'s ``snapshot_id``) are the same, at a snapshot named by its id: what a
quality suite validates is one snapshot, read wherever and whenever its rows are read (a Spark action planned
later, `quality.expectations`). Not with ``as_of`` or ``ref``; an unknown id raises `SnapshotNotFound`.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, parser
from pyiceberg.expressions.visitors import bind
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.io.pyarrow import expression_to_pyarrow, schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import DataScan, FileScanTask, Table
from pyiceberg.table.metadata import TableMetadata
from pyparsing import ParseException

from lakehouse.errors import (
    AsOfUnavailable,
    CorruptDataFileError,
    InvalidArgument,
    RefNotFound,
    SchemaError,
    SnapshotNotFound,
)
from lakehouse.iceberg.datafiles import LakeContext
from lakehouse.iceberg.layout import LAKE_SYSTEM_FIELDS, check_lake_layout, log_to_lake_rows
from lakehouse.iceberg.offsets import (
    COMMIT_USER_PROPERTY,
    TIERING_USER,
    lake_offsets,
    offsets_in_snapshot,
    tiering_snapshots,
)
from lakehouse.log import Log
from lakehouse.merge import MergeEngine, engine_of
from lakehouse.merge.keyed_rows import KeySet, reduce_changes, stored_rows, upserts_of
from lakehouse.read.filescan import read_tasks, stream_tasks
from lakehouse.table.definition import TableDefinition

RowFilter = str | BooleanExpression | None
AsOf = Mapping[int, int]
#: Key lists up to this long are pushed into reads as IN filters; longer ones as their range, matched exactly as
#: the rows are read (pyiceberg binds and evaluates an IN list literal by literal, per data file).
IN_LIST_LIMIT = 64


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


LAKE_SYSTEM_NAMES = frozenset(f.name for f in LAKE_SYSTEM_FIELDS)


def output_columns(table: Table, columns: Sequence[str] | None) -> list[str]:
    names = [f.name for f in table.schema().fields]
    if columns is None:  # the system columns last: an alter adds columns after them in the Iceberg schema
        return [n for n in names if n not in LAKE_SYSTEM_NAMES] + [n for n in names if n in LAKE_SYSTEM_NAMES]
    unknown = [c for c in columns if c not in names]
    if unknown:
        raise SchemaError(f"unknown column(s) {unknown}; the table has {names}")
    return list(columns)


def ref_snapshot(table: Table, ref: str) -> int:
    """The snapshot id the tag or branch ``ref`` of ``table`` points at.

    Raises:
        RefNotFound: the table has no such ref (the message lists those it has).
        InvalidArgument: ``ref`` is not a non-empty string.
    """
    if not isinstance(ref, str) or not ref.strip():
        raise InvalidArgument(f"ref names a tag or branch of the lake table (e.g. 'published'), got {ref!r}")
    found = table.metadata.refs.get(ref)
    if found is None:
        have = ", ".join(sorted(table.metadata.refs)) or "none (nothing was committed yet)"
        raise RefNotFound(
            f"lake table {'.'.join(table.name())} has no tag or branch {ref!r}; its refs: {have}. The tag "
            "'published' appears after the first passing `lakestream check` (quality.published_tag), and 'publication' "
            "once the table is in the warehouse publication (quality.warehouse_publication, `lakestream published`)"
        )
    return found.snapshot_id


def known_snapshot(table: Table, snapshot_id: int) -> int:
    """``snapshot_id``, checked to be a snapshot of ``table`` (a read pinned to one snapshot: a suite reads
    exactly the snapshot it validates, wherever and whenever its rows are read).

    Raises:
        SnapshotNotFound: the table has no such snapshot (expired, or of another table).
        InvalidArgument: ``snapshot_id`` is not an integer.
    """
    if isinstance(snapshot_id, bool) or not isinstance(snapshot_id, int):
        raise InvalidArgument(f"snapshot_id is a snapshot's id (an integer), got {snapshot_id!r}")
    if table.metadata.snapshot_by_id(snapshot_id) is None:
        current = table.metadata.current_snapshot_id
        raise SnapshotNotFound(
            f"lake table {'.'.join(table.name())} has no snapshot {snapshot_id} (expired by maintenance, or one of "
            f"another table); its current snapshot is {current if current is not None else 'none (nothing tiered)'}"
        )
    return snapshot_id


def snapshot_offsets(metadata: TableMetadata, snapshot_id: int, buckets: int) -> dict[int, int]:
    """The log offsets the lake holds at snapshot ``snapshot_id``: those of the newest tiering snapshot among
    its ancestors (itself included) that are still retained; 0 for every bucket if none is."""
    snap = metadata.snapshot_by_id(snapshot_id)
    while snap is not None:
        if snap.summary is not None and snap.summary[COMMIT_USER_PROPERTY] == TIERING_USER:
            try:
                return offsets_in_snapshot(snap, buckets)
            except (TypeError, ValueError, AttributeError, IndexError):
                break
        snap = metadata.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return dict.fromkeys(range(buckets), 0)


def read_tail(
    log_: Log, offsets: dict[int, int], *, primary_key: Sequence[str] = (), ends: dict[int, int] | None = None
) -> pa.Table:
    """Every bucket's log records from ``offsets`` on (up to ``ends``, default the log's end), as lake rows
    with ``_op`` (reduced per key for primary-key tables)."""
    parts = []
    for bucket, start in sorted(offsets.items()):
        end = None if ends is None else ends[bucket]
        if end is not None and start >= end:
            continue  # nothing to read: no request
        data = log_.read(bucket, start, end)
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
    tail_rows: bool = True,
    engine: MergeEngine | None = None,
) -> Iterator[pa.RecordBatch]:
    """Lake batches minus keys changed in ``tail``, then the tail's rows unless not ``tail_rows`` (see the module
    docstring). With a merge ``engine``, ``tail`` is the raw log tail and the lake batches carry every column,
    unfiltered: the rows of the tail's keys are kept aside as they stream by, the tail merged into them, and the
    ones the merge left unchanged yielded as they were."""
    pk = tuple(primary_key)
    keys = KeySet(tail, pk) if pk and tail.num_rows else None
    target = pa.schema([schema.field(c) for c in columns])
    stored: list[pa.RecordBatch] = []
    for batch in lake:
        if keys is not None:
            hits = keys.hits(batch)
            if engine is not None and pc.any(hits).as_py():
                stored.append(batch.filter(hits))
            batch = batch.filter(pc.invert(hits))
        batch = batch.select(columns)
        yield batch if batch.schema.equals(target) else batch.cast(target)
    if engine is not None and tail.num_rows:
        held = pa.Table.from_batches(stored) if stored else pa.table({})
        tail = engine.resolve(held, tail)
        if held.num_rows:  # keys whose stored row stands (an older version, a later first row)
            kept = held.filter(pc.invert(KeySet(tail, pk).hits(held))) if tail.num_rows else held
            yield from kept.select(columns).cast(target).to_batches()
    if tail.num_rows == 0 or not tail_rows:
        return
    if pk:
        tail = upserts_of(tail)
    if not isinstance(tail_filter, AlwaysTrue) and tail.num_rows:
        tail = tail.filter(tail_filter)
    yield from tail.select(columns).cast(target).to_batches()


def corrupt_file_error(table: Table, exc: Exception) -> Exception:
    """The error of a lake read that failed inside pyarrow ("Could not open Parquet input source '<Buffer>'":
    pyiceberg opens files as streams, so the path is lost): a `CorruptDataFileError` naming the first live data
    file, or position delete file, whose footer cannot be read, or ``exc`` itself if every footer reads."""
    if table.current_snapshot() is None:
        return exc
    tasks = list(table.scan().plan_files())
    files = [(t.file.file_path, "data file") for t in tasks]
    files += list({d.file_path: (d.file_path, "position delete file") for t in tasks for d in t.delete_files}.values())
    for path, kind in files:
        try:
            with table.io.new_input(path).open() as stream:
                pq.ParquetFile(stream).metadata  # noqa: B018 - reads the footer
        except (pa.ArrowInvalid, FileNotFoundError) as bad:
            what = "is missing" if isinstance(bad, FileNotFoundError) else "cannot be read as Parquet"
            return CorruptDataFileError(
                f"lake table {'.'.join(table.name())}: {kind} {path} {what} ({' '.join(str(bad).split())}). "
                "Restore it from a backup, or roll the table back to a snapshot that does not reference it"
            )
        except OSError:  # the store, not the file (unreachable, no permission): the original error says it
            return exc
    for path, kind in files:  # footers all read: position delete files are small, read them whole
        if kind == "data file":
            continue
        try:
            with table.io.new_input(path).open() as stream:
                pq.read_table(stream)
        except (pa.ArrowInvalid, OSError) as bad:
            return CorruptDataFileError(
                f"lake table {'.'.join(table.name())}: {kind} {path} cannot be read ({' '.join(str(bad).split())}). "
                "Restore it from a backup, or roll the table back to a snapshot that does not reference it"
            )
    return exc


def _named(table: Table, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    try:
        yield from batches
    except (pa.ArrowInvalid, OSError) as exc:
        raise corrupt_file_error(table, exc) from exc


def _union(
    table: Table,
    log_: Log,
    columns: Sequence[str] | None,
    row_filter: RowFilter,
    *,
    stream: bool,
    as_of: AsOf | None = None,
    ref: str | None = None,
) -> Iterator[pa.RecordBatch]:
    plan = plan_read(table, log_.definition, columns=columns, row_filter=row_filter, as_of=as_of, log_=log_, ref=ref)
    return plan.execute_all(log_, table=table, stream=stream)


def union_batches(
    table: Table,
    log_: Log,
    *,
    columns: Sequence[str] | None = None,
    row_filter: RowFilter = None,
    as_of: AsOf | None = None,
    ref: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Union read as a stream of record batches (memory: one lake batch plus the log tail). With ``ref``: the
    lake at that tag or branch only (see the module docstring)."""
    return _union(table, log_, columns, row_filter, stream=True, as_of=as_of, ref=ref)


def union_read(
    table: Table,
    log_: Log,
    *,
    columns: Sequence[str] | None = None,
    row_filter: RowFilter = None,
    as_of: AsOf | None = None,
    ref: str | None = None,
    keep: Callable[[pa.Table], pa.Table] | None = None,
) -> pa.Table:
    """Union read as one table. With ``keep`` (an exact condition a row filter cannot say: a semi join, a long
    IN list), the read is streamed and each batch narrowed by ``keep`` as it arrives: its memory is the rows
    kept plus a few batches, not the rows the row filter lets through."""
    batches = _union(table, log_, columns, row_filter, stream=keep is not None, as_of=as_of, ref=ref)
    if keep is not None:
        batches = _kept(batches, keep)
    first = next(batches, None)
    if first is None:
        out = output_columns(table, columns)
        return table.scan(selected_fields=tuple(out)).projection().as_arrow().empty_table()
    return pa.Table.from_batches([first, *batches])


def lake_read(
    table: Table,
    *,
    columns: Sequence[str] | None = None,
    row_filter: RowFilter = None,
    as_of: AsOf | None = None,
    log_: Log | None = None,
    ref: str | None = None,
) -> pa.Table:
    """The lake only: what any Iceberg reader sees. With ``as_of`` (and the table's ``log_``), the lake as it
    held exactly those offsets: per bucket, a retained snapshot must hold the bucket at exactly that offset
    (offsets a tiering round committed), else `AsOfUnavailable`. With ``ref`` (a tag or branch, e.g.
    ``"published"``), the lake exactly at the snapshot it points at (`RefNotFound` if there is no such ref)."""
    if ref is not None:
        if as_of is not None:
            raise InvalidArgument("read either as_of offsets or at a ref, not both")
        if log_ is None:
            raise InvalidArgument("lake_read at a ref needs the table's log (for its definition: buckets, key)")
        plan = plan_read(table, log_.definition, columns=columns, row_filter=row_filter, lake_only=True, ref=ref)
        return pa.Table.from_batches(list(plan.execute_all(None, table=table, stream=False)), schema=plan.arrow_schema)
    if as_of is None:
        out = output_columns(table, columns)
        expr = parse_filter(row_filter, table.schema())
        scan = table.scan(row_filter=expr, selected_fields=tuple(out))
        projected = scan.projection()
        schema = schema_to_pyarrow(projected, include_field_ids=False)
        batches = _named(table, read_tasks(scan.plan_files(), table.io, table.metadata, projected, expr))
        return pa.Table.from_batches([b if b.schema.equals(schema) else b.cast(schema) for b in batches], schema=schema)
    if log_ is None:
        raise InvalidArgument("lake_read as_of needs the table's log (to check the offsets against its end)")
    plan = plan_read(
        table, log_.definition, columns=columns, row_filter=row_filter, as_of=as_of, lake_only=True, log_=log_
    )
    return pa.Table.from_batches(list(plan.execute_all(None, table=table, stream=False)), schema=plan.arrow_schema)


def _kept(batches: Iterator[pa.RecordBatch], keep: Callable[[pa.Table], pa.Table]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        kept = keep(pa.Table.from_batches([batch]))
        if kept.num_rows:
            yield from kept.to_batches()


# ---- reads as of log offsets ---------------------------------------------------------------------------


def parse_offsets(text: str, what: str = "offsets") -> dict[int, int]:
    """``"0:120, 1:98"`` (the CLI's and the Spark source's form of an offset map) as {0: 120, 1: 98}; a JSON
    object (``{"0": 120, "1": 98}``) is accepted too. Values are checked against a table by `check_as_of`."""
    text = text.strip()
    if text.startswith("{"):
        try:
            return {int(b): int(o) for b, o in json.loads(text).items()}
        except (ValueError, TypeError, AttributeError):
            raise InvalidArgument(
                f'{what} as JSON maps bucket numbers to offsets, e.g. {{"0": 120}}; got {text!r}'
            ) from None
    offsets: dict[int, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        bucket, sep, offset = part.partition(":")
        if not sep or not bucket.strip().isdigit() or not offset.strip().isdigit():
            raise InvalidArgument(f'{what} takes "bucket:offset,..." (e.g. "0:120,1:98"), got {part!r} in {text!r}')
        if int(bucket) in offsets:
            raise InvalidArgument(f"{what} names bucket {int(bucket)} twice ({text!r})")
        offsets[int(bucket)] = int(offset)
    return offsets


def check_as_of(as_of: AsOf, definition: TableDefinition, log_: Log, *, what: str = "as_of") -> dict[int, int]:
    """``as_of`` as {bucket: offset} for every bucket of the table, checked before any lake read: every bucket
    named (a missing one would mean "now", which no later read could repeat), offsets integers from 0 to the
    bucket's end offset (one listing per bucket).

    Raises:
        InvalidArgument: not a mapping of integers; a bucket missing or one the table lacks; a negative offset;
            an offset beyond the bucket's end.
    """
    offsets = check_offset_buckets(as_of, definition, what=what)
    ends = log_.end_offsets()
    beyond = {b: o for b, o in offsets.items() if o > ends[b]}
    if beyond:
        raise InvalidArgument(
            f"{what} is beyond the end of {definition.name}'s log: "
            + ", ".join(f"bucket {b} offset {o} (its end is {ends[b]})" for b, o in beyond.items())
        )
    return offsets


def check_offset_buckets(as_of: AsOf, definition: TableDefinition, *, what: str = "as_of") -> dict[int, int]:
    """What `check_as_of` checks without reading the log: a mapping of integers naming every bucket of the table
    and no other, offsets >= 0; sorted by bucket. What holds whenever it is checked, so a reader checks it when it
    is built (the log's end is checked when it reads).

    Raises:
        InvalidArgument: as `check_as_of`, but for an offset beyond the bucket's end.
    """
    name, buckets = definition.name, definition.buckets
    if not isinstance(as_of, Mapping):
        raise InvalidArgument(f"{what} must map every bucket to an offset ({{0: 120, 1: 98, ...}}), got {as_of!r}")
    offsets: dict[int, int] = {}
    for b, o in as_of.items():
        try:
            if isinstance(b, bool) or isinstance(o, bool):
                raise TypeError
            offsets[operator.index(b)] = operator.index(o)
        except TypeError:
            raise InvalidArgument(f"{what} maps bucket numbers to offsets (integers), got {b!r}: {o!r}") from None
    unknown = sorted(b for b in offsets if not 0 <= b < buckets)
    if unknown:
        raise InvalidArgument(f"{what} names bucket(s) {unknown}; {name} has buckets 0..{buckets - 1}")
    missing = sorted(set(range(buckets)) - set(offsets))
    if missing:
        raise InvalidArgument(
            f"{what} must name every bucket of {name} (0..{buckets - 1}); it lacks bucket(s) {missing}. A missing "
            "bucket is not read 'as of now': that would not be repeatable"
        )
    negative = {b: o for b, o in offsets.items() if o < 0}
    if negative:
        raise InvalidArgument(f"{what} offsets must be >= 0, got {negative}")
    return dict(sorted(offsets.items()))


@dataclass
class AsOfPlan:
    """Where a read as of ``ends`` takes each bucket's lake part from."""

    bases: dict[int, int]  # bucket -> the lake offset its part is read at (0: no lake part)
    scans: list[tuple[int, frozenset[int] | None]]  # (snapshot id, buckets to keep; None: all of it)
    held: dict[int, set[int]]  # bucket -> every offset a retained snapshot holds it at (and 0)


def plan_as_of(table: Table, definition: TableDefinition, ends: dict[int, int]) -> AsOfPlan:
    """Per bucket, the retained snapshot holding the most of it without passing ``ends``: the current
    snapshot if the lake's offset is at or below the bucket's end, else the newest tiering snapshot that is;
    none (an empty lake part) where every snapshot is past it. Buckets are then grouped so that as few
    snapshots as possible are scanned (the one serving the most buckets first; the current one first on a tie,
    then the newest)."""
    metadata, buckets = table.metadata, definition.buckets
    # checks the newest tiering snapshot
    current = lake_offsets(metadata, buckets, name=str(definition.name), io=table.io)
    candidates: list[tuple[int, dict[int, int]]] = []
    if metadata.current_snapshot_id is not None:
        candidates.append((metadata.current_snapshot_id, current))
    candidates += [(s.snapshot_id, o) for s, o in tiering_snapshots(metadata, buckets, table.io)]
    held = {b: {0, *(o[b] for _, o in candidates)} for b in range(buckets)}
    bases = {b: max(o for o in held[b] if o <= ends[b]) for b in range(buckets)}
    need = {b for b in range(buckets) if bases[b] > 0}
    scans: list[tuple[int, frozenset[int] | None]] = []
    while need:
        snapshot_id, offsets = max(candidates, key=lambda c: sum(c[1][b] == bases[b] for b in need))
        covered = frozenset(b for b in need if offsets[b] == bases[b])
        if not covered:  # cannot happen: every base is some candidate's offset
            raise AssertionError(f"no snapshot holds {sorted(need)} at {bases}")
        need -= covered
        others = any(o > 0 for b, o in offsets.items() if b not in covered)
        scans.append((snapshot_id, covered if others else None))
    return AsOfPlan(bases, scans, held)


def as_of_unavailable(
    table: Table, definition: TableDefinition, ends: dict[int, int], starts: dict[int, int]
) -> AsOfUnavailable | None:
    """The error of a read as of ``ends`` that the lake's retained snapshots and the log retained from
    ``starts`` (`Log.start_offsets`) cannot serve, or None if they can (a race: read again)."""
    plan = plan_as_of(table, definition, ends)
    unavailable, lines = {}, []
    for b, end in ends.items():
        base = plan.bases[b]
        if base == end or starts[b] <= base:
            continue
        points = sorted(o for o in plan.held[b] if o > 0)
        servable_from = min((o for o in plan.held[b] if o >= starts[b]), default=None)
        oldest = min([*points, *([servable_from] if servable_from is not None else [])], default=0)
        unavailable[b] = oldest
        lines.append(
            f"bucket {b} as of offset {end} (the log holds it from offset {starts[b]}, the retained lake snapshots "
            f"at offsets {points or [0]}: the oldest offset it can still be read as of is {oldest}"
            + (f", and any offset from {servable_from} on)" if servable_from is not None else ")")
        )
    if not unavailable:
        return None
    return AsOfUnavailable(
        f"{definition.name}: cannot read "
        + "; ".join(lines)
        + ". Snapshot expiry and log retention removed what that state needs; nothing was returned",
        unavailable=unavailable,
    )


# ---- one read plan for Python and Spark ----------------------------------------------------------------


@dataclass(frozen=True)
class BucketRead:
    """One bucket of a `ReadPlan`: its lake files (from the snapshot serving it) and its log range."""

    bucket: int
    tasks: tuple[FileScanTask, ...]  # pyiceberg FileScanTasks of this bucket's lake part
    base: int  # the log offset the lake part holds the bucket at: the tail starts here
    end: int | None  # the tail's end (exclusive); None: the log's end when executed
    #: False for the other parts of a bucket split by file (`split`): their lake rows are still merged with
    #: the tail's keys, but only one part yields the tail's rows
    tail_rows: bool = True
    #: A merge engine's table: every live data file of the bucket (unfiltered), each with its delete files, where
    #: the stored rows of the tail's keys are looked up
    state: tuple[tuple[DataFile, tuple[DataFile, ...]], ...] = ()
    #: Whether this read holds all of the bucket's lake part (not one part of a split)
    whole: bool = True

    def __repr__(self) -> str:
        end = "end" if self.end is None else self.end
        part = "" if self.tail_rows else ", lake part"
        return f"BucketRead(bucket={self.bucket}, files={len(self.tasks)}, log=[{self.base}, {end}){part})"

    def split(self, max_bytes: int) -> list[BucketRead]:
        """This bucket's read as parts of at most ``max_bytes`` of lake files each (a file larger than that is
        a part of its own), in file order; the first part also yields the tail's rows. Spark runs one task per
        part, so a table of few buckets still uses every core when its buckets hold many files."""
        parts: list[list[FileScanTask]] = [[]]
        size = 0
        for task in self.tasks:
            weight = task.file.file_size_in_bytes + sum(d.file_size_in_bytes for d in task.delete_files)
            if parts[-1] and size + weight > max_bytes:
                parts.append([])
                size = 0
            parts[-1].append(task)
            size += weight
        whole = len(parts) == 1
        return [replace(self, tasks=tuple(p), tail_rows=i == 0, whole=whole) for i, p in enumerate(parts)]


@dataclass(frozen=True)
class ReadPlan:
    """A union read (or lake read), planned once and executable anywhere: the table metadata and what rebuilds
    pyiceberg's `ArrowScan` (projected schema, filter; the FileIO from ``io_properties``), the output columns,
    and per bucket the lake files and the log range to read. Nothing in it depends on the planning process:
    Spark pickles it to its executors; the Python reads execute it in place. Planned with fixed ends, it is
    repeatable (a retried task reads exactly what the first attempt read).

    ``io_properties`` may hold store credentials: they never appear in ``repr``."""

    name: str
    metadata: TableMetadata
    projected: Schema  # what the lake scan reads: the output columns and the primary key
    expr: BooleanExpression
    columns: tuple[str, ...]
    primary_key: tuple[str, ...]
    union: bool  # False: the lake part only
    buckets: dict[int, BucketRead] = field(default_factory=dict)  # empty until `located`
    tasks: tuple[FileScanTask, ...] = ()  # every bucket's files, in planning order (the parallel Python read)
    io_properties: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    snapshot_id: int | None = None  # located at one snapshot, a ref's or named (None: the current one, or as_of)
    #: The table's merge engine if its tail merges into stored rows (None: last-row, the tail alone decides)
    engine: MergeEngine | None = None

    def __repr__(self) -> str:
        snapshot = self.snapshot_id if self.snapshot_id is not None else self.metadata.current_snapshot_id
        return (
            f"ReadPlan({self.name}, snapshot={snapshot}, columns={list(self.columns)}, "
            f"filter={self.expr}, union={self.union}, buckets={list(self.buckets.values())})"
        )

    def filtered(self, expr: BooleanExpression) -> ReadPlan:
        """This plan (not yet located) with ``expr`` and-ed to its filter."""
        if self.buckets:
            raise AssertionError("filter a plan before locating its buckets")
        return replace(self, expr=expr if isinstance(self.expr, AlwaysTrue) else And(self.expr, expr))

    def located(
        self,
        table: Table,
        definition: TableDefinition,
        *,
        as_of: AsOf | None,
        log_: Log | None,
        fix_ends: bool,
        snapshot_id: int | None = None,
    ) -> ReadPlan:
        """This plan with its buckets located: per bucket the lake files (of the snapshot serving it), the lake
        offset and the log range. ``table`` must be the table this plan was made from (same metadata).
        ``snapshot_id`` (a lake-only plan, no ``as_of``): the lake at that snapshot (a ref's, or one named by its id),
        not the current one."""
        if table.metadata is not self.metadata and table.metadata != self.metadata:
            raise AssertionError("locate a plan on the table metadata it was planned on")
        fields = tuple(f.name for f in self.projected.fields)
        buckets, name, expr = definition.buckets, self.name, self.expr
        ends: dict[int, int] | None
        scans: list[tuple[DataScan, frozenset[int] | None]]
        if snapshot_id is not None:
            if as_of is not None or self.union:
                raise InvalidArgument(f"a read of {name} at a ref or snapshot is a lake read: no as_of, no log tail")
            bases, ends = snapshot_offsets(table.metadata, snapshot_id, buckets), None
            scans = [(table.scan(row_filter=expr, selected_fields=fields, snapshot_id=snapshot_id), None)]
        elif as_of is not None:
            if log_ is None:
                raise InvalidArgument(f"a read of {name} as of offsets needs the table's log (to check its end)")
            if not self.union:  # a union plan checked it already
                check_lake_layout(table.metadata, definition)
            ends = check_as_of(as_of, definition, log_)
            asof = plan_as_of(table, definition, ends)
            if not self.union:
                _check_lake_holds(definition, ends, asof)
            bases = asof.bases
            scans = [(table.scan(row_filter=expr, selected_fields=fields, snapshot_id=s), k) for s, k in asof.scans]
        else:
            bases = lake_offsets(table.metadata, buckets, name=name, io=table.io)
            ends = log_.end_offsets() if fix_ends and log_ is not None and self.union else None
            scan = table.scan(row_filter=expr, selected_fields=fields)
            scans = [(scan, None)] if table.current_snapshot() is not None else []
        by_bucket: dict[int, list[FileScanTask]] = {b: [] for b in range(buckets)}
        state: dict[int, list[tuple[DataFile, tuple[DataFile, ...]]]] = {b: [] for b in range(buckets)}
        ordered: list[FileScanTask] = []
        for scan_, keep in scans:
            planned = list(scan_.plan_files())
            for task in planned:
                bucket = _bucket_of(task)
                if keep is None or bucket in keep:
                    by_bucket[bucket].append(task)
                    ordered.append(task)
            if self.engine is not None and self.union:  # every file: the stored rows are read unfiltered
                # (a read without filter planned them already: the files do not depend on the columns)
                unfiltered = (
                    planned if isinstance(expr, AlwaysTrue) else table.scan(snapshot_id=scan_.snapshot_id).plan_files()
                )
                for task in unfiltered:
                    if keep is None or _bucket_of(task) in keep:
                        state[_bucket_of(task)].append((task.file, tuple(task.delete_files)))
        reads = {
            b: BucketRead(
                b,
                tuple(by_bucket[b]),
                bases[b],
                None if ends is None else max(ends[b], bases[b]),
                state=tuple(state[b]),
            )
            for b in range(buckets)
        }
        return replace(self, buckets=reads, tasks=tuple(ordered), snapshot_id=snapshot_id)

    @property
    def scan_schema(self) -> pa.Schema:
        """The Arrow schema of the lake batches (output columns and primary key)."""
        return schema_to_pyarrow(self.projected, include_field_ids=False)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the result."""
        scan = self.scan_schema
        return pa.schema([scan.field(c) for c in self.columns])

    def _stream(self, tasks: Sequence[FileScanTask], io: FileIO) -> Iterator[pa.RecordBatch]:
        """The lake part of ``tasks``, one file and a few batches in memory at a time."""
        return stream_tasks(tasks, io, self.metadata, self.projected, self.expr)

    @property
    def captures(self) -> bool:
        """Whether a merge engine's tail takes the stored rows of its keys from the lake batches as they stream by
        (`merge_batches`): they carry every column, unfiltered. Otherwise they are looked up (`_merged_tail`)."""
        if self.engine is None or not isinstance(self.expr, AlwaysTrue):
            return False
        names = {f.name for f in self.projected.fields}
        return all(name in names for name in self.engine.definition.schema.names)

    def _tail(self, log_: Log, buckets: Sequence[int], table: Table | None = None) -> pa.Table:
        reads = [self.buckets[b] for b in buckets]
        if self.captures:  # the raw tail: merged as the lake streams by
            ends = None if any(r.end is None for r in reads) else {r.bucket: r.end for r in reads if r.end is not None}
            return read_tail(log_, {r.bucket: r.base for r in reads}, ends=ends)
        if self.engine is not None:
            parts = [self._merged_tail(log_, read, table) for read in reads]
            return pa.concat_tables(parts) if parts else read_tail(log_, {}, primary_key=self.primary_key)
        ends = None if any(r.end is None for r in reads) else {r.bucket: r.end for r in reads if r.end is not None}
        return read_tail(log_, {r.bucket: r.base for r in reads}, primary_key=self.primary_key, ends=ends)

    def _merged_tail(self, log_: Log, read: BucketRead, table: Table | None) -> pa.Table:
        """One bucket's tail merged by the table's engine into the stored rows of its keys (see `lakehouse.merge`)."""
        assert self.engine is not None
        raw = log_.read(read.bucket, read.base, read.end)
        stored = pa.table({})
        if raw.num_rows and read.state:
            table = table or self._table(None)
            columns = [*self.primary_key, *self.engine.stored_columns(raw)]
            keys = KeySet(raw, self.primary_key)
            stored = stored_rows(LakeContext.of(log_.store, table), read.state, keys, columns)
        return log_to_lake_rows(self.engine.resolve(stored, raw), read.bucket, keep_op=True)

    def _merge(
        self, lake: Iterator[pa.RecordBatch], tail: pa.Table | None, *, tail_rows: bool = True, raw: bool = False
    ) -> Iterator[pa.RecordBatch]:
        if tail is None:
            target, columns = self.arrow_schema, list(self.columns)
            for batch in lake:
                batch = batch.select(columns)
                yield batch if batch.schema.equals(target) else batch.cast(target)
            return
        tail_filter = expression_to_pyarrow(bind(self.metadata.schema(), self.expr, case_sensitive=True))
        yield from merge_batches(
            lake,
            tail,
            primary_key=self.primary_key,
            columns=list(self.columns),
            tail_filter=tail_filter,
            schema=self.scan_schema,
            tail_rows=tail_rows,
            engine=self.engine if raw else None,
        )

    def execute(
        self, bucket: int, log_: Log | None, *, io: FileIO | None = None, table: Table | None = None
    ) -> Iterator[pa.RecordBatch]:
        """One bucket's part of the result (Spark runs one per task): its lake files, streamed, merged with
        its log range (``log_`` may be None for a lake-only plan). ``table`` names a corrupt data file in
        errors (rebuilt from the plan if not given)."""
        return self.execute_bucket(self.buckets[bucket], log_, io=io, table=table)

    def execute_bucket(
        self, read: BucketRead, log_: Log | None, *, io: FileIO | None = None, table: Table | None = None
    ) -> Iterator[pa.RecordBatch]:
        """`execute` of a `BucketRead` this plan located (it may travel apart from the plan: a Spark input
        partition carries it, the reader the plan without its buckets)."""
        if io is None:
            io = table.io if table is not None else load_file_io(self.io_properties, self.metadata.location)
        lake = self._stream(read.tasks, io)
        tail = None
        raw = self.captures and read.whole
        # a lake part of a split bucket needs the tail only for its keys (primary-key tables)
        if self.union and log_ is not None and (read.tail_rows or self.primary_key):
            if raw:
                tail = read_tail(
                    log_, {read.bucket: read.base}, ends=None if read.end is None else {read.bucket: read.end}
                )
            elif self.engine is not None:
                tail = self._merged_tail(log_, read, table)
            else:
                ends = None if read.end is None else {read.bucket: read.end}
                tail = read_tail(log_, {read.bucket: read.base}, primary_key=self.primary_key, ends=ends)
        return _named(table or self._table(io), self._merge(lake, tail, tail_rows=read.tail_rows, raw=raw))

    def execute_all(
        self, log_: Log | None, *, table: Table | None = None, stream: bool = False
    ) -> Iterator[pa.RecordBatch]:
        """Every bucket's part (the Python reads): the lake files read in parallel (`read_tasks`; or streamed,
        one batch at a time, if ``stream``), then the tails merged by key."""
        table = table or self._table(None)
        tail = self._tail(log_, list(self.buckets), table) if self.union and log_ is not None else None
        if not self.tasks:
            lake: Iterator[pa.RecordBatch] = iter(())
        elif stream:
            lake = _named(table, self._stream(self.tasks, table.io))
        else:  # files read in parallel
            lake = _named(table, read_tasks(self.tasks, table.io, self.metadata, self.projected, self.expr))
        return self._merge(lake, tail, raw=self.captures)

    def _table(self, io: FileIO | None) -> Table:
        from pyiceberg.table import Table as IcebergTable

        io = io if io is not None else load_file_io(self.io_properties, self.metadata.location)
        identifier = tuple(self.name.split("."))
        return IcebergTable(identifier, self.metadata, self.metadata.location, io, None)  # type: ignore[arg-type]


def _bucket_of(task: FileScanTask) -> int:
    partition = task.file.partition
    return partition[len(partition) - 1]  # the lake is partitioned by __bucket, last


def plan_read(
    table: Table,
    definition: TableDefinition,
    *,
    columns: Sequence[str] | None = None,
    row_filter: RowFilter = None,
    as_of: AsOf | None = None,
    lake_only: bool = False,
    log_: Log | None = None,
    fix_ends: bool = False,
    io_properties: Mapping[str, str] | None = None,
    ref: str | None = None,
    snapshot_id: int | None = None,
) -> ReadPlan:
    """Plan a union read of ``table`` (the lake table of ``definition``): checks every argument, fixes the
    snapshot(s), the lake offsets and, per bucket, the files and the log range. Reads nothing but metadata
    (and, with ``as_of`` or ``fix_ends``, the log's end offsets: one listing per bucket).

    ``as_of``: see `check_as_of` (needs ``log_``). ``lake_only``: the lake part only; with ``as_of`` every
    bucket must be held at exactly its offset by a retained snapshot, else `AsOfUnavailable` (see `lake_read`).
    ``fix_ends``: the log ranges end at the log's current ends (a repeatable plan) instead of the ends when
    executed. ``io_properties``: the pyiceberg FileIO properties a worker needs (default: the table's).
    ``ref``: the lake at that tag or branch (``"published"``), lake only whatever ``lake_only`` says (see the
    module docstring); not with ``as_of``. `RefNotFound` if the table has no such ref. ``snapshot_id``: the lake
    at that snapshot, lake only as with ``ref``; not with ``as_of`` or ``ref``. `SnapshotNotFound` if the table
    has no such snapshot.
    """
    if snapshot_id is not None:
        if as_of is not None or ref is not None:
            raise InvalidArgument("read at a snapshot id, as_of offsets or a ref: one of them, not two")
        snapshot_id, lake_only = known_snapshot(table, snapshot_id), True
    if ref is not None:
        if as_of is not None:
            raise InvalidArgument("read either as_of offsets or at a ref, not both")
        snapshot_id, lake_only = ref_snapshot(table, ref), True
    plan = plan_columns(
        table, definition, columns=columns, row_filter=row_filter, lake_only=lake_only, io_properties=io_properties
    )
    return plan.located(table, definition, as_of=as_of, log_=log_, fix_ends=fix_ends, snapshot_id=snapshot_id)


def plan_columns(
    table: Table,
    definition: TableDefinition,
    *,
    columns: Sequence[str] | None = None,
    row_filter: RowFilter = None,
    lake_only: bool = False,
    io_properties: Mapping[str, str] | None = None,
) -> ReadPlan:
    """The first half of `plan_read`: the layout check, output columns, projection and filter, with no
    bucket located yet (`ReadPlan.located` does that). Spark's reader holds this and adds pushed filters."""
    if not lake_only:
        check_lake_layout(table.metadata, definition)
    pk = tuple(definition.primary_key)
    out = output_columns(table, columns)
    scan_cols = out + [c for c in pk if c not in out] if not lake_only else out
    expr = parse_filter(row_filter, table.schema())
    return ReadPlan(
        name=str(definition.name),
        metadata=table.metadata,
        projected=table.scan(selected_fields=tuple(scan_cols)).projection(),
        expr=expr,
        columns=tuple(out),
        primary_key=pk,
        union=not lake_only,
        engine=engine if pk and (engine := engine_of(definition)).needs_stored else None,
        io_properties=dict(io_properties if io_properties is not None else table.io.properties),
    )


def _check_lake_holds(definition: TableDefinition, ends: dict[int, int], plan: AsOfPlan) -> None:
    missing = {b: o for b, o in ends.items() if plan.bases[b] != o}
    if missing:
        held = {b: sorted(plan.held[b]) for b in missing}
        raise AsOfUnavailable(
            f"{definition.name}: the lake holds no snapshot at "
            + "; ".join(f"bucket {b} offset {o} (its retained snapshots hold {held[b]})" for b, o in missing.items())
            + ". lake_read as_of serves offsets a tiering round committed; union_read as_of serves any offset",
            unavailable={b: min([o for o in held[b] if o > 0], default=0) for b in missing},
        )
