"""The S3 backend (AWS S3, MinIO, SeaweedFS, Ceph RGW, ...) on boto3.

Transient faults (5xx, SlowDown, timeouts, connection resets) are retried by botocore's ``standard``
retry mode with exponential backoff and jitter. botocore does not retry ``409
ConditionalRequestConflict`` (S3's answer when two conditional writes to one key overlap), so we retry
that here with the same kind of backoff. When the budget is spent, `StoreUnavailable` names the
operation and the key.

Each retry logs a warning (operation, key, cause, attempt, time so far), so a store that stopped
answering is visible at once rather than after the whole budget. The budget is ``max_attempts`` (8) and
``retry_deadline`` (60 s): no retry starts once an operation has been failing for that long, so an
endpoint that accepts connections and never answers costs about the deadline plus one ``read_timeout``
(30 s), not 8 x 30 s plus backoff (~4.5 minutes before the deadline existed).

A retried conditional write can meet its own first attempt; `ObjectStore.put` settles that with the
write token (see ``base.py``). botocore re-sends the very same request, token included, so the check
works for its internal retries as well as ours.

Usage (`object_store.usage`) is counted per HTTP attempt, retries included: botocore's ``before-send`` event
counts the request by its operation's billing class and the bytes of its body, ``response-received`` the bytes
of the response's body (its Content-Length; none for a HEAD).
"""

from __future__ import annotations

import base64
import importlib.metadata
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC
from typing import Any, TypeVar
from urllib.parse import urlparse

import boto3
import botocore
import botocore.exceptions as bexc
import google_crc32c
import pyarrow.fs as pafs
from botocore.config import Config

from object_store.base import Object, ObjectInfo, ObjectStore
from object_store.errors import (
    AccessDenied,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    StoreError,
    StoreUnavailable,
)
from object_store.tokens import WRITE_TOKEN_KEY
from object_store.usage import record, record_received

#: Operations that change nothing in the store, so a timeout on them leaves nothing half-applied.
_READS = frozenset({"GetObject", "HeadObject", "ListObjectsV2", "ListMultipartUploads"})

T = TypeVar("T")
log = logging.getLogger(__name__)


def _lakestream_version() -> str:
    try:
        return importlib.metadata.version("lakestream")
    except importlib.metadata.PackageNotFoundError:
        return "dev"


_USER_AGENT = f"lakestream/{_lakestream_version()} botocore/{botocore.__version__}"
_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchUpload"}
_DENIED = {
    "403",
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
}
_CONFLICT = {"ConditionalRequestConflict", "OperationAborted"}
_TRANSIENT = (
    bexc.EndpointConnectionError,
    bexc.ConnectTimeoutError,
    bexc.ReadTimeoutError,
    bexc.ConnectionClosedError,
    bexc.HTTPClientError,
)


def _quote(etag: str) -> str:
    return etag if etag.startswith('"') else f'"{etag}"'


def _unquote(etag: str) -> str:
    return etag.strip('"')


