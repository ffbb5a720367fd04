"""A lakestream table is a log and an Iceberg table in one warehouse, under one name."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from typer.testing import CliRunner

from lakehouse import Lakehouse
from lakehouse.errors import TableAlreadyExists
from lakestream.cli import app

SCHEMA = pa.schema([("o_orderkey", pa.int64()), ("o_totalprice", pa.decimal128(12, 2)), ("o_orderdate", pa.date32())])


def test_create_table_creates_the_iceberg_table_too(lakehouse: Lakehouse) -> None:
    d = lakehouse.create_table("ods.orders", SCHEMA, primary_key=["o_orderkey"], buckets=4)
    lake = lakehouse.catalog.load_table("ods.orders")
    assert lake.schema().column_names == [
        "o_orderkey",
        "o_totalprice",
        "o_orderdate",
        "__bucket",
        "__offset",
        "__timestamp",
    ]  # the lake layout: the log's columns plus the system columns (lakehouse.iceberg.layout)
    assert [f.name for f in lake.spec().fields] == ["o_orderkey_bucket"]
    assert lake.properties["write.update.isolation-level"] == "snapshot"
    assert lake.properties["lakestream.table-uuid"] == d.table_uuid
    assert lakehouse.ensure_lake_table(d).metadata_location == lake.metadata_location  # idempotent
    # the same catalog, loaded by any pyiceberg user from the properties alone
    other = load_catalog("elsewhere", **lakehouse.catalog_properties())
    assert other.load_table("ods.orders").metadata_location == lake.metadata_location


def test_a_foreign_iceberg_table_with_the_name_is_not_adopted(lakehouse: Lakehouse) -> None:
    lakehouse.catalog.create_namespace("ods")
    lakehouse.catalog.create_table("ods.taken", SCHEMA)
    with pytest.raises(TableAlreadyExists, match="nothing was created"):
        lakehouse.create_table("ods.taken", SCHEMA, primary_key=["o_orderkey"], buckets=4)
    assert lakehouse.list_tables() == []  # no log definition left behind
    # a foreign table appearing between the log definition and the lake table is refused too
    d = lakehouse.create_table("ods.mine", SCHEMA, primary_key=["o_orderkey"], buckets=4)
    lakehouse.catalog.drop_table("ods.mine")
    lakehouse.catalog.create_table("ods.mine", SCHEMA)
    with pytest.raises(TableAlreadyExists, match="does not belong to this lakestream table"):
        lakehouse.ensure_lake_table(d)


def test_cli_location_register_repair_properties(tmp_path) -> None:
    runner = CliRunner()
    wh = ["-w", tmp_path.as_uri()]
    lh = Lakehouse.open(tmp_path.as_uri())
    lh.create_table("ods.orders", SCHEMA, primary_key=["o_orderkey"], buckets=2)
    result = runner.invoke(app, ["table", "location", "ods.orders", *wh])
    assert result.exit_code == 0 and result.output.strip() == lh.catalog.table_location("ods.orders")
    location = result.output.strip()
    result = runner.invoke(app, ["table", "register", "ods.copy", location, *wh])
    assert result.exit_code == 0, result.output
    assert lh.catalog.load_table("ods.copy").metadata_location == location
    result = runner.invoke(app, ["catalog", "repair", *wh])
    assert result.exit_code == 0 and "0 interrupted rename(s) resolved" in result.output
    result = runner.invoke(app, ["catalog", "properties", *wh])
    assert "py-catalog-impl: lakehouse.iceberg.catalog.ObjectStoreCatalog" in result.output
    result = runner.invoke(app, ["table", "location", "ods.nope", *wh])
    assert result.exit_code == 1 and "does not exist" in result.output
