"""Errors across the layers: one class per kind of error, each naming what went wrong and what to do."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lakehouse.errors
import object_store
from lakehouse import Lakehouse


def test_one_invalid_argument_class_for_the_store_and_the_lakehouse(tmp_path) -> None:
    """There were two: ``except lakehouse.errors.InvalidArgument`` missed the store's, and the reverse."""
    assert lakehouse.errors.InvalidArgument is object_store.InvalidArgument
    lh = Lakehouse.open((tmp_path / "wh").as_uri())
    lh.create_table("ods.events", pa.schema([("id", pa.int64())]), buckets=2)
    with pytest.raises(object_store.InvalidArgument, match="bucket"):
        lh.log("ods.events").read(7)  # a lakehouse argument
    with pytest.raises(lakehouse.errors.InvalidArgument, match="part_size"):
        lh.store.open_writer("x", part_size=1024)  # a store argument
    lh.close()
