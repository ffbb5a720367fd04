"""The local backend: S3 semantics on a POSIX file system.

Layout under the root directory::

    <key>                              the object's bytes, readable by any tool (and by pyarrow)
    .lakestream-store/meta/<key>.json  ETag, user metadata, write token (absent for files written by others)
    .lakestream-store/locks/NN.lock    64 lock stripes (flock) guarding conditional writes
    .lakestream-store/tmp/             bodies being written, renamed into place atomically
    .lakestream-store/uploads/<id>/    parts of open multipart uploads

Conditions are checked and applied under an exclusive ``flock`` on the key's lock stripe, which works
across threads (each call opens its own file description) and processes; readers take the stripe
shared, so they never see a body with another write's metadata. The body is written and hashed before
the lock is taken, so a large write holds the lock only for two renames.

A missing root directory is created, unless the store is opened with ``create=False`` (what commands that only
read do): then it is a `WarehouseNotFound`, and a mistyped path is not silently a new, empty warehouse.

A warehouse this process cannot write (a read-only mount, another user's files) opens read-only: reads
take a stripe shared only if its lock file exists or can be created (``flock`` needs no write access),
and otherwise read without it (no writer can be running through a lock file that does not exist); a
write raises `StoreError` saying the warehouse is read-only.

Limits of a file system: a key cannot be both an object and a "directory" of other keys (``a`` and
``a/b``); such a put raises `InvalidKey`. The top-level name ``.lakestream-store`` is reserved.

Usage (`object_store.usage`) is counted in the primitives as the requests S3 would serve for them: a put one
PUT, a listing one LIST per 1,000 keys, a bulk delete one POST per batch, a multipart upload its POSTs and PUTs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import shutil
import uuid
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from object_store.base import Object, ObjectInfo, ObjectStore
from object_store.errors import InvalidKey, NotFound, PreconditionFailed, StoreError, WarehouseNotFound
from object_store.tokens import WRITE_TOKEN_KEY
from object_store.usage import record, record_received

INTERNAL_DIR = ".lakestream-store"
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
LOCK_STRIPES = 64
_CHUNK = 1024 * 1024
#: Keys a LIST request returns on S3: the local backend counts its listings in pages of as many.
LIST_PAGE = 1000


class LocalStore(ObjectStore):
    """An object store in a local directory (``file:///abs/path``)."""

    def __init__(self, root: str | os.PathLike[str], *, probe: bool = True, create: bool = True) -> None:
        """``create``: make ``root`` if it does not exist; False: a missing ``root`` raises `WarehouseNotFound`
        and nothing is created (a command that only reads must not turn a mistyped path into a new warehouse)."""
        super().__init__(probe=probe)
        self.root = Path(root).resolve()
        self.url = self.root.as_uri()
        self._internal = self.root / INTERNAL_DIR
        if not create and not self.root.is_dir():
            what = "is not a directory" if self.root.exists() else "does not exist"
            raise WarehouseNotFound(
                f"no warehouse at {self.url}: {self.root} {what}; check the path, or create the warehouse first",
                str(self.root),
            )
        #: Why this store cannot write (a read-only mount, no permission), or None if it can.
        self.read_only: str | None = None
        try:
            self._make_folders()
        except OSError as exc:
            if exc.errno in _READ_ONLY and self.root.is_dir():  # an existing warehouse we may only read
                self.read_only = f"{exc.strerror} ({errno.errorcode.get(exc.errno or 0, '')})"
            else:  # a file in the way, a missing mount
                raise StoreError(
                    f"cannot open {self.url}: cannot create the store's folders under {self.root} "
                    f"({exc.strerror}); give a writable directory (it is created if missing)"
                ) from None

    def _make_folders(self) -> None:
        for sub in ("meta", "locks", "tmp", "uploads"):
            (self._internal / sub).mkdir(parents=True, exist_ok=True)

    def _writable(self, key: str) -> None:
        """Raise `StoreError` if this store cannot write (it tries again: the mount may have changed)."""
        if self.read_only is None:
            return
        try:
            self._make_folders()
        except OSError:
            raise StoreError(
                f"cannot write {key!r}: {self.url} is read-only for this process ({self.read_only}); reads work, "
                "writes need a writable warehouse (remount it read-write or run as a user that may write it)"
            ) from None
        self.read_only = None

    # ---- paths and locks -------------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        if key.split("/", 1)[0] == INTERNAL_DIR:
            raise InvalidKey(f"invalid object key {key!r}: '{INTERNAL_DIR}/' is reserved by the local store")
        return self.root / key

    def _meta_path(self, key: str) -> Path:
        return self._internal / "meta" / f"{key}.json"

    @contextlib.contextmanager
    def _locked(self, key: str, *, exclusive: bool) -> Iterator[None]:
        stripe = zlib.crc32(key.encode()) % LOCK_STRIPES
        path = self._internal / "locks" / f"{stripe:02d}.lock"
        if exclusive:
            self._writable(key)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        else:  # a shared flock needs only a readable file: a read-only warehouse can still be read
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
                except OSError as exc:
                    if exc.errno not in (*_READ_ONLY, errno.ENOENT):
                        raise
                    yield  # no lock file and none can be made: nobody writes through this stripe
                    return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # closing the description releases the lock

    def _tmp_path(self) -> Path:
        return self._internal / "tmp" / uuid.uuid4().hex

    @contextlib.contextmanager
    def _os_errors(self, operation: str, key: str) -> Iterator[None]:
        """The file system's errors (disk full, read-only, no permission) as a `StoreError` naming the key."""
        try:
            yield
        except OSError as exc:
            if exc.errno in _READ_ONLY:
                advice = (
                    f"{self.url} is read-only for this process: reads work, writes need a writable warehouse "
                    "(remount it read-write or run as a user that may write it)"
                )
            else:
                advice = f"free space on the disk under {self.root} (or fix the file system), then retry"
            raise StoreError(
                f"cannot {operation} {key!r} in {self.url}: {exc.strerror or exc} "
                f"({errno.errorcode.get(exc.errno or 0, 'OSError')}); {advice}"
            ) from None

    # ---- sidecar metadata ------------------------------------------------------------------------------

    def _read_info(self, key: str) -> ObjectInfo:
        """Describe the object at ``key``; the caller holds the key's stripe (shared or exclusive)."""
        path = self._path(key)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"no object at {key!r} in {self.url}", key) from None
        if not path.is_file():
            raise NotFound(f"no object at {key!r} in {self.url} (it is a prefix of other keys)", key)
        side: dict[str, Any] = {}
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, ValueError):
            side = json.loads(self._meta_path(key).read_text())
        if side.get("size") != st.st_size or side.get("mtime_ns") != st.st_mtime_ns:
            # Written by someone else (pyarrow, a user): hash it, no metadata.
            side = {"etag": _md5_file(path), "metadata": {}}
        meta = dict(side.get("metadata", {}))
        token = meta.pop(WRITE_TOKEN_KEY, None)
        return ObjectInfo(
            key=key,
            size=st.st_size,
            etag=side["etag"],
            last_modified=datetime.fromtimestamp(st.st_mtime, UTC),
            metadata=meta,
            write_token=token,
        )

    def _install(self, key: str, tmp: Path, etag: str, metadata: dict[str, str]) -> None:
        """Move a finished body into place with its sidecar; the caller holds the stripe exclusively."""
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise InvalidKey(
                f"cannot store {key!r} in {self.url}: a prefix of it is already an object "
                "(a file system cannot hold both 'a' and 'a/b')"
            ) from None
        if path.is_dir():
            raise InvalidKey(f"cannot store {key!r} in {self.url}: other keys already live under '{key}/'")
        st = tmp.stat()
        side = {"etag": etag, "metadata": metadata, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        meta_path = self._meta_path(key)
        meta_path.parent.mkdir(parents=True, exist_ok=True)
        meta_tmp = self._tmp_path()
        try:
            meta_tmp.write_text(json.dumps(side))
            os.replace(meta_tmp, meta_path)
        finally:
            meta_tmp.unlink(missing_ok=True)
        os.replace(tmp, path)  # rename keeps mtime, so the sidecar matches the body

    def _check(self, key: str, *, if_match: str | None, if_none_match: bool) -> None:
        if not (if_match or if_none_match):
            return
        try:
            current = self._read_info(key)
        except NotFound:
            if if_match is not None:
                message = f"{key!r} does not exist, so If-Match {if_match} cannot hold"
                raise PreconditionFailed(message, key) from None
            return
        if if_none_match:
            raise PreconditionFailed(f"{key!r} already exists (create-only write refused)", key)
        if current.etag != if_match:
            raise PreconditionFailed(f"{key!r} has ETag {current.etag}, not {if_match} (lost the CAS)", key)

    # ---- primitives ------------------------------------------------------------------------------------

    def _put(
        self, key: str, data: bytes, *, if_match: str | None, if_none_match: bool, metadata: dict[str, str]
    ) -> str:
        path = self._path(key)
        self._writable(key)
        record("PUT", sent=len(data))
        if if_none_match and path.is_file():
            # taken already: refuse before writing the body (the check under the lock below decides races)
            with self._locked(key, exclusive=False):
                self._check(key, if_match=None, if_none_match=True)
        tmp = self._tmp_path()
        try:  # a failed write (disk full) leaves no temporary file behind
            with self._os_errors("write", key):
                tmp.write_bytes(data)
            etag = hashlib.md5(data, usedforsecurity=False).hexdigest()
            with self._locked(key, exclusive=True):
                self._check(key, if_match=if_match, if_none_match=if_none_match)
                with self._os_errors("write", key):
                    self._install(key, tmp, etag, metadata)
        finally:
            tmp.unlink(missing_ok=True)
        return etag

    def _get(self, key: str, start: int | None = None, length: int | None = None) -> Object:
        record("GET")
        with self._locked(key, exclusive=False):
            info = self._read_info(key)
            with open(self._path(key), "rb") as f:
                if start is not None:
                    f.seek(start)
                    data = f.read(length)
                else:
                    data = f.read()
        record_received(len(data))
        return Object(key=key, data=data, etag=info.etag, metadata=info.metadata)

    def _head(self, key: str) -> ObjectInfo:
        record("HEAD")
        return self._stat(key)

    def _stat(self, key: str) -> ObjectInfo:
        with self._locked(key, exclusive=False):
            return self._read_info(key)

    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        base = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
        record("LIST")  # a listing is one request per page, the first one even if it finds nothing
        for n, info in enumerate(self._walk(base, prefix, start_after or ""), 1):
            yield info
            if n % LIST_PAGE == 0:
                record("LIST")

    def _walk(self, dir_key: str, prefix: str, start_after: str) -> Iterator[ObjectInfo]:
        directory = self.root / dir_key if dir_key else self.root
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        # Sort as S3 does, by full key: a directory "a" holds keys "a/...", which sort after "a-b".
        named = []
        for e in entries:
            if not dir_key and e.name == INTERNAL_DIR:
                continue
            is_dir = e.is_dir(follow_symlinks=False)
            named.append((dir_key + e.name + ("/" if is_dir else ""), is_dir))
        for name, is_dir in sorted(named, key=lambda t: t[0].encode()):
            if is_dir:
                # Skip subtrees wholly outside the prefix or wholly at/before start_after.
                if not (name.startswith(prefix) or prefix.startswith(name)):
                    continue
                if name <= start_after and not start_after.startswith(name):
                    continue
                yield from self._walk(name, prefix, start_after)
            elif name.startswith(prefix) and name > start_after:
                try:
                    info = self._stat(name)
                except NotFound:  # deleted while we listed
                    continue
                # Like S3's ListObjects: no user metadata in listings (use head()).
                yield dataclasses.replace(info, metadata={}, write_token=None)

    def _delete(self, key: str, *, if_match: str | None) -> None:
        record("DELETE")
        self._remove(key, if_match=if_match)

    def _delete_many(self, keys: list[str]) -> None:
        record("POST")  # S3's DeleteObjects: one request per batch
        for key in keys:
            self._remove(key, if_match=None)

    def _remove(self, key: str, *, if_match: str | None) -> None:
        path = self._path(key)
        with self._locked(key, exclusive=True):
            if if_match is not None:
                self._check(key, if_match=if_match, if_none_match=False)
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except IsADirectoryError:
                return
            self._meta_path(key).unlink(missing_ok=True)

    def _upload_dir(self, upload_id: str) -> Path:
        if not upload_id.isalnum():
            raise NotFound(f"no multipart upload {upload_id!r}")
        return self._internal / "uploads" / upload_id

    def _create_multipart(self, key: str, metadata: dict[str, str]) -> str:
        self._path(key)
        self._writable(key)
        record("POST")
        upload_id = uuid.uuid4().hex
        d = self._upload_dir(upload_id)
        d.mkdir()
        (d / "upload.json").write_text(json.dumps({"key": key, "metadata": metadata}))
        return upload_id

    def _upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> str:
        record("PUT", sent=len(data))
        d = self._upload_dir(upload_id)
        if not d.is_dir():
            raise _no_upload(key, upload_id)
        etag = hashlib.md5(data, usedforsecurity=False).hexdigest()
        tmp = d / f"tmp-{uuid.uuid4().hex}"
        try:
            with self._os_errors("write a part of", key):
                tmp.write_bytes(data)
                os.replace(tmp, d / f"part-{part_number:05d}-{etag}")  # named by its MD5: checked at completion
        finally:
            tmp.unlink(missing_ok=True)
        return etag

    def _complete_multipart(
        self, key: str, upload_id: str, parts: list[tuple[int, str]], *, if_none_match: bool
    ) -> str:
        record("POST")
        d = self._upload_dir(upload_id)
        try:
            manifest = json.loads((d / "upload.json").read_text())
        except FileNotFoundError:
            raise _no_upload(key, upload_id) from None
        tmp = self._tmp_path()
        try:
            with self._os_errors("write", key), open(tmp, "wb") as out:
                for number, part_etag in parts:
                    part = d / f"part-{number:05d}-{part_etag.strip(chr(34))}"
                    try:
                        _append_file(part, out.fileno())
                    except FileNotFoundError:
                        message = f"{key!r}: upload {upload_id} has no part {number} with ETag {part_etag}"
                        raise NotFound(message, key) from None
            digests = b"".join(bytes.fromhex(e.strip('"')) for _, e in parts)
            etag = f"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{len(parts)}"
            with self._locked(key, exclusive=True):
                try:
                    self._check(key, if_match=None, if_none_match=if_none_match)
                finally:
                    shutil.rmtree(d, ignore_errors=True)  # a completion ends the upload either way
                with self._os_errors("write", key):
                    self._install(key, tmp, etag, manifest["metadata"])
        finally:
            tmp.unlink(missing_ok=True)
        return etag

    def _abort_multipart(self, key: str, upload_id: str) -> None:
        record("DELETE")
        shutil.rmtree(self._upload_dir(upload_id), ignore_errors=True)

    def open_uploads(self) -> list[str]:
        """Ids of multipart uploads not yet completed or aborted (for tests and cleanup)."""
        uploads = self._internal / "uploads"
        return sorted(p.name for p in uploads.iterdir()) if uploads.is_dir() else []

    def arrow_filesystem(self) -> pafs.FileSystem:
        return pafs.SubTreeFileSystem(str(self.root), pafs.LocalFileSystem())


def _no_upload(key: str, upload_id: str) -> NotFound:
    return NotFound(f"no multipart upload {upload_id} for {key!r} (aborted or completed?)", key)


def _append_file(src: Path, out_fd: int) -> None:
    """Append ``src`` to ``out_fd`` inside the kernel (copy_file_range), falling back to read/write."""
    with open(src, "rb") as f:
        remaining = os.fstat(f.fileno()).st_size
        try:
            while remaining > 0:
                n = os.copy_file_range(f.fileno(), out_fd, remaining)
                if n == 0:
                    break
                remaining -= n
        except OSError:
            while chunk := f.read(_CHUNK):
                os.write(out_fd, chunk)


def _md5_file(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.EISDIR):
            raise NotFound(f"no object at {path}") from None
        raise
    return h.hexdigest()
