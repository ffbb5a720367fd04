"""One commit's metrics from its changes: partial aggregates per bucket, merged on the driver.

A bucket's partial (`BucketPartial`) is computed where the bucket's changes are read (`bucket_partial`: a
thread of the driver under the budget, a Spark executor task above it) from the net changelog of the commit's
offset range (`lakehouse.read.changes.read_bucket_changes`): counts of inserts, updates and deletes, and per column
of the after-images (inserted and updated rows) the rows, nulls, a distinct sketch (`quality.metrics.sketch`) and for
numeric columns min, max, sum and the non-null count; plus the append times of the range's first and last
record (one HEAD each, as `quality.stats` reads lags). Partials are small (counts and 4 KiB of sketch per
column, compressed), whatever the commit's size; `merge_partials` adds them up and `metric_rows` turns the total
into the rows of the metrics table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.read.changes import DELETE, INSERT, OP_COLUMN, UPDATE_AFTER
from object_store.usage import Usage
from quality.metrics import sketch

# table-level metrics
ROWS, INSERTS, UPDATES, DELETES, CHANGES = "rows", "inserts", "updates", "deletes", "changes"
FRESHNESS_MAX, FRESHNESS_MIN = "freshness_seconds_max", "freshness_seconds_min"
# what the commit asked of the store (`lakehouse.iceberg.commit_usage`: tiering and compaction commits record it)
WRITE_REQUESTS, READ_REQUESTS = "write_requests", "read_requests"
BYTES_SENT, BYTES_RECEIVED = "bytes_sent", "bytes_received"
USAGE_METRICS = (WRITE_REQUESTS, READ_REQUESTS, BYTES_SENT, BYTES_RECEIVED)
# per column (min, max and mean of numeric columns only)
NULL_FRACTION, DISTINCT, MIN, MAX, MEAN = "null_fraction", "distinct_estimate", "min", "max", "mean"
TABLE_METRICS = (ROWS, INSERTS, UPDATES, DELETES, CHANGES, FRESHNESS_MAX, FRESHNESS_MIN, *USAGE_METRICS)
COLUMN_METRICS = (NULL_FRACTION, DISTINCT, MIN, MAX, MEAN)


def numeric(t: pa.DataType) -> bool:
    """Whether min, max and mean of a column of type ``t`` are metrics (integers, floats, decimals)."""
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


@dataclass
class ColumnPartial:
    """One column's after-images in one bucket (or, merged, in a whole commit)."""

    rows: int = 0
    nulls: int = 0
    registers: bytes | None = None  # `quality.metrics.sketch.pack`ed; None: no value added
    count: int = 0  # non-null values counted in min/max/sum (numeric columns)
    total: float = 0.0
    low: float | None = None
    high: float | None = None


@dataclass
class BucketPartial:
    """A bucket's share of a commit's metrics (what a task returns: no rows)."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    columns: dict[str, ColumnPartial] = field(default_factory=dict)
    oldest_us: int | None = None  # when the range's first record was appended (microseconds since the epoch)
    newest_us: int | None = None


def bucket_partial(changes: pa.Table, columns: list[str], appended: tuple[int | None, int | None]) -> BucketPartial:
    """The partial of one bucket's changes (`lakehouse.read.changes` rows with ``_op``) over the user ``columns``;
    ``appended``: the append times of the range's first and last record."""
    ops = changes.column(OP_COLUMN)
    inserted, updated = pc.equal(ops, INSERT), pc.equal(ops, UPDATE_AFTER)
    out = after_images_partial(changes.filter(pc.or_(inserted, updated)), columns, appended)
    out.inserts, out.updates, out.deletes = _true(inserted), _true(updated), _true(pc.equal(ops, DELETE))
    return out


