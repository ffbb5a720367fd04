"""Streaming lake reads (`lakehouse.read.filescan`): the same rows as pyiceberg's ArrowScan for a filtered,
projected scan (and the parallel whole-table read, `read_tasks`, the same rows in the same order); files opened one
after another as the consumer asks (not all decoded before the first batch); a file pyiceberg must map (one lacking
a column) still read right; `union_read(keep=...)` narrows every batch as it arrives and returns exactly the rows a
filter of the whole read would. Both backends."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import GreaterThanOrEqual
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

from lakehouse import Lakehouse
from lakehouse.read import filescan
from tests.support.keyed_tables import NAME, SCHEMA, USER, batch


def _table(lh: Lakehouse, rounds: int = 4) -> None:
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=2)
    log = lh.log(NAME)
    for r in range(rounds):  # one file per bucket and round
        log.append(batch(range(r * 500, r * 500 + 500), f"r{r}"), op="upsert")
        lh.tier(NAME)


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


def test_streamed_files_give_pyiceberg_s_rows(lakehouse: Lakehouse, monkeypatch) -> None:
    lh = lakehouse
    monkeypatch.setattr(filescan, "BATCH_ROWS", 64)
    _table(lh)
    table = lh.lake_table(NAME)
    expr = GreaterThanOrEqual("n", 3)
    scan = table.scan(row_filter=expr, selected_fields=("k", "v"))
    tasks = list(scan.plan_files())
    assert len(tasks) == 8
    projected = scan.projection()
    batches = list(filescan.stream_tasks(tasks, table.io, table.metadata, projected, expr))
    assert batches and max(b.num_rows for b in batches) <= 64
    streamed = pa.Table.from_batches(batches)
    expected = ArrowScan(table.metadata, table.io, projected, expr).to_table(tasks)
    assert streamed.column_names == ["k", "v"]
    assert _rows(streamed) == _rows(expected.select(["k", "v"]))
    assert len(streamed) == sum(1 for k in range(2000) if k % 7 >= 3)


def test_files_with_position_deletes_give_pyiceberg_s_rows(lakehouse: Lakehouse, monkeypatch) -> None:
    """Merge-on-read: files whose rows later rounds marked deleted stream without those rows, batch edges and
    row-group pruning included, as pyiceberg's scan gives them."""
    from lakehouse.iceberg import datafiles

    lh = lakehouse
    monkeypatch.setattr(filescan, "BATCH_ROWS", 64)
    monkeypatch.setattr(datafiles, "ROW_GROUP_ROWS", 100)  # many row groups: batches end inside and at their edges
    _table(lh, rounds=2)
    log = lh.log(NAME)
    log.append(batch(range(0, 1000, 3), "u"), op="upsert")  # marks rows of every earlier file
    log.append(pa.table({"k": pa.array(range(1, 1000, 5), pa.int64())}), op="delete")
    lh.tier(NAME)
    table = lh.lake_table(NAME)
    for expr in (None, GreaterThanOrEqual("n", 3), GreaterThanOrEqual("k", 700)):  # k: prunes row groups
        scan = table.scan(selected_fields=("k", "v"), **({"row_filter": expr} if expr is not None else {}))
        tasks = list(scan.plan_files())
        assert any(t.delete_files for t in tasks)
        projected = scan.projection()
        streamed = pa.Table.from_batches(
            list(filescan.stream_tasks(tasks, table.io, table.metadata, projected, scan.row_filter))
        )
        expected = ArrowScan(table.metadata, table.io, projected, scan.row_filter).to_table(tasks)
        assert _rows(streamed) == _rows(expected.select(["k", "v"]))
        # the whole-table read: files decoded in parallel, the same rows in the same (task) order
        read = pa.Table.from_batches(
            list(filescan.read_tasks(tasks, table.io, table.metadata, projected, scan.row_filter, threads=3))
        )
        assert read.equals(streamed)
        keys = streamed["k"].to_pylist()
        assert len(keys) == len(set(keys)) and not any(k % 5 == 1 for k in keys)


def _count_opened(monkeypatch) -> list:
    opened: list = []
    real = filescan._FORMAT

    class Counting:  # a spy around the real format: which files became fragments, when
        def make_fragment(self, stream):
            opened.append(stream)
            return real.make_fragment(stream)

    monkeypatch.setattr(filescan, "_FORMAT", Counting())
    return opened


