"""Small deterministic TPC-H-shaped ODS batches for the example project (examples/tpch), shared by the layers
tests and their crash worker."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path

import pyarrow as pa

from lakehouse.lakehouse import Lakehouse

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tpch"
MODELS = ("dwd.orders_enriched", "ads.revenue_by_nation_month")


def nations(keys, names) -> pa.Table:
    return pa.table(
        {
            "n_nationkey": pa.array(keys, pa.int64()),
            "n_name": names,
            "n_regionkey": pa.array([0] * len(keys), pa.int64()),
        }
    )


def customers(keys, nation_keys) -> pa.Table:
    return pa.table(
        {
            "c_custkey": pa.array(keys, pa.int64()),
            "c_name": [f"Customer#{k}" for k in keys],
            "c_nationkey": pa.array(nation_keys, pa.int64()),
            "c_mktsegment": ["BUILDING" if k % 2 else "MACHINERY" for k in keys],
            "c_acctbal": pa.array([decimal.Decimal(k % 1000) / 10 for k in keys], pa.decimal128(12, 2)),
        }
    )


def orders(keys, cust_keys, prices=None, months=None) -> pa.Table:
    prices = prices if prices is not None else [decimal.Decimal(k % 997) + decimal.Decimal("0.25") for k in keys]
    months = months if months is not None else [1 + k % 12 for k in keys]
    return pa.table(
        {
            "o_orderkey": pa.array(keys, pa.int64()),
            "o_custkey": pa.array(cust_keys, pa.int64()),
            "o_orderstatus": ["O" if k % 3 else "F" for k in keys],
            "o_totalprice": pa.array([decimal.Decimal(p) for p in prices], pa.decimal128(12, 2)),
            "o_orderdate": pa.array(
                [datetime.date(2024, m, 1 + k % 28) for k, m in zip(keys, months, strict=True)], pa.date32()
            ),
            "o_orderpriority": [f"{1 + k % 5}-PRIO" for k in keys],
        }
    )


def load_base(lh: Lakehouse, n_orders: int = 200, n_customers: int = 30, n_nations: int = 5) -> None:
    """Nations 0..n-1, customers (one in ten waits for a nation that comes later), orders over customers."""
    lh.log("ods.nation").append(nations(list(range(n_nations)), [f"N{k}" for k in range(n_nations)]), "upsert")
    ck = list(range(n_customers))
    lh.log("ods.customer").append(customers(ck, [k % (n_nations + 1) for k in ck]), "upsert")
    ok = list(range(n_orders))
    lh.log("ods.orders").append(orders(ok, [k % (n_customers + 3) for k in ok]), "upsert")


def change_some(lh: Lakehouse, n_orders: int = 200, n_customers: int = 30, n_nations: int = 5) -> None:
    """One of everything: a nation renamed and a late nation arriving, customers moving nation and a late
    customer arriving, orders updated (price, month, customer), new and deleted."""
    lh.log("ods.nation").append(nations([1, n_nations], ["N1-renamed", "Late"]), "upsert")
    lh.log("ods.customer").append(customers([3, 4, n_customers], [2, 0, 1]), "upsert")
    lh.log("ods.customer").append(pa.table({"c_custkey": pa.array([7], pa.int64())}), "delete")
    changed = [5, 6, 7, n_orders, n_orders + 1]
    lh.log("ods.orders").append(
        orders(changed, [1, 2, n_customers, 3, 4], prices=["1.00", "2.00", "3.00", "4.00", "5.00"]), "upsert"
    )
    lh.log("ods.orders").append(pa.table({"o_orderkey": pa.array([8, 9], pa.int64())}), "delete")


def state(lh: Lakehouse, name: str, key) -> pa.Table:
    t = lh.union_read(name)
    return t.select([c for c in t.column_names if not c.startswith("__")]).sort_by([(k, "ascending") for k in key])


def log_records(lh: Lakehouse, name: str) -> int:
    return sum(lh.log(name).end_offsets().values())
