"""Log segments: one immutable object per append per bucket.

A segment's body is an Arrow IPC stream of the user's columns only, in one or more record batches (a
`Producer` writes the parts of the sends it gathered as they are, rather than copying them into one,
unless they average under ``MIN_BATCH_ROWS`` rows). Everything else is the object's metadata, so a reader
learns it from the same GET (and an index from one HEAD):

    lakestream-count      records in the segment
    lakestream-op         insert | upsert | delete (one operation per append)
    lakestream-ts         append time, microseconds since the epoch (UTC)
    lakestream-producer   producer id
    lakestream-seq        the producer's sequence number of the append
    lakestream-sends      ``first-last``: the `Producer` sends whose rows for this bucket the segment holds
                          (all of them, in send order); what a resumed producer skips (only Producer segments)
    lakestream-schema-version  the table's schema version the segment was written with (`lakehouse.table.evolution`);
                          absent: version 0
    lakestream-crc32c     CRC-32C (Castagnoli) of the body, hex; hardware-accelerated, several times faster
                          than zlib's CRC-32. Segments written before carry ``lakestream-crc32`` (zlib's
                          CRC-32) instead, and are still verified with it.

Offsets are not stored: the segment's key names its base offset and records are contiguous.
"""

from __future__ import annotations

import functools
import operator
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import google_crc32c
import numpy as np
import pyarrow as pa

from lakehouse.errors import CorruptSegmentError, InvalidArgument

OPS = ("insert", "upsert", "delete")
OP_TYPE = pa.dictionary(pa.int8(), pa.string())
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
SYSTEM_FIELDS = [
    pa.field("_op", OP_TYPE, False),
    pa.field("_offset", pa.int64(), False),
    pa.field("_timestamp", TIMESTAMP_TYPE, False),
]
_OP_DICTIONARY = pa.array(OPS, pa.string())
#: Producer ids travel in object metadata (HTTP headers): visible ASCII, which no store trims or re-encodes,
#: and short enough for S3's 2 KB of user metadata.
_PRODUCER_ID = re.compile(r"[!-~]{1,128}")
MAX_SEQUENCE = 2**63 - 1


def check_producer(producer_id: str | None, sequence: int | None) -> tuple[str | None, int]:
    """Return a caller-given producer id (None: one is generated later) and sequence as a header holds
    them, or raise `InvalidArgument`: a header the log could not read back would make its bucket unreadable."""
    if producer_id is not None and (not isinstance(producer_id, str) or not _PRODUCER_ID.fullmatch(producer_id)):
        raise InvalidArgument(
            f"invalid producer id {producer_id!r}: use 1 to 128 visible ASCII characters, no spaces "
            "(it is stored in each segment's object metadata)"
        )
    if sequence is None:
        raise InvalidArgument(f"producer {producer_id}: give the append's sequence too (its number in the producer)")
    try:
        seq = None if isinstance(sequence, bool) else operator.index(sequence)
    except TypeError:
        seq = None
    if seq is None or not 0 <= seq <= MAX_SEQUENCE:
        raise InvalidArgument(f"a producer's sequence must be an integer from 0 to 2**63-1, got {sequence!r}")
    return producer_id, seq


@dataclass(frozen=True)
class SegmentHeader:
    count: int
    op: str
    timestamp_us: int
    producer: str
    sequence: int
    checksum: str
    #: "crc32c" or "crc32" (zlib's: segments of earlier versions, or no CRC-32C C extension here).
    algorithm: str = "crc32c"
    #: The numbers of the first and last `Producer` send whose rows (for this bucket) the segment holds.
    sends: tuple[int, int] | None = None
    #: The table's schema version the body was written with: a read projects an older one to the current schema.
    schema_version: int = 0

    def to_metadata(self) -> dict[str, str]:
        meta = {
            "lakestream-count": str(self.count),
            "lakestream-op": self.op,
            "lakestream-ts": str(self.timestamp_us),
            "lakestream-producer": self.producer,
            "lakestream-seq": str(self.sequence),
            f"lakestream-{self.algorithm}": self.checksum,
        }
        if self.sends is not None:
            meta["lakestream-sends"] = f"{self.sends[0]}-{self.sends[1]}"
        if self.schema_version:
            meta["lakestream-schema-version"] = str(self.schema_version)
        return meta

    @classmethod
    def from_metadata(cls, meta: Mapping[str, str], *, key: str) -> SegmentHeader:
        algorithm = "crc32c" if "lakestream-crc32c" in meta else "crc32"
        try:
            header = cls(
                count=int(meta["lakestream-count"]),
                op=meta["lakestream-op"],
                timestamp_us=int(meta["lakestream-ts"]),
                producer=meta["lakestream-producer"],
                sequence=int(meta["lakestream-seq"]),
                checksum=meta[f"lakestream-{algorithm}"],
                algorithm=algorithm,
                sends=_sends(meta.get("lakestream-sends")),
                schema_version=int(meta.get("lakestream-schema-version", 0)),
            )
        except (KeyError, ValueError):
            raise CorruptSegmentError(
                f"segment {key} has no valid lakestream header in its metadata (written by another tool?)"
            ) from None
        if header.op not in OPS or header.count < 1:
            raise CorruptSegmentError(f"segment {key} has an invalid header: {header}")
        return header


