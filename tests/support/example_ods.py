"""The example project's warehouse (examples/tpch): its ODS tables (`ODS`), every table (`ALL`), and `load_ods`,
which creates the ODS tables from the project and loads them with the demo's consistent data (`N_NATIONS`
nations, `N_CUSTOMERS` customers, `N_ORDERS` orders), tiered. Used by the expectation and check tests."""

from __future__ import annotations

import numpy as np

from lakehouse.lakehouse import Lakehouse
from lakestream.demo.layers import customers, nations, orders
from layers.project import load_project
from tests.support.projects import EXAMPLE

ODS = ("ods.nation", "ods.customer", "ods.orders")
ALL = (*ODS, "dwd.orders_enriched", "ads.revenue_by_nation_month")
N_NATIONS, N_CUSTOMERS, N_ORDERS = 25, 100, 1000


def load_ods(lh: Lakehouse, *, seed: int = 7) -> None:
    """The example's ODS tables, created from the project and loaded with the demo's (consistent) data."""
    project = load_project(EXAMPLE)
    for name in ODS:
        d = project.sources[name].definition
        lh.create_table(name, d.schema, buckets=d.buckets, primary_key=list(d.primary_key))
    rng = np.random.default_rng(seed)
    lh.log("ods.nation").append(nations(np.arange(N_NATIONS)), "upsert")
    lh.log("ods.customer").append(customers(np.arange(N_CUSTOMERS), rng, N_NATIONS), "upsert")
    lh.log("ods.orders").append(orders(np.arange(N_ORDERS), rng, N_CUSTOMERS), "upsert")
    for name in ODS:
        lh.tier(name)