def after_images_partial(after: pa.Table, columns: list[str], appended: tuple[int | None, int | None]) -> BucketPartial:
    """The per-column partial of one bucket's after-images (inserted and updated rows) over the user
    ``columns``, with no counts (a commit that recorded them gives them: `lakehouse.iceberg.offsets.round_changes`);
    ``appended`` as in `bucket_partial`."""
    out = BucketPartial(oldest_us=appended[0], newest_us=appended[1])
    for name in columns:
        col = after.column(name)
        part = ColumnPartial(rows=len(col), nulls=col.null_count)
        if len(col) > col.null_count:
            registers = sketch.empty()
            sketch.add_column(registers, col)
            part.registers = sketch.pack(registers)
            if numeric(col.type):
                values = col.cast(pa.float64())
                bounds = pc.min_max(values)
                part.count = len(col) - col.null_count
                part.total = float(pc.sum(values).as_py() or 0.0)
                part.low, part.high = bounds["min"].as_py(), bounds["max"].as_py()
        out.columns[name] = part
    return out


def _true(mask: pa.ChunkedArray | pa.Array) -> int:
    return int(pc.sum(mask.cast(pa.int64())).as_py() or 0)


def merge_partials(parts: list[BucketPartial]) -> BucketPartial:
    """The commit's total of its buckets' partials."""
    out = BucketPartial()
    for p in parts:
        out.inserts += p.inserts
        out.updates += p.updates
        out.deletes += p.deletes
        out.oldest_us = _pick(min, out.oldest_us, p.oldest_us)
        out.newest_us = _pick(max, out.newest_us, p.newest_us)
        for name, c in p.columns.items():
            m = out.columns.setdefault(name, ColumnPartial())
            m.rows += c.rows
            m.nulls += c.nulls
            m.count += c.count
            m.total += c.total
            m.low = _pick(min, m.low, c.low)
            m.high = _pick(max, m.high, c.high)
            if c.registers is not None:
                registers = sketch.unpack(c.registers)
                if m.registers is not None:
                    registers = sketch.merge(sketch.unpack(m.registers), registers)
                m.registers = sketch.pack(registers)
    return out


def _pick(how: Any, a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else how(a, b)


def usage_rows(usage: Usage | None) -> list[tuple[str, str | None, float]]:
    """``(metric, None, value)`` of what a commit recorded asking of the store (none if it recorded nothing)."""
    if usage is None:
        return []
    return [
        (WRITE_REQUESTS, None, float(usage.write_requests)),
        (READ_REQUESTS, None, float(usage.read_requests)),
        (BYTES_SENT, None, float(usage.bytes_sent)),
        (BYTES_RECEIVED, None, float(usage.bytes_received)),
    ]


def metric_rows(
    total: BucketPartial | None, rows: int | None, committed_ms: int, numeric_columns: set[str]
) -> list[tuple[str, str | None, float]]:
    """``(metric, column, value)`` of one commit: its table's ``rows`` after it (if known), and with ``total``
    (None: its changes could not be read) the counts, freshness and per-column metrics. A metric without a
    value (the mean of a column whose after-images are all null, freshness of records whose segments are
    gone) is left out."""
    out: list[tuple[str, str | None, float]] = []
    if rows is not None:
        out.append((ROWS, None, float(rows)))
    if total is None:
        return out
    out += [
        (INSERTS, None, float(total.inserts)),
        (UPDATES, None, float(total.updates)),
        (DELETES, None, float(total.deletes)),
        (CHANGES, None, float(total.inserts + total.updates + total.deletes)),
    ]
    if total.oldest_us is not None:
        out.append((FRESHNESS_MAX, None, max(0.0, committed_ms / 1e3 - total.oldest_us / 1e6)))
    if total.newest_us is not None:
        out.append((FRESHNESS_MIN, None, max(0.0, committed_ms / 1e3 - total.newest_us / 1e6)))
    for name, c in total.columns.items():
        if not c.rows:
            continue
        out.append((NULL_FRACTION, name, c.nulls / c.rows))
        registers = sketch.unpack(c.registers) if c.registers is not None else sketch.empty()
        out.append((DISTINCT, name, sketch.estimate(registers)))
        if name in numeric_columns and c.count:
            assert c.low is not None and c.high is not None  # a column with values has bounds
            out += [(MIN, name, float(c.low)), (MAX, name, float(c.high)), (MEAN, name, c.total / c.count)]
    return out


__all__ = [
    "COLUMN_METRICS",
    "TABLE_METRICS",
    "USAGE_METRICS",
    "BucketPartial",
    "ColumnPartial",
    "after_images_partial",
    "bucket_partial",
    "usage_rows",
    "merge_partials",
    "metric_rows",
    "numeric",
]
