"""Tiering boundaries (`lakehouse.tiering.boundaries`): a held table is tiered up to the held ends, a released one
to its log's end, a table created again is not held by its predecessor's boundary, and a hold that lands while tiering
reads the log's end is never crossed."""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from lakehouse.lakehouse import Lakehouse
from lakehouse.tiering.boundaries import hold, read_boundary, release, tiering_end

SCHEMA = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", pa.string())])


def rows(keys) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "v": [str(k) for k in keys]}, schema=SCHEMA)


def test_a_held_table_is_tiered_to_the_held_ends_then_to_its_end_once_released(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.t", SCHEMA, primary_key=["k"], buckets=2)
    log = lh.log("ods.t")
    log.append(rows(range(10)), "upsert")
    held = log.end_offsets()
    hold(lh.store, lh.table("ods.t"), held, writer="w")
    log.append(rows(range(10, 20)), "upsert")  # the writer's change, half written
    assert lh.tier("ods.t").offsets == held
    assert lh.lake_offsets("ods.t") == held
    release(lh.store, lh.table("ods.t"), writer="w")
    assert lh.tier("ods.t").offsets == log.end_offsets()
    assert lh.lake_read("ods.t").num_rows == 20


def test_a_hold_landing_while_the_end_is_read_is_not_crossed(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.t", SCHEMA, primary_key=["k"], buckets=2)
    log = lh.log("ods.t")
    log.append(rows(range(4)), "upsert")
    definition = lh.table("ods.t")
    release(lh.store, definition, writer="w")
    before = log.end_offsets()
    calls = []

    def log_end() -> dict[int, int]:
        calls.append(1)
        if len(calls) == 1:  # a writer holds and appends between tiering's two reads of the boundary
            hold(lh.store, definition, before, writer="w")
            log.append(rows(range(4, 8)), "upsert")
        return log.end_offsets()

    assert tiering_end(lh.store, definition, log_end) == before
    assert len(calls) == 1  # the second look found the boundary held: the ends read are not used


def test_a_table_created_again_is_not_held_by_the_dropped_ones_boundary(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    lh.create_table("ods.t", SCHEMA, primary_key=["k"], buckets=2)
    hold(lh.store, lh.table("ods.t"), {0: 0, 1: 0}, writer="w")
    lh.drop_table("ods.t")
    lh.create_table("ods.t", SCHEMA, primary_key=["k"], buckets=2)
    assert read_boundary(lh.store, lh.table("ods.t")) is None  # the drop deleted it
    # one left behind by an interrupted drop belongs to another table uuid: it holds nothing
    earlier = dataclasses.replace(lh.table("ods.t"), table_uuid="an-earlier-table")
    hold(lh.store, earlier, {0: 0, 1: 0}, writer="w")
    lh.log("ods.t").append(rows(range(6)), "upsert")
    assert lh.tier("ods.t").offsets == lh.log("ods.t").end_offsets()
