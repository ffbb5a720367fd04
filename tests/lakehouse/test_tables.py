from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from lakehouse import Lakehouse
from lakehouse.errors import InvalidTableName, SchemaError, TableAlreadyExists, TableNotFound
from lakehouse.table.definition import TableDefinition, TableName, parse_schema

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])


@pytest.mark.parametrize(
    "name",
    ["orders", "a.b.c", ".x", "x.", "ods/orders", "ods.or-ders", "ods.../x", "1ods.x", "ods.x y", "", "a." + "b" * 129],
)
def test_invalid_names(name: str) -> None:
    with pytest.raises(InvalidTableName):
        TableName.parse(name)


def test_the_namespace_lakestream_keeps_its_own_objects_under_is_reserved(lakehouse: Lakehouse) -> None:
    """A table ``_lakestream.tables`` put its log among the table definitions: every listing of tables
    (the CLI, the DAGs' all-tables tasks) then failed on 'log/00000/...arrow'."""
    for name in ("_lakestream.tables", "_LAKESTREAM.t"):
        with pytest.raises(InvalidTableName, match="the namespace .* is reserved"):
            lakehouse.create_table(name, SCHEMA, buckets=1)
    # the Iceberg catalog alone takes it, as pyiceberg's SqlCatalog does: escaped, it lives in %5Flakestream/
    lakehouse.catalog.create_namespace("_lakestream")
    assert lakehouse.catalog.create_table("_lakestream.catalog", SCHEMA).location().endswith("/%5Flakestream/catalog")
    lakehouse.create_table("ods._lakestream", SCHEMA, buckets=1)  # only the namespace is reserved
    # a warehouse that already has such a table (made before the name was reserved) still lists
    lakehouse.store.put("_lakestream/tables/log/00000/00000000000000000000.arrow", b"x")
    assert [str(t) for t in lakehouse.list_tables()] == ["ods._lakestream"]


def test_name_and_keys() -> None:
    n = TableName.parse("ods.orders")
    assert (str(n), n.prefix, n.segment_key(3, 42)) == (
        "ods.orders",
        "ods/orders/",
        "ods/orders/log/00003/00000000000000000042.arrow",
    )


def test_definition_round_trip_and_defaults() -> None:
    d = TableDefinition.build("ods.t", SCHEMA, buckets=8, primary_key=["id"], partition_by=["bucket(8, id)"])
    assert d.bucket_key == "id" and not d.schema.field("id").nullable
    back = TableDefinition.from_json(d.to_json())
    assert back == d and back.schema.equals(d.schema)
    log_table = TableDefinition.build("ods.clicks", SCHEMA, buckets=4)
    assert log_table.bucket_key is None and not log_table.has_primary_key


def test_one_column_may_be_named_without_a_list() -> None:
    """``primary_key="id"`` once meant the columns 'i' and 'd'; ``partition_by="day(ts)"`` its characters."""
    d = TableDefinition.build("ods.t", SCHEMA, buckets=4, primary_key="id", partition_by="name")
    assert (d.primary_key, d.bucket_key, d.partition_by) == (("id",), "id", ("name",))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"buckets": 0}, "buckets must be"),
        ({"buckets": 5000}, "buckets must be"),
        ({"buckets": True}, "buckets must be an integer from 1 to 4096, got True"),  # was a table of 1 bucket
        ({"buckets": 4, "primary_key": ["nope"]}, "not in the schema"),
        ({"buckets": 4, "primary_key": ["id", "name"]}, "needs an explicit bucket_key"),
        ({"buckets": 4, "primary_key": ["id"], "bucket_key": "name"}, "must be a primary-key column"),
        ({"buckets": 4, "bucket_key": "score"}, "cannot be a bucket key"),
        ({"buckets": 4, "bucket_key": "zzz"}, "not in the schema"),
    ],
)
def test_invalid_definitions(kwargs, message) -> None:
    with pytest.raises(SchemaError, match=message):
        TableDefinition.build("ods.t", SCHEMA, **kwargs)


