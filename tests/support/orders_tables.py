"""An orders table (`ORDERS`, rows by `orders(keys, tag)`) and what the tiering and maintenance tests read back from
one: sorted `rows`, the log's records (`log_records`), a primary-key table's state replayed from its log (`replay`)
against the lake's (`lake_state`), and the data files its snapshots reference against those in the store."""

from __future__ import annotations

import pyarrow as pa

from lakehouse import Lakehouse

ORDERS = pa.schema(
    [
        ("o_orderkey", pa.int64()),
        ("o_custkey", pa.int32()),
        ("o_orderdate", pa.date32()),
        ("o_comment", pa.string()),
    ]
)
USER_COLS = ORDERS.names


def orders(keys, tag: str = "v") -> pa.Table:
    keys = list(keys)
    return pa.table(
        {
            "o_orderkey": pa.array(keys, pa.int64()),
            "o_custkey": pa.array([k % 97 for k in keys], pa.int32()),
            "o_orderdate": pa.array([k % 400 for k in keys], pa.int32()).cast(pa.date32()),
            "o_comment": pa.array([f"{tag}-{k}" for k in keys]),
        }
    )


def rows(table: pa.Table, cols=None) -> list[tuple]:
    cols = cols or table.column_names
    return sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True))


def log_records(lh: Lakehouse, name: str, offsets: dict[int, int]) -> list[tuple]:
    """(user columns..., bucket, offset) of every log record below ``offsets``."""
    log = lh.log(name)
    out = []
    for b, end in offsets.items():
        t = log.read(b, 0, end)
        out += [
            (*r, b, o)
            for r, o in zip(
                zip(*(t.column(c).to_pylist() for c in USER_COLS), strict=True),
                t.column("_offset").to_pylist(),
                strict=True,
            )
        ]
    return sorted(out)


def replay(lh: Lakehouse, name: str, offsets: dict[int, int] | None = None) -> dict[int, tuple]:
    """A primary-key table's state after applying its log in order up to ``offsets`` (default: the end)."""
    log = lh.log(name)
    offsets = offsets if offsets is not None else log.end_offsets()
    state: dict[int, tuple] = {}
    for b, end in offsets.items():
        t = log.read(b, 0, end)
        for rec in t.to_pylist():
            key = rec["o_orderkey"]
            if rec["_op"] == "delete":
                state.pop(key, None)
            else:
                state[key] = tuple(rec[c] for c in USER_COLS)
    return state


def lake_state(table: pa.Table) -> dict[int, tuple]:
    keys = table.column("o_orderkey").to_pylist()
    assert len(keys) == len(set(keys)), "a key appears twice in the lake"
    return {r["o_orderkey"]: tuple(r[c] for c in USER_COLS) for r in table.to_pylist()}


def referenced_files(table) -> set[str]:
    """Every data file any snapshot of ``table`` references."""
    out = set()
    for snap in table.metadata.snapshots:
        for manifest in snap.manifests(table.io):
            out |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False)}
    return out


def data_files_in_store(lh: Lakehouse, name: str) -> set[str]:
    table = lh.lake_table(name)
    prefix = table.metadata.location.removeprefix(lh.store.url.rstrip("/") + "/") + "/data/"
    return {f"{lh.store.url.rstrip('/')}/{i.key}" for i in lh.store.list(prefix)}
