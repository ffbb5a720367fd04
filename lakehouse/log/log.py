"""`Log`: append to and read from one table's log.

**Appending** validates the whole batch first, splits it by bucket and, for each bucket, creates the next
segment with ``If-None-Match: *``. That create is the commit point. A producer that loses the race (412)
looks at the winner: if it is its own earlier attempt (same producer id and sequence) the append is
already done; otherwise it refreshes the bucket's end offset and retries there. Buckets are written
concurrently; appends to several buckets are not atomic together, which `AppendIncomplete` reports.

**Exactly once across retries and restarts.** An append carries ``(producer_id, sequence)``. Retrying an
append with the same pair after any failure (a lost response, `StoreUnavailable`, a crash of the caller),
from any process, never duplicates records. As Kafka's idempotent producer does, a `Log` knows per bucket
the newest sequence of each caller-given producer id: the first time the id appends to a bucket, the `Log`
looks back through the bucket's newest segments (at most ``dedup_window`` of them) for the id's segments;
from then on an append at or below that sequence is looked up (among the id's newest segments it keeps,
else by looking back again) and recognised, and one above it is new and costs nothing extra. A recognised
segment must hold the same rows (count, operation and checksum, or the same values read back): other rows
under a sequence already used raise `SequenceConflict` naming producer, sequence and bucket, and so does a
sequence at or below the newest in a bucket with no segment of it there. Every bucket is checked before any
is written, so a conflict writes nothing. Appends without a producer id are never retries and leave no state
behind; the `Log` remembers at most ``_MAX_PRODUCERS`` producer ids (the least recently used one is
forgotten, which only makes its next append look back). Sequences of one producer must increase, and a
producer must not start sequence ``n + 1`` before ``n`` has succeeded (the `Producer` class guarantees both).
A look-back sees ``dedup_window`` segments per bucket: a replay of an append older than that is not
recognised (a `Producer` resumed from a checkpoint reads exactly the segments after it instead).
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
import os
import random
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakehouse.errors import (
    AppendIncomplete,
    BatchError,
    CorruptSegmentError,
    InvalidArgument,
    LogClosed,
    OffsetOutOfRange,
    SchemaError,
    SequenceConflict,
)
from lakehouse.log import chain as chain_format
from lakehouse.log import segment
from lakehouse.log.batch import Limits, check_cast, conform, split_by_bucket
from lakehouse.log.index import KEEP_SEGMENTS, BucketIndex
from lakehouse.log.segment import SegmentHeader
from lakehouse.table import evolution
from lakehouse.table.bucketing import bucket_ids
from lakehouse.table.definition import COMMITS_LOG, TableDefinition
from object_store import NotFound, ObjectInfo, ObjectStore, PreconditionFailed
from object_store.usage import ContextThreadPoolExecutor

if TYPE_CHECKING:
    from lakehouse.log.producer import Producer

DEFAULT_DEDUP_WINDOW = 256
#: Seconds a bucket's known end is trusted before an append lists the bucket again. Log retention must be
#: longer than this (plus clock skew between producers); it warns below 10 minutes.
MAX_INDEX_AGE = 60.0
#: Lost races retried at once (the next free offset is known); later ones back off with jitter.
_RETRIES_WITHOUT_WAIT = 3
#: Segments walked with HEADs after a lost race before listing the bucket instead.
_MAX_CHAIN_WALK = 8
#: Segments a read fetches, verifies and decodes ahead of the consumer (on the pool's threads).
_READ_AHEAD = 4
#: Producer ids a `Log` remembers (their last sequence); beyond it the least recently used is forgotten.
_MAX_PRODUCERS = 10_000


@dataclass(frozen=True)
class AppendResult:
    """Where an append landed: ``ranges[bucket] = (first_offset, last_offset)``, inclusive."""

    producer_id: str
    sequence: int
    ranges: dict[int, tuple[int, int]]
    rows: int
    #: Buckets whose segment was found already written by an earlier attempt of this same append.
    already_appended: frozenset[int] = frozenset()


#: Segments of a producer a `Log` remembers per bucket (its newest ones), so a retry of a recent append needs no
#: look-back.
_KEEP_LANDED = 8


@dataclass
class _BucketHistory:
    """What a `Log` knows of one producer in one bucket: its newest sequence there (-1: none found among the
    bucket's newest segments when it looked) and its newest segments, ``sequence -> (base, header)``."""

    newest: int = -1
    segments: dict[int, tuple[int, SegmentHeader]] = field(default_factory=dict)

    def found(self, base: int, header: SegmentHeader) -> None:
        self.newest = max(self.newest, header.sequence)
        self.segments[header.sequence] = (base, header)
        if len(self.segments) > _KEEP_LANDED:
            del self.segments[min(self.segments)]


@dataclass
class _ProducerState:
    """What a `Log` knows of a caller-given producer id: per bucket (`_BucketHistory`) once it first appends
    there, and the newest sequence attempted through this `Log` (one that failed may still have landed)."""

    last_sequence: int = -1
    buckets: dict[int, _BucketHistory] = field(default_factory=dict)
    #: A "commits" log: the producer's newest sequence among the commits looked back through (None: not yet).
    chain_newest: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def may_hold(self, bucket: int, sequence: int) -> bool:
        """Whether the bucket may already hold ``sequence``: its history is not known yet, the producer got
        that far there, or an attempt of it (or of a later sequence) was made here."""
        history = self.buckets.get(bucket)
        return history is None or sequence <= history.newest or sequence <= self.last_sequence

    def landed(self, bucket: int, base: int, header: SegmentHeader) -> None:
        self.buckets.setdefault(bucket, _BucketHistory()).found(base, header)


class Log:
    """One table's log. Thread-safe; share one instance per process and table: its threads take turns per
    bucket instead of racing each other on the store (other processes still race; the create-only PUT
    decides).

    Options: ``limits`` (rows and bytes per append), ``dedup_window`` (segments per bucket a retry looks back
    through, default 256; on a commits log, commits of the table, default `chain.KEEP_COMMITS`), ``max_workers``
    (parallel bucket writes and read prefetch), ``compression`` of segment bodies (None, "lz4" or "zstd"; off by
    default: segments are short-lived, and on small machines the CPU costs more than the bytes saved), ``clock``
    (append timestamps; injectable for tests).
    """

    def __init__(
        self,
        store: ObjectStore,
        definition: TableDefinition,
        *,
        limits: Limits | None = None,
        dedup_window: int | None = None,
        max_workers: int = 8,
        compression: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.definition = definition
        self.name = definition.name
        self.limits = limits or Limits()
        # a commits log looks back through commits of every producer, not one bucket's segments: by default all
        # the process has learned (up to what a chain keeps in memory) and `LOOK_BACK_READS` older ones read from
        # the store, so a producer restarted while others appended still finds its last appends (a window of 256
        # commits was ~2 s of 8 racing producers)
        commits = definition.log_format == COMMITS_LOG
        most = chain_format.KEEP_COMMITS if commits else KEEP_SEGMENTS
        if dedup_window is None:
            dedup_window = most if commits else DEFAULT_DEDUP_WINDOW
        if not 1 <= dedup_window <= most:
            unit = "commits" if commits else "segments"
            raise InvalidArgument(f"dedup_window must be from 1 to {most} {unit}, got {dedup_window}")
        self.dedup_window = dedup_window
        if compression is not None and (not isinstance(compression, str) or compression.lower() not in ("lz4", "zstd")):
            # Arrow IPC compresses buffers with these two only; others failed every append, from inside Arrow
            raise InvalidArgument(f"compression must be None, 'lz4' or 'zstd', got {compression!r}")
        self.compression = compression.lower() if compression else None
        self._clock = clock
        self._max_workers = max(1, max_workers)
        self._start()
        self._closing = False  # no new producers
        self._closed = False  # nothing at all

    def _start(self) -> None:
        """The per-process state: threads, locks, what this process knows of the buckets and producers."""
        self._pid = os.getpid()
        definition = self.definition
        self._indexes = [BucketIndex(self.store, self.name, b, clock=self._clock) for b in range(definition.buckets)]
        # its threads count their requests in the caller's usage scopes (`object_store.usage`)
        self._pool = ContextThreadPoolExecutor(self._max_workers, thread_name_prefix="log")
        self._sticky = itertools.count(random.randrange(definition.buckets))
        self._producers: dict[str, _ProducerState] = {}
        self._producers_lock = threading.Lock()
        # Appends of this Log's threads to one bucket take turns (see `_append_bucket`).
        self._bucket_locks = [threading.Lock() for _ in range(definition.buckets)]
        # A "commits" log: the table's chain of commits, and this Log's threads take turns creating records.
        # (shared with the other `Log`s of the table in this process: what one learned, they need not read again)
        self._chain: chain_format.Chain | None = None
        if definition.log_format == COMMITS_LOG:
            self._chain, self._data = chain_format.shared(
                self.store, self.name, definition.buckets, definition.table_uuid, self._clock
            )
        self._open_producers: set[Producer] = set()  # closed (flushed) by `close` before the pool stops

    # ---- append --------------------------------------------------------------------------------------

    def append(
        self,
        data: pa.Table | pa.RecordBatch,
        op: str = "insert",
        *,
        producer_id: str | None = None,
        sequence: int | None = None,
    ) -> AppendResult:
        """Append ``data`` with change kind ``op`` (insert; upsert and delete for primary-key tables).

        ``producer_id`` and ``sequence`` (given together) make a retry of the same append recognisable, from
        any process: it lands exactly once. Without them each call is a new append.

        Raises:
            SchemaError, BatchError: the batch does not fit the table; nothing was written.
            InvalidArgument: a bad producer id or sequence; nothing was written.
            AppendIncomplete: some buckets were written and others failed; retry with the same producer
                id and sequence (both are in the error's ``result``).
        """
        explicit_id = producer_id is not None
        if producer_id is None:
            if sequence is not None:
                raise InvalidArgument(
                    f"{self.name}: a sequence ({sequence!r}) without a producer_id cannot be recognised on a retry; "
                    "give both, or neither"
                )
            producer_id, sequence = uuid.uuid4().hex, 0
        else:
            producer_id, sequence = segment.check_producer(producer_id, sequence)
            assert producer_id is not None
        table = conform(self.definition, evolution.upgrade_batch(self.definition, data), op, self.limits)
        keyless_bucket = self.keyless_bucket(producer_id, sequence) if explicit_id else next(self._sticky)
        parts = split_by_bucket(self.definition, table, keyless_bucket % self.definition.buckets)
        return self._append_parts(parts, op, producer_id, sequence, explicit_id=explicit_id)

    def _append_parts(
        self,
        parts: dict[int, pa.Table],
        op: str,
        producer_id: str,
        sequence: int,
        *,
        explicit_id: bool,
        retry: bool = False,
        sends: dict[int, tuple[int, int]] | None = None,
    ) -> AppendResult:
        """Append validated rows already split by bucket (`conform`, then `split_by_bucket`): one segment per
        bucket, under one producer id and sequence. The `Producer` batches per bucket and calls this.

        ``explicit_id``: the id came from the caller, so an earlier attempt may exist that this `Log` did
        not make (another process, before a crash): a bucket the id has not appended to through this `Log`,
        or a sequence at or below its newest there, is looked up first. Without it the id is fresh (generated
        here or by a `Producer`), and only a ``retry`` (an earlier attempt was made through this `Log`) looks
        back. ``sends``: per bucket, the numbers of the first and last `Producer` send the rows come from."""
        # Encode every segment here, on the caller's thread, before any PUT starts: the pool threads then only
        # wait on the store, as raw PUTs of ready bodies do (encoding on the pool threads cost more CPU per
        # append: docs/concepts/log.md, "Design: why it works this way").
        self._check_open()
        if self._chain is not None:
            return self._append_commit(
                self._chain, parts, op, producer_id, sequence, explicit_id=explicit_id, retry=retry, sends=sends
            )
        bodies = {b: segment.encode(part, self.compression) for b, part in parts.items()}
        # A fresh id has no earlier attempts to remember (and one per anonymous append would grow without bound).
        state = self._producer(producer_id) if explicit_id else _ProducerState()
        with state.lock:
            timestamp_us = int(self._clock() * 1_000_000)
            headers = {
                b: SegmentHeader(
                    count=parts[b].num_rows,
                    op=op,
                    timestamp_us=timestamp_us,
                    producer=producer_id,
                    sequence=sequence,
                    checksum=segment.checksum(body),
                    algorithm=segment.WRITE_ALGORITHM,
                    sends=sends.get(b) if sends else None,
                    schema_version=self._version_of(parts[b].schema),
                )
                for b, body in bodies.items()
            }
            # First every bucket this append may already be in is checked (all of them before any write, so a
            # sequence reused for other rows is refused with nothing written), then the others are written.
            look = [b for b in bodies if retry or (explicit_id and state.may_hold(b, sequence))]
            ranges, already, failed = {}, set(), {}
            found = self._run_per_bucket(
                {b: functools.partial(self._earlier_attempt, state, b, parts[b], headers[b]) for b in look}
            )
            for b, outcome in found.items():
                if isinstance(outcome, SequenceConflict):
                    raise outcome
                if isinstance(outcome, BaseException):
                    failed[b] = outcome
                elif outcome is not None:
                    ranges[b] = outcome
                    already.add(b)
            state.last_sequence = max(state.last_sequence, sequence)
            to_write = [b for b in bodies if b not in ranges and b not in failed]
            written = self._run_per_bucket(
                {b: functools.partial(self._append_bucket, b, bodies[b], headers[b]) for b in to_write}
            )
            for b, outcome in written.items():
                if isinstance(outcome, BaseException):
                    failed[b] = outcome
                    continue
                ranges[b], was_there = outcome
                if was_there:
                    already.add(b)
                if explicit_id:
                    state.landed(b, ranges[b][0], headers[b])
        rows = sum(part.num_rows for part in parts.values())
        result = AppendResult(producer_id, sequence, dict(sorted(ranges.items())), rows, frozenset(already))
        if failed:
            first = next(iter(failed.values()))
            raise AppendIncomplete(
                f"{self.name}: append {producer_id}/{sequence} wrote buckets {sorted(ranges)} but not "
                f"{sorted(failed)} ({type(first).__name__}: {first}). Retry with producer_id={producer_id!r}, "
                f"sequence={sequence}: written buckets are recognised and the rest are written exactly once.",
                result=result,
                failed=failed,
            ) from first
        return result

    def _append_commit(
        self,
        chain: chain_format.Chain,
        parts: dict[int, pa.Table],
        op: str,
        producer_id: str,
        sequence: int,
        *,
        explicit_id: bool,
        retry: bool,
        sends: dict[int, tuple[int, int]] | None,
    ) -> AppendResult:
        """`_append_parts` on a "commits" log: every bucket's rows in one data object, then one commit record
        (`lakehouse.log.chain`). Atomic across the buckets it writes: the record's create decides.

        An append is recognised per bucket, as with segments: ``(producer_id, sequence)`` names one batch of rows
        *per bucket* (a Spark job's tasks append one bucket each under one id and sequence), so the buckets an
        earlier attempt (or another task) committed under the pair are checked and reported, and the others
        written."""
        bodies = {b: segment.encode(part, self.compression) for b, part in parts.items()}
        checksums = {b: segment.checksum(body) for b, body in bodies.items()}
        rows = sum(part.num_rows for part in parts.values())
        state = self._producer(producer_id) if explicit_id else _ProducerState()
        with state.lock:
            if chain.age > MAX_INDEX_AGE:
                chain.refresh()  # learn the head before writing: a stale one only costs lost races
            found: dict[int, chain_format.Commit] = {}
            if retry or (explicit_id and any(state.may_hold(b, sequence) for b in parts)):
                found = self._earlier_commits(chain, state, parts, checksums, op, producer_id, sequence)
            state.last_sequence = max(state.last_sequence, sequence)
            todo = {b: parts[b] for b in parts if b not in found}
            ours: chain_format.Commit | None = None
            if todo:
                ours = self._commit_parts_of(chain, todo, bodies, checksums, op, producer_id, sequence, sends)
            if explicit_id:
                for commit in [*found.values(), *([ours] if ours is not None else [])]:
                    for q in commit.parts:
                        state.landed(q.bucket, q.base, commit.header(q))
        held = [part for b, c in found.items() if (part := c.part(b)) is not None]
        held += list(ours.parts) if ours is not None else []
        ranges = {part.bucket: (part.base, part.base + part.count - 1) for part in held}
        return AppendResult(producer_id, sequence, dict(sorted(ranges.items())), rows, frozenset(found))

    def _commit_parts_of(
        self,
        chain: chain_format.Chain,
        parts: dict[int, pa.Table],
        bodies: dict[int, bytes],
        checksums: dict[int, str],
        op: str,
        producer_id: str,
        sequence: int,
        sends: dict[int, tuple[int, int]] | None,
    ) -> chain_format.Commit:
        """Write ``parts``' data object, then their commit record (see `chain_format.Chain.commit`)."""
        data, spans = chain_format.encode_data({b: bodies[b] for b in parts})
        key = chain_format.new_data_key(self.name, self._clock())
        # Written unconditionally under a fresh name: a lost race for the commit record resends the record,
        # not the rows. Unreferenced until the record lands (a crash here leaves an orphan retention removes).
        with self.store.open_writer(key) as writer:
            writer.write(data)
        timestamp_us = int(self._clock() * 1_000_000)
        version = self._version_of(next(iter(parts.values())).schema)

        def make(number: int, ends: tuple[int, ...]) -> chain_format.Commit:
            new_ends = list(ends)
            made = []
            for b in sorted(parts):
                start, length = spans[b]
                made.append(
                    chain_format.Part(
                        b, ends[b], parts[b].num_rows, start, length, checksums[b], sends.get(b) if sends else None
                    )
                )
                new_ends[b] += parts[b].num_rows
            return chain_format.Commit(
                number,
                key,
                producer_id,
                sequence,
                op,
                timestamp_us,
                version,
                segment.WRITE_ALGORITHM,
                tuple(made),
                tuple(new_ends),
            )

        with chain.commit_lock:
            return chain.commit(make)

    def _earlier_commits(
        self,
        chain: chain_format.Chain,
        state: _ProducerState,
        parts: dict[int, pa.Table],
        checksums: dict[int, str],
        op: str,
        producer: str,
        sequence: int,
    ) -> dict[int, chain_format.Commit]:
        """Per bucket of ``parts``, the commit holding an earlier attempt of append ``(producer, sequence)`` there,
        among the newest ``dedup_window`` commits. Raises `SequenceConflict` if one holds other rows, or if the
        sequence is at or below the producer's newest in a bucket and not found there."""
        chain.refresh()
        found: dict[int, chain_format.Commit] = {}
        newest: dict[int, int] = {}
        passed: set[int] = set()  # buckets where an older sequence of the producer was seen: nothing older is ours
        for commit in chain.newest_first(self.dedup_window):
            if commit.producer != producer:
                continue
            for p in commit.parts:
                if p.bucket not in parts:
                    continue
                newest[p.bucket] = max(newest.get(p.bucket, -1), commit.sequence)
                if commit.sequence == sequence:
                    found.setdefault(p.bucket, commit)
                elif commit.sequence < sequence:
                    passed.add(p.bucket)
                state.landed(p.bucket, p.base, commit.header(p))
            if all(b in found or b in passed for b in parts):
                break
        for b, commit in found.items():
            self._check_same_part(commit, b, parts[b], checksums[b], op)
        for b in parts:
            state.buckets.setdefault(b, _BucketHistory())
            if b not in found and newest.get(b, -1) >= sequence:
                raise SequenceConflict(
                    f"{self.name}: producer {producer!r} sequence {sequence} has {parts[b].num_rows} rows for bucket "
                    f"{b}, but the producer's appends there have reached sequence {newest[b]} without one of sequence "
                    f"{sequence} among the log's newest {self.dedup_window} commits: that sequence carried no rows "
                    "for this bucket (so these rows are not the ones it appended), or it is older than the "
                    "look-back. Nothing was written. A producer id and sequence name one batch of rows: resume a "
                    "crashed Producer from its checkpoint (Producer.checkpoint), or use a new id",
                    producer_id=producer,
                    sequence=sequence,
                    bucket=b,
                )
        return found

    def _check_same_part(
        self, commit: chain_format.Commit, bucket: int, part: pa.Table, checksum: str, op: str
    ) -> None:
        """Raise `SequenceConflict` unless ``commit`` holds exactly ``part``'s rows in ``bucket``: the same count and
        op, and the same checksum or (batched into other record batches) the same rows when read back."""
        held = commit.part(bucket)
        same = held is not None and commit.op == op and held.count == part.num_rows
        if held is not None and same and (commit.algorithm, held.checksum) != (segment.WRITE_ALGORITHM, checksum):
            body = self.store.get_range(commit.data, held.start, held.length)
            existing = self._decode(body, commit.header(held), commit.data, held.base)
            try:
                same = existing.equals(pa.Table.from_arrays(part.columns, schema=existing.schema))
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
                same = False
        if not same:
            where = f"{held.count} {commit.op} rows" if held is not None else "no rows"
            raise SequenceConflict(
                f"{self.name}: producer {commit.producer!r} already appended other rows under sequence "
                f"{commit.sequence} in bucket {bucket} (commit {commit.number}: {where} there; this append has "
                f"{part.num_rows} {op} rows, or other values). Nothing was written. A producer id and sequence name "
                "one batch of rows: resume a crashed Producer from its checkpoint (Producer.checkpoint), or use a "
                "new producer id",
                producer_id=commit.producer,
                sequence=commit.sequence,
                bucket=bucket,
            )

    def _version_of(self, schema: pa.Schema) -> int:
        """The schema version rows of ``schema`` were conformed to: the current one, or an earlier one for rows a
        `Producer` held when the definition changed (`set_definition`)."""
        definition = self.definition
        if schema.names == definition.schema.names:
            return definition.schema_version
        for past in reversed(definition.history):
            if schema.names == past.schema.names:
                return past.version
        return definition.schema_version

    def set_definition(self, definition: TableDefinition) -> None:
        """Adopt a newer version of the table's definition (after an alter): reads project to its schema,
        appends are conformed to it."""
        if definition.table_uuid != self.definition.table_uuid or definition.schema_version <= (
            self.definition.schema_version
        ):
            return
        self.definition = definition
        for cached in ("records_schema", "read_schema"):
            self.__dict__.pop(cached, None)

    def keyless_bucket(self, producer_id: str, sequence: int) -> int:
        """The bucket of a keyless table that append ``(producer_id, sequence)`` goes to: the same for every
        attempt of it, in any process (so a retry finds its first attempt), and the next bucket for the
        producer's next sequence (round-robin). Appends without a producer id rotate per `Log`."""
        return (zlib.crc32(producer_id.encode()) + sequence) % self.definition.buckets

    def _producer(self, producer_id: str) -> _ProducerState:
        """The state of a caller-given producer id, most recently used last. Forgetting an id is safe: its
        next append is then treated as a possible retry and looks back."""
        with self._producers_lock:
            state = self._producers.pop(producer_id, None) or _ProducerState()
            self._producers[producer_id] = state
            if len(self._producers) > _MAX_PRODUCERS:
                for old_id, old in self._producers.items():  # the least recently used one not appending now
                    if not old.lock.locked():
                        del self._producers[old_id]
                        break
            return state

    def _run_per_bucket(self, calls: dict[int, Callable[[], Any]]) -> dict[int, Any]:
        """Each bucket's call's result, or the exception it raised. Several run in parallel on the pool; one
        runs here instead: nothing to overlap, and the handoff to the pool costs CPU."""
        futures = {b: self._pool.submit(call) for b, call in calls.items()} if len(calls) > 1 else {}
        out: dict[int, Any] = {}
        for b, call in calls.items():
            try:
                out[b] = futures[b].result() if futures else call()
            except Exception as exc:  # noqa: BLE001 - reported per bucket by the caller
                out[b] = exc
        return out

    def _append_bucket(self, bucket: int, body: bytes, header: SegmentHeader) -> tuple[tuple[int, int], bool]:
        index = self._indexes[bucket]
        if index.age > MAX_INDEX_AGE:
            # Learn the end before uploading a body: a fresh index, or one that others may have passed
            # long ago. The create-only PUT catches a race, but not an offset that others appended and
            # log retention has since deleted: that create would succeed and reuse offsets.
            index.refresh()
        metadata = header.to_metadata()
        # Threads sharing this Log take turns per bucket instead of racing each other on the store: a lost
        # race costs a whole PUT and more requests (and SeaweedFS makes losers of a race wait for their 412):
        # with turns, threads sharing a Log append several times faster (BENCHMARKS.md, the log). Other
        # processes still race, and the create-only PUT decides.
        with self._bucket_locks[bucket]:
            offset = index.end
            for lost in itertools.count():
                key = self.name.segment_key(bucket, offset)
                try:
                    self.store.put(key, body, if_none_match=True, metadata=metadata)
                except PreconditionFailed as exc:
                    # the store read the winner back (to rule out our own lost response): reuse it
                    current = exc.current
                    theirs = (
                        SegmentHeader.from_metadata(current.metadata, key=key)
                        if isinstance(current, ObjectInfo)
                        else self._header_or_none(key)
                    )
                    found = self._next_free(index, offset, theirs, header)
                    if isinstance(found, tuple):
                        return found, True
                    offset = found
                    if lost >= _RETRIES_WITHOUT_WAIT:
                        # Still losing: back off a little (jittered, growing) so racing producers spread out.
                        time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** (lost - _RETRIES_WITHOUT_WAIT))))
                    continue
                index.record(offset, header.count, key)
                return (offset, offset + header.count - 1), False
        raise AssertionError("unreachable")

    def _next_free(
        self, index: BucketIndex, offset: int, theirs: SegmentHeader | None, ours: SegmentHeader
    ) -> int | tuple[int, int]:
        """After losing ``offset`` to a segment with header ``theirs``: the next offset that looked free, or
        ``(first, last)`` if the segment found is our own earlier attempt.

        Segments are contiguous, so the winner's header says where the next one starts. The chain is
        walked with HEADs (a few at most: one per producer that won meanwhile), so no body is uploaded to
        an offset already taken; a long chain, or a segment gone (retention), falls back to a listing.
        """
        for _ in range(_MAX_CHAIN_WALK):
            if theirs is None:
                break
            if (theirs.producer, theirs.sequence) == (ours.producer, ours.sequence):
                index.refresh()
                return offset, offset + theirs.count - 1
            offset += theirs.count
            theirs = self._header_or_none(self.name.segment_key(index.bucket, offset))
            if theirs is None:
                return offset
        return max(index.refresh(), offset + 1)

    def _header_or_none(self, key: str) -> SegmentHeader | None:
        try:
            return SegmentHeader.from_metadata(self.store.head(key).metadata, key=key)
        except NotFound:
            return None

    def _earlier_attempt(
        self, state: _ProducerState, bucket: int, part: pa.Table, ours: SegmentHeader
    ) -> tuple[int, int] | None:
        """``(first, last)`` offsets of this append's segment in ``bucket`` if an earlier attempt of it landed
        there, None if it did not. Raises `SequenceConflict` if the producer's segment of that sequence holds
        other rows, or if the sequence is at or below the producer's newest in the bucket and not found."""
        producer, sequence = ours.producer, ours.sequence
        history = state.buckets.get(bucket)
        known = history.segments.get(sequence) if history else None
        if known is None:
            known = self._look_back(state, bucket, producer, sequence)
            history = state.buckets[bucket]
        assert history is not None  # the bucket's history is known once a segment of it was looked for
        if known is not None:
            base, theirs = known
            self._check_same_rows(bucket, base, theirs, part, ours)
            return base, base + theirs.count - 1
        if sequence <= history.newest:
            raise SequenceConflict(
                f"{self.name}: producer {producer!r} sequence {sequence} has {part.num_rows} rows for bucket "
                f"{bucket}, but the producer's appends there have reached sequence {history.newest} without a "
                f"segment of sequence {sequence} among the bucket's newest {self.dedup_window} segments: that "
                "sequence carried no rows for this bucket (so these rows are not the ones it appended), or it is "
                "older than the look-back. Nothing was written. A producer id and sequence name one batch of "
                "rows: resume a crashed Producer from its checkpoint (Producer.checkpoint), or use a new id",
                producer_id=producer,
                sequence=sequence,
                bucket=bucket,
            )
        return None

    def _look_back(
        self, state: _ProducerState, bucket: int, producer: str, sequence: int
    ) -> tuple[int, SegmentHeader] | None:
        """Walk the bucket's newest segments (at most ``dedup_window``) back until the producer's segment of
        ``sequence``, or one of an earlier sequence; note in ``state`` what it finds of the producer (its newest
        sequence in the bucket). Returns ``(base, header)`` of the segment of ``sequence``, if found."""
        index = self._indexes[bucket]
        index.refresh()
        bounds = [*index.bases, index.end]
        history = state.buckets.setdefault(bucket, _BucketHistory())
        for i in range(len(bounds) - 2, max(-1, len(bounds) - 2 - self.dedup_window), -1):
            base = bounds[i]
            header = self._header_or_none(self.name.segment_key(bucket, base))
            if header is None or header.producer != producer:
                continue
            history.found(base, header)
            if header.sequence <= sequence:
                break
        return history.segments.get(sequence)

    def producer_segments(self, producer_id: str, after: dict[int, int]) -> dict[int, list[tuple[int, SegmentHeader]]]:
        """``(base, header)`` of every segment of ``producer_id`` at or after offset ``after[bucket]``, per
        bucket, oldest first: one listing per bucket from that offset and a HEAD per segment listed (all
        producers' segments past it). A resumed `Producer` learns this way what it appended after its
        checkpoint."""
        self._check_open()
        if self._chain is not None:
            out: dict[int, list[tuple[int, SegmentHeader]]] = {b: [] for b in range(self.definition.buckets)}
            for commit in self._chain.since(after):
                if commit.producer != producer_id:
                    continue
                for p in commit.parts:
                    if p.base >= after.get(p.bucket, 0):
                        out[p.bucket].append((p.base, commit.header(p)))
            return out

        def walk(bucket: int) -> list[tuple[int, SegmentHeader]]:
            start = after.get(bucket, 0)
            index = self._indexes[bucket]
            start_after = self.name.segment_key(bucket, start - 1) if start > 0 else None
            keys = [(base, key) for base, key in index.listed(start_after=start_after) if base >= start]
            headers = [self._header_or_none(key) for _, key in keys]
            return [(base, h) for (base, _), h in zip(keys, headers, strict=True) if h and h.producer == producer_id]

        return dict(enumerate(self._pool.map(walk, range(self.definition.buckets))))

    def _check_same_rows(
        self, bucket: int, base: int, theirs: SegmentHeader, part: pa.Table, ours: SegmentHeader
    ) -> None:
        """Raise `SequenceConflict` unless the segment found at ``base`` holds the rows of ``part``: the same
        count and checksum, or (batched into other record batches, or another checksum algorithm) the same
        rows when read back."""
        same = theirs.count == ours.count and theirs.op == ours.op
        if same and (theirs.algorithm, theirs.checksum) != (ours.algorithm, ours.checksum):
            existing, _ = self._fetch(bucket, base)
            try:
                same = existing.equals(pa.Table.from_arrays(part.columns, schema=existing.schema))
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
                same = False
        if not same:
            raise SequenceConflict(
                f"{self.name}: producer {ours.producer!r} already appended other rows under sequence "
                f"{ours.sequence} in bucket {bucket} (offsets {base}..{base + theirs.count - 1}: {theirs.count} "
                f"{theirs.op} rows; this append has {ours.count} {ours.op} rows, or other values). Nothing was "
                "written. A producer id and sequence name one batch of rows: resume a crashed Producer from its "
                "checkpoint (Producer.checkpoint), or use a new producer id",
                producer_id=ours.producer,
                sequence=ours.sequence,
                bucket=bucket,
            )

    # ---- offsets and reads ---------------------------------------------------------------------------

    def end_offsets(self) -> dict[int, int]:
        """Next offset of every bucket (0 for an empty bucket), refreshed from the store."""
        self._check_open()
        if self._chain is not None:
            return dict(enumerate(self._chain.refresh()))
        ends = list(self._pool.map(lambda ix: ix.refresh(), self._indexes))
        return dict(enumerate(ends))

    def start_offsets(self) -> dict[int, int]:
        """Earliest readable offset of every bucket, listed (log retention may have removed segments since
        this `Log` learned them): one LIST per bucket (a "commits" log: one LIST and one GET)."""
        self._check_open()
        if self._chain is not None:
            return dict(enumerate(self._chain.start_offsets()))
        return dict(enumerate(self._pool.map(lambda ix: ix.list_start(), self._indexes)))

    def appended_at(self, bucket: int, offset: int) -> int | None:
        """When the record at ``offset`` of ``bucket`` was appended (its ``_timestamp``, in microseconds since the
        epoch), from its segment's header: one HEAD, no data read. None if ``offset`` is at or past the bucket's
        end or its segment is gone (removed by log retention)."""
        self._check_open()
        bucket, offset = _integer("bucket", bucket), _integer("offset", offset)
        if not 0 <= bucket < self.definition.buckets:
            raise InvalidArgument(f"{self.name} has buckets 0..{self.definition.buckets - 1}, not {bucket}")
        if self._chain is not None:
            found = self._commit_parts(self._chain, bucket, offset, offset + 1) if offset >= 0 else []
            commit = self._chain.get(found[0][2]) if found else None
            return commit.timestamp_us if commit is not None else None
        index = self._indexes[bucket]
        if offset < 0 or offset >= index.refresh():
            return None
        segs = index.segments(offset, offset + 1)
        if not segs:
            return None
        key = self.name.segment_key(bucket, segs[0][0])
        try:
            return SegmentHeader.from_metadata(self.store.head(key).metadata, key=key).timestamp_us
        except NotFound:
            return None

    def read(self, bucket: int, start: int = 0, end: int | None = None) -> pa.Table:
        """Records of ``bucket`` with offsets in [start, end), oldest first, with ``_op``, ``_offset`` and
        ``_timestamp``. ``end`` defaults to the bucket's end offset.

        Raises:
            CorruptSegmentError: a segment fails its checksum, or the bucket's segments are not contiguous;
                nothing is skipped.
            OffsetOutOfRange: ``start`` is below the earliest retained offset.
            InvalidArgument: a bucket the table does not have; an offset that is negative or not an integer.
        """
        parts = list(self._slices(bucket, start, end))
        if not parts:
            return self.read_schema.empty_table()
        # The system columns of the whole read at once, not per segment (as `read_batches` must): reading 100
        # segments of 10,000 rows went from 0.63-0.65 to 0.79-0.82 of raw GETs + IPC decoding on a local disk,
        # and from 0.87-0.89 to 0.90-0.91 on SeaweedFS (same-session A/B).
        return segment.with_system_columns(parts, self.records_schema, parts[0][2])

    def read_batches(self, bucket: int, start: int = 0, end: int | None = None) -> Iterator[pa.RecordBatch]:
        """Like `read`, one segment at a time (segments are fetched a few ahead, in parallel)."""
        for table, header, first in self._slices(bucket, start, end):
            yield from segment.with_system_columns([(table, header, first)], self.records_schema, first).to_batches()

    def _slices(self, bucket: int, start: int, end: int | None) -> Iterator[tuple[pa.Table, SegmentHeader, int]]:
        """``(records, header, first offset)`` of each segment overlapping [start, end), oldest first, sliced
        to the range; fetched, verified and decoded ``_READ_AHEAD`` ahead on the pool's threads."""
        self._check_open()
        bucket, start = _integer("bucket", bucket), _integer("start", start)
        end = None if end is None else _integer("end", end)
        if not 0 <= bucket < self.definition.buckets:
            raise InvalidArgument(f"{self.name} has buckets 0..{self.definition.buckets - 1}, not {bucket}")
        if start < 0 or (end is not None and end < 0):
            raise InvalidArgument(f"offsets must be >= 0, got start={start}, end={end}")
        if self._chain is not None:
            yield from self._commit_slices(self._chain, bucket, start, end)
            return
        index = self._indexes[bucket]
        log_end = index.refresh()
        end = log_end if end is None else min(end, log_end)
        if start >= end:
            return
        if start < index.kept_from and start < (first := index.first_offset):  # the second may list the bucket
            raise OffsetOutOfRange(
                f"{self.name} bucket {bucket}: offset {start} is no longer in the log; the earliest available "
                f"offset is {first} (older records live in the lake)"
            )
        segs = index.segments(start, end)

        def load(base: int, next_base: int) -> tuple[pa.Table, SegmentHeader, int]:  # on a pool thread
            table, header = self._fetch(bucket, base)
            if base + header.count != next_base:
                first, last = base, base + header.count - 1
                raise CorruptSegmentError(
                    f"{self.name.segment_key(bucket, base)} holds offsets {first}..{last}, but the bucket's next "
                    f"segment starts at {next_base}: the log has a gap or an overlap there. It is not skipped: "
                    "restore the bucket's objects or re-create the log from its source"
                )
            lo, hi = max(start, base) - base, min(end, next_base) - base
            return table.slice(lo, hi - lo), header, base + lo

        ahead = collections.deque(self._pool.submit(load, *seg) for seg in segs[:_READ_AHEAD])
        for i in range(len(segs)):
            if i + _READ_AHEAD < len(segs):
                ahead.append(self._pool.submit(load, *segs[i + _READ_AHEAD]))
            yield ahead.popleft().result()

    def _commit_parts(
        self, chain: chain_format.Chain, bucket: int, start: int, end: int | None
    ) -> list[tuple[int, int, int]]:
        """``(base, next base, commit number)`` of the parts of ``bucket`` overlapping [start, end) (end: the log's),
        after a refresh. Raises `OffsetOutOfRange` if ``start`` is below what retention kept."""
        ends = chain.refresh()
        end = ends[bucket] if end is None else min(end, ends[bucket])
        if start >= end:
            return []
        known_from = chain.known_from(bucket)
        older = chain.older(bucket, start, known_from) if start < known_from else []
        found = older + chain.segments(bucket, max(start, known_from), end)
        first = found[0][0] if found else end
        if start < first:
            earliest = chain.start_offsets()[bucket]
            raise OffsetOutOfRange(
                f"{self.name} bucket {bucket}: offset {start} is no longer in the log; the earliest available "
                f"offset is {earliest} (older records live in the lake)"
            )
        return [seg for seg in found if seg[0] < end]

    def _commit_slices(
        self, chain: chain_format.Chain, bucket: int, start: int, end: int | None
    ) -> Iterator[tuple[pa.Table, SegmentHeader, int]]:
        """`_slices` of a "commits" log: each part read with a ranged GET of its data object."""
        segs = self._commit_parts(chain, bucket, start, end)
        if not segs:
            return
        stop = segs[-1][1] if end is None else min(end, segs[-1][1])

        def load(base: int, next_base: int, number: int) -> tuple[pa.Table, SegmentHeader, int]:  # on a pool thread
            commit = chain.get(number)
            part = commit.part(bucket) if commit is not None else None
            if commit is None or part is None or part.base != base or base + part.count != next_base:
                raise CorruptSegmentError(
                    f"{self.name} bucket {bucket}: log commit {number} no longer describes offsets {base}.."
                    f"{next_base - 1} (removed by log retention, or the chain was rewritten). It is not skipped: read "
                    "again (the log's earliest offsets are in start_offsets)"
                )
            where = f"{commit.data} (table {self.name}, commit {number}, bucket {bucket})"
            try:
                body = self._data.part(commit, part)
            except NotFound:
                raise OffsetOutOfRange(
                    f"{self.name} bucket {bucket}: offsets from {base} were removed by log retention; the earliest "
                    f"available offset is {chain.start_offsets()[bucket]} (older records live in the lake: use "
                    "union_read)"
                ) from None
            header = commit.header(part)
            table = self._decode(body, header, where, base)
            lo, hi = max(start, base) - base, min(stop, next_base) - base
            return table.slice(lo, hi - lo), header, base + lo

        ahead = collections.deque(self._pool.submit(load, *seg) for seg in segs[:_READ_AHEAD])
        for i in range(len(segs)):
            if i + _READ_AHEAD < len(segs):
                ahead.append(self._pool.submit(load, *segs[i + _READ_AHEAD]))
            yield ahead.popleft().result()

    def _fetch(self, bucket: int, base: int) -> tuple[pa.Table, SegmentHeader]:
        key = self.name.segment_key(bucket, base)
        try:
            obj = self.store.get(key)
        except NotFound:
            earliest = self._indexes[bucket].list_start()
            raise OffsetOutOfRange(
                f"{self.name} bucket {bucket}: offsets from {base} were removed by log retention; the earliest "
                f"available offset is {earliest} (older records live in the lake: use union_read)"
            ) from None
        header = SegmentHeader.from_metadata(obj.metadata, key=key)
        return self._decode(obj.data, header, key, base), header

    def _decode(self, body: bytes, header: SegmentHeader, key: str, base: int) -> pa.Table:
        """A segment body (or a commit's part) verified and decoded into the current schema."""
        definition = self.definition
        if header.schema_version == definition.schema_version:
            return segment.decode(body, header, key=key, base_offset=base, schema=self.records_schema)
        # written before an alter (or by a producer that had not seen it): decoded as its version, projected to
        # the current schema by field id (`lakehouse.table.evolution`)
        evolution.check_segment_version(definition, header.schema_version, key)
        past = definition.schema_at(header.schema_version)
        old = segment.records_schema(past.schema, definition.primary_key)
        table = segment.decode(body, header, key=key, base_offset=base, schema=old)
        source = {field_id: i for i, field_id in enumerate(past.field_ids)}
        return evolution.project(table, self.records_schema, definition.ids, source)

    @functools.cached_property
    def records_schema(self) -> pa.Schema:
        """The user columns of a read: the table's, except that in a primary-key table the columns outside
        the key are nullable (a delete may carry only the key)."""
        return segment.records_schema(self.definition.schema, self.definition.primary_key)

    @functools.cached_property
    def read_schema(self) -> pa.Schema:
        """The schema of `read` and `read_batches`: `records_schema` and ``_op``, ``_offset``, ``_timestamp``."""
        return pa.schema([*self.records_schema, *segment.SYSTEM_FIELDS])

    def bucket_of(self, values: pa.Array | pa.ChunkedArray | list) -> pa.Int32Array:
        """The bucket of each bucket-key value (Iceberg's ``bucket[N]``); null for null values."""
        key = self.definition.bucket_key
        if key is None:
            raise BatchError(f"{self.name} has no bucket key: appends rotate over buckets")
        key_type = self.definition.schema.field(key).type
        try:  # as an append casts them: the hash depends on the type (an int16 7 and an int64 7 differ)
            if not isinstance(values, pa.Array | pa.ChunkedArray):
                values = pa.array(values, type=key_type)
            elif values.type != key_type:
                # an append refuses '7' for an int64 key: a bucket for it would name where no row can be
                check_cast(self.name, key, values.type, key_type, what="bucket key")
                values = values.cast(key_type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise SchemaError(f"{self.name}: values that do not fit bucket key {key!r} ({key_type}): {exc}") from None
        return bucket_ids(values, self.definition.buckets)

    def producer(self, **options: Any) -> Producer:
        """A streaming `Producer` for this log (batches rows per bucket, bounded buffer, flushes on close)."""
        from lakehouse.log.producer import Producer

        return Producer(self, **options)

    def close(self) -> None:
        """Close the `Producer`s still open on this log (appending what they hold), then stop its threads.
        Later calls raise `LogClosed`. Raises the first producer's `ProducerError` once everything is stopped."""
        with self._producers_lock:
            if self._closing:
                return
            self._closing = True
            producers = list(self._open_producers)
        from lakehouse.log.producer import close_all

        failed = close_all(producers)
        self._closed = True
        self._pool.shutdown(wait=True)
        if failed:
            raise failed

    @property
    def closed(self) -> bool:
        return self._closing

    def _open_producer(self, producer: Producer) -> None:
        self._check_open()
        with self._producers_lock:
            if self._closing:
                raise LogClosed(f"the log of {self.name} is closed; open it again (Lakehouse.log) for a new producer")
            self._open_producers.add(producer)

    def _close_producer(self, producer: Producer) -> None:
        with self._producers_lock:
            self._open_producers.discard(producer)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(f"the log of {self.name} is closed; open it again (Lakehouse.log)")
        if os.getpid() != self._pid:
            # A forked child (multiprocessing's default on Linux) has none of the parent's threads, and
            # locks other threads held at the fork stay held: start over. The parent's producers and
            # what it knew of the buckets stay the parent's; this process learns the buckets again.
            self._start()


#: Attempts of one append that `AppendIncomplete` interrupted (`append_until_complete`).
APPEND_ATTEMPTS = 5


def append_until_complete(
    log_: Log, data: pa.Table, op: str, producer_id: str, sequence: int, attempts: int = APPEND_ATTEMPTS
) -> AppendResult:
    """``log_.append`` under ``(producer_id, sequence)``, appended again while `AppendIncomplete` (the buckets it
    wrote are recognised, the others written), with a short backoff; the last failure is raised."""
    for attempt in range(attempts):
        try:
            return log_.append(data, op, producer_id=producer_id, sequence=sequence)
        except AppendIncomplete:
            if attempt == attempts - 1:
                raise
            time.sleep(0.1 * 2**attempt)
    raise AssertionError("unreachable")


def _integer(what: str, value: Any) -> int:
    """``value`` as an int (numpy integers too); a bool, float or string is refused, not truncated or compared."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise InvalidArgument(f"{what} must be an integer, got {value!r}")
    return operator.index(value)
