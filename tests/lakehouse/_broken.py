"""A warehouse with broken tables among good ones, for the all-tables commands, jobs and DAG tasks."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakehouse import Lakehouse
from lakehouse.table.definition import TableDefinition

GOOD = ["ods.a", "ods.c"]
BROKEN = ["ods.b", "ods.bad"]


def warehouse_with_broken_tables(url: str, **options: str) -> None:
    """ods.a and ods.c: good primary-key tables with rows in their logs. ods.b: half-created, as create_table
    left a decimal(5, -2) table before issue 22 (its lake metadata cannot be loaded). ods.bad: an unreadable
    definition. And an object among the definitions that is not one (no valid table name)."""
    with Lakehouse.open(url, **options) as lh:
        for name in GOOD:
            lh.create_table(name, pa.schema([("k", pa.int64()), ("v", pa.string())]), primary_key=["k"], buckets=2)
            for i in range(3):  # three rounds of files, for compaction
                lh.log(name).append(pa.table({"k": [i, i + 10], "v": ["x", "y"]}), "upsert")
        half = TableDefinition.build("ods.b", pa.schema([("v", pa.decimal128(5, -2))]), buckets=1)
        lh.store.put(half.name.definition_key, half.to_json(), if_none_match=True)
        with pytest.raises(Exception, match="Could not parse decimal"):
            lh.ensure_lake_table(half)
        lh.store.put("_lakestream/tables/ods.bad.json", b"{not json")
        lh.store.put("_lakestream/tables/not a table!.json", b"{}")
