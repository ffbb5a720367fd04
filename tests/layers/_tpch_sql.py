"""A few rows of the example project's ODS tables, and what a model's SQL gives over its inputs (Spark), to
hold the layers' tables to."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tpch"


def produce(lh, project, *, round_: int = 0) -> None:
    """Round 0: 3 nations, 5 customers (one of nation 9, which does not exist: its orders wait), 12 orders over
    two months. Round 1: a customer moves nation, a nation is renamed, an order is updated, one deleted."""

    def append(name: str, rows: list[dict], op: str = "upsert") -> None:
        schema = project.schema_of(name)
        if op == "delete":
            key = project.primary_key_of(name)
            schema = pa.schema([schema.field(k) for k in key])
        lh.log(name).append(pa.Table.from_pylist(rows, schema=schema), op)

    if round_ == 0:
        append("ods.nation", [{"n_nationkey": k, "n_name": f"N{k}", "n_regionkey": k % 2} for k in range(3)])
        append(
            "ods.customer",
            [
                {
                    "c_custkey": c,
                    "c_name": f"C{c}",
                    "c_nationkey": 9 if c == 4 else c % 3,
                    "c_mktsegment": "BUILDING" if c % 2 else "MACHINERY",
                    "c_acctbal": Decimal(f"{c}.50"),
                }
                for c in range(5)
            ],
        )
        append(
            "ods.orders",
            [
                {
                    "o_orderkey": o,
                    "o_custkey": o % 5,
                    "o_orderstatus": "O",
                    "o_totalprice": Decimal(f"{100 + o}.25"),
                    "o_orderdate": datetime.date(2024, 1 + o % 2, 1 + o),
                    "o_orderpriority": "1-URGENT",
                }
                for o in range(12)
            ],
        )
    else:
        append(
            "ods.customer",
            [
                {
                    "c_custkey": 1,
                    "c_name": "C1",
                    "c_nationkey": 2,
                    "c_mktsegment": "BUILDING",
                    "c_acctbal": Decimal("1.50"),
                }
            ],
        )
        append("ods.nation", [{"n_nationkey": 0, "n_name": "N0-renamed", "n_regionkey": 0}])
        append(
            "ods.orders",
            [
                {
                    "o_orderkey": 3,
                    "o_custkey": 2,
                    "o_orderstatus": "F",
                    "o_totalprice": Decimal("999.99"),
                    "o_orderdate": datetime.date(2024, 3, 1),
                    "o_orderpriority": "2-HIGH",
                }
            ],
        )
        append("ods.orders", [{"o_orderkey": 5}], "delete")


def rows(table: pa.Table, key) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda row: tuple(row[k] for k in key))


def current(lh, name: str) -> pa.Table:
    """The table now: its union read, without the system columns."""
    return lh.union_read(name).select(lh.table(name).schema.names)


def table_rows(lh, project, name: str) -> list[dict]:
    """The table now, sorted by its key."""
    return rows(current(lh, name), project.primary_key_of(name))


def sql_rows(spark, lh, project, name: str) -> list[dict]:
    """What the model's SQL gives over its inputs as they are now (their union reads), sorted by its key."""
    model = project.models[name]
    sql = model.sql
    for table in model.inputs:
        view = table.replace(".", "__")
        rows_now = current(lh, table).combine_chunks()  # one chunk: see layers/spark_sql.py
        spark.createDataFrame(rows_now).createOrReplaceTempView(view)
        namespace, bare = table.split(".")
        sql = re.sub(rf"`?\b{namespace}\b`?\.`?\b{bare}\b`?", view, sql, flags=re.IGNORECASE)
    return rows(spark.sql(sql).toArrow(), model.primary_key)
