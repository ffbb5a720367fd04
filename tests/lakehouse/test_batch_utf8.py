"""Strings that are not valid UTF-8 are refused before anything is written (issue 22: the log took them,
and every union read and tiering round of the table then failed with UnicodeDecodeError)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakehouse import Lakehouse
from lakehouse.errors import BatchError

BAD = pa.array([b"ok", b"\xff\xfe"], pa.binary()).cast(pa.string(), safe=False)  # what an unsafe cast makes
SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("s", pa.string()),
        ("tags", pa.list_(pa.large_string())),
        ("info", pa.struct([("n", pa.int32()), ("note", pa.string())])),
        ("attrs", pa.map_(pa.string(), pa.string())),
    ]
)


def good_rows() -> dict[str, pa.Array]:
    return {
        "k": pa.array([1, 2], pa.int64()),
        "s": pa.array(["a", "b"]),
        "tags": pa.array([["x"], []], SCHEMA.field("tags").type),
        "info": pa.array([{"n": 1, "note": "a"}, None], SCHEMA.field("info").type),
        "attrs": pa.array([[("a", "b")], []], SCHEMA.field("attrs").type),
    }


def with_bad(column: str) -> pa.Table:
    rows = good_rows()
    if column == "s":
        rows["s"] = BAD
    elif column == "tags":
        rows["tags"] = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), BAD.cast(pa.large_string())).cast(
            SCHEMA.field("tags").type
        )
    elif column == "info":
        rows["info"] = pa.StructArray.from_arrays([pa.array([1, 2], pa.int32()), BAD], names=["n", "note"])
    elif column == "attrs":
        rows["attrs"] = pa.MapArray.from_arrays(pa.array([0, 1, 2], pa.int32()), pa.array(["a", "b"]), BAD)
    return pa.table(rows, schema=SCHEMA)


@pytest.mark.parametrize("column", ["s", "tags", "info", "attrs"])
def test_invalid_utf8_is_refused_by_append_and_send_and_nothing_is_written(lakehouse: Lakehouse, column) -> None:
    lh = lakehouse
    lh.create_table("ods.t", SCHEMA, primary_key=["k"], buckets=2)
    log = lh.log("ods.t")
    with pytest.raises(BatchError, match=f"ods.t: column '{column}' holds a string that is not valid UTF-8"):
        log.append(with_bad(column), "upsert")
    with log.producer(linger=0.01) as producer, pytest.raises(BatchError, match=f"column '{column}'.*not valid UTF-8"):
        producer.send(with_bad(column), "upsert")
    assert log.end_offsets() == {0: 0, 1: 0}
    assert list(lh.store.list("ods/t/log/")) == []
    log.append(pa.table(good_rows(), schema=SCHEMA), "upsert")  # valid strings, nested ones too, still go in
    lh.tier("ods.t")
    assert lh.union_read("ods.t", columns=["k", "s"]).sort_by("k").to_pylist() == [
        {"k": 1, "s": "a"},
        {"k": 2, "s": "b"},
    ]


def test_a_key_column_and_a_dictionary_column_are_checked_too(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    schema = pa.schema([("id", pa.string()), ("d", pa.dictionary(pa.int32(), pa.string()))])
    lh.create_table("ods.d", schema, primary_key=["id"], buckets=2)
    log = lh.log("ods.d")
    with pytest.raises(BatchError, match="column 'id' holds a string that is not valid UTF-8"):
        log.append(pa.table({"id": BAD}), "delete")  # a key-only delete
    bad_dict = pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()), BAD)
    with pytest.raises(BatchError, match="column 'd' holds a string that is not valid UTF-8"):
        log.append(pa.table({"id": ["a", "b"], "d": bad_dict}), "upsert")
    assert list(lh.store.list("ods/d/log/")) == []
