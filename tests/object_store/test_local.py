"""The local backend's own failure modes: a full disk, a read-only warehouse."""

from __future__ import annotations

import errno
import pathlib

import pytest

from object_store import StoreError, open_store


def _disk_full_after(half: bool, real):
    """A ``Path.write_bytes``/``write_text`` that writes half of the data, then fails as a full disk does."""

    def write(self, data, *args, **kwargs):
        if ".lakestream-store" in str(self) and half:
            real(self, data[: len(data) // 2], *args, **kwargs)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data, *args, **kwargs)

    return write


@pytest.mark.parametrize("what", ["body", "sidecar", "part"])
def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch, what: str) -> None:
    """The body's temporary file was written outside the try/finally that removes it: a full disk left it in
    .lakestream-store/tmp (the sidecar's too), and the error was a raw OSError."""
    store = open_store((tmp_path / "wh").as_uri())
    store.put("kept", b"old")
    patched = "write_text" if what == "sidecar" else "write_bytes"
    monkeypatch.setattr(pathlib.Path, patched, _disk_full_after(True, getattr(pathlib.Path, patched)))
    with pytest.raises(
        StoreError, match=r"cannot write.*'kept'.*No space left on device \(ENOSPC\); free space on the disk"
    ):
        if what == "part":
            with store.open_writer("kept", part_size=5 << 20) as w:
                w.write(b"x" * (11 << 20))
        else:
            store.put("kept", b"new" * 1000)
    monkeypatch.undo()
    internal = tmp_path / "wh" / ".lakestream-store"
    leftovers = [p for p in internal.rglob("*") if p.is_file() and not {"locks", "meta"} & set(p.parts)]
    assert leftovers == [], leftovers
    assert store.get("kept").data == b"old"
    assert store.open_uploads() == []  # type: ignore[attr-defined]


def test_create_false_refuses_a_missing_directory_and_makes_nothing(tmp_path) -> None:
    """Read-only commands open with ``create=False``: a mistyped path must not become a new, empty warehouse."""
    from object_store import WarehouseNotFound

    missing = tmp_path / "typo" / "wh"
    with pytest.raises(WarehouseNotFound, match="does not exist") as caught:
        open_store(missing.as_uri(), create=False)
    assert caught.value.path == str(missing) and not (tmp_path / "typo").exists()
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(WarehouseNotFound, match="is not a directory"):
        open_store((tmp_path / "file").as_uri(), create=False)
    missing.mkdir(parents=True)  # an existing directory opens as before
    open_store(missing.as_uri(), create=False).put("k", b"v")
    assert (missing / "k").read_bytes() == b"v"
    assert open_store((tmp_path / "new").as_uri()).url.endswith("/new") and (tmp_path / "new").is_dir()