@pytest.mark.backends("local", "s3")
def test_large_files_are_opened_as_the_consumer_asks(lakehouse: Lakehouse, monkeypatch) -> None:
    lh = lakehouse
    _table(lh)
    monkeypatch.setattr(filescan, "SMALL_FILE_BYTES", 0)  # every file counts as large: streamed in turn
    opened = _count_opened(monkeypatch)
    batches = lh.union_batches(NAME)
    first = next(batches)
    assert first.num_rows and len(opened) == 1  # pyiceberg's to_record_batches had read all 8 files by now
    rest = list(batches)
    assert len(opened) == 8
    assert sum(b.num_rows for b in [first, *rest]) == 2000


@pytest.mark.backends("local", "s3")
def test_small_files_are_read_a_few_ahead_in_task_order(lakehouse: Lakehouse, monkeypatch) -> None:
    lh = lakehouse
    monkeypatch.setattr(filescan, "PREFETCH_FILES", 2)
    _table(lh, rounds=6)  # 12 files of 250 rows
    table = lh.lake_table(NAME)
    scan = table.scan(selected_fields=("k",))
    tasks = list(scan.plan_files())
    assert len(tasks) == 12
    # a third of them large (streamed in place), the rest small (prefetched): the order of the tasks holds
    large = {t.file.file_path for t in tasks[::3]}
    monkeypatch.setattr(filescan, "_is_small", lambda task: task.file.file_path not in large)
    opened = _count_opened(monkeypatch)
    batches = filescan.stream_tasks(tasks, table.io, table.metadata, scan.projection(), scan.row_filter)
    first = next(batches)
    assert first.num_rows and len(opened) <= 1 + 2  # the first file, two small ones ahead
    rest = list(batches)
    assert len(opened) == 12
    scan_ = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter)
    expected = [k for t in tasks for k in scan_.to_table([t]).column("k").to_pylist()]  # file after file
    assert [k for b in [first, *rest] for k in b.column("k").to_pylist()] == expected


def test_a_file_lacking_a_column_is_read_by_pyiceberg(lakehouse: Lakehouse, tmp_path) -> None:
    """A data file another engine wrote without column ``v`` (an older schema of the table, field ids kept):
    ``v`` is null in its rows, as pyiceberg reads it."""
    lh = lakehouse
    _table(lh, rounds=1)
    table = lh.lake_table(NAME)
    fields = [f for f in lh.lake_table(NAME).schema().as_arrow() if f.name != "v"]
    ids = {f.name: f.field_id for f in table.schema().fields}
    schema = pa.schema([f.with_metadata({b"PARQUET:field_id": str(ids[f.name]).encode()}) for f in fields])
    rows = pa.table([[7000, 7001], [1, 2], [0, 0], [900, 901], [0, 0]], schema=schema)
    location = f"{table.metadata.location}/data/foreign.parquet"
    with table.io.new_output(location).create() as out:
        pq.write_table(rows, out)
    like = next(iter(table.scan().plan_files())).file
    added = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=like.partition,
        record_count=2,
        file_size_in_bytes=len(table.io.new_input(location)),
        spec_id=like.spec_id,
    )
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        append.append_data_file(added)
    table = lh.lake_table(NAME)
    scan = table.scan()
    batches = filescan.stream_tasks(scan.plan_files(), table.io, table.metadata, scan.projection(), scan.row_filter)
    # pyiceberg's batches hold large strings, ours the file's: union reads cast to one schema
    got = pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")
    foreign = got.filter(pc.field("k") >= 7000)
    assert foreign.column("v").to_pylist() == [None, None]
    assert got.num_rows == 502


def test_union_read_keep_narrows_each_batch(lakehouse: Lakehouse, monkeypatch) -> None:
    lh = lakehouse
    monkeypatch.setattr(filescan, "BATCH_ROWS", 50)
    _table(lh)
    lh.log(NAME).append(batch([3, 4, 2500], "tail"), op="upsert")  # a tail: the lake's versions of 3, 4 hidden
    seen: list[int] = []
    wanted = pa.array([3, 4, 10, 11, 1999, 2500, 4000], pa.int64())

    def keep(rows: pa.Table) -> pa.Table:
        seen.append(rows.num_rows)
        return rows.filter(pc.is_in(rows["k"], value_set=wanted))

    got = lh.union_read(NAME, columns=USER, keep=keep)
    expected = lh.union_read(NAME, columns=USER).filter(pc.field("k").isin(wanted.to_pylist()))
    assert _rows(got) == _rows(expected)
    assert {r["k"]: r["v"] for r in got.to_pylist()}[3] == "tail-3"
    assert len(seen) > 40 and max(seen[:-1]) <= 50  # lake batches, then the tail's
    empty = lh.union_read(NAME, columns=["k"], keep=lambda rows: rows.slice(0, 0))
    assert empty.num_rows == 0 and empty.column_names == ["k"]
