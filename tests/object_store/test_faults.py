"""Faults we cannot cause with a healthy server, injected as thin wrappers around the real thing.

On S3 the faults are injected at botocore's HTTP layer (the ``before-send`` event), so botocore's real
retry machinery and our real settle logic run exactly as they would after a network failure.
"""

from __future__ import annotations

import io
import os
import socket
from collections.abc import Callable
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ReadTimeoutError

from object_store import (
    AccessDenied,
    MiB,
    ObjectStore,
    PreconditionFailed,
    StoreUnavailable,
    UnsafeStoreError,
    open_store,
)
from object_store.s3 import S3Store
from object_store.seaweedfs import SeaweedFS

# Faults and what the store reports for them: the backend is what is tested, so they run on each.
pytestmark = pytest.mark.backends("local", "s3")


def _inject(store: S3Store, operation: str, fault: Callable[[Any, int], Any]) -> list[int]:
    """Call ``fault(request, n)`` before the n-th HTTP send of ``operation``; returns the call log."""
    calls: list[int] = []

    def handler(request: Any, **_: Any) -> Any:
        calls.append(len(calls) + 1)
        return fault(request, len(calls))

    store.client.meta.events.register(f"before-send.s3.{operation}", handler)
    return calls


def _apply_then_time_out(store: S3Store) -> Callable[[Any, int], Any]:
    """The first attempt reaches the server and is applied; its response is lost (a read timeout)."""

    def fault(request: Any, n: int) -> Any:
        if n == 1:
            store.client._endpoint.http_session.send(request)
            raise ReadTimeoutError(endpoint_url=request.url)
        return None

    return fault


@pytest.fixture
def s3(seaweedfs: SeaweedFS, request: pytest.FixtureRequest) -> S3Store:
    store = open_store(
        f"s3://{seaweedfs.bucket}/faults-{request.node.name[:40]}-{os.urandom(3).hex()}",
        **seaweedfs.store_options(),
    )
    assert isinstance(store, S3Store)
    store.ensure_conditional_writes()  # probe before faults are installed
    return store


def test_lost_response_on_create_only_put_is_reported_as_success(s3: S3Store) -> None:
    calls = _inject(s3, "PutObject", _apply_then_time_out(s3))
    etag = s3.put("seg/0001", b"payload", if_none_match=True)
    assert calls == [1, 2], "botocore should have re-sent the request once"
    assert etag == s3.head("seg/0001").etag
    assert s3.get("seg/0001").data == b"payload"
    assert [i.key for i in s3.list("seg/")] == ["seg/0001"]


def test_lost_response_on_cas_is_reported_as_success(s3: S3Store) -> None:
    e1 = s3.put("ptr", b"v1")
    _inject(s3, "PutObject", _apply_then_time_out(s3))
    e2 = s3.put("ptr", b"v2", if_match=e1)
    assert s3.get("ptr").data == b"v2" and s3.head("ptr").etag == e2


def test_lost_response_on_create_only_multipart_completion_is_reported_as_success(s3: S3Store) -> None:
    calls = _inject(s3, "CompleteMultipartUpload", _apply_then_time_out(s3))
    payload = os.urandom(6 * MiB)
    with s3.open_writer("big", part_size=5 * MiB, if_none_match=True) as w:
        w.write(payload)
    assert len(calls) == 2
    assert s3.get("big").data == payload and w.etag == s3.head("big").etag
    assert s3.open_uploads() == []


def test_retry_that_meets_another_writer_is_a_real_conflict(s3: S3Store, seaweedfs: SeaweedFS) -> None:
    """Our first attempt is lost before reaching the server; meanwhile another writer creates the key."""
    other = open_store(s3.url, **seaweedfs.store_options())

    def fault(request: Any, n: int) -> Any:
        if n == 1:
            other.put("seg/0002", b"theirs", if_none_match=True)
            raise ReadTimeoutError(endpoint_url=request.url)
        return None

    _inject(s3, "PutObject", fault)
    with pytest.raises(PreconditionFailed):
        s3.put("seg/0002", b"ours", if_none_match=True)
    assert s3.get("seg/0002").data == b"theirs"


def test_persistent_timeouts_raise_store_unavailable_naming_operation_and_key(seaweedfs: SeaweedFS) -> None:
    store = open_store(f"s3://{seaweedfs.bucket}/unavail", max_attempts=3, probe=False, **seaweedfs.store_options())
    assert isinstance(store, S3Store)

    def fault(request: Any, n: int) -> Any:
        raise ReadTimeoutError(endpoint_url=request.url)

    calls = _inject(store, "PutObject", fault)
    with pytest.raises(StoreUnavailable) as info:
        store.put("k/1", b"x")
    assert len(calls) == 3
    assert "PutObject" in str(info.value) and "unavail/k/1" in str(info.value)


