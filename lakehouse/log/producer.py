"""`Producer`: streaming appends with per-bucket batching, a bounded buffer and no silent loss.

``send`` validates rows at once (a bad batch raises there, nothing is buffered) and queues them. A
background thread splits queued sends by bucket into one queue per bucket, and turns the queues into
appends. A bucket is ready when ``batch_rows`` of its rows are queued or its oldest queued row has waited
``linger`` seconds; an append takes every ready bucket's longest run of queued rows that share one
operation (the operation of the oldest ready row), up to about ``batch_rows`` per bucket, so a segment
holds up to ``batch_rows`` rows however many buckets the table has. Order within a bucket is kept across
operations, so an upsert followed by a delete of the same key stays in that order (offsets are per
bucket, so there is no order across buckets to keep). A keyless table has one queue; its appends rotate
over the buckets.

The buffer is bounded: ``send`` blocks while ``max_buffer_rows`` rows or ``max_buffer_bytes`` bytes of
Arrow buffers wait (back-pressure), so a slow store slows the caller instead of filling memory, however
wide the rows. A full buffer makes every queued bucket ready, and an append then takes about half of it,
so sends refill the rest meanwhile. Each bucket's part of a send owns its buffers, so the buffer's counts
bound memory even when one bucket's rows wait longer. Transient
failures are retried with the same producer id, sequence and buckets, which the log recognises, so a
retry never duplicates. A failure that outlasts the retries is kept and raised, as `ProducerError`, from
the next ``send``, ``flush`` or ``close``; the error says how many rows were not delivered. Nothing is
dropped without the caller being told.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401 - its pools stop at exit: `_close_at_exit` is registered after
import json
import logging
import math
import os
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from lakehouse.errors import AppendIncomplete, InvalidArgument, LakestreamError, ProducerError
from lakehouse.log.batch import conform, split_by_bucket
from lakehouse.log.segment import check_producer
from lakehouse.table import evolution
from lakehouse.table.definition import COMMITS_LOG

if TYPE_CHECKING:
    from lakehouse.log.log import AppendResult, Log

log = logging.getLogger(__name__)

#: Seconds a bucket's oldest queued row waits for more before an append. Chosen for cost at a stated latency: an
#: append every 250 ms per producer (WarpStream's figure), so on a "commits" log a producer makes at most about
#: 8 write requests a second however many buckets it feeds; `linger=0.05` appends five times as often for lower
#: latency (docs/concepts/log.md, "What a flush costs").
DEFAULT_LINGER = 0.25
#: `AppendResult`s a `Producer` keeps (the latest ones).
RESULTS_KEPT = 10_000
#: Producers not closed yet, closed at interpreter exit (see `_close_at_exit`).
_OPEN: weakref.WeakSet[Producer] = weakref.WeakSet()

#: Sends split together hold at most this fraction of ``batch_rows`` (see `Producer._split`).
_GROUP_FRACTION = 8
#: The queue of a keyless table's rows (it has no bucket until an append picks one).
_KEYLESS = -1


@dataclass
class _Pending:
    table: pa.Table
    op: str
    queued_at: float
    nbytes: int = 0  # its Arrow buffers, counted against ``max_buffer_bytes``
    serial: int = 0  # the number of the (first) send its rows come from: `flush` waits for those it saw sent
    last: int = 0  # the number of the last send its rows come from (a group of sends split together)


@dataclass(frozen=True)
class ProducerCheckpoint:
    """Where a `Producer` stood when `Producer.checkpoint` returned: every row of its first ``sends`` sends
    is in the log. Store it (``to_json``) atomically with the source position of the next send; after a
    crash, ``log.producer(resume=checkpoint)`` and send again, in the same order, exactly what was sent
    after it. ``offsets`` (per bucket, at or below where the producer's next segments can land) bound what a
    resume reads to learn which of those rows already landed."""

    table: str
    producer_id: str
    sends: int
    sequence: int
    offsets: dict[int, int]

    def to_json(self) -> str:
        return json.dumps(
            {
                "table": self.table,
                "producer_id": self.producer_id,
                "sends": self.sends,
                "sequence": self.sequence,
                "offsets": {str(b): o for b, o in self.offsets.items()},
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> ProducerCheckpoint:
        try:
            data = json.loads(text)
            cp = cls(
                table=str(data["table"]),
                producer_id=data["producer_id"],
                sends=int(data["sends"]),
                sequence=int(data["sequence"]),
                offsets={int(b): int(o) for b, o in data["offsets"].items()},
            )
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise InvalidArgument(f"not a producer checkpoint (Producer.checkpoint().to_json()): {exc}") from None
        check_producer(cp.producer_id, cp.sequence)
        if cp.sends < 0 or any(o < 0 for o in cp.offsets.values()):
            raise InvalidArgument(f"a producer checkpoint with a negative count or offset: {text}")
        return cp


class Producer:
    """Batches rows into appends to one `Log`. Use as a context manager, or call `close`.

    ``batch_rows`` is per bucket: an append writes up to about that many rows to each bucket it touches.
    ``producer_id`` is generated unless given.

    **Exactly once after a crash**: call `checkpoint` (it flushes) and store what it returns together with
    the source position of the next send; after a crash, ``log.producer(resume=checkpoint)`` and send again,
    in the same order, the same sends that followed that position. Each segment records which sends its rows
    come from (``lakestream-sends``), so the resumed producer skips, per bucket, the rows of every send the
    crashed process had already appended, however differently the two batched them (batches depend on
    timing). Resume only once the crashed process is gone: two live producers with one id are not fenced.
    A given ``producer_id`` with ``first_sequence`` (no checkpoint) resumes at the granularity of appends
    instead: a replayed sequence whose rows differ from the ones logged raises `SequenceConflict`.

    ``results`` holds the `AppendResult`s of the latest ``RESULTS_KEPT`` appends (older ones are dropped,
    so a producer that streams for weeks keeps bounded memory); ``rows_appended`` counts every row.
    """

    def __init__(
        self,
        log: Log,
        *,
        producer_id: str | None = None,
        first_sequence: int = 0,
        resume: ProducerCheckpoint | str | None = None,
        batch_rows: int = 10_000,
        linger: float = DEFAULT_LINGER,
        max_buffer_rows: int = 200_000,
        max_buffer_bytes: int = 256 * 1024 * 1024,
        max_retries: int = 5,
        retry_backoff: float = 0.2,
    ) -> None:
        if batch_rows < 1 or max_buffer_rows < batch_rows or max_buffer_bytes < 1:
            raise InvalidArgument(
                f"need batch_rows >= 1, max_buffer_rows >= batch_rows and max_buffer_bytes >= 1, got batch_rows="
                f"{batch_rows}, max_buffer_rows={max_buffer_rows}, max_buffer_bytes={max_buffer_bytes}"
            )
        for option, value in (("linger", linger), ("max_retries", max_retries), ("retry_backoff", retry_backoff)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise InvalidArgument(f"{option} must be a number >= 0, got {value!r}")
        producer_id, first_sequence = check_producer(producer_id, first_sequence)
        self.log = log
        # A caller-given id may be resuming after a crash, so its appends look back for an earlier attempt
        # (in a bucket the first time, and for sequences the bucket already reached); a generated one cannot
        # have any, so only retries look back (a look-back HEADs up to `Log.dedup_window` segments per bucket).
        self._given_id = producer_id is not None
        self._sequence = first_sequence
        self._serial = 0  # sends so far
        #: Rows of sends up to these numbers (per bucket queue) landed before a resume: skipped, not queued.
        self._landed: dict[int, int] = {}
        self._landed_rows: dict[int, int | None] = {}  # their row counts (None: cannot be checked)
        self._skipped: dict[int, int] = {}
        self.rows_skipped = 0
        if resume is not None:
            producer_id = self._resume(resume, producer_id, first_sequence)
        self.producer_id = producer_id or uuid.uuid4().hex
        self.batch_rows = batch_rows
        self.linger = linger
        self.max_buffer_rows = max_buffer_rows
        self.max_buffer_bytes = max_buffer_bytes
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self._incoming: deque[_Pending] = deque()  # whole sends, not yet split by bucket
        self._queues: dict[int, deque[_Pending]] = {}  # per bucket (`_KEYLESS` for a keyless table)
        self._queued: dict[int, int] = {}  # rows per bucket queue
        self._buffered = 0  # rows sent and not yet appended
        self._buffered_bytes = 0  # their Arrow buffers
        self._cond = threading.Condition()
        self._flushes = 0  # flush calls waiting: append every queued bucket now
        self._moving: dict[str, float] = {}  # the oldest send serial the thread holds outside the queues, by stage
        self._closing = False
        self._error: ProducerError | None = None
        self.results: deque[AppendResult] = deque(maxlen=RESULTS_KEPT)
        self.rows_appended = 0
        self._thread = threading.Thread(target=self._run, name=f"producer-{self.producer_id[:8]}", daemon=True)
        log._open_producer(self)  # refuses a closed Log; closing the Log closes (flushes) this producer first
        try:
            self._thread.start()
        except BaseException:
            log._close_producer(self)  # never started: nothing for the Log to close
            raise
        _OPEN.add(self)

    # ---- caller side ---------------------------------------------------------------------------------

    def send(self, data: pa.Table | pa.RecordBatch, op: str = "insert") -> None:
        """Queue rows. Blocks while the buffer is full. Raises `SchemaError`/`BatchError` for bad rows (nothing
        queued) and `ProducerError` if an earlier append failed for good."""
        table = conform(self.log.definition, evolution.upgrade_batch(self.log.definition, data), op, self.log.limits)
        nbytes = table.nbytes
        with self._cond:
            self._raise_if_failed()
            if self._closing:
                raise ProducerError(f"producer {self.producer_id} is closed")
            while self._buffered > 0 and (
                self._buffered + table.num_rows > self.max_buffer_rows
                or self._buffered_bytes + nbytes > self.max_buffer_bytes
            ):  # an empty buffer takes any send the log accepts, so a send larger than the buffer still goes
                self._cond.wait()
                self._raise_if_failed()
            self._serial += 1
            self._incoming.append(_Pending(table, op, time.monotonic(), nbytes, self._serial, self._serial))
            self._buffered += table.num_rows
            self._buffered_bytes += nbytes
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        """Append every row sent before this call; raise `ProducerError` if that fails or times out. Rows that
        other threads send meanwhile are appended too, but not waited for: under a steady stream of sends the
        buffer is never empty, and waiting for that kept a flush waiting for good."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            barrier = self._serial
            self._flushes += 1
            self._cond.notify_all()
            try:
                while self._oldest_unappended() <= barrier and self._error is None:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise ProducerError(
                            f"producer {self.producer_id}: flush timed out with {self._buffered} rows buffered"
                        )
                    self._cond.wait(remaining)
            finally:
                self._flushes -= 1
            self._raise_if_failed()

    def checkpoint(self, timeout: float | None = None) -> ProducerCheckpoint:
        """Flush, and return where this producer stands: every row sent before this call is in the log.
        Store it with the source position of the next send (``to_json``); ``log.producer(resume=...)``
        resumes from it after a crash (see the class docstring). Take one before the first send too, so
        that a crash before the next one can be resumed."""
        for index in self.log._indexes:  # a bucket this Log never looked at: learn its end (one LIST)
            if index.age == math.inf:
                index.refresh()
        with self._cond:
            self._raise_if_failed()
            sends = self._serial
            # Every segment this producer appends from now on lands at or above each bucket's known end.
            offsets = {b: index.end for b, index in enumerate(self.log._indexes)}
        self.flush(timeout)
        with self._cond:
            sequence = self._sequence
        return ProducerCheckpoint(str(self.log.name), self.producer_id, sends, sequence, offsets)

    def _resume(self, checkpoint: ProducerCheckpoint | str, producer_id: str | None, first_sequence: int) -> str:
        """Learn what the producer appended after ``checkpoint`` (its segments at or past the checkpoint's
        offsets), so that the sends replayed after it skip, per bucket, the rows that landed."""
        cp = checkpoint if isinstance(checkpoint, ProducerCheckpoint) else ProducerCheckpoint.from_json(checkpoint)
        definition = self.log.definition
        if cp.table != str(definition.name) or any(not 0 <= b < definition.buckets for b in cp.offsets):
            raise InvalidArgument(
                f"checkpoint of producer {cp.producer_id} on {cp.table} ({len(cp.offsets)} buckets) cannot resume a "
                f"producer on {definition.name} ({definition.buckets} buckets)"
            )
        if (producer_id is not None and producer_id != cp.producer_id) or first_sequence:
            raise InvalidArgument("resume takes its producer id and sequence from the checkpoint: give neither")
        keyed = definition.bucket_key is not None
        found = self.log.producer_segments(cp.producer_id, cp.offsets)
        sequence = cp.sequence
        for bucket, segments in found.items():
            queue = bucket if keyed else _KEYLESS
            for _, header in segments:
                sequence = max(sequence, header.sequence + 1)
                if header.sends is None:
                    raise InvalidArgument(
                        f"producer {cp.producer_id} appended to {definition.name} without send numbers after its "
                        "checkpoint (log.append, or a Producer without checkpoints): it cannot be resumed from one"
                    )
                first, last = header.sends
                if last <= cp.sends:
                    continue  # appended before the checkpoint was taken
                self._landed[queue] = max(self._landed.get(queue, 0), last)
                rows = self._landed_rows.get(queue, 0)
                # A segment also holding sends from before the checkpoint (other threads sent meanwhile): the
                # bucket's replayed rows are fewer than what landed after the checkpoint, so not checked.
                self._landed_rows[queue] = None if rows is None or first <= cp.sends else rows + header.count
        # Fresh sequences above every one the crashed process used: no look-back needed, none can collide.
        self._given_id = False
        self._sequence = sequence
        self._serial = cp.sends
        if self._landed:
            log.info(
                "producer %s resumed after send %d: sends up to %d had landed in part, their rows there are skipped",
                cp.producer_id,
                cp.sends,
                max(self._landed.values()),
            )
        return cp.producer_id

    def _oldest_unappended(self) -> float:
        """The serial of the oldest send with rows not appended yet (infinity if none); the caller holds the
        lock. Queues are in send order, so only their heads count."""
        heads = [q[0].serial for q in self._queues.values() if q]
        if self._incoming:
            heads.append(self._incoming[0].serial)
        return min([*heads, *self._moving.values()], default=math.inf)

    def close(self, timeout: float | None = None) -> None:
        """Flush and stop. Raises `ProducerError` if rows could not be delivered."""
        try:
            if self._error is None:
                self.flush(timeout)
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            self._thread.join()
            self.log._close_producer(self)
            _OPEN.discard(self)
            if self._landed and self._error is None:
                log.warning(
                    "producer %s closed before its replay reached send %d, the last one that had landed before the "
                    "resume: sends after the checkpoint were not all sent again",
                    self.producer_id,
                    max(self._landed.values()),
                )
        with self._cond:
            self._raise_if_failed()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.close()
        else:  # do not mask the caller's exception; still stop the thread and deliver what we can
            try:
                self.close()
            except ProducerError:
                log.exception("producer %s failed while the caller was failing too", self.producer_id)

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    # ---- background thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - a dead thread would leave flush() and close() waiting forever
            self._fail(exc, "its thread stopped on an unexpected error")

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._incoming or self._ready()):
                    if self._closing and not self._buffered_in_queues():
                        return
                    self._cond.wait(self._wait_time())
                if self._incoming:
                    incoming, self._incoming = self._incoming, deque()
                    self._moving["split"] = incoming[0].serial
                else:
                    incoming = None
                    parts, sends, op, nbytes, oldest = self._take_append()
                    self._moving["append"] = oldest
            if incoming is not None:
                try:
                    self._split(incoming)
                except Exception as exc:  # noqa: BLE001 - not expected (`send` validated the rows); never silent
                    self._fail(exc, "splitting sends by bucket failed")
                    return
                continue
            if _KEYLESS in parts:  # every attempt of this append goes to one bucket (the retry looks there)
                bucket = self.log.keyless_bucket(self.producer_id, self._sequence)
                parts, sends = {bucket: parts[_KEYLESS]}, {bucket: sends[_KEYLESS]}
            try:
                result = self._append_with_retries(parts, sends, op)
            except LakestreamError as exc:
                self._fail(exc, f"append {self._sequence} failed after {self.max_retries + 1} attempts")
                return
            with self._cond:
                del self._moving["append"]
                self._sequence += 1
                self._buffered -= result.rows
                self._buffered_bytes -= nbytes
                self.rows_appended += result.rows
                self.results.append(result)
                self._cond.notify_all()

    def _fail(self, exc: BaseException, what: str) -> None:
        """Keep the failure for the caller's next `send`, `flush` or `close`; drop the queues."""
        with self._cond:
            self._error = ProducerError(
                f"producer {self.producer_id}: {what}; {self._buffered} rows were not delivered: {exc}"
            )
            self._error.__cause__ = exc
            self._incoming.clear()
            self._buffered_bytes = 0
            self._queues.clear()
            self._queued.clear()
            self._moving.clear()
            self._cond.notify_all()

    def _split(self, sends: deque[_Pending]) -> None:
        """Split sends by bucket into the bucket queues, in order (here, off the caller's thread: splitting
        in `send` slowed sends enough that the linger fired on small queues). Each part owns its buffers.

        Consecutive sends of one operation that waited together are split as one table (see `group_sends`):
        splitting has a fixed cost (hashing, a take per bucket), which small sends paid per send. A
        group holds at most an eighth of ``batch_rows``, so that appends, which take whole parts, still fill a
        bucket's segment to within an eighth of ``batch_rows``."""
        limits = self.log.limits
        max_rows = min(max(1, self.batch_rows // _GROUP_FRACTION), limits.max_rows)
        catch_up = max(self._landed.values(), default=0)
        # Sends a resume may skip in part are split one by one: a group's rows are skipped or kept together.
        groups = [[send] for send in sends if send.serial <= catch_up]
        groups += group_sends([send for send in sends if send.serial > catch_up], max_rows, limits.max_bytes)
        split = []
        for group in groups:
            table = group[0].table
            if len(group) > 1:  # key-only deletes are nullable outside the key: unify with full ones
                table = pa.concat_tables([send.table for send in group], promote_options="permissive")
            split.append((group, split_by_bucket(self.log.definition, table, _KEYLESS, own_buffers=True)))
        with self._cond:
            for group, parts in split:
                for bucket, part in parts.items():
                    if group[-1].serial <= self._landed.get(bucket, 0):  # appended before a crash: skip
                        self._skipped[bucket] = self._skipped.get(bucket, 0) + part.num_rows
                        self._buffered -= part.num_rows
                        self.rows_skipped += part.num_rows
                        continue
                    # The parts own their buffers: count those instead of the sends' (they differ a little).
                    # Their total size is what they hold, and costs ~1 µs where `nbytes` costs ~25 (it walks
                    # a slice's referenced ranges).
                    pending = _Pending(
                        part,
                        group[0].op,
                        group[0].queued_at,
                        part.get_total_buffer_size(),
                        group[0].serial,
                        group[-1].serial,
                    )
                    self._queues.setdefault(bucket, deque()).append(pending)
                    self._queued[bucket] = self._queued.get(bucket, 0) + part.num_rows
                    self._buffered_bytes += pending.nbytes
                self._buffered_bytes -= sum(send.nbytes for send in group)
            if self._landed and sends[-1].serial >= catch_up:
                self._caught_up()
            del self._moving["split"]
            self._cond.notify_all()

    def _caught_up(self) -> None:
        """Every send a resume skips rows of has been replayed: check that the rows skipped per bucket are the
        rows that landed (the caller replayed the same sends), then stop skipping. The caller holds the lock."""
        wrong = {
            b: (rows, self._skipped.get(b, 0))
            for b, rows in self._landed_rows.items()
            if rows is not None and rows != self._skipped.get(b, 0)
        }
        landed, self._landed = self._landed, {}
        if wrong:
            detail = ", ".join(
                f"bucket {'(any)' if b == _KEYLESS else b}: {rows} landed, {skipped} replayed"
                for b, (rows, skipped) in sorted(wrong.items())
            )
            raise ProducerError(
                f"producer {self.producer_id}: the sends replayed after the checkpoint are not the ones it appended "
                f"before it stopped (rows of sends up to {max(landed.values())}: {detail}). Resume sends exactly "
                "what followed the checkpoint's source position, in the same order"
            )

    def _buffered_in_queues(self) -> bool:
        return any(self._queues.values())

    def _urgent(self) -> bool:
        """Append every queued bucket now: on flush and close, and when the buffer is full (a `send` waits)."""
        return self._flushes > 0 or self._closing or self._full()

    def _full(self) -> bool:
        return self._buffered >= self.max_buffer_rows or self._buffered_bytes >= self.max_buffer_bytes

    def _bucket_ready(self, bucket: int, now: float) -> bool:
        queue = self._queues[bucket]
        return bool(queue) and (self._queued[bucket] >= self.batch_rows or now - queue[0].queued_at >= self.linger)

    def _ready(self) -> bool:
        if self._error is not None or not self._buffered_in_queues():
            return False
        if self._urgent():
            return True
        now = time.monotonic()
        return any(self._bucket_ready(b, now) for b in self._queues)

    def _wait_time(self) -> float | None:
        heads = [q[0].queued_at for q in self._queues.values() if q]
        if not heads:
            return None
        return max(0.001, self.linger - (time.monotonic() - min(heads)))

    def _take_append(self) -> tuple[dict[int, pa.Table], dict[int, tuple[int, int]], str, int, float]:
        """Pop the next append: for every ready bucket whose oldest queued rows have the operation of the
        oldest ready rows, its longest run of queued sends with that operation, up to about ``batch_rows``
        rows (less when the buffer is full), within the log's per-append limits. Returns the parts, their
        operation, their buffers' size and the serial of the oldest send they hold."""
        now, urgent = time.monotonic(), self._urgent()
        # On a "commits" log an append is one data object and one record whatever its buckets: once one bucket is
        # ready, every queued bucket goes along (appended at their own linger, they would cost an append each).
        every = urgent or self.log.definition.log_format == COMMITS_LOG
        ready = sorted(
            (b for b, q in self._queues.items() if q and (every or self._bucket_ready(b, now))),
            key=lambda b: self._queues[b][0].queued_at,
        )
        op = self._queues[ready[0]][0].op
        limits = self.log.limits
        cap = self.batch_rows
        if self._full() and not (self._flushes or self._closing):
            # Take about half the buffer, spread over the buckets, so sends refill the other half while these
            # rows are appended (taking it all would stall every send until the append is done).
            # (the buffer's size in rows: full by bytes, it holds fewer rows than max_buffer_rows)
            capacity = min(self.max_buffer_rows, self._buffered * self.max_buffer_bytes // max(1, self._buffered_bytes))
            cap = min(cap, max(1, capacity // (2 * len(ready))))
        parts: dict[int, pa.Table] = {}
        sends: dict[int, tuple[int, int]] = {}
        rows = nbytes = 0
        oldest = math.inf
        for bucket in ready:
            queue = self._queues[bucket]
            if queue[0].op != op:
                continue
            run: list[_Pending] = []
            run_rows = run_bytes = 0
            while queue and queue[0].op == op and (not run or run_rows + queue[0].table.num_rows <= cap):
                size, weight = queue[0].table.num_rows, queue[0].nbytes
                if parts or run:  # the first send always fits: `send` checked it against the limits
                    if rows + run_rows + size > limits.max_rows or nbytes + run_bytes + weight > limits.max_bytes:
                        break
                run.append(queue.popleft())
                run_rows, run_bytes = run_rows + size, run_bytes + weight
            if not run:
                break  # the append is full
            oldest = min(oldest, run[0].serial)
            sends[bucket] = (run[0].serial, run[-1].last)
            # The sends' parts become the segment's record batches as they are: joining them into one batch
            # first copied every row once more (~12% of a Producer's CPU per row, same-session A/B).
            tables = [p.table for p in run]
            parts[bucket] = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
            self._queued[bucket] -= run_rows
            rows, nbytes = rows + run_rows, nbytes + run_bytes
        return parts, sends, op, nbytes, oldest

    def _append_with_retries(
        self, parts: dict[int, pa.Table], sends: dict[int, tuple[int, int]], op: str
    ) -> AppendResult:
        for attempt in range(self.max_retries + 1):
            try:
                return self.log._append_parts(
                    parts,
                    op,
                    self.producer_id,
                    self._sequence,
                    explicit_id=self._given_id,
                    retry=attempt > 0,
                    sends=sends,
                )
            except LakestreamError as exc:
                if attempt == self.max_retries or not _retryable(exc):
                    raise
                log.warning("producer %s: append %d failed (%s); retrying", self.producer_id, self._sequence, exc)
                time.sleep(self.retry_backoff * 2**attempt)
        raise AssertionError("unreachable")


def group_sends(sends: Iterable[_Pending], max_rows: int, max_bytes: int) -> list[list[_Pending]]:
    """Consecutive sends of one operation, in order, in groups of at most ``max_rows`` rows and ``max_bytes``
    bytes (a larger send is a group of its own), so that a group's part of a bucket fits in one append."""
    groups: list[list[_Pending]] = []
    rows = nbytes = 0
    for send in sends:
        size = send.table.num_rows
        if groups and groups[-1][0].op == send.op and rows + size <= max_rows and nbytes + send.nbytes <= max_bytes:
            groups[-1].append(send)
            rows, nbytes = rows + size, nbytes + send.nbytes
        else:
            groups.append([send])
            rows, nbytes = size, send.nbytes
    return groups


def _close_at_exit() -> None:
    """Close the producers a program left open when it exits, so their buffered rows are appended instead
    of vanishing with their daemon threads; a failure is logged (there is no caller left to raise to)."""
    for producer in list(_OPEN):
        log.warning("producer %s was never closed; closing it at exit", producer.producer_id)
        try:
            producer.close()
        except LakestreamError as exc:
            log.error("%s", exc)


# threading's exit hooks run newest first and before `concurrent.futures` stops its pools (which a `Log`'s
# appends need); atexit's run after that, so they are only the fallback.
getattr(threading, "_register_atexit", atexit.register)(_close_at_exit)
# A forked child inherits the parent's producers but not their threads: they are the parent's to close
# (closing them in the child would wait forever, and append the parent's rows twice).
os.register_at_fork(after_in_child=_OPEN.clear)


def close_all(items: Iterable[Producer | Log]) -> ProducerError | None:
    """Close each of ``items`` (producers, or logs that close theirs); return the first `ProducerError`,
    log the others, so that one failure does not leave the rest open."""
    errors = []
    for item in items:
        try:
            item.close()
        except ProducerError as exc:
            errors.append(exc)
    for other in errors[1:]:
        log.error("%s", other)
    return errors[0] if errors else None


def _retryable(exc: BaseException) -> bool:
    from object_store import StoreUnavailable

    return isinstance(exc, StoreUnavailable | AppendIncomplete)
