"""`Producer`: streaming appends with batching, a bounded buffer and no silent loss.

``send`` validates rows at once (a bad batch raises there, nothing is buffered) and queues them. A
background thread turns the queue into appends: it waits until ``batch_rows`` rows are queued or the
oldest queued row has waited ``linger`` seconds, then appends the longest run of queued sends that share
one operation (order across operations is kept, so an upsert followed by a delete of the same key stays
in that order). Each append is split by bucket, one segment per bucket.

The buffer is bounded: ``send`` blocks while ``max_buffer_rows`` rows wait (back-pressure), so a slow
store slows the caller instead of filling memory. Transient failures are retried with the same producer
id and sequence, which the log recognises, so a retry never duplicates. A failure that outlasts the
retries is kept and raised, as `ProducerError`, from the next ``send``, ``flush`` or ``close``; the error
says how many rows were not delivered. Nothing is dropped without the caller being told.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from lakehouse.errors import LakestreamError, ProducerError
from lakehouse.log.batch import conform

if TYPE_CHECKING:
    from lakehouse.log.log import AppendResult, Log

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    table: pa.Table
    op: str
    queued_at: float


class Producer:
    """Batches rows into appends to one `Log`. Use as a context manager, or call `close`."""

    def __init__(
        self,
        log: Log,
        *,
        producer_id: str | None = None,
        first_sequence: int = 0,
        batch_rows: int = 10_000,
        linger: float = 0.05,
        max_buffer_rows: int = 200_000,
        max_retries: int = 5,
        retry_backoff: float = 0.2,
    ) -> None:
        if batch_rows < 1 or max_buffer_rows < batch_rows:
            raise ValueError("need batch_rows >= 1 and max_buffer_rows >= batch_rows")
        self.log = log
        self.producer_id = producer_id or uuid.uuid4().hex
        self._sequence = first_sequence
        self.batch_rows = batch_rows
        self.linger = linger
        self.max_buffer_rows = max_buffer_rows
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self._queue: deque[_Pending] = deque()
        self._buffered = 0  # rows queued or being appended
        self._cond = threading.Condition()
        self._flush_requested = False
        self._closing = False
        self._error: ProducerError | None = None
        self.results: list[AppendResult] = []
        self.rows_appended = 0
        self._thread = threading.Thread(target=self._run, name=f"producer-{self.producer_id[:8]}", daemon=True)
        self._thread.start()

    # ---- caller side ---------------------------------------------------------------------------------

    def send(self, data: pa.Table | pa.RecordBatch, op: str = "insert") -> None:
        """Queue rows. Blocks while the buffer is full. Raises `SchemaError`/`BatchError` for bad rows (nothing
        queued) and `ProducerError` if an earlier append failed for good."""
        table = conform(self.log.definition, data, op, self.log.limits)
        with self._cond:
            self._raise_if_failed()
            if self._closing:
                raise ProducerError(f"producer {self.producer_id} is closed")
            while self._buffered + table.num_rows > self.max_buffer_rows and self._buffered > 0:
                self._cond.wait()
                self._raise_if_failed()
            self._queue.append(_Pending(table, op, time.monotonic()))
            self._buffered += table.num_rows
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        """Append everything queued so far; raise `ProducerError` if that fails or times out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flush_requested = True
            self._cond.notify_all()
            while self._buffered and self._error is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise ProducerError(f"producer {self.producer_id}: flush timed out with {self._buffered} rows")
                self._cond.wait(remaining)
            self._flush_requested = False
            self._raise_if_failed()

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
        while True:
            with self._cond:
                while not self._ready():
                    if self._closing and not self._queue:
                        return
                    self._cond.wait(self._wait_time())
                if self._closing and not self._queue:
                    return
                batch, op, rows = self._take_run()
            try:
                result = self._append_with_retries(batch, op)
            except LakestreamError as exc:
                with self._cond:
                    undelivered = self._buffered
                    self._error = ProducerError(
                        f"producer {self.producer_id}: append {self._sequence} failed after "
                        f"{self.max_retries + 1} attempts; {undelivered} rows were not delivered: {exc}"
                    )
                    self._error.__cause__ = exc
                    self._queue.clear()
                    self._cond.notify_all()
                return
            with self._cond:
                self._sequence += 1
                self._buffered -= rows
                self.rows_appended += rows
                self.results.append(result)
                self._cond.notify_all()

    def _ready(self) -> bool:
        if self._error is not None:
            return False
        if not self._queue:
            return False
        if self._flush_requested or self._closing:
            return True
        queued = sum(p.table.num_rows for p in self._queue)
        return queued >= self.batch_rows or time.monotonic() - self._queue[0].queued_at >= self.linger

    def _wait_time(self) -> float | None:
        if not self._queue:
            return None
        return max(0.001, self.linger - (time.monotonic() - self._queue[0].queued_at))

    def _take_run(self) -> tuple[pa.Table, str, int]:
        """Pop the longest prefix of queued sends with one operation, up to about ``batch_rows`` rows."""
        op = self._queue[0].op
        tables, rows = [], 0
        while (
            self._queue
            and self._queue[0].op == op
            and (rows == 0 or rows + self._queue[0].table.num_rows <= self.batch_rows)
        ):
            pending = self._queue.popleft()
            tables.append(pending.table)
            rows += pending.table.num_rows
        return pa.concat_tables(tables, promote_options="permissive"), op, rows

    def _append_with_retries(self, batch: pa.Table, op: str) -> AppendResult:
        for attempt in range(self.max_retries + 1):
            try:
                return self.log.append(batch, op, producer_id=self.producer_id, sequence=self._sequence)
            except LakestreamError as exc:
                if attempt == self.max_retries or not _retryable(exc):
                    raise
                log.warning("producer %s: append %d failed (%s); retrying", self.producer_id, self._sequence, exc)
                time.sleep(self.retry_backoff * 2**attempt)
        raise AssertionError("unreachable")


def _retryable(exc: BaseException) -> bool:
    from lakehouse.log.log import AppendIncomplete
    from object_store import StoreUnavailable

    return isinstance(exc, StoreUnavailable | AppendIncomplete)