class _RawBody(io.BytesIO):
    def stream(self, *_: Any, **__: Any) -> Any:
        yield self.read()


def test_409_conditional_request_conflict_is_retried(s3: S3Store) -> None:
    body = (
        b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>ConditionalRequestConflict</Code>"
        b"<Message>A conflicting conditional operation is in progress</Message></Error>"
    )

    def fault(request: Any, n: int) -> Any:
        if n <= 2:
            return AWSResponse(request.url, 409, {"Content-Type": "application/xml"}, _RawBody(body))
        return None

    calls = _inject(s3, "PutObject", fault)
    s3.put("conflicted", b"x", if_none_match=True)
    assert len(calls) == 3 and s3.get("conflicted").data == b"x"


def test_5xx_is_retried_by_botocore(s3: S3Store) -> None:
    body = b"<Error><Code>InternalError</Code><Message>We encountered an internal error</Message></Error>"

    def fault(request: Any, n: int) -> Any:
        if n == 1:
            return AWSResponse(request.url, 503, {}, _RawBody(body))
        return None

    calls = _inject(s3, "GetObject", fault)
    s3.put("k", b"v")
    assert s3.get("k").data == b"v" and len(calls) == 2


def test_unreachable_store_is_unavailable_with_a_clear_message() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    store = open_store(
        "s3://nobody/x",
        endpoint_url=f"http://127.0.0.1:{port}",
        access_key_id="AKIAEXAMPLE",
        secret_access_key="super-secret-value",
        max_attempts=2,
        connect_timeout=1,
    )
    with pytest.raises(StoreUnavailable) as info:
        store.get("k")
    assert f"127.0.0.1:{port}" in str(info.value) and "reachable" in str(info.value)
    assert "super-secret-value" not in str(info.value)


def test_wrong_credentials_give_access_denied_without_the_secret(seaweedfs: SeaweedFS) -> None:
    secret = "definitely-not-the-secret-1234"
    options = {**seaweedfs.store_options(), "secret_access_key": secret}
    store = open_store(f"s3://{seaweedfs.bucket}/creds", **options)
    for call in (lambda: store.put("k", b"x"), lambda: store.get("k"), lambda: list(store.list())):
        with pytest.raises(AccessDenied) as info:
            call()
        assert secret not in str(info.value) and "AWS_SECRET_ACCESS_KEY" in str(info.value)
    assert secret not in repr(store)


def _ignore_conditions(store: ObjectStore, *, if_match: bool, if_none_match: bool) -> ObjectStore:
    """Wrap the real backend's put so it silently drops one or both conditions (a broken gateway)."""
    real_put = store._put

    def put(key: str, data: bytes, **kw: Any) -> str:
        if if_match:
            kw["if_match"] = None
        if if_none_match:
            kw["if_none_match"] = False
        return real_put(key, data, **kw)

    store._put = put  # type: ignore[method-assign]
    return store


@pytest.mark.parametrize(("drop_match", "drop_none_match"), [(True, False), (False, True), (True, True)])
def test_capability_probe_refuses_a_store_that_ignores_conditions(
    store: ObjectStore, drop_match: bool, drop_none_match: bool
) -> None:
    _ignore_conditions(store, if_match=drop_match, if_none_match=drop_none_match)
    store.put("plain", b"unconditional writes still work")
    with pytest.raises(UnsafeStoreError) as info:
        store.put("k", b"x", if_none_match=True)
    assert store.url in str(info.value)
    assert ("stale If-Match" in str(info.value)) == drop_match
    assert ("second create with If-None-Match" in str(info.value)) == drop_none_match
    assert not store.exists("k")
    assert [i.key for i in store.list("_lakestream/")] == []  # the probe cleaned up after itself
    with pytest.raises(UnsafeStoreError):
        store.delete("plain", if_match="0" * 32)


def test_probe_runs_once_per_store(store: ObjectStore) -> None:
    runs = []
    real = store._run_probe
    store._run_probe = lambda: (runs.append(1), real())[1]  # type: ignore[method-assign]
    for i in range(5):
        store.put(f"k{i}", b"x", if_none_match=True)
    assert runs == [1]
