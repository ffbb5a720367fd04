"""Log retention: delete segments whose records are all in the lake and older than the retention period.

A segment is deletable only if its last offset is below the lake's tiered offset of its bucket **and**
it was appended more than ``retention`` ago. Segments are deleted oldest first and the scan stops at
the first one that must stay, so a bucket's log is always one contiguous range of offsets. The newest
segment of a bucket is always kept: the log learns a bucket's end offset from its newest segment, so an
emptied bucket would restart at offset 0 (offsets must never be reused). A segment
holding an un-tiered record is never deleted, whatever its age: if retention is overdue because
tiering lags, the result says so (``overdue``) and a warning is logged.

Subscriptions pin the log too: the caller passes ``pinned`` (bucket -> the first offset a subscription's as-of
read needs, and who needs it; `lakehouse.subscriptions.pins`), and a segment holding any offset at or above
it is kept however old and tiered it is; the result's ``pinned`` says where that held retention back.

Readers below the earliest retained offset are served by the lake: union read starts each bucket's
tail at the lake's offset, which is never below it; a log read of a deleted range raises
`OffsetOutOfRange` naming the earliest available offset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from lakehouse.errors import InvalidArgument
from lakehouse.log import Log
from lakehouse.log.log import MAX_INDEX_AGE
from lakehouse.log.segment import SegmentHeader
from lakehouse.maintenance.expiry import cutoff_of

log = logging.getLogger(__name__)

DEFAULT_RETENTION = timedelta(days=7)
#: Below this, a producer idle for longer than the retention could hold a bucket end whose segments were
#: appended by others and deleted since (it re-lists a bucket only after `MAX_INDEX_AGE` seconds).
SAFE_RETENTION = timedelta(minutes=10)


@dataclass
class RetentionResult:
    table: str
    segments_deleted: int = 0
    records_deleted: int = 0
    bytes_freed: int = 0
    start_offsets: dict[int, int] = field(default_factory=dict)
    overdue: dict[int, int] = field(default_factory=dict)  # bucket -> expired but un-tiered records
    #: bucket -> (offset, who): expired, tiered records from that offset on kept only because of a pin
    pinned: dict[int, tuple[int, str]] = field(default_factory=dict)
    message: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["start_offsets"] = {str(k): v for k, v in self.start_offsets.items()}
        doc["overdue"] = {str(k): v for k, v in self.overdue.items()}
        doc["pinned"] = {str(k): {"offset": o, "by": who} for k, (o, who) in self.pinned.items()}
        return doc


def apply_log_retention(
    log_: Log,
    lake_offsets: dict[int, int],
    *,
    retention: timedelta = DEFAULT_RETENTION,
    pinned: Mapping[int, tuple[int, str]] | None = None,
) -> RetentionResult:
    """Delete tiered segments older than ``retention`` and wholly below the ``pinned`` offsets (see the module
    docstring)."""
    if not isinstance(retention, timedelta):
        raise InvalidArgument(f"retention must be a timedelta, got {retention!r}")
    cutoff = cutoff_of(retention, "retention")
    if retention < SAFE_RETENTION:
        log.warning(
            "log retention of %s for %s is below %s: a producer that appended more than %s s ago and not since "
            "may still take a deleted offset as the end of its bucket; keep retention >= %s in production",
            retention,
            log_.name,
            SAFE_RETENTION,
            int(MAX_INDEX_AGE),
            SAFE_RETENTION,
        )
    started = time.perf_counter()
    store, name = log_.store, log_.name
    result = RetentionResult(str(name))
    for bucket in range(log_.definition.buckets):
        prefix = name.bucket_prefix(bucket)
        segments = []
        for info in store.list(prefix):
            stem = info.key[len(prefix) :]
            if stem.endswith(".arrow") and stem[:-6].isdigit():
                segments.append((int(stem[:-6]), info))
        segments.sort(key=lambda s: s[0])
        tiered = lake_offsets.get(bucket, 0)
        pin, pinned_by = (pinned or {}).get(bucket, (tiered, ""))
        start = segments[0][0] if segments else 0

        def end_of(j: int, segments: list = segments) -> int:
            if j + 1 < len(segments):
                return segments[j + 1][0]
            key = segments[j][1].key
            return segments[j][0] + SegmentHeader.from_metadata(store.head(key).metadata, key=key).count

        for i, (base, info) in enumerate(segments):
            if info.last_modified >= cutoff:
                break  # too young (and so is everything appended after it)
            end = end_of(i)
            if end > tiered:
                # expired, but holds records the lake does not have: kept, whatever its age
                last_expired = max(j for j, (_, inf) in enumerate(segments) if inf.last_modified < cutoff)
                result.overdue[bucket] = end_of(last_expired) - max(base, tiered)
                break
            if end > pin:  # tiered and expired, but a subscription's as-of read needs offsets from `pin` on
                result.pinned[bucket] = (pin, pinned_by)
                break
            if i == len(segments) - 1:
                break  # the newest segment stays: its key and header are where the bucket's end offset lives
            store.delete(info.key)
            result.segments_deleted += 1
            result.records_deleted += end - base
            result.bytes_freed += info.size
            start = end
        result.start_offsets[bucket] = start
    if result.pinned:
        log.info(
            "%s: log retention kept segments subscriptions need: %s",
            name,
            "; ".join(f"bucket {b} from offset {o} ({who})" for b, (o, who) in sorted(result.pinned.items())),
        )
    if result.overdue:
        result.message = (
            f"{name}: retention is overdue: {sum(result.overdue.values()):,} records older than {retention} are not "
            f"tiered yet (buckets {sorted(result.overdue)}) and were kept. Tiering lags: run `lakestream tier` / "
            "check the lake_tiering DAG"
        )
        log.warning(result.message)
    else:
        result.message = f"{name}: {result.segments_deleted} segments ({result.records_deleted:,} records) deleted"
    result.seconds = time.perf_counter() - started
    return result
