"""Errors raised by the object store.

`LakestreamError` is the root of every error lakestream raises. It lives here, in the lowest package, so
that `object_store` imports nothing of ours while `lakehouse.errors` and `quality.errors` subclass it.

Every message says what went wrong and what to do about it. None of them ever contains a secret: the
stores never put credentials into messages, and errors from boto3 are re-worded, not passed through.
"""

from __future__ import annotations

from typing import Any


class LakestreamError(Exception):
    """Root of all lakestream errors."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its args and attributes without calling ``__init__``: errors whose fields are required
        # keyword arguments (`SequenceConflict`'s producer, sequence and bucket) would otherwise fail to unpickle
        # ("missing 3 required keyword-only arguments") where they cross a process: a worker pool's, a Spark task's.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[LakestreamError], args: tuple[Any, ...], state: dict[str, Any]) -> LakestreamError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class StoreError(LakestreamError):
    """Something went wrong talking to an object store."""


class InvalidKey(StoreError, ValueError):
    """A key is not acceptable (empty segment, `.` or `..`, leading slash, control character, ...).

    Raised before anything is sent or written.
    """


class InvalidArgument(LakestreamError, ValueError):
    """An argument is out of range or inconsistent: in the store a part size, a retry count, conflicting
    conditions; in `lakehouse` (which re-exports this class) a bucket the table does not have, a negative
    offset or size, a location outside the warehouse.

    Raised before anything is sent, read or written. One class for every layer, so ``except
    InvalidArgument`` catches both; not a `StoreError` (nothing went wrong talking to a store).
    """


class NotFound(StoreError, KeyError):
    """The object (or multipart upload) does not exist."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class PreconditionFailed(StoreError):
    """A conditional write or delete lost: `If-None-Match: *` met an existing object, or `If-Match`
    met a different ETag (or, on some stores, a missing object).

    ``after_retry`` is True when the request had been retried after a transient fault; then the object
    found in place was read back and it is not ours, so our write did not land *or* it landed and was
    already replaced by another writer. Callers that must tell these apart (the catalog) check their own
    higher-level state.
    """

    def __init__(self, message: str, key: str | None = None, *, after_retry: bool = False) -> None:
        super().__init__(message)
        self.key = key
        self.after_retry = after_retry
        #: What stood at ``key`` when the conflicting write was checked (an `ObjectInfo`, metadata
        #: included), or None if nothing did; set by `ObjectStore.put` so callers need no second HEAD.
        self.current: object | None = None


class WarehouseNotFound(StoreError):
    """A local warehouse's directory does not exist and the store was opened with ``create=False``: a mistyped
    path must not silently become a new, empty warehouse."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        #: The directory that does not exist.
        self.path = path


class StoreUnavailable(StoreError):
    """The store kept failing with transient errors (5xx, throttling, timeouts, resets) until the retry
    budget ran out. A write may or may not have been applied, and its message says so; a read (GET, HEAD,
    LIST) changed nothing, and its message does not."""


class AccessDenied(StoreError):
    """The store rejected our credentials or refused the operation."""


class UnsafeStoreError(StoreError):
    """The store does not enforce conditional writes (`If-None-Match: *` or `If-Match`).

    Running on such a store silently loses data (two writers both "win"), so lakestream refuses to.
    """
