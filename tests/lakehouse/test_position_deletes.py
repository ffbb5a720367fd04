"""What a merge-on-read round looks up, read once: the delete index (each delete file read once per task, not once
per data file it may name), key membership by searching the changed keys in a file's ascending keys, and the
row-group pruning by the changed keys' range. Each is checked against the plain computation it replaces."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakehouse import Lakehouse
from lakehouse.errors import CorruptDataFileError
from lakehouse.iceberg.datafiles import LakeContext
from lakehouse.iceberg.position_deletes import DeleteIndex, deleted_positions, in_sorted, sorted_unique
from lakehouse.merge.keyed_rows import KeySet, may_hold
from tests.support.profiles import examples

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])
NAME = "ods.pd"

keys_ = st.lists(st.integers(-50, 50), max_size=40)


@given(changed=keys_, stored=keys_, ascending=st.booleans())
def test_key_membership_and_range_pruning_equal_a_set_lookup(changed, stored, ascending) -> None:
    if ascending:  # a data file's key column: distinct keys in order (the search of the changed keys in them)
        stored = sorted(set(stored))
    keys = KeySet(pa.table({"k": pa.array(changed, pa.int64())}), ("k",))
    got = keys.hits(pa.table({"k": pa.array(stored, pa.int64())})).to_pylist()
    assert got == [s in set(changed) for s in stored]
    if stored:
        lo, hi = min(stored), max(stored)
        assert may_hold(keys, {"k": (lo, hi)}) == any(lo <= c <= hi for c in changed)
    values = np.array(stored, np.int64)
    assert in_sorted(values, sorted_unique(np.array(changed, np.int64))).tolist() == [s in set(changed) for s in stored]


rounds_ = st.lists(
    st.tuples(st.lists(st.integers(0, 59), max_size=25), st.lists(st.integers(0, 59), max_size=8)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=rounds_)
def test_the_delete_index_finds_what_each_data_files_lookup_finds(rounds) -> None:
    """Rounds of upserts and deletes leave data files named by several delete files each (uncompacted): for every
    data file, the index (every delete file read once) gives the positions a lookup of that file alone gives, and
    the table read through them is the log replayed."""
    with tempfile.TemporaryDirectory() as tmp:
        lh = Lakehouse.open(Path(tmp).as_uri())
        lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=2)
        log = lh.log(NAME)
        log.append(pa.table({"k": pa.array(range(60), pa.int64()), "v": pa.array([0] * 60, pa.int64())}), "upsert")
        lh.tier(NAME)
        state = dict.fromkeys(range(60), 0)
        for n, (upserts, deletes) in enumerate(rounds, start=1):
            if upserts:
                ups = sorted(set(upserts))
                log.append(
                    pa.table({"k": pa.array(ups, pa.int64()), "v": pa.array([n] * len(ups), pa.int64())}), "upsert"
                )
                state.update(dict.fromkeys(ups, n))
            if deletes:
                log.append(pa.table({"k": pa.array(sorted(set(deletes)), pa.int64())}), "delete")
                for k in deletes:
                    state.pop(k, None)
            lh.tier(NAME)
        table = lh.lake_table(NAME)
        ctx = LakeContext.of(lh.store, table)
        index = DeleteIndex(ctx)
        for task in table.scan().plan_files():
            alone = deleted_positions(ctx, task.file, task.delete_files)
            assert index.positions(task.file, task.delete_files).tolist() == alone.tolist()
        got = lh.lake_read(NAME)
        assert dict(zip(got["k"].to_pylist(), got["v"].to_pylist(), strict=True)) == state


def test_a_corrupt_delete_file_fails_the_index_naming_it(tmp_path) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=1)
    log = lh.log(NAME)
    log.append(pa.table({"k": pa.array(range(10), pa.int64()), "v": pa.array([0] * 10, pa.int64())}), "upsert")
    lh.tier(NAME)
    log.append(pa.table({"k": pa.array([3], pa.int64())}), "delete")
    lh.tier(NAME)
    table = lh.lake_table(NAME)
    [task] = [t for t in table.scan().plan_files() if t.delete_files]
    [delete_file] = task.delete_files
    Path(delete_file.file_path.removeprefix("file://")).write_bytes(b"not parquet")
    with pytest.raises(CorruptDataFileError, match=delete_file.file_path.split("/")[-1]):
        DeleteIndex(LakeContext.of(lh.store, table)).positions(task.file, task.delete_files)
