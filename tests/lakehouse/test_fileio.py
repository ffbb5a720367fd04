"""LakeFileIO on SeaweedFS: pyiceberg's writes go through our store, create-only is atomic, reads are pyarrow's."""

from __future__ import annotations

import os
import pickle
import threading
import uuid

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO

from lakehouse.iceberg.fileio import LakeFileIO, StoreOutputFile
from object_store import MiB, open_store
from tests.support.stores import catalog_properties

SCHEMA = pa.schema([("worker", pa.int32()), ("seq", pa.int32())])


@pytest.fixture
def s3(seaweedfs):
    """(FileIO properties, store on the bucket root, a fresh prefix)."""
    opts = seaweedfs.store_options()
    props = catalog_properties(f"s3://{seaweedfs.bucket}", opts)
    props = {k: v for k, v in props.items() if k.startswith("s3.")}
    return props, open_store(f"s3://{seaweedfs.bucket}", **opts), f"fio-{uuid.uuid4().hex[:10]}"


def test_loaded_by_configuration_and_writes_through_the_store(s3, seaweedfs) -> None:
    props, store, prefix = s3
    io = load_file_io({**props, "py-io-impl": "lakehouse.iceberg.fileio.LakeFileIO"})
    assert isinstance(io, LakeFileIO) and isinstance(io, PyArrowFileIO)
    location = f"s3://{seaweedfs.bucket}/{prefix}/a.bin"
    out = io.new_output(location)
    assert isinstance(out, StoreOutputFile) and not out.exists()
    with pytest.raises(FileNotFoundError, match="a.bin"):  # pyiceberg's contract for a missing file
        len(out)
    with out.create() as stream:
        stream.write(b"hello ")
        stream.write(b"lake")
        assert stream.tell() == 10
    heads = []
    real_head = io._store(seaweedfs.bucket).head
    io._store(seaweedfs.bucket).head = lambda key: heads.append(key) or real_head(key)
    assert store.get(f"{prefix}/a.bin").data == b"hello lake"
    assert len(out) == 10 and heads == []  # the size pyiceberg asks for after writing costs no request
    assert len(io.new_output(location)) == 10 and len(heads) == 1  # a file it did not write: a HEAD
    assert isinstance(io.new_input(location), PyArrowFile)  # reads stay pyarrow's
    assert out.to_input_file().open().read() == b"hello lake"


def test_create_only_is_atomic_and_leaves_the_existing_file(s3, seaweedfs) -> None:
    props, store, prefix = s3
    io = LakeFileIO(props)
    location = f"s3://{seaweedfs.bucket}/{prefix}/once.bin"
    barrier, winners, losers = threading.Barrier(8), [], []

    def create(i: int) -> None:
        stream = io.new_output(location).create(overwrite=False)
        stream.write(f"writer {i}".encode())
        barrier.wait()
        try:
            stream.close()
            winners.append(i)
        except FileExistsError:
            losers.append(i)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(losers) == 7
    assert store.get(f"{prefix}/once.bin").data == f"writer {winners[0]}".encode()
    with io.new_output(location).create(overwrite=True) as stream:  # overwrite replaces
        stream.write(b"replaced")
    assert store.get(f"{prefix}/once.bin").data == b"replaced"


def test_a_failed_write_leaves_nothing_even_past_one_part(s3, seaweedfs) -> None:
    props, store, prefix = s3
    io = LakeFileIO(props)
    big = os.urandom(9 * MiB)  # more than one 8 MiB part: a multipart upload
    with io.new_output(f"s3://{seaweedfs.bucket}/{prefix}/big.bin").create() as stream:
        stream.write(big)
    assert store.get(f"{prefix}/big.bin").data == big
    with pytest.raises(RuntimeError, match="boom"):
        with io.new_output(f"s3://{seaweedfs.bucket}/{prefix}/broken.bin").create() as stream:
            stream.write(big)
            raise RuntimeError("boom")
    assert not store.exists(f"{prefix}/broken.bin")


def test_pickles_and_leaves_other_schemes_to_pyarrow(s3, seaweedfs, tmp_path) -> None:
    props, store, prefix = s3
    io = pickle.loads(pickle.dumps(LakeFileIO(props)))
    with io.new_output(f"s3://{seaweedfs.bucket}/{prefix}/p.bin").create() as stream:
        stream.write(b"after pickling")
    assert store.get(f"{prefix}/p.bin").data == b"after pickling"
    local = io.new_output((tmp_path / "x.bin").as_uri())
    assert isinstance(local, PyArrowFile)
    with local.create() as stream:
        stream.write(b"local")
    assert (tmp_path / "x.bin").read_bytes() == b"local"


def test_catalog_tables_use_it_unless_configured_otherwise(seaweedfs) -> None:
    props = catalog_properties(f"s3://{seaweedfs.bucket}/cat-{uuid.uuid4().hex[:8]}", seaweedfs.store_options())
    catalog = load_catalog("lake", **props)
    catalog.create_namespace("ods")
    table = catalog.create_table("ods.t", SCHEMA)
    assert isinstance(table.io, LakeFileIO)
    for i in range(3):
        table.append(pa.table({"worker": pa.array([1], pa.int32()), "seq": pa.array([i], pa.int32())}))
    assert sorted(r["seq"] for r in catalog.load_table("ods.t").scan().to_arrow().to_pylist()) == [0, 1, 2]
    plain = load_catalog("plain", **{**props, "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"})
    assert type(plain.load_table("ods.t").io) is PyArrowFileIO
