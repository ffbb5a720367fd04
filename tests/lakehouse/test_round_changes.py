"""A tiering commit records its net changes (`lakehouse.iceberg.offsets.ROUND_CHANGES_PROPERTY`): inserts, updates and
deletes as `lakehouse.read.changes` counts them for the commit's offset range, found while the round looks the changed
keys up anyway; and, for merge-on-read and log tables, that its added data files are exactly the after-images.

For random upserts and deletes (repeated keys, deletes of absent keys) of every merge engine, merge-on-read and
copy-on-write, buckets split by file across tasks or not, with compactions between rounds: each tiering snapshot's
recorded counts equal the ops of ``lh.changes`` over its range, and where it says so its added data files hold
exactly the ``insert``/``update_after`` rows.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

from lakehouse import Lakehouse
from lakehouse.errors import BatchError
from lakehouse.executor import LocalExecutor
from lakehouse.iceberg.offsets import AFTER_IMAGES_IN_ADDED_FILES, round_changes, tiering_snapshots
from tests.support.profiles import examples

SCHEMA = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("v", pa.int64())])
NAME = "ods.rc"
BUCKETS = 2
ENGINES = {
    "last-row": {},
    "partial-update": {},
    "versioned": {"version_column": "v"},
    "first-row": {},
    "aggregate": {"aggregates": {"a": "sum"}},
}

rows_ = st.lists(
    st.fixed_dictionaries(
        {"k": st.integers(0, 9), "a": st.one_of(st.none(), st.integers(-9, 9)), "v": st.integers(0, 3)}
    ),
    min_size=1,
    max_size=8,
    unique_by=lambda r: r["k"],
)
step = st.one_of(
    st.tuples(st.just("upsert"), rows_),
    st.tuples(st.just("delete"), rows_),
    st.tuples(st.just("tier"), st.sampled_from([1, 4])),  # executor threads: 4 splits a bucket by file
    st.tuples(st.just("compact"), st.none()),
)


def added_after_images(lh: Lakehouse, snapshot_id: int) -> list[tuple]:
    """The user rows of the data files ``snapshot_id`` added."""
    lake = lh.lake_table(NAME)
    snap = lake.metadata.snapshot_by_id(snapshot_id)
    rows: list[tuple] = []
    for manifest in snap.manifests(lake.io):
        for entry in manifest.fetch_manifest_entry(lake.io, discard_deleted=True):
            if entry.status != ManifestEntryStatus.ADDED or entry.snapshot_id != snapshot_id:
                continue
            if entry.data_file.content != DataFileContent.DATA:
                continue
            with lake.io.new_input(entry.data_file.file_path).open() as f:
                t = pq.read_table(f, columns=["k", "a", "v"])
            rows += list(zip(*(t.column(c).to_pylist() for c in ("k", "a", "v")), strict=True))
    return sorted(rows, key=repr)


def check_round(lh: Lakehouse, write_mode: str, threads: int) -> int:
    """Tier on ``threads`` threads; the snapshot's recorded changes equal the changes read of its range (and its
    added files the after-images, for merge-on-read). Returns 1 if a round was committed."""
    before = lh.lake_offsets(NAME)
    result = lh.tier(NAME, executor=LocalExecutor(threads))
    if not result.tiered:
        return 0
    recorded = round_changes(lh.lake_table(NAME).metadata.snapshot_by_id(result.snapshot_id))
    changes = lh.changes(NAME, before, result.offsets)
    ops = Counter(changes.column("_op").to_pylist())
    assert recorded is not None
    counted = {"inserts": ops["insert"], "updates": ops["update_after"], "deletes": ops["delete"]}
    assert {k: recorded[k] for k in counted} == counted, (recorded, ops)
    merge_on_read = write_mode == "merge-on-read"
    assert (recorded.get("after_images") == AFTER_IMAGES_IN_ADDED_FILES) == merge_on_read
    if merge_on_read:
        after = changes.filter(pc.is_in(changes.column("_op"), pa.array(["insert", "update_after"])))
        want = sorted(zip(*(after.column(c).to_pylist() for c in ("k", "a", "v")), strict=True), key=repr)
        assert added_after_images(lh, result.snapshot_id) == want
    return 1


def run(engine: str, write_mode: str, steps: list[tuple]) -> int:
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        lh = Lakehouse.open(Path(tmp).as_uri())
        try:
            lh.create_table(
                NAME, SCHEMA, primary_key=["k"], buckets=BUCKETS, write_mode=write_mode, merge_engine=engine,
                **ENGINES[engine],
            )  # fmt: skip
            log = lh.log(NAME)
            for kind, arg in steps:
                if kind == "upsert":
                    log.append(pa.Table.from_pylist(arg, schema=SCHEMA), op="upsert")
                elif kind == "delete":
                    keys = ["k", "v"] if engine == "versioned" else ["k"]
                    data = pa.Table.from_pylist(arg, schema=SCHEMA).select(keys)
                    try:
                        log.append(data, op="delete")
                    except BatchError:  # first-row and aggregate take no deletes
                        assert engine in ("first-row", "aggregate")
                elif kind == "tier":
                    checked += check_round(lh, write_mode, arg)
                elif kind == "compact":
                    lh.compact(NAME, min_input_files=2, delete_ratio=0.0)
            # compactions and other commits record nothing; every tiering snapshot does
            lake = lh.lake_table(NAME)
            for snap, _ in tiering_snapshots(lake.metadata, BUCKETS, lake.io):
                assert round_changes(snap) is not None
        finally:
            lh.close()
    return checked


@pytest.mark.parametrize("write_mode", ["merge-on-read", "copy-on-write"])
@pytest.mark.parametrize("engine", list(ENGINES))
@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=3, max_size=12))
def test_recorded_round_changes_equal_the_changes_read(engine: str, write_mode: str, steps: list[tuple]) -> None:
    run(engine, write_mode, [*steps, ("tier", 4)])


def test_a_round_of_every_kind_of_change_is_counted() -> None:
    """Inserts, updates, deletes of live and of absent keys, a key changed twice in a round and again in later
    rounds, keys deleted and written again, one task per bucket and buckets split by file."""
    steps = [
        ("upsert", [{"k": k, "a": k, "v": 0} for k in range(8)]),
        ("tier", 1),
        ("upsert", [{"k": 1, "a": 10, "v": 1}, {"k": 8, "a": 8, "v": 0}]),
        ("upsert", [{"k": 1, "a": 11, "v": 2}]),
        ("delete", [{"k": 2, "a": None, "v": 3}, {"k": 9, "a": None, "v": 0}]),
        ("tier", 4),
        # keys whose older versions are deleted rows of earlier files: only their live rows count
        ("upsert", [{"k": 1, "a": 12, "v": 3}, {"k": 2, "a": 2, "v": 3}]),
        ("delete", [{"k": 8, "a": None, "v": 3}]),
        ("tier", 1),
        ("upsert", [{"k": 1, "a": 13, "v": 3}, {"k": 8, "a": 8, "v": 3}]),
        ("tier", 4),
    ]
    for write_mode in ("merge-on-read", "copy-on-write"):
        assert run("last-row", write_mode, steps) == 4
