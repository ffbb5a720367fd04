"""Order-independent digests of rows, computed vectorized (numpy over Arrow buffers).

A row's hash is a 64-bit mix of its columns' hashes; a set of rows has the digest ``(count, sum of row hashes
mod 2**64)``. Digests add and subtract, so "the rows a commit removed, minus those of changed keys, plus the
log's new rows" is arithmetic on digests, and two sides agree iff their digests do (up to a 2**-64 chance).
Where they differ, `difference` names the rows: both sides' row hashes are in memory, so a sorted multiset
difference finds exactly the rows on one side only (no bisection over a remote database needed, as reladiff
must do).

Values are hashed by what they mean, not how Arrow stores them: every integer as int64, dates as days,
timestamps and times as microseconds, floats as float64 bits, strings and binaries by their bytes (plain,
large or dictionary-encoded alike), decimals by their unscaled 128-bit value; structs and lists by their
children. So the lake's Parquet columns and the log's Arrow IPC columns of one row hash alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.table.bucketing import as_micros, murmur3_binary

MASK = (1 << 64) - 1
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_NULL = np.uint64(0x9E3779B97F4A7C15)  # a null's hash (then mixed with the column's position)
_ROW = np.uint64(0x100000001B3)


def splitmix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijective 64-bit mix."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _M1
        x = x ^ (x >> np.uint64(27))
        x = x * _M2
        return x ^ (x >> np.uint64(31))


def _fixed(values: np.ndarray) -> np.ndarray:
    return splitmix(np.ascontiguousarray(values).view(np.uint64).copy())


def _decimal(arr: pa.Array) -> np.ndarray:
    """Hash of the unscaled value (decimal32/64 widened to 128 bits by a cast to the same scale)."""
    t = arr.type
    if not pa.types.is_decimal128(t):
        arr = arr.cast(pa.decimal128(38, t.scale))
    words = np.frombuffer(arr.buffers()[1], dtype=np.uint64)[2 * arr.offset : 2 * (arr.offset + len(arr))]
    lo, hi = words[0::2], words[1::2]
    with np.errstate(over="ignore"):
        return splitmix(splitmix(lo) ^ (hi * _ROW))


def column_hashes(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A uint64 hash of every value of ``arr`` (nulls hash alike, to `_NULL`)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if pa.types.is_dictionary(t):
        return column_hashes(arr.dictionary_decode())
    if isinstance(t, pa.BaseExtensionType):
        return column_hashes(arr.storage)
    n = len(arr)
    if pa.types.is_null(t):
        return np.full(n, _NULL, dtype=np.uint64)
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        h = _fixed(arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
    elif pa.types.is_date32(t):
        h = _fixed(arr.cast(pa.int32()).cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
    elif pa.types.is_date64(t):
        h = _fixed(pc.divide(arr.cast(pa.int64()), 86_400_000).fill_null(0).to_numpy(zero_copy_only=False))
    elif pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_duration(t):
        h = _fixed(as_micros(arr))
    elif pa.types.is_floating(t):
        h = _fixed(arr.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False))
    elif pa.types.is_decimal(t):
        h = _decimal(arr)
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        h = splitmix(murmur3_binary(arr.cast(pa.large_string()).cast(pa.large_binary())).astype(np.uint64))
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        h = splitmix(murmur3_binary(arr.cast(pa.large_binary())).astype(np.uint64))
    elif pa.types.is_struct(t):
        h = np.zeros(n, dtype=np.uint64)
        for i in range(t.num_fields):
            h = _combine(h, column_hashes(arr.field(i)), i)
        h = splitmix(h)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_map(t):
        h = _lists(arr)
    else:
        raise TypeError(f"cannot hash a column of type {t}")
    if arr.null_count:
        h = np.where(np.asarray(arr.is_valid()), h, _NULL)
    return h


def _lists(arr: pa.Array) -> np.ndarray:
    """Each list's hash: its length and its elements' hashes, each mixed with its position in the list."""
    if pa.types.is_fixed_size_list(arr.type):
        arr = arr.cast(pa.list_(arr.type.value_field))
    offsets = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    values = (
        arr.flatten()
        if not pa.types.is_map(arr.type)
        else pa.StructArray.from_arrays([arr.keys, arr.items], ["key", "value"])
    )
    base = offsets[0]
    vh = column_hashes(values)
    lengths = np.diff(offsets)
    with np.errstate(over="ignore"):
        positions = np.arange(len(vh), dtype=np.int64) - np.repeat(offsets[:-1] - base, lengths)
        mixed = splitmix(vh ^ (positions.astype(np.uint64) * _ROW))
        sums = np.zeros(len(arr), dtype=np.uint64)
        nonempty = lengths > 0
        if nonempty.any():
            starts = (offsets[:-1] - base)[nonempty]
            sums[nonempty] = np.add.reduceat(mixed, starts)
        return splitmix(sums ^ splitmix(lengths.astype(np.uint64)))


def _combine(acc: np.ndarray, h: np.ndarray, position: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (acc * _ROW) ^ (h + np.uint64(position + 1) * _NULL)


def row_hashes(table: pa.Table | pa.RecordBatch, columns: list[str]) -> np.ndarray:
    """A uint64 hash of every row over ``columns`` (in that order; a column's name is not hashed)."""
    acc = np.zeros(table.num_rows, dtype=np.uint64)
    for i, name in enumerate(columns):
        acc = _combine(acc, column_hashes(table.column(name)), i)
    return splitmix(acc)


@dataclass(frozen=True)
class Digest:
    """``count`` rows whose hashes sum to ``total`` (mod 2**64). Digests of disjoint row sets add up."""

    count: int = 0
    total: int = 0

    @classmethod
    def of(cls, hashes: np.ndarray) -> Digest:
        with np.errstate(over="ignore"):
            return cls(len(hashes), int(hashes.sum(dtype=np.uint64)) if len(hashes) else 0)

    def __add__(self, other: Digest) -> Digest:
        return Digest(self.count + other.count, (self.total + other.total) & MASK)

    def __sub__(self, other: Digest) -> Digest:
        return Digest(self.count - other.count, (self.total - other.total) & MASK)

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "hash": self.total}


def difference(expected: np.ndarray, actual: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the rows of ``expected`` missing from ``actual``, and of those of ``actual`` not in
    ``expected`` (multisets: a row there twice but expected once is one extra)."""
    e_order = np.argsort(expected, kind="stable")
    a_order = np.argsort(actual, kind="stable")
    e_sorted, a_sorted = expected[e_order], actual[a_order]
    # the k-th occurrence of a hash on one side matches the k-th on the other
    e_rank = _occurrence(e_sorted)
    a_rank = _occurrence(a_sorted)
    e_keys = e_sorted ^ splitmix(e_rank.astype(np.uint64) + _NULL)
    a_keys = a_sorted ^ splitmix(a_rank.astype(np.uint64) + _NULL)
    missing = ~np.isin(e_keys, a_keys)
    extra = ~np.isin(a_keys, e_keys)
    return e_order[missing], a_order[extra]


def _occurrence(sorted_hashes: np.ndarray) -> np.ndarray:
    """For a sorted array, how many equal values precede each position."""
    n = len(sorted_hashes)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.concatenate(([True], sorted_hashes[1:] != sorted_hashes[:-1]))
    group_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    return np.arange(n) - group_start


__all__ = ["Digest", "column_hashes", "difference", "row_hashes"]
