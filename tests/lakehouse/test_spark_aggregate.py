"""`lakehouse.spark.aggregate.aggregate_changes`: a Structured Streaming aggregate of a table's changes kept in another
lakestream table (the README's example): equal to the GROUP BY over the source after every run, through
inserts, updates that move rows between groups, and deletes; a restart from the checkpoint adds only what is
new."""

from __future__ import annotations

import random
from decimal import Decimal

import pyarrow as pa
import pytest

from lakehouse import Lakehouse
from lakehouse.errors import SchemaError
from lakehouse.spark.aggregate import aggregate_changes

pytestmark = pytest.mark.slow

ORDERS = pa.schema(
    [
        pa.field("o_orderkey", pa.int64(), nullable=False),
        pa.field("o_orderstatus", pa.string()),
        pa.field("o_totalprice", pa.decimal128(12, 2)),
    ]
)


def orders(keys, rng: random.Random) -> pa.Table:
    return pa.table(
        {
            "o_orderkey": list(keys),
            "o_orderstatus": [rng.choice("FOP") for _ in keys],
            "o_totalprice": [Decimal(rng.randrange(100, 100_000)) / 100 for _ in keys],
        },
        schema=ORDERS,
    )


def expected(lh: Lakehouse) -> dict:
    state = lh.union_read("ods.orders").to_pylist()
    out: dict = {}
    for r in state:
        rows, total = out.get(r["o_orderstatus"], (0, Decimal(0)))
        out[r["o_orderstatus"]] = (rows + 1, total + r["o_totalprice"])
    return out


def aggregate(lh: Lakehouse) -> dict:
    got = {
        r["o_orderstatus"]: (r["rows"], r["sum_o_totalprice"])
        for r in lh.union_read("ads.orders_by_status").to_pylist()
    }
    return {k: v for k, v in got.items() if v[0]}  # a group whose rows all left stays, at 0


def test_the_aggregate_follows_inserts_updates_and_deletes(tmp_path, spark) -> None:
    lh = Lakehouse.open(tmp_path.as_uri())
    lh.create_table("ods.orders", ORDERS, primary_key=["o_orderkey"], buckets=2)
    log, rng = lh.log("ods.orders"), random.Random(3)
    log.append(orders(range(100), rng), "upsert")
    lh.tier("ods.orders")  # the lake holds part: earliest starts with its snapshot
    log.append(orders(rng.sample(range(150), 40), rng), "upsert")  # updates move orders between statuses
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> None:
        query = aggregate_changes(
            spark,
            "ods.orders",
            "ads.orders_by_status",
            group_by=["o_orderstatus"],
            sums=["o_totalprice"],
            checkpoint=checkpoint,
            lakehouse=lh,
        )
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()

    run()
    assert aggregate(lh) == expected(lh)
    log.append(orders(rng.sample(range(150), 30), rng), "upsert")
    log.append(pa.table({"o_orderkey": pa.array(rng.sample(range(150), 25), pa.int64())}), "delete")
    run()
    assert aggregate(lh) == expected(lh)
    with pytest.raises(SchemaError, match="ads.orders_by_status exists with columns"):
        aggregate_changes(
            spark, "ods.orders", "ads.orders_by_status", group_by=["o_orderkey"], checkpoint=checkpoint, lakehouse=lh
        )
    with pytest.raises(SchemaError, match="only numbers are summed"):
        aggregate_changes(
            spark,
            "ods.orders",
            "ads.x",
            group_by=["o_orderkey"],
            sums=["o_orderstatus"],
            checkpoint=checkpoint,
            lakehouse=lh,
        )
