"""Errors across the layers: one class per kind of error, each naming what went wrong and what to do."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from functools import partialmethod
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import lakehouse.errors
import object_store
from lakehouse import Lakehouse
from lakehouse.errors import CorruptDataFileError, LakeStateError
from lakehouse.settings import Settings
from lakestream.cli import app


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


DROP_DAC = "-dac_override,-dac_read_search,-fowner"


def _cli_as_reader(args: list[str], warehouse: Path) -> subprocess.CompletedProcess:
    """`lakestream ARGS -w WAREHOUSE` in a process that cannot write the warehouse (made read-only with
    chmod). Root writes through any permission bits, so as root the process runs without the capabilities
    that let it (setpriv drops CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER)."""
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"}
    code = "import sys; from lakestream.cli import app; sys.exit(app())"
    command = [sys.executable, "-c", code, *args, "-w", warehouse.as_uri()]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: cannot make a process that respects permissions")
        command = ["setpriv", f"--inh-caps={DROP_DAC}", f"--bounding-set={DROP_DAC}", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=repo)


@pytest.mark.subprocess
def test_a_read_only_warehouse_can_be_listed_and_read(tmp_path) -> None:
    """Every read took a lock stripe by opening .lakestream-store/locks/NN.lock for writing: on a warehouse
    the process could not write, even `table list` failed (EACCES, or EROFS on a read-only mount)."""
    warehouse = tmp_path / "wh"
    lh = Lakehouse.open(warehouse.as_uri())
    lh.create_table("ods.events", pa.schema([("id", pa.int64())]), bucket_key="id", buckets=2)
    lh.log("ods.events").append(pa.table({"id": list(range(10))}))
    lh.tier("ods.events")
    lh.log("ods.events").append(pa.table({"id": list(range(10, 15))}))  # a log tail after the lake
    lh.close()
    locks = warehouse / ".lakestream-store" / "locks"
    for lock in locks.iterdir():
        lock.unlink()  # stripes no write used yet: a reader cannot create them
    subprocess.run(["chmod", "-R", "a-w", str(warehouse)], check=True)
    try:
        listed = _cli_as_reader(["table", "list"], warehouse)
        assert listed.returncode == 0 and "ods.events" in listed.stdout, listed.stdout + listed.stderr
        read = _cli_as_reader(["table", "read", "ods.events"], warehouse)
        assert read.returncode == 0 and "15 rows (union read)" in read.stdout, read.stdout + read.stderr
        offsets = _cli_as_reader(["log", "offsets", "ods.events"], warehouse)
        assert offsets.returncode == 0 and "15" in offsets.stdout, offsets.stdout + offsets.stderr
        create = _cli_as_reader(["table", "create", "ods.more", "--schema", "id:int64"], warehouse)
        assert create.returncode == 1 and "read-only for this process: reads work" in create.stderr, (
            create.stdout + create.stderr
        )
        assert "Traceback" not in create.stderr
        assert list(locks.iterdir()) == []
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(warehouse)], check=False)


# ---- the CLI's boundary: one line that says what to do, never a traceback --------------------------------


def test_register_with_a_missing_metadata_file_is_one_line(tmp_path) -> None:
    """It printed pyarrow's FileNotFoundError as a traceback."""
    wh = tmp_path.as_uri()
    result = CliRunner().invoke(app, ["table", "register", "ods.x", "/nonexistent.json", "-w", wh])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot register ods.x"), result.output
    assert "/nonexistent.json" in lines[0] and "lakestream table location" in lines[0]


def test_a_bad_spark_master_is_one_line(tmp_path) -> None:
    """`tier --spark-master foo://bar` printed PySparkRuntimeError's traceback after the JVM's own."""
    result = CliRunner().invoke(app, ["tier", "--spark-master", "foo://bar", "-w", tmp_path.as_uri()])
    assert result.exit_code == 1 and result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Spark master 'foo://bar' is not one Spark accepts" in lines[0], result.output


