"""lakestream's storage contract: an object store with conditional writes, on S3 or a local directory.

>>> from object_store import open_store
>>> store = open_store("file:///tmp/lake")                      # local backend
>>> store = open_store("s3://bucket/prefix", endpoint_url="http://127.0.0.1:8333")
>>> etag = store.put("a/b", b"x", if_none_match=True)          # create-only
>>> store.put("a/b", b"y", if_match=etag)                       # compare-and-swap

`object_store` imports nothing else of lakestream's.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlparse

from object_store.base import MAX_METADATA_BYTES, MiB, Object, ObjectInfo, ObjectStore, validate_key
from object_store.errors import (
    AccessDenied,
    InvalidArgument,
    InvalidKey,
    LakestreamError,
    NotFound,
    PreconditionFailed,
    StoreError,
    StoreUnavailable,
    UnsafeStoreError,
    WarehouseNotFound,
)
from object_store.pricing import Cost, PriceList
from object_store.usage import Usage, UsageMeter, measure_usage, process_usage

__all__ = [
    "AccessDenied",
    "Cost",
    "InvalidArgument",
    "InvalidKey",
    "LakestreamError",
    "MAX_METADATA_BYTES",
    "MiB",
    "NotFound",
    "Object",
    "ObjectInfo",
    "ObjectStore",
    "PreconditionFailed",
    "PriceList",
    "StoreError",
    "StoreUnavailable",
    "UnsafeStoreError",
    "Usage",
    "UsageMeter",
    "WarehouseNotFound",
    "measure_usage",
    "open_store",
    "process_usage",
    "validate_key",
]

S3_OPTIONS = (
    "endpoint_url",
    "region",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "path_style",
    "max_attempts",
    "connect_timeout",
    "read_timeout",
    "retry_deadline",
    "max_pool_connections",
    "create_bucket",
    "probe",
)


def open_store(url: str, **options: Any) -> ObjectStore:
    """Open the store named by ``url``.

    ``file:///abs/path`` opens the local backend (options: ``probe``, ``create``: a missing directory is
    created, the default; with ``create=False`` it is a `WarehouseNotFound`). ``s3://bucket/prefix`` opens the S3
    backend; options: ``endpoint_url`` (MinIO, SeaweedFS, ...), ``region``, ``access_key_id``,
    ``secret_access_key``, ``session_token`` (else the standard AWS credential chain), ``path_style``
    (default: on when ``endpoint_url`` is set), ``max_attempts``, ``connect_timeout``, ``read_timeout``,
    ``retry_deadline`` (no retry after an operation has failed for this many seconds),
    ``max_pool_connections``, ``create_bucket``, ``probe`` (check once that conditional writes are
    enforced; default on). ``create`` is taken by both schemes so that a caller need not know which it opens:
    on S3 a prefix is never created (it exists once an object is under it) and a bucket only with
    ``create_bucket``. Options that are None are ignored, so settings can be passed through.

    Raises:
        StoreError: the URL's scheme is not supported or the URL is malformed.
        WarehouseNotFound: ``create=False`` and a ``file://`` URL's directory does not exist.
    """
    options = {k: v for k, v in options.items() if v is not None}
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise StoreError(f"cannot open {url!r}: write file URLs as file:///absolute/path (three slashes)")
        _reject_unknown(url, options, ("probe", "create"))
        from object_store.local import LocalStore

        return LocalStore(unquote(parsed.path), **options)
    if parsed.scheme in ("s3", "s3a"):
        if len(parsed.netloc) < 3:
            raise StoreError(f"cannot open {url!r}: the bucket name must have at least 3 characters")
        options.pop("create", None)  # nothing to create for a prefix (see above)
        _reject_unknown(url, options, S3_OPTIONS)
        from object_store.s3 import S3Store

        return S3Store(parsed.netloc, parsed.path.strip("/"), **options)
    raise StoreError(
        f"cannot open {url!r}: unsupported URL scheme {parsed.scheme or '(none)'!r}; "
        "use file:///absolute/path or s3://bucket/prefix"
    )


def _reject_unknown(url: str, options: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise StoreError(f"cannot open {url!r}: unknown options {unknown}; known: {sorted(known)}")
