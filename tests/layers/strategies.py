"""Random ODS change sequences for the example project (examples/tpch), as hypothesis strategies.

A *change* is one append, a `Change` ``(table, op, rows)`` (``.batch``: the rows as Arrow): ``op`` insert or
upsert (whole rows; both replace a row of the same key, as the log defines them) or delete (key-only rows). Keys
come from small ranges, so that changes collide: an order is rewritten with another customer, month or price (it
moves between joins and groups), a customer moves nation, a nation is renamed or deleted, an order names a
customer (or a customer a nation) that does not exist yet and arrives later (a late dimension), or never. Within a
batch a key may repeat (the later row wins, as in the log). Its repr is Python source: a failing example pastes
into a reproducer test.

A *scenario* is a list of steps: ``("changes", [change, ...])``, ``("run",)`` (one layers round),
``("tier", table)``, ``("compact", table)``, ``("retain", table)`` (log retention down to the lake's offsets).
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
from hypothesis import strategies as st

from layers import load_project

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tpch"
PROJECT = load_project(EXAMPLE)
SOURCES = tuple(PROJECT.sources)
TABLES = PROJECT.tables

#: Key ranges: the referring columns reach one past the keys that ever exist (a dimension that never arrives).
NATION_KEYS = st.integers(0, 3)
CUSTOMER_KEYS = st.integers(0, 7)
ORDER_KEYS = st.integers(0, 24)
NATION_REFS = st.integers(0, 4)
CUSTOMER_REFS = st.integers(0, 8)

NAMES = ["ALGERIA", "BRAZIL", "CANADA", "EGYPT", "FRANCE", "FRANCE2", "GERMANY", ""]
SEGMENTS = ["AUTOMOBILE", "BUILDING", "MACHINERY"]
STATUSES = ["O", "F", "P"]
PRIORITIES = ["1-URGENT", "2-HIGH", "5-LOW"]
#: Four months, with their first and last days (trunc to the month must not spill over).
DATES = [date(2024, m, d) for m, last in ((1, 31), (2, 29), (3, 31), (12, 31)) for d in (1, 15, last)] + [
    date(2023, 12, 31),
    date(2025, 1, 1),
]


def _or_none(values: st.SearchStrategy, p_none: int = 8) -> st.SearchStrategy:
    """``values``, or None about once in ``p_none`` draws (``st.one_of`` picks its branches uniformly, whatever
    their repeats: 44% None for eleven repeats and one ``st.none()``)."""
    coin = st.sampled_from([False] * (p_none - 1) + [True])
    return st.tuples(coin, values).map(lambda t: None if t[0] else t[1])


prices = st.integers(0, 99_999).map(lambda cents: Decimal(cents).scaleb(-2))


class Change(NamedTuple):
    """One append: ``rows`` (dicts) to source ``table`` with ``op``; its repr is a reproducer's source text."""

    table: str
    op: str
    rows: list[dict]

    @property
    def batch(self) -> pa.Table:
        return batch(self.table, self.rows)


def batch(name: str, rows: list[dict]) -> pa.Table:
    """``rows`` as a batch of source ``name`` (whole rows with its schema, or key-only for deletes)."""
    schema = PROJECT.schema_of(name)
    if rows and set(rows[0]) == set(PROJECT.primary_key_of(name)):
        schema = pa.schema([schema.field(k) for k in PROJECT.primary_key_of(name)])
    return pa.Table.from_pylist(rows, schema=schema)


NATION_VALUES = {"n_name": _or_none(st.sampled_from(NAMES)), "n_regionkey": st.integers(0, 2)}
CUSTOMER_VALUES = {
    "c_name": _or_none(st.sampled_from(["Alice", "Bob", "Carol", "Dave"])),
    "c_nationkey": _or_none(NATION_REFS, 12),
    "c_mktsegment": _or_none(st.sampled_from(SEGMENTS)),
    "c_acctbal": _or_none(prices),
}
ORDER_VALUES = {
    "o_custkey": _or_none(CUSTOMER_REFS, 12),
    "o_orderstatus": _or_none(st.sampled_from(STATUSES)),
    "o_totalprice": _or_none(prices, 10),
    "o_orderdate": st.sampled_from(DATES),  # never null: order_month is part of the ADS key
    "o_orderpriority": _or_none(st.sampled_from(PRIORITIES)),
}
VALUES = {"ods.nation": NATION_VALUES, "ods.customer": CUSTOMER_VALUES, "ods.orders": ORDER_VALUES}


def rows_of(name: str, key: st.SearchStrategy) -> st.SearchStrategy[dict]:
    """A whole row of source ``name`` with its key drawn from ``key``."""
    (column,) = PROJECT.primary_key_of(name)
    return st.fixed_dictionaries({column: key, **VALUES[name]}).map(
        lambda row: {c: row[c] for c in PROJECT.schema_of(name).names}
    )


KEYS = {"ods.nation": NATION_KEYS, "ods.customer": CUSTOMER_KEYS, "ods.orders": ORDER_KEYS}
MAX_ROWS = {"ods.nation": 4, "ods.customer": 6, "ods.orders": 10}


@st.composite
def upserts(draw: st.DrawFn, name: str) -> Change:
    rows = draw(st.lists(rows_of(name, KEYS[name]), min_size=1, max_size=MAX_ROWS[name]))
    return Change(name, draw(st.sampled_from(["upsert", "insert"])), rows)


@st.composite
def deletes(draw: st.DrawFn, name: str) -> Change:
    (key,) = PROJECT.primary_key_of(name)
    keys = draw(st.lists(KEYS[name], min_size=1, max_size=4, unique=True))
    return Change(name, "delete", [{key: k} for k in keys])


#: One append to one source; upserts about three times as often as deletes.
change = st.one_of(
    *[upserts(name) for name in SOURCES for _ in range(3)],
    *[deletes(name) for name in SOURCES],
)

#: The keys of a first load: each source's keys but the last nation and customer (they may arrive later:
#: late dimensions); loaded in any order (orders before their customers, too).
FIRST_KEYS = {"ods.nation": range(3), "ods.customer": range(7), "ods.orders": range(15)}


@st.composite
def initial_load(draw: st.DrawFn) -> list[Change]:
    loads = []
    for name in draw(st.permutations(SOURCES)):
        rows = [draw(rows_of(name, st.just(k))) for k in FIRST_KEYS[name]]
        loads.append(Change(name, "insert", rows))
    return loads


step = st.one_of(
    st.tuples(st.just("changes"), st.lists(change, min_size=1, max_size=4)),
    st.tuples(st.just("changes"), st.lists(change, min_size=1, max_size=4)),
    st.tuples(st.just("changes"), st.lists(change, min_size=1, max_size=4)),
    st.tuples(st.just("run")),
    st.tuples(st.just("tier"), st.sampled_from(TABLES)),
    st.tuples(st.just("compact"), st.sampled_from(TABLES)),
    st.tuples(st.just("retain"), st.sampled_from(TABLES)),
)


@st.composite
def scenarios(draw: st.DrawFn, max_steps: int = 8) -> list[tuple]:
    """An initial load and a round, then up to ``max_steps`` random steps (the test adds a final round)."""
    first = ("changes", draw(initial_load()))
    return [first, ("run",), *draw(st.lists(step, max_size=max_steps))]
