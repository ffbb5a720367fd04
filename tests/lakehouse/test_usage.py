"""Operations record their requests to the store: tiering, compaction, executor tasks (local threads, Spark)."""

from __future__ import annotations

import pytest

from lakehouse import Lakehouse
from lakehouse.executor import LocalExecutor, SparkExecutor
from lakehouse.tiering.round import TieringResult
from object_store import measure_usage, open_store
from tests.support.orders_tables import ORDERS, orders


@pytest.mark.backends("local", "s3")
def test_a_tiering_round_reports_the_puts_of_its_files_and_its_commit(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.u", ORDERS, bucket_key="o_orderkey", buckets=4)
    lh.log("ods.u").append(orders(range(400)))
    with measure_usage() as caller:
        result = lh.tier("ods.u", workers=4)
    assert result.files_added == 4
    used = result.usage
    # a data file per bucket (written by the executor's threads), the metadata file and the pointer's CAS
    assert used.requests["PUT"] >= result.files_added + 2
    assert used.bytes_sent >= result.bytes_written
    assert used.requests.get("GET", 0) + used.requests.get("HEAD", 0) >= 1  # the pointer, the log's segments
    assert caller.usage().requests["PUT"] >= used.requests["PUT"]  # the caller's scope holds the round's
    doc = result.to_dict()
    assert doc["usage"] == used.to_dict()
    old = {k: v for k, v in doc.items() if k != "usage"}  # a result printed before usage was recorded
    assert TieringResult(**{**old, "previous_offsets": {}, "offsets": {}}).usage.total_requests == 0

    idle = lh.tier("ods.u")  # nothing to tier: still a few reads, no data file
    assert idle.snapshot_id is None and idle.usage.total_requests >= 1
    assert idle.usage.requests.get("PUT", 0) == 0


def test_compaction_reports_its_writes_and_commit(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.c", ORDERS, bucket_key="o_orderkey", buckets=1)
    for i in range(3):
        lh.log("ods.c").append(orders(range(i * 100, i * 100 + 100)))
        lh.tier("ods.c")
    result = lh.compact("ods.c", min_input_files=2)
    assert result.files_rewritten == 3 and result.files_after == 1
    assert result.usage.requests["PUT"] >= 1 + 2  # the new file; the metadata and the pointer
    assert result.usage.bytes_sent >= result.bytes_written
    assert result.to_dict()["usage"] == result.usage.to_dict()


def test_local_executor_tasks_count_in_the_callers_scope(store) -> None:
    store.ensure_conditional_writes()

    def task(i: int) -> int:
        store.put(f"tasks/{i}", b"x" * i)
        return i

    with measure_usage() as used:
        assert LocalExecutor(4).map(task, list(range(1, 9))) == list(range(1, 9))
    assert used.requests["PUT"] == 8 and used.bytes_sent == sum(range(1, 9))


@pytest.mark.slow
def test_spark_executor_tasks_return_their_usage_to_the_driver(tmp_path, spark) -> None:
    url = tmp_path.as_uri()
    open_store(url).ensure_conditional_writes()

    def task(i: int) -> int:
        open_store(url, probe=False).put(f"spark/{i}", b"y" * i)
        return i * 10

    with measure_usage() as used:
        assert SparkExecutor(spark).map(task, [1, 2, 3]) == [10, 20, 30]
    assert used.requests["PUT"] == 3 and used.bytes_sent == 6
