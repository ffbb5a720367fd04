"""What a table costs (`lakehouse.cost`, `lakestream table cost`): producers' writes read from the log, lake commits'
usage recorded in their snapshots, storage; priced at the settings' price list, for a period."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from lakehouse import Lakehouse
from lakehouse.errors import InvalidArgument
from lakehouse.iceberg.commit_usage import USAGE_PROPERTY, snapshot_usage
from lakehouse.log.chain import data_prefix
from lakehouse.table.definition import COMMITS_LOG, SEGMENTS_LOG, TableName
from object_store import ObjectStore
from object_store.pricing import PriceList
from object_store.usage import measure_usage

ORDERS = pa.schema([("o_orderkey", pa.int64()), ("o_comment", pa.string())])


def orders(keys, comment: str = "c") -> pa.Table:
    keys = list(keys)
    return pa.table({"o_orderkey": pa.array(keys, pa.int64()), "o_comment": pa.array([f"{comment}{k}" for k in keys])})


def test_a_tables_cost_is_its_appends_its_commits_usage_and_its_storage(lakehouse: Lakehouse, store: ObjectStore):
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4, log_format=COMMITS_LOG)
    start = datetime.now(UTC)
    log_ = lakehouse.log("ods.orders")
    for i in range(3):
        log_.append(orders(range(i * 100, i * 100 + 100)), "upsert")
    written = [o for o in store.list(data_prefix(TableName("ods", "orders")))]
    assert len(written) == 3  # one data object per append, whatever its buckets
    with measure_usage() as tiering:
        result = lakehouse.tier("ods.orders")
    log_.append(orders(range(50), "u"), "upsert")
    lakehouse.tier("ods.orders")
    compacted = lakehouse.compact("ods.orders", min_input_files=2)
    assert compacted.snapshot_id is not None

    # each lake commit keeps what it asked of the store up to its commit, its tasks' requests included
    lake = lakehouse.lake_table("ods.orders")
    first = snapshot_usage(lake.metadata.snapshot_by_id(result.snapshot_id))
    assert first is not None and first.requests.get("PUT", 0) >= 2  # data files, the offsets file at least
    assert first.write_requests <= tiering.usage().write_requests  # the commit itself comes after
    compaction = snapshot_usage(lake.metadata.snapshot_by_id(compacted.snapshot_id))
    assert compaction is not None and compaction.requests.get("PUT", 0) >= compacted.files_after

    cost = lakehouse.cost("ods.orders", since=start - timedelta(seconds=1))
    lines = {line.part: line for line in cost.lines}
    producers = lines["producers"]
    assert producers.operations == 4
    assert producers.usage.requests == {"PUT": 8, "GET": 4}  # a data object, a record and the look before it
    assert producers.usage.bytes_sent == sum(o.size for o in store.list(data_prefix(TableName("ods", "orders"))))
    assert lines["lake commits: tiering"].operations == 2 and lines["lake commits: tiering"].unmeasured == 0
    assert lines["lake commits: compaction"].operations == 1
    prices = PriceList()
    for line in cost.lines:
        assert line.dollars == pytest.approx(prices.price(line.usage).total)
    lake_bytes = int(lakehouse.lake_table("ods.orders").current_snapshot().summary["total-files-size"])
    assert cost.stored_bytes == lake_bytes + producers.usage.bytes_sent
    assert cost.total == pytest.approx(cost.requests_dollars + cost.storage_dollars) and cost.total > 0

    # a period after all of it: nothing written, nothing committed; storage still held
    later = lakehouse.cost(
        "ods.orders", since=datetime.now(UTC) + timedelta(seconds=1), until=datetime.now(UTC) + timedelta(hours=1)
    )
    assert [(line.part, line.operations) for line in later.lines] == [("producers", 0)]
    assert later.stored_bytes == cost.stored_bytes and later.requests_dollars == 0


def test_a_segments_log_counts_a_segment_per_bucket_an_append_touched(lakehouse: Lakehouse, store: ObjectStore):
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=4, log_format=SEGMENTS_LOG)
    lakehouse.log("ods.orders").append(orders(range(100)), "upsert")
    segments = [o for o in store.list("ods/orders/log/")]
    cost = lakehouse.cost("ods.orders")
    producers = cost.lines[0]
    assert producers.operations == len(segments) == 4
    assert producers.usage.requests == {"PUT": 4}
    assert producers.usage.bytes_sent == sum(o.size for o in segments)


def test_a_commit_of_an_older_version_is_counted_not_priced(lakehouse: Lakehouse):
    """A snapshot without recorded usage (an older lakestream, another writer): counted as unmeasured."""
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=2)
    lakehouse.log("ods.orders").append(orders(range(10)), "upsert")
    start = datetime.now(UTC) - timedelta(seconds=1)
    lakehouse.tier("ods.orders")
    lake = lakehouse.lake_table("ods.orders")
    snap = lake.current_snapshot()
    assert USAGE_PROPERTY in snap.summary.additional_properties
    del snap.summary.additional_properties[USAGE_PROPERTY]
    from lakehouse.iceberg.commit_usage import commit_usage

    (tiering,) = commit_usage(lake.metadata.snapshots, int(start.timestamp() * 1000), 2**62)
    assert (tiering.commits, tiering.measured, tiering.usage.total_requests) == (1, 0, 0)


def test_a_bad_period_is_refused(lakehouse: Lakehouse):
    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=2)
    now = datetime.now(UTC)
    with pytest.raises(InvalidArgument, match="must end after its start"):
        lakehouse.cost("ods.orders", since=now, until=now - timedelta(hours=1))
    with pytest.raises(InvalidArgument, match="timezone-aware times"):
        lakehouse.cost("ods.orders", since=datetime(2026, 1, 1))


def test_the_cli_prints_the_cost_and_its_json_and_refuses_a_bad_time(lakehouse: Lakehouse, tmp_path):
    from typer.testing import CliRunner

    from lakestream.cli import app

    lakehouse.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=2)
    lakehouse.log("ods.orders").append(orders(range(10)), "upsert")
    lakehouse.tier("ods.orders")
    url = lakehouse.url
    runner = CliRunner()
    shown = runner.invoke(app, ["table", "cost", "ods.orders", "-w", url, "--since", "1h"])
    assert shown.exit_code == 0, shown.output
    assert "producers" in shown.output and "lake commits: tiering" in shown.output and "storage" in shown.output
    doc = json.loads(runner.invoke(app, ["table", "cost", "ods.orders", "-w", url, "--json"]).output)
    assert [line["part"] for line in doc["lines"]] == ["producers", "lake commits: tiering"]
    assert doc["lines"][0]["operations"] == 1 and doc["total_dollars"] > 0
    assert doc["this_command"]["usage"]["requests"]["LIST"] >= 1
    bad = runner.invoke(app, ["table", "cost", "ods.orders", "-w", url, "--since", "yesterday"])
    assert bad.exit_code != 0 and "bad time 'yesterday'" in bad.output
