"""The test server launcher leaves nothing behind: no process, no listening port, no socket in /tmp."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from object_store import AccessDenied, InvalidArgument, PreconditionFailed, StoreError, open_store
from object_store.seaweedfs import SeaweedFS


@pytest.mark.subprocess
def test_start_serve_stop_leaves_nothing(tmp_path: Path) -> None:
    server = SeaweedFS(tmp_path).start()
    store = open_store(f"s3://{server.bucket}/x", **server.store_options())
    store.put("k", b"v", if_none_match=True)
    pid, ports = server.process.pid, dict(server.ports)
    server.stop()
    assert server.process.poll() is not None
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    for port in ports.values():
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still listening"
        assert list(Path("/tmp").glob(f"seaweedfs-*-grpc-{port}.sock")) == []
    server.stop()  # idempotent


def test_s3_requests_carry_lakestream_user_agent(seaweedfs: SeaweedFS) -> None:
    """The S3 client runs with a fixed User-Agent (botocore's default is rebuilt per request)."""
    store = open_store(f"s3://{seaweedfs.bucket}/ua", **seaweedfs.store_options())
    seen: list[str] = []
    store.client.meta.events.register(
        "before-send.s3.*", lambda request, **_: seen.append(request.headers["User-Agent"])
    )
    store.put("k", b"x", metadata={"kind": "test"})
    assert store.get("k").metadata == {"kind": "test"}
    agents = [ua.decode() if isinstance(ua, bytes) else ua for ua in seen]
    assert agents and all(a.startswith("lakestream/") for a in agents), agents


def test_a_bad_endpoint_or_missing_credentials_get_a_clear_error(seaweedfs: SeaweedFS, tmp_path, monkeypatch) -> None:
    """Both raised botocore's own exceptions (ValueError, NoCredentialsError) through every command."""
    with pytest.raises(InvalidArgument, match="Invalid endpoint: 5; give the endpoint as a URL"):
        open_store(f"s3://{seaweedfs.bucket}/x", endpoint_url="5", probe=False)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    options = {k: v for k, v in seaweedfs.store_options().items() if k not in ("access_key_id", "secret_access_key")}
    store = open_store(f"s3://{seaweedfs.bucket}/x", probe=False, **options)
    with pytest.raises(AccessDenied, match="Unable to locate credentials. Set AWS_ACCESS_KEY_ID"):
        list(store.list())


def test_directory_markers_are_not_listed(seaweedfs: SeaweedFS) -> None:
    """pyarrow's S3 file system leaves a marker ``dir/`` when it deletes a directory's last file (pyiceberg
    deletes uncommitted manifests with it); orphan removal listed the marker and failed on its key."""
    store = open_store(f"s3://{seaweedfs.bucket}/markers", **seaweedfs.store_options())
    store.put("t/metadata/a.json", b"{}")
    store.client.put_object(Bucket=seaweedfs.bucket, Key="markers/t/data/", Body=b"")
    assert [i.key for i in store.list("t/")] == ["t/metadata/a.json"]
    assert "markers/t/data/" in [o["Key"] for o in store.client.list_objects_v2(Bucket=seaweedfs.bucket)["Contents"]]


@pytest.mark.subprocess
def test_metrics_count_s3_requests_by_type_at_the_server(tmp_path: Path) -> None:
    """``metrics=True`` serves the server's request counters; ``s3_requests`` sums them by type (a HEAD is a GET,
    a refused conditional PUT is still a PUT)."""
    with SeaweedFS(tmp_path, metrics=True) as server:
        store = open_store(f"s3://{server.bucket}/m", probe=False, **server.store_options())
        before = server.s3_requests()
        store.put("k", b"v", if_none_match=True)
        with pytest.raises(PreconditionFailed):
            store.put("k", b"w", if_none_match=True)
        store.get("k")
        store.head("k")
        list(store.list())
        after = server.s3_requests()
    delta = {kind: after.get(kind, 0) - before.get(kind, 0) for kind in after}
    assert delta["PUT"] == 2 and delta["LIST"] >= 1  # (the server may list for itself too)
    assert delta["GET"] >= 2  # the GET and the HEAD, and whatever the lost write read to settle its outcome


def test_metrics_need_the_option(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="metrics=True"):
        SeaweedFS(tmp_path).s3_requests()