class S3Store(ObjectStore):
    """An object store in an S3 bucket, optionally under a key prefix (``s3://bucket/prefix``)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        path_style: bool | None = None,
        max_attempts: int = 8,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        retry_deadline: float = 60.0,
        max_pool_connections: int = 32,
        create_bucket: bool = False,
        probe: bool = True,
    ) -> None:
        super().__init__(probe=probe)
        if max_attempts < 1:
            raise InvalidArgument(f"max_attempts must be >= 1, got {max_attempts}")
        if not retry_deadline > 0:
            raise InvalidArgument(f"retry_deadline must be a positive number of seconds, got {retry_deadline}")
        self._retry_deadline = float(retry_deadline)
        self._retries = threading.local()  # what the last call's retries were, per thread (for its error)
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self._max_attempts = max_attempts
        if path_style is None:
            path_style = endpoint_url is not None  # MinIO, SeaweedFS, RGW: path-style; AWS: virtual hosts
        self._session = boto3.session.Session(
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            aws_session_token=session_token,
            region_name=region or ("us-east-1" if endpoint_url else None),
        )
        self._config = Config(
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_pool_connections=max_pool_connections,
            s3={"addressing_style": "path" if path_style else "auto"},
            # Only checksum when the operation requires it: some S3-compatible stores reject the
            # newer default CRC trailers on conditional and multipart requests.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            # botocore's client-side check of every request against the API model, and its default
            # User-Agent (~30 parts, rebuilt and sanitized twice per request), are Python run under the
            # GIL on the caller's thread. Our calls are built here from keys and metadata the store has
            # validated already (`validate_key`, `validate_metadata`), so validation is off and the
            # User-Agent fixed: a tenth less client CPU per small PUT (docs/concepts/storage.md, "A lean botocore
            # client").
            parameter_validation=False,
            user_agent=_USER_AGENT,
        )
        try:
            self._client = self._new_client()
        except ValueError as exc:  # botocore: "Invalid endpoint: ..."
            raise InvalidArgument(
                f"cannot open {self.url}: {exc}; give the endpoint as a URL, e.g. http://127.0.0.1:9000"
            ) from None
        self._pid = os.getpid()
        if create_bucket:
            self._create_bucket()

    @property
    def client(self) -> Any:
        """The boto3 client of this process. A forked child gets its own: the parent's pooled connections
        would carry both processes' requests on one socket."""
        if os.getpid() != self._pid:
            self._client = self._new_client()
            self._pid = os.getpid()
        return self._client

    def _new_client(self) -> Any:
        """A boto3 client whose standard retry handler is wrapped: each retry logs a warning, and none starts
        after ``retry_deadline`` seconds of failing."""
        client = self._session.client("s3", endpoint_url=self.endpoint_url, config=self._config)
        events = client.meta.events
        events.register("before-send.s3", _count_request, unique_id="lakestream-usage-request")
        events.register("response-received.s3", _count_response, unique_id="lakestream-usage-response")
        unique_id = "retry-config-s3"
        emitter = getattr(events, "_emitter", events)  # botocore's EventAliaser wraps a HierarchicalEmitter
        entry = getattr(emitter, "_unique_id_handlers", {}).get(unique_id)
        if entry is None:  # another botocore: keep its retries as they are
            return client
        standard = entry["handler"]
        events.unregister("needs-retry.s3", unique_id=unique_id)
        events.register("before-call.s3", _note_start, unique_id="lakestream-call-start")
        events.register("needs-retry.s3", self._needs_retry(standard), unique_id="lakestream-retries")
        return client

    def _needs_retry(self, standard: Callable[..., float | None]) -> Callable[..., float | None]:
        def needs_retry(**kwargs: Any) -> float | None:
            request = kwargs.get("request_dict") or {}
            context = request.get("context") or {}
            elapsed = time.monotonic() - context.get("lakestream-started", time.monotonic())
            attempts = kwargs.get("attempts", 0)
            self._retries.attempts, self._retries.elapsed = attempts, elapsed
            delay = standard(**kwargs)
            if delay is None:
                return None
            if elapsed + delay > self._retry_deadline:
                return None  # out of time: botocore raises the last error, which _call reports
            operation = getattr(kwargs.get("operation"), "name", "request")
            where = urlparse(str(request.get("url", ""))).path or self.url
            error = kwargs.get("caught_exception")
            response = kwargs.get("response")
            if error is not None:
                cause = type(error).__name__
            elif response is not None:
                cause = f"HTTP {response[0].status_code}"
            else:
                cause = "a transient error"
            log.warning(
                "%s %s at %s: %s (attempt %d of %d, %.1f s so far); retrying in %.1f s",
                operation,
                where,
                self.endpoint_url or "AWS S3",
                cause,
                attempts,
                self._max_attempts,
                elapsed,
                delay,
            )
            return delay

        return needs_retry

    def __repr__(self) -> str:
        where = f", endpoint_url={self.endpoint_url!r}" if self.endpoint_url else ""
        return f"S3Store({self.url!r}{where})"

    # ---- calls and error mapping ------------------------------------------------------------------------

    def _full(self, key: str) -> str:
        return self.prefix + key

    def _call(self, operation: str, key: str | None, fn: Callable[..., T], **kwargs: Any) -> T:
        """Run one boto3 call, retrying 409 conflicts, and translate its errors to ours."""
        self._retries.attempts, self._retries.elapsed = 1, 0.0
        for attempt in range(1, self._max_attempts + 1):
            try:
                return fn(**kwargs)
            except bexc.ClientError as exc:
                error = self._translate(operation, key, exc)
                if isinstance(error, PreconditionFailed):
                    retried = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)
                    error.after_retry = bool(retried) or attempt > 1
                if isinstance(error, _Retry) and attempt < self._max_attempts:
                    time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))  # full jitter
                    continue
                if isinstance(error, _Retry):
                    raise StoreUnavailable(
                        f"{operation} {self._describe(key)} kept conflicting with concurrent requests after "
                        f"{attempt} attempts; retry later or reduce contention on this key"
                    ) from None
                raise error from None
            except _TRANSIENT as exc:
                tries, spent = getattr(self._retries, "attempts", 1), getattr(self._retries, "elapsed", 0.0)
                # Only a write can have landed unseen; saying so after a failed read sends people looking
                # for a change that cannot exist.
                landed = "" if operation in _READS else " A write may or may not have been applied."
                raise StoreUnavailable(
                    f"{operation} {self._describe(key)} failed after {tries} attempts in {spent:.0f} s "
                    f"(at most {self._max_attempts} attempts, no retry after {self._retry_deadline:.0f} s): "
                    f"{type(exc).__name__}. Check that the store at {self.endpoint_url or 'AWS S3'} is "
                    f"reachable and answers, or raise max_attempts / retry_deadline / timeouts.{landed}"
                ) from None
            except (bexc.NoCredentialsError, bexc.PartialCredentialsError) as exc:
                raise AccessDenied(
                    f"{operation} {self._describe(key)}: {exc}. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                    "(or s3.access_key_id / s3.secret_access_key in the config file), or run where an AWS "
                    "profile or instance role provides them."
                ) from None
            except bexc.BotoCoreError as exc:  # anything else botocore raises before or after the request
                raise StoreError(f"{operation} {self._describe(key)}: {type(exc).__name__}: {exc}") from None
        raise AssertionError("unreachable")

    def _describe(self, key: str | None) -> str:
        return f"s3://{self.bucket}/{self._full(key)}" if key is not None else self.url

    def _translate(self, operation: str, key: str | None, exc: bexc.ClientError) -> Exception:
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        where = self._describe(key)
        if code == "PreconditionFailed" or status == 412:
            return PreconditionFailed(f"{operation} {where}: precondition failed (412)", key)
        if code in _CONFLICT or status == 409 and code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            return _Retry()
        if code == "NoSuchBucket":
            return StoreError(
                f"{operation} {where}: bucket {self.bucket!r} does not exist at "
                f"{self.endpoint_url or 'AWS S3'}; create it first or fix the warehouse URL"
            )
        if code in _NOT_FOUND or status == 404:
            return NotFound(f"{operation} {where}: no such object", key)
        if code in _DENIED or status == 403:
            return AccessDenied(
                f"{operation} {where}: the store refused our credentials or this operation ({code}). "
                "Check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the access_key_id / "
                "secret_access_key options) and the bucket's policy."
            )
        if status is not None and status >= 500 or code in ("SlowDown", "Throttling", "RequestTimeout"):
            return StoreUnavailable(
                f"{operation} {where}: the store kept failing ({code or status}) after "
                f"{self._max_attempts} attempts; retry later"
            )
        return StoreError(f"{operation} {where}: {code or status}: {err.get('Message', '')}")

    def _create_bucket(self) -> None:
        try:
            self._call("CreateBucket", None, self.client.create_bucket, Bucket=self.bucket)
        except StoreError as exc:
            if "BucketAlready" not in str(exc):
                raise

    # ---- primitives ------------------------------------------------------------------------------------

    def _put(
        self, key: str, data: bytes, *, if_match: str | None, if_none_match: bool, metadata: dict[str, str]
    ) -> str:
        # The body's CRC-32C travels with it, and the store refuses a body that does not match. Without it a
        # client killed after sending a PUT's headers left a 0-byte object on SeaweedFS 4.48 (it took the
        # closed connection for an empty body): a create-only segment that can never be rewritten.
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self._full(key),
            "Body": data,
            "ChecksumCRC32C": base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode(),
        }
        if metadata:
            kwargs["Metadata"] = metadata
        if if_match is not None:
            kwargs["IfMatch"] = _quote(if_match)
        if if_none_match:
            kwargs["IfNoneMatch"] = "*"
        try:
            response = self._call("PutObject", key, self.client.put_object, **kwargs)
        except NotFound:
            if if_match is None:
                raise
            # AWS answers If-Match on a missing key with 404 NoSuchKey where SeaweedFS and MinIO answer 412:
            # both mean that the compare-and-swap lost
            raise PreconditionFailed(f"PutObject {self._describe(key)}: no such object (If-Match)", key) from None
        return _unquote(response["ETag"])

    def _get(self, key: str, start: int | None = None, length: int | None = None) -> Object:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._full(key)}
        if start is not None:
            kwargs["Range"] = f"bytes={start}-{start + (length or 1) - 1}"
        try:
            response = self._call("GetObject", key, self.client.get_object, **kwargs)
        except StoreError as exc:
            if start is not None and "InvalidRange" in str(exc):  # range starts past the end
                info = self._head(key)
                return Object(key=key, data=b"", etag=info.etag, metadata=info.metadata)
            raise
        try:
            data = response["Body"].read()
        except _TRANSIENT as exc:
            raise StoreUnavailable(f"GetObject {self._describe(key)}: body read failed ({exc!r}); retry") from None
        meta = dict(response.get("Metadata", {}))
        meta.pop(WRITE_TOKEN_KEY, None)
        return Object(key=key, data=data, etag=_unquote(response["ETag"]), metadata=meta)

    def _head(self, key: str) -> ObjectInfo:
        r = self._call("HeadObject", key, self.client.head_object, Bucket=self.bucket, Key=self._full(key))
        meta = dict(r.get("Metadata", {}))
        token = meta.pop(WRITE_TOKEN_KEY, None)
        return ObjectInfo(
            key=key,
            size=r["ContentLength"],
            etag=_unquote(r["ETag"]),
            last_modified=r["LastModified"].astimezone(UTC),
            metadata=meta,
            write_token=token,
        )

    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._full(prefix)}
        if start_after:
            kwargs["StartAfter"] = self._full(start_after)
        token: str | None = None
        while True:
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call("ListObjectsV2", prefix or None, self.client.list_objects_v2, **kwargs)
            for item in page.get("Contents", []):
                yield ObjectInfo(
                    key=item["Key"][len(self.prefix) :],
                    size=item["Size"],
                    etag=_unquote(item["ETag"]),
                    last_modified=item["LastModified"].astimezone(UTC),
                )
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def _delete(self, key: str, *, if_match: str | None) -> None:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._full(key)}
        if if_match is not None:
            kwargs["IfMatch"] = _quote(if_match)
        try:
            self._call("DeleteObject", key, self.client.delete_object, **kwargs)
        except NotFound:
            if if_match is not None:  # AWS answers 404 where SeaweedFS answers 412: both mean "lost"
                raise PreconditionFailed(f"DeleteObject {self._describe(key)}: no such object", key) from None

    def _delete_many(self, keys: list[str]) -> None:
        objects = [{"Key": self._full(k)} for k in keys]
        delete = {"Objects": objects, "Quiet": True}
        answer = self._call("DeleteObjects", keys[0], self.client.delete_objects, Bucket=self.bucket, Delete=delete)
        failed = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
        if failed:
            sample = ", ".join(f"{e.get('Key')} ({e.get('Code')}: {e.get('Message')})" for e in failed[:3])
            raise StoreError(
                f"DeleteObjects on s3://{self.bucket}: {len(failed)} of {len(keys)} keys were not deleted, e.g. "
                f"{sample}; the others were. Check the credentials' s3:DeleteObject permission and retry"
            )

    def _create_multipart(self, key: str, metadata: dict[str, str]) -> str:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._full(key)}
        if metadata:
            kwargs["Metadata"] = metadata
        created = self._call("CreateMultipartUpload", key, self.client.create_multipart_upload, **kwargs)
        upload_id: str = created["UploadId"]
        return upload_id

    def _upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> str:
        r = self._call(
            "UploadPart",
            key,
            self.client.upload_part,
            Bucket=self.bucket,
            Key=self._full(key),
            UploadId=upload_id,
            PartNumber=part_number,
            Body=data,
        )
        etag: str = r["ETag"]
        return etag

    def _complete_multipart(
        self, key: str, upload_id: str, parts: list[tuple[int, str]], *, if_none_match: bool
    ) -> str:
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self._full(key),
            "UploadId": upload_id,
            "MultipartUpload": {"Parts": [{"PartNumber": n, "ETag": e} for n, e in parts]},
        }
        if if_none_match:
            kwargs["IfNoneMatch"] = "*"
        r = self._call("CompleteMultipartUpload", key, self.client.complete_multipart_upload, **kwargs)
        return _unquote(r["ETag"])

    def _abort_multipart(self, key: str, upload_id: str) -> None:
        try:
            self._call(
                "AbortMultipartUpload",
                key,
                self.client.abort_multipart_upload,
                Bucket=self.bucket,
                Key=self._full(key),
                UploadId=upload_id,
            )
        except NotFound:
            pass

    def open_uploads(self) -> list[str]:
        """Ids of multipart uploads under this store's prefix not yet completed or aborted."""
        r = self._call(
            "ListMultipartUploads",
            None,
            self.client.list_multipart_uploads,
            Bucket=self.bucket,
            Prefix=self.prefix,
        )
        return sorted(u["UploadId"] for u in r.get("Uploads", []))

    def connection_options(self) -> dict[str, str]:
        options = {"region": self._session.region_name or "us-east-1"}
        if self.endpoint_url:
            options["endpoint_url"] = self.endpoint_url
        creds = self._session.get_credentials()
        if creds is not None:
            frozen = creds.get_frozen_credentials()
            options.update(access_key_id=frozen.access_key, secret_access_key=frozen.secret_key)
            if frozen.token:
                options["session_token"] = frozen.token
        return options

    def arrow_filesystem(self) -> pafs.FileSystem:
        creds = self._session.get_credentials()
        frozen = creds.get_frozen_credentials() if creds is not None else None
        kwargs: dict[str, Any] = {"region": self._session.region_name or "us-east-1"}
        if frozen is not None:
            kwargs.update(access_key=frozen.access_key, secret_key=frozen.secret_key)
            if frozen.token:
                kwargs["session_token"] = frozen.token
        else:
            kwargs["anonymous"] = True
        if self.endpoint_url:
            parsed = urlparse(self.endpoint_url)
            kwargs["endpoint_override"] = parsed.netloc
            kwargs["scheme"] = parsed.scheme or "https"
        kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=self._max_attempts)
        fs = pafs.S3FileSystem(**kwargs)
        return pafs.SubTreeFileSystem(f"{self.bucket}/{self.prefix}".rstrip("/"), fs)

    def close(self) -> None:
        self.client.close()


