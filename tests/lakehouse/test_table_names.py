"""`Lakehouse.resolve` through its `TableNames`: the aliases by default, physical names in `without_aliases`
(a `Lakehouse` of its own sharing the state: store, aliases, catalog, logs)."""

from __future__ import annotations

import pyarrow as pa

from lakehouse import Lakehouse
from lakehouse.lakehouse import AliasedNames, PhysicalNames
from lakehouse.table.aliases import read_aliases, write_aliases
from lakehouse.table.definition import TableName

SCHEMA = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", pa.string())])


def test_without_aliases_takes_every_name_as_the_physical_table_and_shares_the_state(tmp_path) -> None:
    lh = Lakehouse.open(tmp_path.as_uri(), alias_cache_seconds=0)
    lh.create_table("dwd.m", SCHEMA, primary_key=["k"], buckets=1)
    lh.create_table("dwd__g1.m", SCHEMA, primary_key=["k"], buckets=1)
    write_aliases(lh.store, read_aliases(lh.store), {"dwd.m": "dwd__g1.m"})
    physical = lh.without_aliases()

    assert isinstance(lh.names, AliasedNames) and isinstance(physical.names, PhysicalNames)
    assert isinstance(physical, Lakehouse) and physical.without_aliases() is physical
    assert lh.resolve("dwd.m") == TableName.parse("dwd__g1.m")
    assert physical.resolve("dwd.m") == TableName.parse("dwd.m")
    assert lh.resolve(TableName.parse("dwd.m")) == TableName.parse("dwd.m")  # a TableName is physical already
    assert repr(physical) == f"{lh!r}.without_aliases()"

    physical.log("dwd.m").append(pa.table({"k": [1], "v": ["a"]}, schema=SCHEMA), op="upsert")
    assert lh.log(TableName.parse("dwd.m")) is physical.log("dwd.m")  # one log per table, shared
    assert physical.catalog is lh.catalog and physical.store is lh.store and physical.aliases is lh.aliases
    assert lh.union_read("dwd.m").num_rows == 0  # the alias: dwd__g1.m, empty
    assert physical.union_read("dwd.m").num_rows == 1
