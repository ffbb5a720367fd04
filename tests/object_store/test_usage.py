"""What the store counts: requests by kind and bytes, per operation scope and per process, on both backends."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from object_store import ObjectStore, PriceList, Usage, measure_usage, process_usage
from object_store.errors import InvalidArgument, NotFound, PreconditionFailed
from object_store.s3 import S3Store

pytestmark = pytest.mark.backends("local", "s3")


def _ready(store: ObjectStore) -> None:
    store.ensure_conditional_writes()  # the probe's requests are not the test's


def test_a_put_is_one_put_of_its_bytes(store: ObjectStore) -> None:
    _ready(store)
    before = process_usage()
    with store.usage() as used:
        store.put("a/one", b"x" * 1000)
    assert used.requests["PUT"] == 1 and used.usage().total_requests == 1
    assert used.bytes_sent == 1000 and used.bytes_received == 0
    grown = process_usage()
    assert grown.requests.get("PUT", 0) - before.requests.get("PUT", 0) >= 1
    assert grown.bytes_sent - before.bytes_sent >= 1000


def test_each_primitive_counts_as_s3_bills_it(store: ObjectStore) -> None:
    _ready(store)
    store.put("p/k", b"hello")
    with measure_usage() as used:
        assert store.get("p/k").data == b"hello"
        assert store.get_range("p/k", 1, 3) == b"ell"
        store.head("p/k")
        assert [i.key for i in store.list("p/")] == ["p/k"]
        store.delete("p/k")
        with pytest.raises(NotFound):
            store.get("p/k")  # a GET that finds nothing is still a request
    assert {k: v for k, v in used.requests.items() if v} == {"GET": 3, "HEAD": 1, "LIST": 1, "DELETE": 1}
    assert used.bytes_sent == 0
    # the bodies at least (S3 also answers a missing key with a small error document)
    assert used.bytes_received >= 5 + 3


def test_a_lost_create_only_write_counts_its_put_and_the_head_that_settles_it(store: ObjectStore) -> None:
    _ready(store)
    store.put("c/k", b"first", if_none_match=True)
    with measure_usage() as used:
        with pytest.raises(PreconditionFailed):
            store.put("c/k", b"second", if_none_match=True)
    assert used.requests["PUT"] == 1 and used.requests["HEAD"] == 1


def test_bulk_delete_is_one_post_per_batch(store: ObjectStore) -> None:
    _ready(store)
    for i in range(3):
        store.put(f"d/{i}", b"x")
    with measure_usage() as used:
        assert store.delete_many(f"d/{i}" for i in range(3)) == 3
    assert used.requests["POST"] == 1 and used.usage().total_requests == 1


def test_a_multipart_upload_counts_its_posts_and_parts_in_the_writers_scope(store: ObjectStore) -> None:
    _ready(store)
    part = 5 * 1024 * 1024
    with measure_usage() as used:
        with store.open_writer("m/big", part_size=part, max_concurrency=2) as w:
            w.write(b"y" * (2 * part + 10))  # parts are uploaded on the writer's own threads
    # create + complete, three parts
    assert used.requests["POST"] == 2 and used.requests["PUT"] == 3
    assert used.bytes_sent >= 2 * part + 10


def test_nested_scopes_each_see_their_own_requests(store: ObjectStore) -> None:
    _ready(store)
    with measure_usage() as outer:
        store.put("n/a", b"1")
        with measure_usage() as inner:
            store.put("n/b", b"22")
        store.get("n/a")
    assert inner.usage() == Usage({"PUT": 1}, bytes_sent=2)
    assert outer.requests["PUT"] == 2 and outer.requests["GET"] == 1 and outer.bytes_sent == 3


def test_concurrent_scopes_in_two_threads_do_not_mix(store: ObjectStore) -> None:
    _ready(store)
    barrier = threading.Barrier(2)
    seen: dict[str, Usage] = {}

    def operation(name: str, puts: int) -> None:
        with measure_usage() as used:
            barrier.wait()
            for i in range(puts):
                store.put(f"t/{name}/{i}", b"z" * (i + 1))
            barrier.wait()  # both operations are still running here
        seen[name] = used.usage()

    threads = [threading.Thread(target=operation, args=(n, p)) for n, p in (("a", 3), ("b", 5))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["a"] == Usage({"PUT": 3}, bytes_sent=1 + 2 + 3)
    assert seen["b"] == Usage({"PUT": 5}, bytes_sent=1 + 2 + 3 + 4 + 5)


def test_a_thread_not_handed_the_context_counts_only_in_the_process(store: ObjectStore) -> None:
    _ready(store)
    before = process_usage().requests.get("PUT", 0)
    with measure_usage() as used:
        t = threading.Thread(target=store.put, args=("o/k", b"x"))
        t.start()
        t.join()
    assert used.requests["PUT"] == 0
    assert process_usage().requests.get("PUT", 0) >= before + 1


def test_botocore_retries_are_counted_as_the_requests_they_are(store: ObjectStore) -> None:
    if not isinstance(store, S3Store):
        pytest.skip("retries are the S3 backend's")
    from botocore.awsrequest import AWSResponse

    class _Body:
        def __init__(self, data: bytes) -> None:
            self._data = data

        def stream(self, **_: Any) -> Any:
            yield self._data

        def read(self, *_: Any) -> bytes:
            data, self._data = self._data, b""
            return data

    error = b"<Error><Code>InternalError</Code><Message>try again</Message></Error>"
    sends: list[int] = []

    def fault(request: Any, **_: Any) -> Any:
        sends.append(1)
        return AWSResponse(request.url, 503, {}, _Body(error)) if len(sends) == 1 else None

    store.put("r/k", b"v")
    store.client.meta.events.register("before-send.s3.GetObject", fault)
    with measure_usage() as used:
        assert store.get("r/k").data == b"v"
    assert len(sends) == 2 and used.requests["GET"] == 2


def test_prices_default_to_aws_s3_list_prices() -> None:
    usage = Usage({"PUT": 1000, "LIST": 1000, "GET": 10_000, "HEAD": 0, "DELETE": 500}, bytes_sent=10, bytes_received=9)
    cost = PriceList().price(usage)
    assert cost.write_requests == pytest.approx(2 * 0.005)
    assert cost.read_requests == pytest.approx(10 * 0.0004)
    assert cost.transfer == 0 and cost.total == pytest.approx(0.014)
    assert PriceList().storage(1024**3, months=2) == pytest.approx(0.046)
    assert PriceList(transfer_out_per_gb=0.09).price(Usage(bytes_received=1024**3)).total == pytest.approx(0.09)
    with pytest.raises(InvalidArgument):
        PriceList(read_per_1000=-1)


def test_usage_json_round_trips_and_old_documents_mean_none() -> None:
    usage = Usage({"PUT": 2, "GET": 1}, bytes_sent=5, bytes_received=7)
    assert Usage.from_dict(usage.to_dict()) == usage
    assert Usage.from_dict(None) == Usage() and not Usage.from_dict({})
    assert usage + Usage({"PUT": 1}) == Usage({"PUT": 3, "GET": 1}, bytes_sent=5, bytes_received=7)
