"""The object-store contract, run unchanged against the local backend and a real S3 server (SeaweedFS)."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from object_store import (
    MAX_METADATA_BYTES,
    InvalidArgument,
    InvalidKey,
    MiB,
    NotFound,
    ObjectStore,
    PreconditionFailed,
    StoreError,
    open_store,
)

# The store contract: what every backend must do, so it runs on each.
pytestmark = pytest.mark.backends("local", "s3")


def test_put_get_head_round_trip_with_metadata(store: ObjectStore) -> None:
    etag = store.put("a/b.bin", b"hello", metadata={"producer": "p1", "Seq": "7"})
    assert etag == hashlib.md5(b"hello").hexdigest()  # S3's single-part ETag, unquoted
    obj = store.get("a/b.bin")
    assert (obj.data, obj.etag, dict(obj.metadata)) == (b"hello", etag, {"producer": "p1", "seq": "7"})
    info = store.head("a/b.bin")
    assert (info.key, info.size, info.etag, dict(info.metadata)) == (
        "a/b.bin",
        5,
        etag,
        {"producer": "p1", "seq": "7"},
    )
    now = datetime.now(UTC)
    assert now - timedelta(minutes=5) < info.last_modified < now + timedelta(minutes=5)
    assert store.exists("a/b.bin") and not store.exists("a/c.bin")


def test_missing_objects_raise_not_found(store: ObjectStore) -> None:
    for call in (
        lambda: store.get("nope"),
        lambda: store.head("nope"),
        lambda: store.get_range("nope", 0, 3),
    ):
        with pytest.raises(NotFound):
            call()


def test_empty_object_and_overwrite(store: ObjectStore) -> None:
    store.put("k", b"")
    assert store.get("k").data == b"" and store.head("k").size == 0
    store.put("k", b"second")
    assert store.get("k").data == b"second"


def test_get_range(store: ObjectStore) -> None:
    data = bytes(range(256)) * 4
    store.put("r", data)
    assert store.get_range("r", 0, 10) == data[:10]
    assert store.get_range("r", 100, 50) == data[100:150]
    assert store.get_range("r", 1000, 100) == data[1000:]  # short read at the end
    assert store.get_range("r", 5000, 10) == b""
    assert store.get_range("r", 3, 0) == b""
    with pytest.raises(InvalidArgument, match="get_range"):
        store.get_range("r", -1, 3)


def test_create_only(store: ObjectStore) -> None:
    etag = store.put("once", b"first", if_none_match=True)
    with pytest.raises(PreconditionFailed) as info:
        store.put("once", b"second", if_none_match=True, metadata={"who": "loser"})
    assert info.value.key == "once"
    assert info.value.current.etag == etag  # what stood there, read back once by the store
    assert store.get("once").data == b"first" and store.head("once").etag == etag


def test_compare_and_swap(store: ObjectStore) -> None:
    e1 = store.put("ptr", b"v1")
    e2 = store.put("ptr", b"v2", if_match=e1)
    with pytest.raises(PreconditionFailed):
        store.put("ptr", b"stale", if_match=e1)
    assert store.get("ptr").data == b"v2"
    with pytest.raises(PreconditionFailed):  # If-Match on a missing key: a lost CAS, not "not found"
        store.put("missing", b"x", if_match=e2)
    assert not store.exists("missing")
    with pytest.raises(InvalidArgument, match="exclude each other"):
        store.put("ptr", b"x", if_match=e2, if_none_match=True)


def test_delete_and_conditional_delete(store: ObjectStore) -> None:
    etag = store.put("d", b"x")
    with pytest.raises(PreconditionFailed):
        store.delete("d", if_match="0" * 32)
    assert store.exists("d")
    store.delete("d", if_match=etag)
    assert not store.exists("d")
    store.delete("d")  # deleting a missing key is not an error (as on S3)
    with pytest.raises(PreconditionFailed):
        store.delete("d", if_match=etag)


def test_delete_many_deletes_in_batches_as_keys_come(store: ObjectStore, monkeypatch) -> None:
    import object_store.base

    monkeypatch.setattr(object_store.base, "DELETE_BATCH", 3)  # S3: several DeleteObjects requests
    keys = [f"bulk/{i:02d}" for i in range(8)]
    for k in keys:
        store.put(k, b"x")
    store.put("kept", b"x")
    given = (k for k in [*keys, "bulk/missing"])  # a generator: consumed batch by batch
    assert store.delete_many(given) == 9
    assert [i.key for i in store.list()] == ["kept"]
    assert store.delete_many([]) == 0
    with pytest.raises(InvalidKey):
        store.delete_many(["kept", "bad//key"])
    assert store.exists("kept")  # nothing of a batch with a bad key is deleted


def test_list_in_key_order_with_prefix_and_start_after(store: ObjectStore) -> None:
    # No key has a character below '/' right after a shared prefix: there S3 (byte order) and
    # directory-backed stores such as SeaweedFS (tree order) disagree. See ObjectStore.list.
    keys = ["a_b", "a/b", "a/c/d", "a/c/e", "a0", "b", "log/00000000000000000010", "log/00000000000000000002"]
    for k in keys:
        store.put(k, k.encode())
    assert [i.key for i in store.list()] == sorted(keys)
    assert [i.key for i in store.list("a/")] == ["a/b", "a/c/d", "a/c/e"]
    assert [i.key for i in store.list("a")] == ["a/b", "a/c/d", "a/c/e", "a0", "a_b"]
    assert [i.key for i in store.list("a/c")] == ["a/c/d", "a/c/e"]
    assert [i.key for i in store.list(start_after="a/c/d")] == ["a/c/e", "a0", "a_b", "b", *sorted(keys)[-2:]]
    assert [i.key for i in store.list("log/", start_after="log/00000000000000000002")] == ["log/00000000000000000010"]
    assert list(store.list("zzz")) == []
    info = next(iter(store.list("b")))
    assert (info.key, info.size, info.etag) == ("b", 1, hashlib.md5(b"b").hexdigest())


@pytest.mark.slow
def test_list_paginates_past_1000_keys_lazily(store: ObjectStore) -> None:
    from concurrent.futures import ThreadPoolExecutor

    keys = [f"many/{i:05d}" for i in range(1105)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: store.put(k, b"."), keys))
    assert [i.key for i in store.list("many/")] == keys
    assert [i.key for i in store.list("many/", start_after="many/01000")] == keys[1001:]
    it = store.list("many/")
    assert next(it).key == "many/00000"  # the first page arrives before the rest is fetched


@pytest.mark.parametrize(
    "key",
    ["", "/abs", "a//b", "a/", "./a", "a/./b", "a/../b", "..", "a\nb", "a\x00b", "tab\there", "x" * 1025],
)
def test_invalid_keys_are_rejected_and_nothing_is_written(store: ObjectStore, key: str) -> None:
    for call in (
        lambda: store.put(key, b"x"),
        lambda: store.put(key, b"x", if_none_match=True),
        lambda: store.get(key),
        lambda: store.head(key),
        lambda: store.delete(key),
        lambda: store.open_writer(key),
    ):
        with pytest.raises(InvalidKey):
            call()
    assert [i.key for i in store.list() if not i.key.startswith("_lakestream/")] == []


def test_invalid_metadata_is_rejected(store: ObjectStore) -> None:
    for meta in (
        {"bad key": "v"},
        {"": "v"},
        {"caf\u00e9": "v"},
        {"a.b": "v"},
        {"k": "caf\u00e9"},
        {"k": "line\nbreak"},
        {"k": " padded"},  # S3 would trim it, a file system would not
        {"k": "x" * 2000},  # beyond S3's 2 KB with the write token
        {"lakestream-write-token": "x"},
    ):
        with pytest.raises(InvalidKey):
            store.put("m", b"x", metadata=meta)
    assert not store.exists("m")


def test_metadata_up_to_the_limit_round_trips_on_a_conditional_write(store: ObjectStore) -> None:
    meta = {"k": "x" * (MAX_METADATA_BYTES - 1)}
    store.put("full-meta", b"x", if_none_match=True, metadata=meta)
    assert store.head("full-meta").metadata == meta


def test_small_writer_is_a_single_put(store: ObjectStore) -> None:
    with store.open_writer("w/small", metadata={"kind": "test"}) as w:
        w.write(b"abc")
        w.write(memoryview(b"def"))
        assert w.tell() == 6
    assert store.get("w/small").data == b"abcdef"
    assert store.head("w/small").metadata == {"kind": "test"}
    assert w.etag == store.head("w/small").etag


@pytest.mark.slow
def test_multipart_50_mib_streamed_with_concurrent_parts(store: ObjectStore) -> None:
    payload = os.urandom(MiB) * 50
    with store.open_writer("w/big", part_size=5 * MiB, max_concurrency=4, if_none_match=True) as w:
        for i in range(0, len(payload), 3 * MiB + 7):  # writes that do not line up with parts
            w.write(payload[i : i + 3 * MiB + 7])
    info = store.head("w/big")
    assert info.size == len(payload) and info.etag.endswith("-10")
    assert hashlib.sha256(store.get("w/big").data).digest() == hashlib.sha256(payload).digest()
    assert store.open_uploads() == []  # type: ignore[attr-defined]


def test_exception_inside_writer_leaves_no_object_and_no_upload(store: ObjectStore) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with store.open_writer("w/aborted", part_size=5 * MiB) as w:
            w.write(os.urandom(12 * MiB))  # two parts already sent
            raise RuntimeError("boom")
    assert not store.exists("w/aborted")
    assert store.open_uploads() == []  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgument, match="closed writer"):
        w.write(b"more")


def test_create_only_multipart_onto_existing_key_fails_and_keeps_the_old_object(store: ObjectStore) -> None:
    store.put("w/exists", b"old")
    with pytest.raises(PreconditionFailed):
        with store.open_writer("w/exists", part_size=5 * MiB, if_none_match=True) as w:
            w.write(os.urandom(11 * MiB))
    assert store.get("w/exists").data == b"old"
    assert store.open_uploads() == []  # type: ignore[attr-defined]


def test_create_only_multipart_enforced_at_completion(store: ObjectStore) -> None:
    """Another writer creates the key while our parts are in flight: completion must refuse."""
    with pytest.raises(PreconditionFailed):
        with store.open_writer("w/late", part_size=5 * MiB, if_none_match=True) as w:
            w.write(os.urandom(6 * MiB))  # the upload has started (early check passed)
            store.put("w/late", b"winner", if_none_match=True)
            w.write(b"tail")
    assert store.get("w/late").data == b"winner"
    assert store.open_uploads() == []  # type: ignore[attr-defined]


def test_writer_rejects_bad_arguments(store: ObjectStore) -> None:
    with pytest.raises(InvalidArgument, match="part_size"):
        store.open_writer("x", part_size=1024)
    with pytest.raises(InvalidArgument, match="max_concurrency"):
        store.open_writer("x", max_concurrency=0)


def test_arrow_filesystem_reads_and_writes_the_same_keys(store: ObjectStore) -> None:
    fs = store.arrow_filesystem()
    table = pa.table({"x": [1, 2, 3]})
    with store.open_writer("pq/one.parquet") as w:
        pq.write_table(table, pa.PythonFile(w, mode="w"))
    assert pq.read_table("pq/one.parquet", filesystem=fs).equals(table)
    pq.write_table(table, "pq/two.parquet", filesystem=fs)
    assert store.get("pq/two.parquet").data[:4] == b"PAR1"
    assert store.head("pq/two.parquet").etag  # visible through the store with an ETag
    assert [i.key for i in store.list("pq/")] == ["pq/one.parquet", "pq/two.parquet"]


def test_open_store_rejects_bad_urls_and_options(tmp_path) -> None:
    for url in ("ftp://x/y", "file://relative/path", "s3://ab/x", "no-scheme"):
        with pytest.raises(StoreError):
            open_store(url)
    with pytest.raises(StoreError, match="unknown options"):
        open_store(tmp_path.as_uri(), endpoint_url="http://x")


def test_a_local_store_where_no_directory_can_be_made_gets_a_store_error(tmp_path) -> None:
    """A file in the way raised NotADirectoryError from inside, a read-only place PermissionError."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot create the store's folders under .*file.*give a writable directory"):
        open_store((tmp_path / "file").as_uri())
    with pytest.raises(StoreError, match="cannot create the store's folders"):
        open_store((tmp_path / "file" / "below").as_uri())


def test_repr_names_the_location(store: ObjectStore) -> None:
    assert store.url in repr(store)
