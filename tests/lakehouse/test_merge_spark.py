"""Merge-engine tables through Spark (issue 42): ``spark.read.format("lakestream")`` equals the Python union read
(and so the fold of the log) whole, split by file (the stored rows then come from a lookup), filtered and as of
offsets; a stream of the table's changes carries merged rows."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakehouse import Lakehouse
from lakehouse.read.changes import apply_changes
from lakehouse.spark.source import register
from tests.support.spark_reads import lakestream as reader

SCHEMA = pa.schema([("k", pa.int64()), ("total", pa.int64()), ("n", pa.int64()), ("tag", pa.string())])
NAME = "ods.totals"
COLS = ["k", "total", "n", "tag"]


def rows(table: pa.Table, columns=COLS) -> list[tuple]:
    return sorted(tuple(r[c] for c in columns) for r in table.select(columns).to_pylist())


@pytest.mark.slow
def test_spark_reads_merged_rows(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    try:
        lh.create_table(
            NAME,
            SCHEMA,
            primary_key=["k"],
            buckets=2,
            merge_engine="aggregate",
            aggregates={"total": "sum", "n": "count"},
        )
        log = lh.log(NAME)

        def add(keys, total, tag):
            log.append(
                pa.table({"k": keys, "total": [total] * len(keys), "n": [1] * len(keys), "tag": [tag] * len(keys)})
            )

        add(list(range(40)), 1, "a")
        lh.tier(NAME)
        add(list(range(0, 40, 2)), 10, "b")
        lh.tier(NAME)
        middle = log.end_offsets()
        add(list(range(0, 40, 4)), 100, None)  # the tail: merged into the lake's sums by every reader
        want = lh.union_read(NAME)
        assert sorted(rows(want))[0] == (0, 111, 3, "b")  # 1 + 10 + 100, three rows, the last non-null tag
        assert rows(reader(spark, lh).load(NAME).toArrow()) == rows(want)
        split = reader(spark, lh, maxPartitionBytes="1").load(NAME)
        assert split.rdd.getNumPartitions() > 2 and rows(split.toArrow()) == rows(want)
        filtered = reader(spark, lh, columns="k,total", filter="k < 10").load(NAME)
        assert rows(filtered.toArrow(), ["k", "total"]) == rows(
            lh.union_read(NAME, ["k", "total"], "k < 10"), ["k", "total"]
        )
        as_of = ",".join(f"{b}:{o}" for b, o in middle.items())
        assert rows(reader(spark, lh, as_of=as_of).load(NAME).toArrow()) == rows(lh.union_read(NAME, as_of=middle))

        # a stream from the middle: its micro-batch is the merged change of each key
        query = (
            spark.readStream.format("lakestream")
            .option("warehouse", lh.url)
            .option("startingOffsets", as_of)
            .load(NAME)
            .writeStream.format("memory")
            .queryName("merged_changes")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        changes = spark.sql("SELECT * FROM merged_changes").toArrow()
        state = lh.union_read(NAME, as_of=middle).select(COLS)
        assert rows(apply_changes(state, changes.select([*COLS, "_op"]), ["k"])) == rows(want)
    finally:
        lh.close()


@pytest.mark.slow
def test_spark_writes_rows_of_some_columns_to_a_partial_update_table(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    try:
        lh.create_table("ods.wide", SCHEMA, primary_key=["k"], buckets=2, merge_engine="partial-update")
        register(spark, lh)
        first = spark.createDataFrame([(1, 10, 1, "a"), (2, 20, 2, "b")], "k long, total long, n long, tag string")
        first.write.format("lakestream").option("warehouse", lh.url).mode("append").save("ods.wide")
        lh.tier("ods.wide")
        tags = spark.createDataFrame([(1, "new")], "k long, tag string")  # another stream: the tag only
        tags.write.format("lakestream").option("warehouse", lh.url).mode("append").save("ods.wide")
        assert rows(lh.union_read("ods.wide")) == [(1, 10, 1, "new"), (2, 20, 2, "b")]
        lh.create_table("ods.narrow", SCHEMA, primary_key=["k"], buckets=1)  # last-row: whole rows only
        with pytest.raises(Exception, match="lacks columns"):
            tags.write.format("lakestream").option("warehouse", lh.url).mode("append").save("ods.narrow")
    finally:
        lh.close()