#: S3 operations by how S3 bills them (`object_store.usage.KINDS`); others by their HTTP method.
_KIND = {
    "PutObject": "PUT",
    "UploadPart": "PUT",
    "CreateBucket": "PUT",
    "CopyObject": "COPY",
    "UploadPartCopy": "COPY",
    "CreateMultipartUpload": "POST",
    "CompleteMultipartUpload": "POST",
    "DeleteObjects": "POST",
    "ListObjectsV2": "LIST",
    "ListObjects": "LIST",
    "ListMultipartUploads": "LIST",
    "ListParts": "LIST",
    "ListBuckets": "LIST",
    "GetObject": "GET",
    "HeadObject": "HEAD",
    "HeadBucket": "HEAD",
    "DeleteObject": "DELETE",
    "AbortMultipartUpload": "DELETE",
}
_BY_METHOD = {"PUT": "PUT", "POST": "POST", "GET": "GET", "HEAD": "HEAD", "DELETE": "DELETE"}


def _count_request(request: Any = None, event_name: str = "", **_: Any) -> None:
    """before-send: one HTTP attempt (botocore's retries included), with the bytes of its body."""
    if request is None:
        return
    kind = _KIND.get(event_name.rsplit(".", 1)[-1]) or _BY_METHOD.get(str(request.method).upper(), "GET")
    body = request.body
    length = request.headers.get("Content-Length")
    if length is not None:
        sent = int(length)
    elif isinstance(body, bytes | bytearray):
        sent = len(body)
    else:
        sent = 0
    record(kind, sent=sent)


def _count_response(response_dict: dict[str, Any] | None = None, event_name: str = "", **_: Any) -> None:
    """response-received: the bytes of an attempt's response body (a HEAD's Content-Length is the object's, not
    sent)."""
    if not response_dict or event_name.endswith(".HeadObject") or event_name.endswith(".HeadBucket"):
        return
    length = (response_dict.get("headers") or {}).get("content-length")
    if length is not None:
        record_received(int(length))
    elif isinstance(response_dict.get("body"), bytes):
        record_received(len(response_dict["body"]))


def _note_start(context: dict[str, Any] | None = None, **_: Any) -> None:
    """before-call: when the operation started (its retries' deadline counts from here)."""
    if context is not None:
        context["lakestream-started"] = time.monotonic()


class _Retry(Exception):
    """Internal marker: a 409 conflict worth retrying."""
