"""The `ObjectStore` contract: a few primitives per backend, everything else derived here once.

A backend (``local.py``, ``s3.py``) implements the underscored primitives. This base adds what every
backend must share: key validation, the write token that makes conditional writes' outcomes certain,
the one-time capability probe, and the streaming multipart writer.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import itertools
import logging
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from object_store.errors import (
    InvalidArgument,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    UnsafeStoreError,
)
from object_store.multipart import ObjectWriter
from object_store.tokens import WRITE_TOKEN_KEY, new_token
from object_store.usage import Usage, UsageMeter, measure_usage, process_usage

if TYPE_CHECKING:
    import pyarrow.fs


log = logging.getLogger(__name__)

MiB = 1024 * 1024

#: S3 allows 2 KB of user metadata per object (keys and values); the write token of a conditional write
#: takes the rest.
_METADATA_RESERVED = 64
MAX_METADATA_BYTES = 2048 - _METADATA_RESERVED
#: Prefix (under the store's root) used by the capability probe.
PROBE_PREFIX = "_lakestream/probe/"
#: Keys per bulk delete: S3's DeleteObjects takes at most 1,000.
DELETE_BATCH = 1000


@dataclass(frozen=True)
class ObjectInfo:
    """What `head` and `list` say about an object."""

    key: str
    size: int
    etag: str
    last_modified: datetime
    metadata: Mapping[str, str] = field(default_factory=dict)
    write_token: str | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Object:
    """An object's body with its ETag and user metadata, as `get` returns it."""

    key: str
    data: bytes
    etag: str
    metadata: Mapping[str, str] = field(default_factory=dict)


#: Checked on every call, so regular expressions rather than loops over characters.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_BELOW_SPACE = re.compile(r"[\x00-\x1f]")
_METADATA_KEY = re.compile(r"[A-Za-z0-9_-]+")


def validate_key(key: str) -> str:
    """Return ``key`` if it is a safe object key, else raise `InvalidKey`.

    Safe: non-empty, no leading slash, no empty segment (``a//b``, trailing ``/``), no ``.`` or ``..``
    segment, no control characters (which includes NUL and newlines). Such keys behave differently across
    stores or could escape a prefix on the local backend.
    """
    if not isinstance(key, str) or not key:
        raise InvalidKey(f"invalid object key {key!r}: keys must be non-empty strings")
    if key.startswith("/"):
        raise InvalidKey(f"invalid object key {key!r}: keys are relative to the store's root; drop the '/'")
    if _CONTROL.search(key):
        raise InvalidKey(f"invalid object key {key!r}: control characters are not allowed")
    for segment in key.split("/"):
        if segment == "":
            raise InvalidKey(f"invalid object key {key!r}: empty path segment ('//' or a trailing '/')")
        if segment in (".", ".."):
            raise InvalidKey(f"invalid object key {key!r}: '.' and '..' segments are not allowed")
    if len(key.encode("utf-8")) > 1024:
        raise InvalidKey(f"invalid object key {key[:40]!r}...: longer than 1024 bytes")
    return key


def validate_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """Return user metadata as a plain dict of lowercase ASCII keys (S3's rules), or raise `InvalidKey`.

    Values travel as HTTP headers, so they must be printable ASCII without leading or trailing blanks
    (S3 would trim them, a local store would not), and all of it must fit S3's limit of 2 KB."""
    out: dict[str, str] = {}
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not _METADATA_KEY.fullmatch(k):
            raise InvalidKey(f"invalid metadata key {k!r}: use ASCII letters, digits, '-' and '_'")
        if k.lower() == WRITE_TOKEN_KEY:
            raise InvalidKey(f"metadata key {k!r} is reserved by lakestream")
        if not isinstance(v, str) or not v.isascii() or _CONTROL_BELOW_SPACE.search(v) or v != v.strip():
            raise InvalidKey(
                f"invalid metadata value {v!r} for {k!r}: use printable ASCII, no leading or trailing blanks"
            )
        out[k.lower()] = v
    size = sum(len(k) + len(v) for k, v in out.items())
    if size > MAX_METADATA_BYTES:
        raise InvalidKey(
            f"user metadata of {size} bytes (keys and values) exceeds {MAX_METADATA_BYTES} bytes: S3 allows "
            f"2 KB per object, of which lakestream keeps {_METADATA_RESERVED} for its write token; store less"
        )
    return out


