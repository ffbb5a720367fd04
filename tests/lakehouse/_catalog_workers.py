"""Process entry points for catalog race tests."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.catalog import load_catalog


def append_rows(props: dict, table: str, worker: int, appends: int, barrier) -> int:
    catalog = load_catalog("lake", **props)
    tbl = catalog.load_table(table)
    barrier.wait()
    for i in range(appends):
        tbl.append(pa.table({"worker": pa.array([worker], pa.int32()), "seq": pa.array([i], pa.int32())}))
    return appends
