"""Shared fixtures: one real SeaweedFS S3 server per test session, stores on the local backend (on SeaweedFS too
where a test is marked `backends("local", "s3")`), the tiers and the hypothesis profile (tests/README.md)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from object_store import ObjectStore, open_store
from object_store.seaweedfs import SeaweedFS
from tests.support.profiles import load_profile
from tests.support.spark_cds import driver_options
from tests.support.stores import catalog_properties, new_store_spec
from tests.support.tiers import guard_fast_tier, mark_tiers

# Before any test module is imported: property tests scale their example counts by the profile at import.
load_profile()

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Every Spark driver JVM the suite starts (the shared session, crash workers, `dag.test()`'s spark-submits, the demo)
# lives seconds on small data: the C1-only JIT compiles far less, and Spark's classes come mapped from the archive
# `make install` dumped (tests/support/spark_cds.py) instead of being loaded and verified again (tests/README.md).
# Only these: a GC flag here would clash with the G1 a SQL session asks for itself.
os.environ.setdefault("SPARK_SUBMIT_OPTS", driver_options())
if os.environ.get("PYTEST_XDIST_WORKER"):
    # xdist's workers inherit COLUMNS=80 / LINES=24 from their launcher; the CLI honours COLUMNS (it is how a user
    # asks for a width), so without this the CLI tests would read tables folded to 80 columns.
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_tiers(items)


@pytest.fixture(autouse=True)
def _fast_tier_starts_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    guard_fast_tier(monkeypatch)


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """A real S3 server on loopback (SeaweedFS `weed mini`), stopped by PID at the end of the session."""
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A test that takes a store runs on the local backend; on SeaweedFS too where the backend is what it tests
    # (`pytest.mark.backends("local", "s3")`: the store contract, faults, races, conditional writes). A test that
    # parametrizes `backend` itself keeps its own values.
    if "backend" not in metafunc.fixturenames:
        return
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0]
        if "backend" in ([n.strip() for n in names.split(",")] if isinstance(names, str) else names):
            return
    marker = metafunc.definition.get_closest_marker("backends")
    metafunc.parametrize("backend", marker.args if marker else ("local",), indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The store backend: "local" (a file:// store) or "s3" (SeaweedFS); see `pytest_generate_tests`."""
    return getattr(request, "param", "local")


@pytest.fixture
def store_spec(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """(url, options) of a fresh, empty store on the parametrized backend: what a subprocess needs."""
    return new_store_spec(backend, tmp_path, request)


@pytest.fixture
def store(store_spec: tuple[str, dict[str, str]]) -> Iterator[ObjectStore]:
    url, options = store_spec
    s = open_store(url, **options)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(autouse=True)
def _log_format(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``segments`` tests the log layout of tables created before "commits" became the default: the
    tables it creates (without a ``log_format``) get that layout, as a warehouse of an earlier version has them."""
    if request.node.get_closest_marker("segments") is not None:
        from lakehouse.table import definition

        monkeypatch.setattr(definition, "DEFAULT_LOG_FORMAT", definition.SEGMENTS_LOG)


@pytest.fixture
def lakehouse(store: ObjectStore):
    """A `Lakehouse` on a fresh store of the parametrized backend."""
    from lakehouse import Lakehouse

    lh = Lakehouse(store)
    try:
        yield lh
    finally:
        for log in lh._logs.values():
            log.close()


@pytest.fixture
def catalog_props(store_spec) -> dict[str, str]:
    return catalog_properties(*store_spec)


@pytest.fixture
def catalog(catalog_props):
    from pyiceberg.catalog import load_catalog

    return load_catalog("lake", **catalog_props)


@pytest.fixture(scope="session")
def spark():
    """One Spark `local[2]` session for the whole run (starting one takes ~15 s)."""
    from lakehouse.spark import spark_session

    # many small jobs on 2 cores: the C1-only JIT compiles less than the full one would; the tests' data is small:
    # two shuffle partitions, not production's 8 tasks of a few rows each per shuffle (still more than one, so
    # what crosses partitions runs); BENCHMARKS.md, "The test suite", has what it saves
    session = spark_session(
        master="local[2]",
        app_name="lakestream-tests",
        scheduler_only=True,
        **{"spark.sql.shuffle.partitions": "2"},
    )
    try:
        yield session
    finally:
        session.stop()


def duckdb_connection():
    """DuckDB with its iceberg and avro extensions, loaded offline (see `lakehouse.duckdb_reader`)."""
    pytest.importorskip("duckdb")
    from lakehouse.duckdb_reader import duckdb_connection as connect

    return connect()


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """http://127.0.0.1:PORT of a TCP server that accepts every connection and never sends a byte."""
    server = socket.create_server(("127.0.0.1", 0), backlog=64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()
        for conn in held:
            conn.close()