def _sends(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    first, last = (int(v) for v in text.split("-"))
    return first, last


#: A segment's record batches hold this many rows on average at least: smaller ones are joined first.
MIN_BATCH_ROWS = 1024


def encode(table: pa.Table, compression: str | None = None) -> bytes:
    """The Arrow IPC stream of ``table``; ``compression`` = None, "lz4" or "zstd" (buffer compression,
    read transparently).

    Each chunk of ``table`` becomes a record batch, unless they average fewer than ``MIN_BATCH_ROWS`` rows:
    then they are joined into one. A `Producer` gathering 10-row sends wrote segments of ~2,000 batches,
    three times the bytes of one batch and ten times slower to read (each batch carries its own header)."""
    batches = table.to_batches()
    if len(batches) > 1 and table.num_rows < MIN_BATCH_ROWS * len(batches):
        batches = table.combine_chunks().to_batches()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


#: New segments use CRC-32C where its C extension is installed (pure Python it would be far slower than zlib).
WRITE_ALGORITHM = "crc32c" if google_crc32c.implementation == "c" else "crc32"


def checksum(body: bytes, algorithm: str = WRITE_ALGORITHM) -> str:
    if algorithm == "crc32c":
        return f"{google_crc32c.value(body):08x}"
    return f"{zlib.crc32(body):08x}"


def records_schema(schema: pa.Schema, primary_key: tuple[str, ...] | list[str]) -> pa.Schema:
    """The user columns as a log read returns them: in a primary-key table every column outside the key is
    nullable, because a delete may carry only the key (its segment's schema says so, and one read can hold
    such a segment next to full ones)."""
    if not primary_key:
        return schema
    return pa.schema([f if f.name in primary_key else f.with_nullable(True) for f in schema], metadata=schema.metadata)


def decode(body: bytes, header: SegmentHeader, *, key: str, base_offset: int, schema: pa.Schema) -> pa.Table:
    """Verify and decode a segment body into ``schema`` (see `records_schema`); raise `CorruptSegmentError`
    naming the object and offsets."""
    where = f"segment {key} (offsets {base_offset}..{base_offset + header.count - 1})"
    if checksum(body, header.algorithm) != header.checksum:
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
    if table.schema.equals(schema):
        return table
    if table.schema.names != schema.names or table.schema.types != schema.types or _nullable_where_not(table, schema):
        raise CorruptSegmentError(
            f"{where} has columns {_describe(table.schema)}, the table has {_describe(schema)} (written by "
            "another tool or another table?). It is not skipped: restore the object or re-create the log"
        )
    return pa.Table.from_arrays(table.columns, schema=schema)  # the same arrays, under the read schema


def _nullable_where_not(table: pa.Table, schema: pa.Schema) -> bool:
    """Whether a column the read schema declares NOT NULL holds nulls."""
    return any(not f.nullable and table.column(i).null_count for i, f in enumerate(schema))


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema)


def with_system_columns(
    parts: list[tuple[pa.Table, SegmentHeader, int]], schema: pa.Schema, first_offset: int
) -> pa.Table:
    """One table of consecutive segment slices ``(records, header, first offset)`` with ``_op``, ``_offset``
    and ``_timestamp``: one ``_offset`` range and one fill per segment for the others, so `Log.read` builds
    them once for the whole range (per segment they cost Python time each) and `Log.read_batches` for
    one segment at a time. The user columns stay chunked by segment (zero-copy). The columns are filled
    into buffers from pyarrow's memory pool (which reuses freed memory: fresh numpy arrays paid page
    faults), without pyarrow's validating constructors."""
    n = sum(table.num_rows for table, _, _ in parts)
    offsets, view = _int64_buffer(n)
    view[:] = np.arange(first_offset, first_offset + n)
    timestamps, ts_view = _int64_buffer(n)
    op_codes = pa.allocate_buffer(n)
    op_view = np.frombuffer(op_codes, dtype=np.int8)
    position = 0
    for table, header, _ in parts:
        stop = position + table.num_rows
        ts_view[position:stop] = header.timestamp_us
        op_view[position:stop] = OPS.index(header.op)
        position = stop
    user = pa.Table.from_batches([b for table, _, _ in parts for b in table.to_batches()], schema=schema)
    columns = [
        *user.columns,
        pa.DictionaryArray.from_buffers(OP_TYPE, n, [None, op_codes], _OP_DICTIONARY),
        pa.Array.from_buffers(pa.int64(), n, [None, offsets]),
        pa.Array.from_buffers(TIMESTAMP_TYPE, n, [None, timestamps]),
    ]
    return pa.Table.from_arrays(columns, schema=_read_schema(schema))


def _int64_buffer(n: int) -> tuple[pa.Buffer, np.ndarray]:
    """An Arrow buffer for ``n`` int64 values from pyarrow's memory pool, and a writable numpy view of it."""
    buffer = pa.allocate_buffer(n * 8)
    return buffer, np.frombuffer(buffer, dtype=np.int64)


@functools.lru_cache(maxsize=16)
def _read_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([*schema, *SYSTEM_FIELDS])
