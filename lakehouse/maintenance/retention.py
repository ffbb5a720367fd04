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

**The record.** Before it deletes anything, retention records per bucket the offset below which it may have
removed segments (its *floor*) in one object per table, ``_lakestream/retention/<ns>.<table>.json``, written with
conditional writes only (create with ``If-None-Match``, replace with ``If-Match``: floors only ever move up, a
lost race is read again and merged). A crash between the record and the deletes leaves a floor above the first
segment, which is fine: the record says "may be removed up to". So a bucket whose log starts *above* its floor
lost the records in between to something other than retention (quality's reconciliation reports that), and
retention leaves such a bucket alone rather than remove more of it and move the floor over the gap.
`create_table` writes the record (floors 0); a table created before records existed has none until retention
first runs on it, which records where each bucket starts then.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lakehouse.errors import InvalidArgument, MaintenanceError
from lakehouse.log import Log
from lakehouse.log import chain as chain_format
from lakehouse.log.log import MAX_INDEX_AGE
from lakehouse.log.segment import SegmentHeader
from lakehouse.maintenance.expiry import cutoff_of
from lakehouse.table.definition import COMMITS_LOG, RESERVED_NAMESPACE, TableDefinition, TableName
from object_store import NotFound, ObjectStore, PreconditionFailed
from object_store.usage import ContextThreadPoolExecutor

log = logging.getLogger(__name__)

DEFAULT_RETENTION = timedelta(days=7)
RETENTION_PREFIX = f"{RESERVED_NAMESPACE}/retention/"
#: Compare-and-swap attempts of one record update (each lost one means another writer moved a floor).
_RECORD_ATTEMPTS = 10
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
    #: bucket -> the floor recorded before deleting (see the module): offsets below it may have been removed
    floors: dict[int, int] = field(default_factory=dict)
    #: bucket -> (floor, first offset): the log starts above what retention removed; the bucket was left alone
    gaps: dict[int, tuple[int, int]] = field(default_factory=dict)
    message: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["start_offsets"] = {str(k): v for k, v in self.start_offsets.items()}
        doc["floors"] = {str(k): v for k, v in self.floors.items()}
        doc["gaps"] = {str(k): list(v) for k, v in self.gaps.items()}
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
    if log_.definition.log_format == COMMITS_LOG:
        _commits_retention(log_, lake_offsets, cutoff, pinned or {}, result)
        _finish(result, name, retention)
        result.seconds = time.perf_counter() - started
        return result
    # planned first, deleted only once the floors are recorded: bucket -> (first offset, segments to delete)
    plans: dict[int, tuple[int, list[tuple[int, int, Any]]]] = {}
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
        doomed: list[tuple[int, int, Any]] = []

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
            doomed.append((base, end, info))
        plans[bucket] = (segments[0][0] if segments else 0, doomed)
    # Read after the listings: a retention that deleted what they no longer show recorded it before deleting.
    floors = retention_floors(store, log_.definition)
    if floors is not None:
        for bucket, (first, _) in list(plans.items()):
            if first > floors.get(bucket, 0):
                # removing more and recording it would hide the loss; the bucket stays as it is
                result.gaps[bucket] = (floors.get(bucket, 0), first)
                plans[bucket] = (first, [])
    wanted = {b: doomed[-1][1] if doomed else first for b, (first, doomed) in plans.items()}
    for bucket, (floor, _) in result.gaps.items():
        wanted[bucket] = floor  # the floor stays below the gap
    if floors is None or any(wanted[b] > floors.get(b, 0) for b in wanted):
        # before any delete: a crash after this leaves segments below a floor, which is harmless
        result.floors = record_retention_floors(store, log_.definition, wanted)
    else:
        result.floors = dict(floors)
    # in bulk (S3 DeleteObjects, 1,000 keys a request): every doomed segment is below the recorded floor, so
    # a crash midway leaves no hole a reader could fall into, whatever order the store deletes them in
    store.delete_many(info.key for _, (_, doomed) in plans.items() for _, _, info in doomed)
    for bucket, (start, doomed) in plans.items():
        for base, end, info in doomed:
            result.segments_deleted += 1
            result.records_deleted += end - base
            result.bytes_freed += info.size
            start = end
        result.start_offsets[bucket] = start
    _finish(result, name, retention)
    result.seconds = time.perf_counter() - started
    return result


#: A data object of a "commits" log older than the first commit retention keeps by more than this, and referenced by
#: none it read, is an orphan (its producer died between the data and the commit): an append takes seconds.
ORPHAN_GRACE = timedelta(hours=1)
#: Commit records a retention run lists and reads at a time (threads), oldest first.
READ_AHEAD = 256
READ_THREADS = 16


def _commits_retention(
    log_: Log,
    lake_offsets: dict[int, int],
    cutoff: datetime,
    pinned: Mapping[int, tuple[int, str]],
    result: RetentionResult,
) -> None:
    """Retention of a "commits" log (`lakehouse.log.chain`): whole commits are removed, oldest first, each with its
    data object, while every part of the commit is tiered, older than the cutoff and below the pins; the newest
    commit always stays (it holds the ends). Then the data objects older than the first kept commit's that no
    commit references (orphans of producers killed between data and commit) are removed."""
    store, name, buckets = log_.store, log_.name, log_.definition.buckets
    chain = chain_format.Chain(store, name, buckets)
    # The records are listed lazily, oldest first (fixed-width numbers in one folder: key order is number order),
    # and read READ_AHEAD at a time by threads: a run lists and reads what it removes and one batch more, never the
    # whole retained chain (a week of it is millions of records), and does not wait one GET at a time.
    entries = (
        (n, info)
        for info in store.list(chain_format.commits_prefix(name))
        if (n := chain_format.number_of(info.key)) is not None
    )
    doomed: list[tuple[chain_format.Commit, Any]] = []
    first_kept: chain_format.Commit | None = None
    starts: tuple[int, ...] | None = None
    batch = list(itertools.islice(entries, READ_AHEAD))
    with ContextThreadPoolExecutor(READ_THREADS, thread_name_prefix="retention") as pool:
        while batch and first_kept is None:
            following = list(itertools.islice(entries, READ_AHEAD))
            commits = list(pool.map(lambda entry: chain.read_commit(entry[0]), batch))
            for j, ((_, info), commit) in enumerate(zip(batch, commits, strict=True)):
                if commit is None:
                    continue
                if starts is None:
                    starts = commit.starts()
                newest = not following and j == len(batch) - 1
                keep = newest or info.last_modified >= cutoff  # the newest holds the ends
                if not keep:
                    for p in commit.parts:
                        end = p.base + p.count
                        if end > lake_offsets.get(p.bucket, 0):
                            result.overdue[p.bucket] = (
                                result.overdue.get(p.bucket, 0) + end - max(p.base, lake_offsets.get(p.bucket, 0))
                            )
                            keep = True
                        elif p.bucket in pinned and end > pinned[p.bucket][0]:
                            result.pinned[p.bucket] = pinned[p.bucket]
                            keep = True
                if keep:
                    first_kept = commit
                    break
                doomed.append((commit, info))
            batch = following
    first = starts if starts is not None else tuple(log_.end_offsets()[b] for b in range(buckets))
    floors = retention_floors(store, log_.definition)
    if floors is not None:
        gaps = {b: (floors.get(b, 0), first[b]) for b in range(buckets) if first[b] > floors.get(b, 0)}
        if gaps:  # removing more and recording it would hide the loss; the log stays as it is
            result.gaps = gaps
            doomed = []
    wanted = {b: (doomed[-1][0].ends[b] if doomed else first[b]) for b in range(buckets)}
    for bucket, (floor, _) in result.gaps.items():
        wanted[bucket] = floor
    if floors is None or any(wanted[b] > floors.get(b, 0) for b in wanted):
        result.floors = record_retention_floors(store, log_.definition, wanted)
    else:
        result.floors = dict(floors)
    # records first, then their data (a crash between leaves data objects no commit names: orphans, below)
    store.delete_many(info.key for _, info in doomed)
    store.delete_many(commit.data for commit, _ in doomed)
    for commit, info in doomed:
        result.segments_deleted += 1
        result.records_deleted += sum(p.count for p in commit.parts)
        result.bytes_freed += info.size + sum(p.length for p in commit.parts)
    result.start_offsets = dict(wanted)
    if first_kept is not None:
        # orphans: data objects written before the first kept commit's, by more than the grace, that no kept commit
        # names (the doomed ones' were deleted above); listed in time order, so the listing stops there
        limit = first_kept.data.rpartition("/")[2][:16]
        grace_us = int(ORPHAN_GRACE.total_seconds() * 1_000_000)
        cutoff_us = int(cutoff.timestamp() * 1_000_000)
        orphans = []
        for info in store.list(chain_format.data_prefix(name)):
            stamp = info.key.rpartition("/")[2][:16]
            if not stamp.isdigit() or stamp >= limit:
                break
            if int(stamp) < int(limit) - grace_us and int(stamp) < cutoff_us and info.key != first_kept.data:
                orphans.append(info.key)
        store.delete_many(orphans)


def _finish(result: RetentionResult, name: TableName, retention: timedelta) -> None:
    """The result's message, and the warnings of what was kept or left alone."""
    gaps = ""
    if result.gaps:
        gaps = (
            "; buckets left alone whose log starts above what retention removed ("
            + "; ".join(f"bucket {b}: offsets [{f}, {o}) gone" for b, (f, o) in sorted(result.gaps.items()))
            + "): something else deleted those records. Restore the segments, or to accept the loss delete "
            f"{retention_key(name)} (the next retention run records the floors anew)"
        )
        log.warning("%s: log retention%s", name, gaps)
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
    result.message += gaps


# ---- the record: how far retention removed each bucket ------------------------------------------------------


def retention_key(name: TableName | str) -> str:
    """The key of ``name``'s retention record."""
    return f"{RETENTION_PREFIX}{TableName.parse(name)}.json"


def _read_record(store: ObjectStore, key: str) -> tuple[dict[str, Any] | None, str | None]:
    """(document, etag) of the record at ``key``; (None, None) if there is none, (None, etag) if it is not a
    record (it is replaced)."""
    try:
        obj = store.get(key)
    except NotFound:
        return None, None
    try:
        doc = json.loads(obj.data)
    except ValueError:
        return None, obj.etag
    return (doc if isinstance(doc, dict) and isinstance(doc.get("floors"), dict) else None), obj.etag


def retention_floors(store: ObjectStore, definition: TableDefinition) -> dict[int, int] | None:
    """Per bucket, the offset below which log retention may have removed segments of ``definition``'s table
    (0: nothing removed); None if the table has no record (created before retention records existed, and
    retention has not run on it since) or only one of a dropped table of the same name."""
    doc, _ = _read_record(store, retention_key(definition.name))
    if doc is None or doc.get("table_uuid") != definition.table_uuid:
        return None
    floors = {int(b): int(o) for b, o in doc["floors"].items()}
    return {b: floors.get(b, 0) for b in range(definition.buckets)}


def record_retention_floors(
    store: ObjectStore, definition: TableDefinition, floors: Mapping[int, int]
) -> dict[int, int]:
    """Raise the recorded floors of ``definition``'s table to at least ``floors`` (never lower one) and return
    the floors now recorded. Conditional writes only: created with ``If-None-Match``, replaced with ``If-Match``
    on the ETag read; a lost race reads the record again and merges.

    Raises:
        MaintenanceError: the record kept changing under this writer (`_RECORD_ATTEMPTS` lost races).
    """
    key = retention_key(definition.name)
    for _ in range(_RECORD_ATTEMPTS):
        doc, etag = _read_record(store, key)
        ours = doc is not None and doc.get("table_uuid") == definition.table_uuid
        current = {int(b): int(o) for b, o in doc["floors"].items()} if doc is not None and ours else {}
        merged = {b: max(current.get(b, 0), int(floors.get(b, 0))) for b in range(definition.buckets)}
        if ours and all(current.get(b, 0) == o for b, o in merged.items()):
            return merged  # nothing moves: nothing to write
        body = {
            "table": str(definition.name),
            "table_uuid": definition.table_uuid,
            "floors": {str(b): o for b, o in merged.items()},
            "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        data = json.dumps(body, indent=1, sort_keys=True).encode()
        try:
            if etag is None:
                store.put(key, data, if_none_match=True)
            else:
                store.put(key, data, if_match=etag)
        except PreconditionFailed:
            continue  # another writer moved it: read again and merge
        return merged
    raise MaintenanceError(
        f"{definition.name}: the log retention record {key} kept changing while it was updated "
        f"({_RECORD_ATTEMPTS} attempts); nothing was deleted, run retention again"
    )
