"""Streaming writes: an object appears whole or not at all.

`ObjectWriter` buffers up to one part. If the whole body fits in one part it is written with a single
PUT; otherwise a multipart upload is started and full parts are uploaded concurrently (at most
``max_concurrency`` in flight, so memory stays bounded by about ``(max_concurrency + 1) * part_size``).
Leaving the ``with`` block normally completes the upload (with ``If-None-Match: *`` when asked, enforced
by the store at CompleteMultipartUpload); leaving it with an exception aborts it, so no object becomes
visible and no multipart upload is left open.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING

from object_store.errors import InvalidArgument, PreconditionFailed
from object_store.tokens import WRITE_TOKEN_KEY, new_token
from object_store.usage import ContextThreadPoolExecutor

if TYPE_CHECKING:
    from object_store.base import ObjectStore

log = logging.getLogger(__name__)

#: S3's lower bound for every part but the last.
MIN_PART_SIZE = 5 * 1024 * 1024
MAX_PARTS = 10_000


class ObjectWriter:
    """A write-only binary stream into one object. Use it as a context manager."""

    def __init__(
        self,
        store: ObjectStore,
        key: str,
        *,
        if_none_match: bool,
        metadata: dict[str, str],
        part_size: int,
        max_concurrency: int,
    ) -> None:
        if part_size < MIN_PART_SIZE:
            raise InvalidArgument(f"part_size must be at least {MIN_PART_SIZE} bytes (S3's minimum), got {part_size}")
        if max_concurrency < 1:
            raise InvalidArgument(f"max_concurrency must be >= 1, got {max_concurrency}")
        self._store = store
        self.key = key
        self._if_none_match = if_none_match
        self._metadata = metadata
        self._part_size = part_size
        self._max_concurrency = max_concurrency
        self._buffer = bytearray()
        self._position = 0
        self._upload_id: str | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._futures: list[Future[tuple[int, str]]] = []
        self._closed = False
        #: The ETag of the finished object, set when the writer closes successfully.
        self.etag: str | None = None

    # ---- file-like surface (enough for pyarrow.PythonFile and shutil.copyfileobj) ---------------------

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return self._closed

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        """Parts go up when full; there is nothing to flush early."""

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._closed:
            raise InvalidArgument(f"write to a closed writer for {self.key}")
        view = memoryview(data).cast("B")
        self._buffer += view
        self._position += len(view)
        while len(self._buffer) >= self._part_size:
            part = bytes(self._buffer[: self._part_size])
            del self._buffer[: self._part_size]
            self._send_part(part)
        return len(view)

    # ---- lifecycle ---------------------------------------------------------------------------------------

    def close(self) -> None:
        """Finish the object. Idempotent once it has succeeded."""
        if self._closed:
            return
        try:
            if self._upload_id is None:
                self.etag = self._store.put(
                    self.key, bytes(self._buffer), if_none_match=self._if_none_match, metadata=self._metadata
                )
            else:
                if self._buffer:
                    self._send_part(bytes(self._buffer))
                self._buffer.clear()
                parts = sorted(f.result() for f in self._futures)
                try:
                    self.etag = self._store._complete_multipart(
                        self.key, self._upload_id, parts, if_none_match=self._if_none_match
                    )
                except PreconditionFailed as exc:
                    self.abort()  # some stores keep the upload open after a failed completion
                    token = self._metadata.get(WRITE_TOKEN_KEY)
                    if token is None:
                        raise
                    self.etag = self._store._settle_precondition_failure(self.key, token, exc)
                self._upload_id = None
        except BaseException:
            self.abort()
            raise
        finally:
            self._closed = True
            self._shutdown_pool()

    def abort(self) -> None:
        """Discard everything written: no object appears and no multipart upload stays open."""
        self._closed = True
        self._buffer.clear()
        for f in self._futures:
            f.cancel()
        self._shutdown_pool()
        if self._upload_id is not None:
            upload_id, self._upload_id = self._upload_id, None
            try:
                self._store._abort_multipart(self.key, upload_id)
            except Exception:  # the original error matters more; a store lifecycle rule reaps leftovers
                log.exception("could not abort multipart upload %s of %s", upload_id, self.key)

    def __enter__(self) -> ObjectWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # ---- parts -----------------------------------------------------------------------------------------

    def _send_part(self, data: bytes) -> None:
        if self._upload_id is None:
            self._check_overwrite_early()
            metadata = dict(self._metadata)
            if self._if_none_match:  # lets a retried completion recognise its own first attempt
                metadata[WRITE_TOKEN_KEY] = new_token()
                self._store.ensure_conditional_writes()
            self._metadata = metadata
            self._upload_id = self._store._create_multipart(self.key, metadata)
            # parts count in the writer's usage scopes (object_store.usage)
            self._pool = ContextThreadPoolExecutor(self._max_concurrency, thread_name_prefix="mpu")
        part_number = len(self._futures) + 1
        if part_number > MAX_PARTS:
            raise InvalidArgument(
                f"{self.key}: more than {MAX_PARTS} parts; use a larger part_size (now {self._part_size})"
            )
        for f in self._futures:  # surface a failed part at once instead of at close
            if f.done() and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
        self._slots.acquire()  # back-pressure: at most max_concurrency parts in memory and in flight
        assert self._pool is not None
        try:
            future = self._pool.submit(self._upload, part_number, data)
        except BaseException:
            self._slots.release()
            raise
        self._futures.append(future)

    def _upload(self, part_number: int, data: bytes) -> tuple[int, str]:
        try:
            assert self._upload_id is not None
            return part_number, self._store._upload_part(self.key, self._upload_id, part_number, data)
        finally:
            self._slots.release()

    def _check_overwrite_early(self) -> None:
        """A create-only upload onto an existing key will fail at completion; fail before sending gigabytes.

        This is only an optimisation: the store enforces the condition atomically at completion.
        """
        if self._if_none_match and self._store.exists(self.key):
            raise PreconditionFailed(
                f"{self.key} already exists; a create-only write (if_none_match=True) must not replace it",
                self.key,
            )

    def _shutdown_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