@pytest.mark.parametrize(
    "key_type",
    [pa.struct([("a", pa.int32())]), pa.list_(pa.int32()), pa.map_(pa.string(), pa.int32()), pa.uuid()],
)
def test_a_key_column_arrow_cannot_group_by_is_refused(key_type) -> None:
    """Such a table took appends, then failed every union read and tiering round ("Keys of type ...")."""
    schema = pa.schema([("id", pa.int64()), ("k", key_type)])
    with pytest.raises(SchemaError, match="primary-key column 'k' has type .* cannot be part of a key"):
        TableDefinition.build("ods.t", schema, buckets=2, primary_key=["id", "k"], bucket_key="id")
    if key_type == pa.uuid():  # a keyless table may bucket by a uuid column, as Iceberg can
        assert TableDefinition.build("ods.t", schema, buckets=2, bucket_key="k").bucket_key == "k"


def test_reserved_and_duplicate_columns() -> None:
    for bad in (pa.schema([("_offset", pa.int64())]), pa.schema([("__x", pa.int64())])):
        with pytest.raises(SchemaError, match="reserved"):
            TableDefinition.build("ods.t", bad, buckets=1)
    with pytest.raises(SchemaError, match="duplicate"):
        TableDefinition.build("ods.t", pa.schema([("a", pa.int64()), ("a", pa.string())]), buckets=1)


def test_create_describe_list(lakehouse: Lakehouse) -> None:
    lakehouse.create_table("ods.orders", SCHEMA, primary_key=["id"], buckets=4)
    lakehouse.create_table("ods.clicks", SCHEMA, bucket_key="id", buckets=2)
    lakehouse.create_table("dwd.x", SCHEMA, buckets=1)
    assert [str(n) for n in lakehouse.list_tables()] == ["dwd.x", "ods.clicks", "ods.orders"]
    assert [str(n) for n in lakehouse.list_tables("ods")] == ["ods.clicks", "ods.orders"]
    assert lakehouse.table("ods.orders").primary_key == ("id",)
    with pytest.raises(TableAlreadyExists):
        lakehouse.create_table("ods.orders", SCHEMA, buckets=4)
    with pytest.raises(TableNotFound, match="no table ods.missing"):
        lakehouse.table("ods.missing")
    with pytest.raises(TableNotFound):
        lakehouse.log("ods.missing")


def test_invalid_create_writes_nothing(lakehouse: Lakehouse) -> None:
    with pytest.raises(SchemaError):
        lakehouse.create_table("ods.bad", SCHEMA, primary_key=["nope"], buckets=4)
    with pytest.raises(InvalidTableName):
        lakehouse.create_table("../etc", SCHEMA, buckets=4)
    assert lakehouse.list_tables() == []


@pytest.mark.backends("local", "s3")
def test_concurrent_creators_one_wins(lakehouse: Lakehouse) -> None:
    barrier = threading.Barrier(16)

    def create(i: int) -> str:
        schema = pa.schema([("id", pa.int64()), (f"creator_{i}", pa.string())])
        barrier.wait()
        try:
            lakehouse.create_table("ods.race", schema, primary_key=["id"], buckets=2)
            return f"creator_{i}"
        except TableAlreadyExists:
            return ""

    with ThreadPoolExecutor(16) as pool:
        winners = [w for w in pool.map(create, range(16)) if w]
    assert len(winners) == 1
    assert lakehouse.table("ods.race").schema.names == ["id", winners[0]]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("v:decimal(5,7)", "column 'v': decimal\\(5,7\\) is not a decimal the lake can hold: .* scale s from 0 to p"),
        ("v:decimal(40,2)", "column 'v': decimal\\(40,2\\) .* precision p from 1 to 38"),  # was Arrow's ValueError
        ("v:decimal128(0, 0)", "precision p from 1 to 38"),
        ("v:decimal(5,-2)", "unknown type 'decimal\\(5,-2\\)'"),
    ],
)
def test_the_schema_parser_refuses_decimals_the_lake_cannot_hold(spec: str, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        parse_schema(spec)


def test_the_schema_parser_knows_every_documented_type_name() -> None:
    """The README lists date32 as a column type; ``--schema "d:date32"`` was an unknown type."""
    assert parse_schema("d:date32, e:date, f:decimal(38,38)") == pa.schema(
        [("d", pa.date32()), ("e", pa.date32()), ("f", pa.decimal128(38, 38))]
    )
