"""The test server launcher leaves nothing behind: no process, no listening port, no socket in /tmp."""

from __future__ import annotations

import socket
from pathlib import Path

from object_store import open_store
from object_store.seaweedfs import SeaweedFS


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
