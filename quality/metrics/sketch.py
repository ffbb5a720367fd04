"""A mergeable distinct-count sketch: HyperLogLog registers over the 64-bit value hashes of `quality.digest`.

Why not the ``datasketches`` package: it installs from PyPI, but its Python ``hll_sketch.update`` takes one
value per call (no array update in 5.2), so a column of a million changes is a million Python calls, the
dominant cost of a commit's metrics. Here the values are hashed vectorized (`quality.digest.column_hashes`, the
same hashes reconciliation uses: by meaning, so an int32 and an int64 of one value count once; strings and
binaries: their distinct values, found by Arrow, by `string_hashes`), and the registers are updated with one
numpy ``maximum.at``.

Precision ``P`` = 12: 4,096 one-byte registers per column (zlib-compressed when shipped from a task; mostly
zeros for small commits), relative standard error 1.04 / sqrt(4096) = 1.6 %. Below 2.5 x 4,096 distinct values
the estimate is linear counting over the empty registers, close to exact for small counts. Sketches of
disjoint or overlapping row sets merge by the register-wise maximum (the union's distinct count).
"""

from __future__ import annotations

import math
import zlib

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quality.digest import column_hashes, splitmix

P = 12
M = 1 << P
#: The relative standard error of an estimate (1.04 / sqrt(M)).
RELATIVE_ERROR = 1.04 / math.sqrt(M)
_REST_BITS = 64 - P
_REST_MASK = np.uint64((1 << _REST_BITS) - 1)


def empty() -> np.ndarray:
    return np.zeros(M, dtype=np.uint8)


def add_hashes(registers: np.ndarray, hashes: np.ndarray) -> None:
    """Add uint64 ``hashes`` to ``registers`` (in place)."""
    if not len(hashes):
        return
    index = (hashes >> np.uint64(_REST_BITS)).astype(np.intp)
    rest = hashes & _REST_MASK
    # the rank: 1 + the leading zeros of the rest's REST_BITS bits (REST_BITS + 1 when the rest is 0); float64's
    # exponent is exact for the bit length unless rounding carries into the next power of two (the top 53 bits
    # all ones: negligible for a sketch)
    nonzero = rest != 0
    bits = np.zeros(len(rest), dtype=np.int64)
    bits[nonzero] = np.frexp(rest[nonzero].astype(np.float64))[1]
    rank = np.minimum(_REST_BITS - bits + 1, 255).astype(np.uint8)
    np.maximum.at(registers, index, rank)


def add_column(registers: np.ndarray, column: pa.Array | pa.ChunkedArray) -> None:
    """Add the non-null values of ``column`` to ``registers``."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.null_count:
        column = column.drop_null()
    if not len(column):
        return
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        # strings: Arrow's C++ hash table finds the distinct ones first (a column of statuses or codes hashes a
        # few values), then `string_hashes`
        add_hashes(registers, string_hashes(pc.unique(column)))
    else:
        add_hashes(registers, column_hashes(column))


#: Strings up to this many bytes are hashed as fixed-width rows of 8-byte words (`string_hashes`).
PADDED_BYTES = 128
_MIX = np.uint64(0xBF58476D1CE4E5B9)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def string_hashes(values: pa.Array) -> np.ndarray:
    """A 64-bit hash of each (non-null) string or binary value. Strings of up to `PADDED_BYTES` bytes: Arrow
    pads them to one width (``ascii_rpad`` counts bytes), the padded data is a matrix of 8-byte words, and each
    word is mixed into its row's hash (with the value's byte length first, so padding never collides): a few
    numpy passes, not a Python call per value. Longer ones (and binaries): mmh3's 64-bit hash, value by value
    (numpy's vectorized murmur3 over padded bytes, what `quality.digest` uses, is ten times slower for
    strings of tens of bytes)."""
    if not len(values):
        return np.empty(0, np.uint64)
    t = values.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        values = values.cast(pa.large_string())
        lengths = pc.binary_length(values).to_numpy(zero_copy_only=False).astype(np.uint64)
        longest = int(lengths.max())
        if longest <= PADDED_BYTES:
            width = max(8, (longest + 7) // 8 * 8)
            padded = pc.ascii_rpad(values, width, " ")
            first = int(np.frombuffer(padded.buffers()[1], np.int64, count=1, offset=8 * padded.offset)[0])
            words = np.frombuffer(padded.buffers()[2], np.uint64, count=len(values) * width // 8, offset=first)
            words = words.reshape(len(values), width // 8)
            with np.errstate(over="ignore"):
                h = lengths * _GOLDEN
                for j in range(width // 8):
                    h = (h ^ words[:, j]) * _MIX
                    h ^= h >> np.uint64(29)
            return splitmix(h)
    return np.fromiter((mmh3.hash64(v, signed=False)[0] for v in values.to_pylist()), np.uint64, len(values))


def merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a, b)


def estimate(registers: np.ndarray) -> float:
    """The distinct values added (HyperLogLog with linear counting for small counts)."""
    zeros = int(np.count_nonzero(registers == 0))
    if zeros == M:
        return 0.0
    alpha = 0.7213 / (1 + 1.079 / M)
    raw = alpha * M * M / float(np.sum(np.ldexp(1.0, -registers.astype(np.int64))))
    if raw <= 2.5 * M and zeros:
        return M * math.log(M / zeros)
    return raw


def pack(registers: np.ndarray) -> bytes:
    """The registers as shipped from a task (compressed: a small commit's are mostly zeros)."""
    return zlib.compress(registers.tobytes(), 1)


def unpack(data: bytes) -> np.ndarray:
    return np.frombuffer(zlib.decompress(data), dtype=np.uint8).copy()


__all__ = ["M", "P", "RELATIVE_ERROR", "add_column", "add_hashes", "empty", "estimate", "merge", "pack", "unpack"]
