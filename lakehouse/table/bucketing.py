"""Iceberg's ``bucket[N]`` transform, vectorized over Arrow arrays.

The log puts a row in bucket ``(murmur3_x86_32(serialize(key), seed=0) & Integer.MAX_VALUE) % N``,
exactly Iceberg's bucket transform, so log bucket ``i`` *is* Iceberg partition ``bucket(N, key) = i`` and
tiering needs no shuffle. Serialization follows the Iceberg spec's single-value hashing rules:

* int, long, date (days), time (micros), timestamp(tz) (micros; nanos are floored to micros): 8-byte
  little-endian long;
* string: UTF-8 bytes; binary and fixed: the bytes; decimal: the unscaled value as minimal big-endian
  two's-complement bytes; uuid: 16 big-endian bytes.

Fixed-width keys hash in a few numpy passes; variable-width keys are padded into a row-by-word matrix
in chunks and hashed word column by word column (one pass per 4 bytes of the longest key in the chunk).
Decimals fall back to ``mmh3`` per value (rare as bucket keys).
"""

from __future__ import annotations

import mmh3
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.utils.decimal import bytes_required

from lakehouse.errors import InvalidArgument, SchemaError

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_CHUNK_ROWS = 65536
_MAX_VECTOR_LEN = 256  # longer keys in a chunk: hash that chunk value by value


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k(k: np.ndarray) -> np.ndarray:
    return _rotl(k * _C1, 15) * _C2


def _mix_h(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    return _rotl(h ^ _mix_k(k), 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h: npt.NDArray[np.uint32], length: np.ndarray | int) -> npt.NDArray[np.uint32]:
    h = h ^ np.asarray(length, dtype=np.uint32)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


def murmur3_longs(values: np.ndarray) -> np.ndarray:
    """murmur3_x86_32 (seed 0) of each int64 serialized as 8 little-endian bytes; uint32 results."""
    u = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    lo = (u & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (u >> np.uint64(32)).astype(np.uint32)
    with np.errstate(over="ignore"):
        h = _mix_h(np.zeros(len(u), dtype=np.uint32), lo)
        h = _mix_h(h, hi)
        return _fmix(h, 8)


def murmur3_binary(arr: pa.Array) -> np.ndarray:
    """murmur3_x86_32 (seed 0) of each value of a string/binary array (nulls hash as empty)."""
    arr = arr.cast(pa.large_binary()) if not pa.types.is_large_binary(arr.type) else arr
    out = np.empty(len(arr), dtype=np.uint32)
    for start in range(0, len(arr), _CHUNK_ROWS):
        out[start : start + _CHUNK_ROWS] = _murmur3_binary_chunk(arr.slice(start, _CHUNK_ROWS))
    return out


def _murmur3_binary_chunk(arr: pa.Array) -> np.ndarray:
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if arr.null_count:
        lengths = np.where(np.asarray(arr.is_valid()), lengths, 0)
    max_len = int(lengths.max()) if n else 0
    if max_len > _MAX_VECTOR_LEN:
        return np.array([mmh3.hash(v.as_py() or b"", signed=False) for v in arr], dtype=np.uint32)
    words = (max_len + 3) // 4
    if words == 0:
        return _fmix(np.zeros(n, dtype=np.uint32), 0)
    pos = np.arange(words * 4)
    index = offsets[:-1, None] + pos[None, :]
    valid = pos[None, :] < lengths[:, None]
    padded = np.where(valid, data[np.minimum(index, max(len(data) - 1, 0))] if len(data) else 0, 0)
    matrix = np.ascontiguousarray(padded.astype(np.uint8)).view("<u4")
    h = np.zeros(n, dtype=np.uint32)
    full_words = lengths // 4
    with np.errstate(over="ignore"):
        for j in range(words):
            k = matrix[:, j].astype(np.uint32)
            h = np.where(full_words > j, _mix_h(h, k), h)
        tail = lengths % 4 != 0
        if tail.any():
            k = matrix[np.arange(n), np.minimum(full_words, words - 1)].astype(np.uint32)
            h = np.where(tail, h ^ _mix_k(k), h)
        return _fmix(h, lengths.astype(np.uint32))


def _decimal_bytes(unscaled: int) -> bytes:
    # minimal two's complement, as Java's BigInteger.toByteArray: -128 is one byte (0x80), not two (0xff80)
    return unscaled.to_bytes(bytes_required(unscaled), "big", signed=True)


def _murmur3_decimals(arr: pa.Array) -> np.ndarray:
    scale = arr.type.scale
    out = np.zeros(len(arr), dtype=np.uint32)
    for i, v in enumerate(arr.to_pylist()):
        if v is not None:
            unscaled = int(v.scaleb(scale))
            out[i] = mmh3.hash(_decimal_bytes(unscaled), signed=False)
    return out


def as_micros(arr: pa.Array) -> np.ndarray:
    """Timestamps (or times) as int64 microseconds, whatever their unit (nulls as 0)."""
    unit = arr.type.unit
    ints = arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    if unit == "s":
        return ints * 1_000_000
    if unit == "ms":
        return ints * 1_000
    if unit == "ns":
        return np.floor_divide(ints, 1_000)
    return ints


def murmur3(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Iceberg's 32-bit bucket hash of every value (uint32); null positions hold an arbitrary value.

    Raises:
        SchemaError: the type cannot be a bucket key (Iceberg's bucket transform does not support it).
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_integer(t) and not pa.types.is_uint64(t):
        return murmur3_longs(arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
    if pa.types.is_date32(t):
        return murmur3_longs(arr.cast(pa.int32()).cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
    if pa.types.is_date64(t):
        days = pc.divide(arr.cast(pa.int64()), 86_400_000).fill_null(0).to_numpy(zero_copy_only=False)
        return murmur3_longs(days)
    if pa.types.is_timestamp(t) or pa.types.is_time(t):
        return murmur3_longs(as_micros(arr))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        return murmur3_binary(arr)
    if pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return murmur3_binary(arr)
    if pa.types.is_decimal(t):
        return _murmur3_decimals(arr)
    if isinstance(t, pa.BaseExtensionType) and t.extension_name == "arrow.uuid":
        return murmur3_binary(arr.storage)  # its storage is the 16 big-endian bytes Iceberg hashes
    raise SchemaError(
        f"a column of type {t} cannot be a bucket key: Iceberg's bucket transform supports int, long, "
        "date, time, timestamp, string, binary, fixed, decimal and uuid"
    )


def bucket_ids(arr: pa.Array | pa.ChunkedArray, num_buckets: int) -> pa.Int32Array:
    """``bucket[num_buckets]`` of every value, as Iceberg computes it; null where the value is null."""
    if num_buckets < 1:
        raise InvalidArgument(f"num_buckets must be >= 1, got {num_buckets}")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    ids = ((murmur3(arr) & np.uint32(0x7FFFFFFF)) % np.uint32(num_buckets)).astype(np.int32)
    mask = np.asarray(arr.is_null()) if arr.null_count else None
    return pa.array(ids, type=pa.int32(), mask=mask)


def check_bucket_key_type(t: pa.DataType) -> None:
    """Raise `SchemaError` if ``t`` cannot be a bucket key."""
    murmur3(pa.array([], type=t))
