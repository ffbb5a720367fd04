"""Creating a table is all or nothing; dropping one removes its log, its lake table and its definition, in
whatever state the table is (issue 22: a create that failed halfway left a table that was listed, could not
be read, created again or dropped)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakehouse import Lakehouse
from lakehouse.errors import SchemaError, TableNotFound
from lakehouse.table.definition import TableDefinition
from object_store import ObjectStore, StoreUnavailable
from tests.lakehouse._faults import FailingPuts

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
POINTER = "_lakestream/catalog/tables/ods/t.json"


class FailingDeletes:
    """DELETEs raise StoreUnavailable after ``after`` of them succeeded (a drop that crashes midway)."""

    def __init__(self, store: ObjectStore, after: int) -> None:
        self.real_delete, self.after = store.delete, after
        store.delete = self.delete  # type: ignore[method-assign]

    def delete(self, key: str, **kw: Any) -> None:
        if self.after <= 0:
            raise StoreUnavailable(f"injected: DeleteObject {key} timed out")
        self.after -= 1
        self.real_delete(key, **kw)


def keys(store: ObjectStore, prefix: str = "") -> list[str]:
    return sorted(info.key for info in store.list(prefix) if not info.key.startswith("_lakestream/probe"))


def half_created(lh: Lakehouse) -> None:
    """What create_table did with ``decimal128(5, -2)`` before issue 22: the definition, then a lake table
    whose metadata pyiceberg wrote but cannot load."""
    definition = TableDefinition.build("ods.t", pa.schema([("k", pa.int64()), ("v", pa.decimal128(5, -2))]), buckets=2)
    lh.store.put(definition.name.definition_key, definition.to_json(), if_none_match=True)
    with pytest.raises(Exception, match="Could not parse decimal"):
        lh.ensure_lake_table(definition)


@pytest.mark.parametrize("applied", [False, True], ids=["pointer-lost", "pointer-written-answer-lost"])
def test_a_create_that_fails_halfway_leaves_nothing(lakehouse: Lakehouse, applied: bool) -> None:
    lh = lakehouse
    FailingPuts(lh.store, POINTER, apply=applied)
    with pytest.raises(StoreUnavailable, match="injected"):
        lh.create_table("ods.t", SCHEMA, primary_key=["k"], buckets=2)
    assert lh.list_tables() == []
    assert not lh.catalog.table_exists("ods.t")
    assert keys(lh.store, "ods/") == []
    lh.create_table("ods.t", SCHEMA, primary_key=["k"], buckets=2)  # and the name is free again
    lh.log("ods.t").append(pa.table({"k": [1], "v": ["a"]}), "upsert")
    assert lh.union_read("ods.t", columns=["k", "v"]).to_pylist() == [{"k": 1, "v": "a"}]


def test_drop_removes_the_log_the_lake_table_and_the_definition(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.t", SCHEMA, primary_key=["k"], buckets=2)
    lh.create_table("ods.other", SCHEMA, primary_key=["k"], buckets=2)
    log = lh.log("ods.t")
    log.append(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}), "upsert")
    lh.tier("ods.t")
    log.append(pa.table({"k": [4], "v": ["d"]}), "upsert")
    other = keys(lh.store, "ods/other/")
    result = lh.drop_table("ods.t")
    assert (result.lake_table, result.definition) == (True, True) and result.objects_deleted >= 5
    assert [str(t) for t in lh.list_tables()] == ["ods.other"]
    assert not lh.catalog.table_exists("ods.t")
    assert keys(lh.store, "ods/t/") == []  # segments, data and metadata files: purged
    assert keys(lh.store, "ods/other/") == other
    with pytest.raises(TableNotFound, match="no table ods.t"):
        lh.drop_table("ods.t")
    lh.create_table("ods.t", SCHEMA, buckets=1)  # a new, empty table under the same name
    assert lh.union_read("ods.t").num_rows == 0 and lh.log("ods.t").end_offsets() == {0: 0}


def test_a_half_created_table_is_dropped_and_created_again(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    half_created(lh)
    assert [str(t) for t in lh.list_tables()] == ["ods.t"]
    with pytest.raises(Exception, match="already exists|drop"):  # it used to fail on the metadata it cannot load
        lh.create_table("ods.t", SCHEMA, buckets=1)
    result = lh.drop_table("ods.t")
    assert (result.lake_table, result.definition) == (True, True)
    assert lh.list_tables() == [] and keys(lh.store, "ods/") == []
    lh.create_table("ods.t", SCHEMA, buckets=1)
    assert lh.union_read("ods.t").num_rows == 0


def test_a_drop_interrupted_at_any_point_is_finished_by_dropping_again(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.t", SCHEMA, primary_key=["k"], buckets=2)
    log = lh.log("ods.t")
    for i in range(3):
        log.append(pa.table({"k": [i, i + 10], "v": ["x", "y"]}), "upsert")
    lh.tier("ods.t")
    left = len(keys(lh.store, "ods/t/")) + 3  # the pointer, the retention record and the definition
    real_delete = lh.store.delete
    crashes = 0
    while True:  # each attempt deletes one object, then "crashes": every point of the drop in turn
        FailingDeletes(lh.store, after=1)
        try:
            lh.drop_table("ods.t")
            break
        except StoreUnavailable:
            crashes += 1
        finally:
            lh.store.delete = real_delete  # type: ignore[method-assign]
        assert [str(t) for t in lh.list_tables()] == ["ods.t"]  # the definition goes last: still listed
    assert crashes == left - 1
    assert lh.list_tables() == [] and keys(lh.store, "ods/") == [] and not lh.catalog.table_exists("ods.t")


def test_a_table_with_an_unreadable_definition_or_pointer_is_dropped(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.t", SCHEMA, buckets=1)
    lh.log("ods.t").append(pa.table({"k": [1], "v": ["a"]}))
    lh.store.put("ods.t".join(["_lakestream/tables/", ".json"]), b"{not json")
    lh.store.put(POINTER, b"garbage")
    with pytest.raises(SchemaError, match="unreadable"):
        lh.table("ods.t")
    result = lh.drop_table("ods.t")
    assert (result.lake_table, result.definition) == (True, True)
    assert lh.list_tables() == [] and keys(lh.store, "ods/") == []
    assert keys(lh.store, "_lakestream/catalog/tables/") == []
