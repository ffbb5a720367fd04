"""Faults on the pointer CAS: lost responses, ambiguous outcomes, and a randomized model check."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pyarrow as pa
import pytest
from botocore.exceptions import ReadTimeoutError
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import CommitStateUnknownException

from lakehouse.iceberg.catalog import TABLES_PREFIX, ObjectStoreCatalog
from object_store import ObjectStore, StoreUnavailable
from tests.support.stores import catalog_properties

SCHEMA = pa.schema([("client", pa.int32()), ("step", pa.int32())])


def row(client: int, step: int) -> pa.Table:
    return pa.table({"client": pa.array([client], pa.int32()), "step": pa.array([step], pa.int32())})


@pytest.fixture
def s3_catalogs(seaweedfs):
    """Two catalogs (two writers) on one SeaweedFS warehouse, with a table ods.t."""
    props = catalog_properties(f"s3://{seaweedfs.bucket}/cat-{uuid.uuid4().hex[:8]}", seaweedfs.store_options())
    ours, theirs = load_catalog("lake", **props), load_catalog("lake", **props)
    ours.create_namespace("ods")
    ours.create_table("ods.t", SCHEMA)
    ours.store.ensure_conditional_writes()
    return ours, theirs


def on_pointer_cas(catalog: ObjectStoreCatalog, fault) -> list[int]:
    """Run fault(request, n) before the n-th HTTP send of a pointer PutObject (botocore retries included)."""
    calls: list[int] = []

    def handler(request: Any, **_: Any) -> Any:
        if TABLES_PREFIX in request.url:
            calls.append(len(calls) + 1)
            return fault(request, len(calls))
        return None

    catalog.store.client.meta.events.register("before-send.s3.PutObject", handler)
    return calls


def metadata_files(catalog: ObjectStoreCatalog) -> list[str]:
    return [i.key for i in catalog.store.list("ods/t/metadata/") if i.key.endswith(".metadata.json")]


def test_cas_applied_then_response_lost_is_success(s3_catalogs) -> None:
    ours, _ = s3_catalogs
    table = ours.load_table("ods.t")

    def fault(request, n):
        if n == 1:
            ours.store.client._endpoint.http_session.send(request)
            raise ReadTimeoutError(endpoint_url=request.url)

    calls = on_pointer_cas(ours, fault)
    table.append(row(1, 1))
    assert calls == [1, 2]
    fresh = ours.load_table("ods.t")
    assert len(fresh.metadata.snapshots) == 1 and fresh.scan().to_arrow().num_rows == 1


def test_cas_applied_then_lost_and_another_writer_built_on_it_is_success(s3_catalogs) -> None:
    ours, theirs = s3_catalogs
    table = ours.load_table("ods.t")

    def fault(request, n):
        if n == 1:
            ours.store.client._endpoint.http_session.send(request)  # ours lands...
            theirs.load_table("ods.t").append(row(2, 2))  # ...another writer commits on top of it
            raise ReadTimeoutError(endpoint_url=request.url)  # ...and our response was lost

    on_pointer_cas(ours, fault)
    table.append(row(1, 1))  # the retry meets 412; our file is in the metadata log: success
    fresh = ours.load_table("ods.t")
    assert sorted(r["client"] for r in fresh.scan().to_arrow().to_pylist()) == [1, 2]
    assert len(fresh.metadata.snapshots) == 2


def test_cas_lost_while_another_writer_won_is_unknown_and_keeps_our_file(s3_catalogs) -> None:
    ours, theirs = s3_catalogs
    table = ours.load_table("ods.t")

    def fault(request, n):
        if n == 1:  # our request never arrives; meanwhile another writer commits
            theirs.load_table("ods.t").append(row(2, 2))
            raise ReadTimeoutError(endpoint_url=request.url)

    on_pointer_cas(ours, fault)
    before = set(metadata_files(ours))
    with pytest.raises(CommitStateUnknownException):
        table.append(row(1, 1))
    fresh = ours.load_table("ods.t")
    ours_file = set(metadata_files(ours)) - before - {fresh.metadata_location.split("/ods/t/")[-1]}
    assert [r["client"] for r in fresh.scan().to_arrow().to_pylist()] == [2]
    assert any(k.startswith("ods/t/metadata/") for k in ours_file), "our metadata file must be kept"


class FaultyPointerPuts:
    """Fault wrapper around a real store: pointer writes sometimes apply and then report StoreUnavailable
    (lost response), sometimes fail before applying."""

    def __init__(self, store: ObjectStore, rng: random.Random, rate: float) -> None:
        self.rng, self.rate = rng, rate
        self.real_put = store.put
        store.put = self.put  # type: ignore[method-assign]

    def put(self, key: str, data: bytes, **kw: Any) -> str:
        if key.startswith(TABLES_PREFIX) and kw.get("if_match") and self.rng.random() < self.rate:
            if self.rng.random() < 0.5:
                self.real_put(key, data, **kw)
                raise StoreUnavailable(f"injected: response to PutObject {key} lost")
            raise StoreUnavailable(f"injected: PutObject {key} never arrived")
        return self.real_put(key, data, **kw)


def test_100_randomized_interleavings_keep_the_chain_intact(tmp_path) -> None:
    rng = random.Random(20261122)
    props = {"py-catalog-impl": "lakehouse.iceberg.catalog.ObjectStoreCatalog", "warehouse": tmp_path.as_uri()}
    clients = [load_catalog("lake", **props) for _ in range(3)]
    clients[0].create_namespace("ods")
    clients[0].create_table("ods.t", SCHEMA)
    for c in clients:
        FaultyPointerPuts(c.store, rng, rate=0.3)
    tables = [c.load_table("ods.t") for c in clients]
    succeeded, unknown = set(), set()
    for step in range(100):
        i = rng.randrange(3)
        action = rng.random()
        if action < 0.25:
            tables[i] = clients[i].load_table("ods.t")  # reload
            continue
        try:
            tables[i].append(row(i, step))  # often on a stale base: pyiceberg retries on the new one
            succeeded.add((i, step))
        except CommitStateUnknownException:
            unknown.add((i, step))
            tables[i] = clients[i].load_table("ods.t")
        # invariants after every step
        current = clients[0].load_table("ods.t")
        snaps = current.metadata.snapshots
        assert all(s.parent_snapshot_id == (snaps[k - 1].snapshot_id if k else None) for k, s in enumerate(snaps))
        for entry in current.metadata.metadata_log:  # the pointer's chain of metadata is intact
            key = entry.metadata_file.removeprefix(clients[0].warehouse + "/")
            assert clients[0].store.exists(key), f"metadata log names a missing file {key}"
        present = [(r["client"], r["step"]) for r in current.scan().to_arrow().to_pylist()]
        assert len(present) == len(set(present)), "a row landed twice"
        assert succeeded <= set(present), "a commit reported as successful is missing"
        assert set(present) <= succeeded | unknown, "a row nobody appended appeared"
    assert succeeded and unknown, "the fault mix should produce both outcomes"
