"""Log segments: one immutable object per append per bucket.

A segment's body is an Arrow IPC stream of the user's columns only. Everything else is the object's
metadata, so a reader learns it from the same GET (and an index from one HEAD):

    lakestream-count      records in the segment
    lakestream-op         insert | upsert | delete (one operation per append)
    lakestream-ts         append time, microseconds since the epoch (UTC)
    lakestream-producer   producer id
    lakestream-seq        the producer's sequence number of the append
    lakestream-crc32      CRC-32 of the body (hex)

Offsets are not stored: the segment's key names its base offset and records are contiguous.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lakehouse.errors import CorruptSegmentError

OPS = ("insert", "upsert", "delete")
OP_TYPE = pa.dictionary(pa.int8(), pa.string())
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
SYSTEM_FIELDS = [
    pa.field("_op", OP_TYPE, False),
    pa.field("_offset", pa.int64(), False),
    pa.field("_timestamp", TIMESTAMP_TYPE, False),
]
_OP_DICTIONARY = pa.array(OPS, pa.string())


@dataclass(frozen=True)
class SegmentHeader:
    count: int
    op: str
    timestamp_us: int
    producer: str
    sequence: int
    crc32: str

    def to_metadata(self) -> dict[str, str]:
        return {
            "lakestream-count": str(self.count),
            "lakestream-op": self.op,
            "lakestream-ts": str(self.timestamp_us),
            "lakestream-producer": self.producer,
            "lakestream-seq": str(self.sequence),
            "lakestream-crc32": self.crc32,
        }

    @classmethod
    def from_metadata(cls, meta: Mapping[str, str], *, key: str) -> SegmentHeader:
        try:
            header = cls(
                count=int(meta["lakestream-count"]),
                op=meta["lakestream-op"],
                timestamp_us=int(meta["lakestream-ts"]),
                producer=meta["lakestream-producer"],
                sequence=int(meta["lakestream-seq"]),
                crc32=meta["lakestream-crc32"],
            )
        except (KeyError, ValueError):
            raise CorruptSegmentError(
                f"segment {key} has no valid lakestream header in its metadata (written by another tool?)"
            ) from None
        if header.op not in OPS or header.count < 1:
            raise CorruptSegmentError(f"segment {key} has an invalid header: {header}")
        return header


def encode(table: pa.Table, compression: str | None = None) -> bytes:
    """The Arrow IPC stream of ``table``; ``compression`` = None, "lz4" or "zstd" (buffer compression,
    read transparently)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def checksum(body: bytes) -> str:
    return f"{zlib.crc32(body):08x}"


def decode(body: bytes, header: SegmentHeader, *, key: str, base_offset: int) -> pa.Table:
    """Verify and decode a segment body; raise `CorruptSegmentError` naming the object and offsets."""
    where = f"segment {key} (offsets {base_offset}..{base_offset + header.count - 1})"
    if checksum(body) != header.crc32:
        raise CorruptSegmentError(
            f"{where} fails its checksum ({len(body)} bytes; truncated or overwritten). It is not skipped: "
            "restore the object or re-create the log from its source"
        )
    try:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    except pa.ArrowException as exc:
        raise CorruptSegmentError(f"{where} cannot be decoded: {exc}") from None
    if table.num_rows != header.count:
        raise CorruptSegmentError(f"{where} holds {table.num_rows} records, its header says {header.count}")
    return table


def with_system_columns(table: pa.Table, header: SegmentHeader, first_offset: int) -> pa.Table:
    """Append ``_op``, ``_offset`` and ``_timestamp`` to (a slice of) a decoded segment."""
    n = table.num_rows
    op = pa.DictionaryArray.from_arrays(pa.array(np.full(n, OPS.index(header.op), dtype=np.int8)), _OP_DICTIONARY)
    offsets = pa.array(np.arange(first_offset, first_offset + n, dtype=np.int64))
    ts = pa.array(np.full(n, header.timestamp_us, dtype=np.int64)).view(TIMESTAMP_TYPE)
    schema = pa.schema([*table.schema, *SYSTEM_FIELDS])
    return pa.Table.from_arrays([*table.columns, op, offsets, ts], schema=schema)