class ObjectStore(abc.ABC):
    """An object store rooted at one location (a local directory or an S3 bucket and prefix).

    All keys are relative to that root. Conditional writes are atomic: of several writers racing
    ``if_none_match=True`` on one key exactly one wins; ``if_match=etag`` is a compare-and-swap.
    """

    #: A URL naming the store's root, without credentials (``file:///...`` or ``s3://bucket/prefix``).
    url: str

    def __init__(self, *, probe: bool = True) -> None:
        self._probe_enabled = probe
        self._probed = False
        self._probe_lock = threading.Lock()

    # ---- primitives every backend implements -------------------------------------------------------

    @abc.abstractmethod
    def _put(
        self, key: str, data: bytes, *, if_match: str | None, if_none_match: bool, metadata: dict[str, str]
    ) -> str:
        """Write one object, honouring the conditions atomically; return its ETag.

        Raises `PreconditionFailed` when a condition fails (If-Match on a missing key included).
        """

    @abc.abstractmethod
    def _get(self, key: str, start: int | None = None, length: int | None = None) -> Object: ...

    @abc.abstractmethod
    def _head(self, key: str) -> ObjectInfo: ...

    @abc.abstractmethod
    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]: ...

    @abc.abstractmethod
    def _delete(self, key: str, *, if_match: str | None) -> None: ...

    @abc.abstractmethod
    def _create_multipart(self, key: str, metadata: dict[str, str]) -> str:
        """Start a multipart upload; return its upload id."""

    @abc.abstractmethod
    def _upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> str:
        """Upload one part (numbered from 1); return the part's ETag."""

    @abc.abstractmethod
    def _complete_multipart(
        self, key: str, upload_id: str, parts: list[tuple[int, str]], *, if_none_match: bool
    ) -> str:
        """Assemble the parts into the object atomically; return its ETag."""

    @abc.abstractmethod
    def _abort_multipart(self, key: str, upload_id: str) -> None: ...

    @abc.abstractmethod
    def arrow_filesystem(self) -> pyarrow.fs.FileSystem:
        """A pyarrow FileSystem rooted at the store's root: paths given to it are object keys."""

    # ---- the public API ------------------------------------------------------------------------------

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
        metadata: Mapping[str, str] | None = None,
    ) -> str:
        """Write ``data`` at ``key`` and return the new ETag.

        Args:
            if_match: only replace the object if its current ETag is this one (compare-and-swap).
            if_none_match: only create the object if no object exists at ``key``.
            metadata: user metadata (lowercase ASCII keys), returned by `get` and `head`.

        Raises:
            PreconditionFailed: a condition did not hold; nothing was written by this call.
            InvalidKey: the key or metadata is not acceptable; nothing was sent.
            StoreUnavailable: transient faults outlasted the retries; the write may or may not have landed.
        """
        validate_key(key)
        meta = validate_metadata(metadata)
        if if_match is not None and if_none_match:
            raise InvalidArgument("put(): if_match and if_none_match exclude each other")
        if if_match is None and not if_none_match:
            return self._put(key, bytes(data), if_match=None, if_none_match=False, metadata=meta)
        self.ensure_conditional_writes()
        token = new_token()
        meta[WRITE_TOKEN_KEY] = token
        try:
            return self._put(key, bytes(data), if_match=if_match, if_none_match=if_none_match, metadata=meta)
        except PreconditionFailed as exc:
            return self._settle_precondition_failure(key, token, exc)

    def get(self, key: str) -> Object:
        """Read a whole object. Raises `NotFound`."""
        return self._get(validate_key(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Read ``length`` bytes from ``start`` (fewer at the end of the object). Raises `NotFound`."""
        if start < 0 or length < 0:
            raise InvalidArgument(f"get_range(): start and length must be >= 0, got {start}, {length}")
        if length == 0:
            self._head(validate_key(key))
            return b""
        return self._get(validate_key(key), start, length).data

    def head(self, key: str) -> ObjectInfo:
        """Size, ETag, modification time and user metadata of an object. Raises `NotFound`."""
        return self._head(validate_key(key))

    def exists(self, key: str) -> bool:
        try:
            self.head(key)
        except NotFound:
            return False
        return True

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix`` and sorts after ``start_after``, in key order.

        Pages are fetched lazily as the iterator advances. Listings carry no user metadata (S3's
        ListObjects does not return it); use `head` for that.

        Key order is byte order on AWS S3 and the local backend. Stores that keep a directory tree
        (SeaweedFS, MinIO on a file system) order the keys of one "directory" by byte order but list a
        sub-directory ``a/`` where its name ``a`` sorts, so ``a/b`` may come before ``a-b``. lakestream
        only relies on order among keys of one directory level that share a fixed-width name scheme.

        Directory markers (keys ending in ``/``, made by S3 consoles, Hadoop's S3A, and pyarrow's S3 file
        system when it deletes a directory's last file) are not objects here and are left out.
        """
        if prefix:
            validate_key(prefix.rstrip("/") or "x")
        return (info for info in self._list(prefix, start_after) if not info.key.endswith("/"))

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete objects in bulk, consuming ``keys`` as they come (memory: one batch of `DELETE_BATCH` keys):
        S3's DeleteObjects, 1,000 keys a request; the local backend one by one. A missing key counts as deleted
        (as on S3). Returns how many keys were given.

        Raises:
            InvalidKey: a key is not a valid key (nothing of its batch was deleted).
            StoreError: some keys of a batch could not be deleted; it names them (the batch's others were).
        """
        count = 0
        it = iter(keys)
        while batch := list(itertools.islice(it, DELETE_BATCH)):
            for key in batch:
                validate_key(key)
            self._delete_many(batch)
            count += len(batch)
        return count

    def _delete_many(self, keys: builtins.list[str]) -> None:  # `list` here is the method
        """Delete up to `DELETE_BATCH` valid keys; backends with a bulk request override this."""
        for key in keys:
            self._delete(key, if_match=None)

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        """Delete an object. Deleting a missing key without ``if_match`` succeeds (as on S3).

        Raises:
            PreconditionFailed: ``if_match`` was given and the object's ETag differs (or it is missing).
        """
        validate_key(key)
        if if_match is not None:
            self.ensure_conditional_writes()
        self._delete(key, if_match=if_match)

    def open_writer(
        self,
        key: str,
        *,
        if_none_match: bool = False,
        metadata: Mapping[str, str] | None = None,
        part_size: int = 8 * MiB,
        max_concurrency: int = 4,
    ) -> ObjectWriter:
        """A context manager that streams an object up in parts; see `object_store.multipart.ObjectWriter`."""

        validate_key(key)
        return ObjectWriter(
            self,
            key,
            if_none_match=if_none_match,
            metadata=validate_metadata(metadata),
            part_size=part_size,
            max_concurrency=max_concurrency,
        )

    # ---- outcome certainty and the capability probe ---------------------------------------------------

    def _settle_precondition_failure(self, key: str, token: str, exc: PreconditionFailed) -> str:
        """A conditional write got 412. If a retry of our own request met our first attempt (the response
        was lost, the write applied), the object now carries our token: that is a success, not a loss."""
        try:
            info = self._head(key)
        except NotFound:
            raise exc from None
        exc.current = info
        if info.write_token == token:
            log.info("conditional write to %s was applied by an earlier attempt; reporting success", key)
            return info.etag
        raise exc  # exc.after_retry tells the caller whether an earlier attempt may have landed

    def ensure_conditional_writes(self) -> None:
        """Probe once that the store enforces If-None-Match and If-Match; raise `UnsafeStoreError` if not."""
        if self._probed or not self._probe_enabled:
            return
        with self._probe_lock:
            if not self._probed:
                self._run_probe()
                self._probed = True

    def _run_probe(self) -> None:
        key = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        problems = []
        self._put(key, b"probe-1", if_match=None, if_none_match=True, metadata={})
        try:
            try:
                self._put(key, b"probe-2", if_match=None, if_none_match=True, metadata={})
                problems.append("a second create with If-None-Match: * succeeded")
            except PreconditionFailed:
                pass
            stale = '"00000000000000000000000000000000"'
            try:
                self._put(key, b"probe-3", if_match=stale, if_none_match=False, metadata={})
                problems.append("a write with a stale If-Match ETag succeeded")
            except PreconditionFailed:
                pass
        finally:
            self._delete(key, if_match=None)
        if problems:
            raise UnsafeStoreError(
                f"the object store at {self.url} does not enforce conditional writes: "
                f"{'; '.join(problems)}. Concurrent writers would silently overwrite each other and lose "
                "data. Use a store that enforces If-None-Match and If-Match (AWS S3, MinIO, SeaweedFS >= "
                "4.x, Ceph RGW >= 19), or fix the gateway in front of it."
            )

    # ---- usage ----------------------------------------------------------------------------------------------

    @staticmethod
    def usage() -> contextlib.AbstractContextManager[UsageMeter]:
        """A scope counting the requests and bytes of the operation run inside it (`object_store.usage`): every
        store's, since one operation reaches the store through several clients. ``with store.usage() as u: ...;
        u.requests["PUT"], u.bytes_sent``."""
        return measure_usage()

    @staticmethod
    def usage_total() -> Usage:
        """Every request this process made to any store since it started."""
        return process_usage()

    def connection_options(self) -> dict[str, str]:
        """Options another client needs to reach the same store (`open_store` keyword names). For S3 this
        includes the resolved credentials: treat the result as a secret."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing to release
        """Release connections and threads. The store must not be used afterwards."""

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