def test_the_cli_shows_each_retry_against_a_store_that_does_not_answer(silent_endpoint, monkeypatch) -> None:
    """`lakestream table list` against an endpoint that accepts connections and never answers said nothing
    for about 4.5 minutes, then printed a traceback."""
    fast = partialmethod(Settings.open_store, read_timeout=0.3, connect_timeout=1, max_attempts=3)
    monkeypatch.setattr(Settings, "open_store", fast)  # the defaults (30 s, 8 attempts, 60 s) in a blink
    monkeypatch.setattr(
        logging.getLogger(), "handlers", []
    )  # as in a shell: pytest's capture is not configured logging
    store_logger = logging.getLogger("object_store")
    monkeypatch.setattr(store_logger, "handlers", list(store_logger.handlers))  # the CLI's handler goes afterwards
    env = {"LAKESTREAM_S3_ENDPOINT": silent_endpoint, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    result = CliRunner().invoke(app, ["table", "list", "-w", "s3://bucket/wh"], env=env)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["warning", "warning", "error"], result.output
    assert "ReadTimeoutError (attempt 1 of 3" in lines[0] and "retrying in" in lines[0]
    assert "failed after 3 attempts" in lines[2] and f"Check that the store at {silent_endpoint}" in lines[2]


def test_a_corrupt_data_file_is_named(lakehouse: Lakehouse) -> None:
    """pyiceberg opens data files as streams, so pyarrow reported "Could not open Parquet input source
    '<Buffer>'" without saying which file."""
    lh = lakehouse
    lh.create_table("ods.events", pa.schema([("id", pa.int64())]), bucket_key="id", buckets=2)
    lh.log("ods.events").append(pa.table({"id": list(range(10))}))
    lh.tier("ods.events")
    path = next(t.file.file_path for t in lh.lake_table("ods.events").scan().plan_files())
    lh.store.put(path.removeprefix(lh.store.url.rstrip("/") + "/"), b"not parquet" * 10)
    reads = {
        "lake_read": lambda: lh.lake_read("ods.events"),
        "union_read": lambda: lh.union_read("ods.events"),
        "union_batches": lambda: list(lh.union_batches("ods.events")),
    }
    for name, read in reads.items():
        with pytest.raises(CorruptDataFileError, match="cannot be read as Parquet") as info:
            read()
        assert path in str(info.value) and "Restore it from a backup" in str(info.value), name


def test_a_deleted_catalog_pointer_points_to_table_register(lakehouse: Lakehouse) -> None:
    """The hint was to recreate the lake table, which makes an empty one: tiering would start over from the
    log's first offsets, and records log retention removed would be gone from the lake."""
    lh = lakehouse
    lh.create_table("ods.events", pa.schema([("id", pa.int64())]), bucket_key="id", buckets=2)
    lh.log("ods.events").append(pa.table({"id": list(range(10))}))
    lh.tier("ods.events")
    metadata = lh.catalog.table_location("ods.events")
    lh.store.delete("_lakestream/catalog/tables/ods/events.json")  # the pointer, as a mistaken cleanup would
    with pytest.raises(LakeStateError) as info:
        lh.tier("ods.events")
    assert f"lakestream table register ods.events {metadata}" in str(info.value)
    lh.register_table("ods.events", metadata)  # what the command does
    assert lh.lake_offsets("ods.events") == lh.log("ods.events").end_offsets()


def test_every_error_crosses_a_process_whole() -> None:
    """Errors raised in a worker process or a Spark task are pickled to their caller: those whose fields are
    required keyword arguments failed to unpickle ("missing 3 required keyword-only arguments"), which hid the
    error itself (found by 8 racing producer processes)."""
    import pickle

    from lakehouse.errors import AppendIncomplete, SequenceConflict
    from lakehouse.log.log import AppendResult

    conflict = SequenceConflict("p1 reused sequence 7", producer_id="p1", sequence=7, bucket=3)
    back = pickle.loads(pickle.dumps(conflict))
    assert type(back) is SequenceConflict and str(back) == str(conflict)
    assert (back.producer_id, back.sequence, back.bucket) == ("p1", 7, 3)
    result = AppendResult("p1", 7, {0: (0, 9)}, 10)
    incomplete = pickle.loads(pickle.dumps(AppendIncomplete("half", result=result, failed={1: OSError("x")})))
    assert incomplete.result == result and str(incomplete.failed[1]) == "x"
