"""Maintenance of the metrics table (`quality.metrics.table.maintain_metrics`): after several collects the
compaction leaves fewer files and snapshots and exactly the same rows, the recorded map survives it (the next
collect records nothing twice), a collect racing the compaction loses no row and doubles none, and the
retention drops old rows without making the next collect record them again. Local backend, no Spark."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pyarrow as pa
import pytest

from lakehouse import Lakehouse
from object_store import open_store
from quality.metrics import collect_metrics
from quality.metrics import table as metrics_store
from quality.metrics.table import RECORDED_PROPERTY, maintain_metrics, metrics_table, recorded
from tests.conftest import duckdb_connection

NAME = "ods.mm"
SCHEMA = pa.schema([("k", pa.int64()), ("x", pa.float64())])


@pytest.fixture
def lh(tmp_path):
    lake = Lakehouse(open_store(tmp_path.as_uri()))
    lake.create_table(NAME, SCHEMA, bucket_key="k", buckets=2)
    yield lake
    for log in lake._logs.values():
        log.close()


def commit(lh: Lakehouse, start: int) -> None:
    """One lake commit of a few new rows."""
    keys = list(range(start, start + 5))
    lh.log(NAME).append(pa.table({"k": keys, "x": [k / 2 for k in keys]}, schema=SCHEMA))
    lh.tier(NAME)


def rows(lh: Lakehouse) -> Counter:
    return Counter(tuple(r.values()) for r in metrics_table(lh).scan().to_arrow().to_pylist())


def data_files(lh: Lakehouse) -> int:
    return len(list(metrics_table(lh).scan().plan_files()))


def assert_each_metric_once(lh: Lakehouse) -> None:
    keys = Counter(
        (r["snapshot_id"], r["metric"], r["column"]) for r in metrics_table(lh).scan().to_arrow().to_pylist()
    )
    assert keys and max(keys.values()) == 1


def collect_rounds(lh: Lakehouse, n: int) -> None:
    for i in range(n):
        commit(lh, i * 10)
        assert collect_metrics(lh) > 0


def test_compaction_keeps_the_rows_and_the_recorded_map(lh: Lakehouse) -> None:
    collect_rounds(lh, 4)
    before, done = rows(lh), recorded(metrics_table(lh))
    assert data_files(lh) == 4 and len(metrics_table(lh).metadata.snapshots) == 4

    result = maintain_metrics(lh, older_than=timedelta(0), keep_snapshots=1)
    table = metrics_table(lh)
    assert (result.files_before, result.files_after, result.files_rewritten) == (4, 1, 4)
    assert data_files(lh) == 1 and len(table.metadata.snapshots) == 1
    assert result.expiry["files_deleted"] >= 4  # the small files, no longer referenced, are gone
    assert rows(lh) == before  # exactly the same rows
    assert table.current_snapshot().summary[RECORDED_PROPERTY] and recorded(table) == done
    sorted_rows = table.scan().to_arrow()
    assert sorted_rows.column("committed_at").to_pylist() == sorted(sorted_rows.column("committed_at").to_pylist())
    con = duckdb_connection()  # the independent reader reads the compacted table
    (count,) = con.sql(f"SELECT count(*) FROM iceberg_scan('{table.metadata_location}')").fetchone()
    assert count == sum(before.values())

    assert collect_metrics(lh) == 0  # the recorded map survived: nothing collected again
    commit(lh, 100)
    new = collect_metrics(lh)
    assert 0 < new and sum(rows(lh).values()) == sum(before.values()) + new
    assert_each_metric_once(lh)
    # nothing small enough to merge: no commit
    assert maintain_metrics(lh, older_than=timedelta(0), keep_snapshots=1).files_after == 1
    assert rows(lh).total() == sum(before.values()) + new


def test_a_collect_racing_the_compaction_loses_and_doubles_nothing(lh: Lakehouse, monkeypatch) -> None:
    collect_rounds(lh, 3)
    write = metrics_store._write_rewritten
    raced = []

    def collect_meanwhile(*args):  # between the compaction's plan and its commit
        if not raced:
            commit(lh, 200)
            raced.append(collect_metrics(lh))
        return write(*args)

    monkeypatch.setattr(metrics_store, "_write_rewritten", collect_meanwhile)
    before = rows(lh)
    result = maintain_metrics(lh, older_than=timedelta(0), keep_snapshots=1)
    assert raced[0] > 0 and result.retries == 1
    after = rows(lh)
    assert after.total() == before.total() + raced[0] and after >= before
    assert data_files(lh) == 1
    assert_each_metric_once(lh)
    assert collect_metrics(lh) == 0  # the racing collect's progress is in the compaction's recorded map


def test_retention_drops_old_rows_but_not_the_recorded_map(lh: Lakehouse) -> None:
    collect_rounds(lh, 2)
    kept = maintain_metrics(lh, older_than=timedelta(0), keep_snapshots=1, retention=timedelta(days=1))
    assert kept.rows_dropped == 0 and rows(lh).total() == kept.rows_rewritten > 0
    result = maintain_metrics(lh, older_than=timedelta(0), keep_snapshots=1, retention=timedelta(0))
    assert result.rows_dropped == kept.rows_rewritten and data_files(lh) == 0
    assert collect_metrics(lh) == 0  # dropped for age, not collected again
    commit(lh, 300)
    assert collect_metrics(lh) > 0
    assert_each_metric_once(lh)


def test_retention_filters_a_file_across_its_cutoff(lh: Lakehouse) -> None:
    collect_rounds(lh, 2)
    maintain_metrics(lh, older_than=timedelta(0), keep_snapshots=1)  # one file holding both commits
    first, second = sorted({r["committed_at"] for r in metrics_table(lh).scan().to_arrow().to_pylist()})
    before = rows(lh)
    result = maintain_metrics(lh, older_than=timedelta(0), keep_snapshots=1, retention=second)
    assert result.files_rewritten == 1 and result.rows_dropped > 0
    assert rows(lh) == Counter({r: n for r, n in before.items() if r[2] == second})
    assert collect_metrics(lh) == 0


def test_cli_maintains(lh: Lakehouse) -> None:
    import json

    from typer.testing import CliRunner

    from lakestream.cli import app

    collect_rounds(lh, 2)
    before = rows(lh)
    wh = lh.store.url
    done = CliRunner().invoke(
        app, ["metrics", "maintain", "-w", wh, "--snapshot-age-hours", "0", "--keep-snapshots", "1", "--json"]
    )
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert (result["files_before"], result["files_after"]) == (2, 1) and result["expiry"]["expired"]
    assert rows(lh) == before and data_files(lh) == 1
    again = CliRunner().invoke(app, ["metrics", "maintain", "-w", wh])
    assert again.exit_code == 0 and "1 -> 1 data files" in again.output, again.output


def test_the_dags_job_maintains(lh: Lakehouse, capsys) -> None:
    import json

    from jobs import metrics_maintenance

    collect_rounds(lh, 2)
    before = rows(lh)
    argv = ["--warehouse", lh.store.url, "--snapshot-age-hours", "0", "--keep-snapshots", "1"]
    assert metrics_maintenance.main(argv) == 0
    line = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert line["table"] == "_lakestream.metrics" and line["files_after"] == 1
    assert rows(lh) == before and data_files(lh) == 1
