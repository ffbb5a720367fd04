"""Where each bucket's segments are, learned by listing forward from the last key seen.

A bucket's segments are contiguous: each one starts where the previous ended, so the base offsets from
one listing give every segment's size except the last one's, which one HEAD gives. `refresh` lists with
``start_after=<last known segment>``, so a long-lived index never lists a bucket from the start twice.

An index keeps the newest ``KEEP_SEGMENTS`` to ``2 * KEEP_SEGMENTS`` segments of its bucket in memory, so a
process that appends for weeks does not grow without bound (one producer adds up to ~1.7 M segments a day
per bucket at a 50 ms linger). A read of older segments lists them again.
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from lakehouse.log.segment import SegmentHeader
from lakehouse.table.definition import TableName
from object_store import NotFound, ObjectStore

#: Segments an index keeps per bucket, at least (the newest; more than the look-back of a retry needs).
KEEP_SEGMENTS = 10_000


@dataclass
class BucketIndex:
    """Known segments of one bucket: ``bases`` sorted, ``end`` = next offset to append."""

    store: ObjectStore
    table: TableName
    bucket: int
    bases: list[int] = field(default_factory=list)
    end: int = 0
    _last_key: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    clock: Callable[[], float] = time.time
    #: When ``end`` was last known to be the bucket's end (a refresh, or a segment we created there).
    confirmed_at: float = -math.inf
    #: False once the oldest known segments were dropped from ``bases`` (see `KEEP_SEGMENTS`).
    complete: bool = True
    #: True while ``bases`` lacks segments below ``end`` (ours landed after others'): `refresh` fills them in.
    _behind: bool = False

    def refresh(self) -> int:
        """Learn segments appended since the last refresh; return the end offset."""
        with self._lock:
            self.confirmed_at = self.clock()
            new = list(self.listed(start_after=self._last_key))
            if not new:
                return self.end
            new.sort()
            last_base, last_key = new[-1]
            header = self._header(last_key)
            known = self.bases[-1] if self.bases else -1
            self.bases.extend(b for b, _ in new if b > known)
            self._last_key = last_key
            self.end = max(self.end, last_base + header.count)
            self._behind = False  # listed from the last segment known before the gap: it is filled
            self._trim()
            return self.end

    def record(self, base: int, count: int, key: str) -> None:
        """Note a segment we created ourselves (no listing needed to know about it).

        If it starts past the known end, other producers appended the segments in between: the end moves
        on, but the next `refresh` (every read does one) lists from the last segment known before them, so
        the index learns them too instead of seeing a gap."""
        with self._lock:
            if base < self.end:
                return
            if base > self.end:
                self._behind = True  # segments of others lie between what we know and this one
            if not self._behind:
                self.bases.append(base)
                self._last_key = key
                self._trim()
            self.end = base + count
            self.confirmed_at = self.clock()

    def _trim(self) -> None:
        """Drop the oldest known segments once twice `KEEP_SEGMENTS` are known; the caller holds the lock."""
        if len(self.bases) > 2 * KEEP_SEGMENTS:
            del self.bases[:-KEEP_SEGMENTS]
            self.complete = False

    @property
    def age(self) -> float:
        """Seconds since ``end`` was last confirmed (infinite before the first refresh)."""
        return self.clock() - self.confirmed_at

    def _header(self, key: str) -> SegmentHeader:
        try:
            return SegmentHeader.from_metadata(self.store.head(key).metadata, key=key)
        except NotFound:  # removed by retention between list and head: a later refresh sees the rest
            return SegmentHeader(0, "insert", 0, "", 0, "")

    def segments(self, start: int, end: int) -> list[tuple[int, int]]:
        """(base, next base) of the segments overlapping [start, end), oldest first."""
        with self._lock:
            bounds = [*self.bases, self.end]
            complete = self.complete
        if not complete and start < bounds[0]:
            bounds = self._listed_before(bounds[0]) + bounds
        i = max(0, bisect.bisect_right(bounds, start) - 1)
        out = []
        for j in range(i, len(bounds) - 1):
            if bounds[j] >= end:
                break
            out.append((bounds[j], bounds[j + 1]))
        return out

    def listed(self, start_after: str | None = None) -> Iterator[tuple[int, str]]:
        """(base offset, key) of the bucket's segments, in order, listed after ``start_after``."""
        prefix = self.table.bucket_prefix(self.bucket)
        for info in self.store.list(prefix, start_after=start_after):
            name = info.key[len(prefix) :]
            if name.endswith(".arrow") and name[:-6].isdigit():
                yield int(name[:-6]), info.key

    def _listed_before(self, limit: int) -> list[int]:
        """Bases of the bucket's segments below ``limit``, listed from the bucket's start."""
        return list(itertools.takewhile(lambda base: base < limit, (base for base, _ in self.listed())))

    def list_start(self) -> int:
        """The bucket's earliest offset, listed: log retention (in any process) may have deleted the oldest
        segments this index knew, which it forgets here. The bucket's end if it holds no segment."""
        first = next((base for base, _ in self.listed()), None)
        with self._lock:
            if first is None:
                return self.end
            gone = bisect.bisect_left(self.bases, first)
            del self.bases[:gone]
            if self.bases and self.bases[0] != first:
                self.complete = False  # the listing shows a segment this index does not hold
            return first

    @property
    def kept_from(self) -> int:
        """The oldest offset this index knows a segment for, without a request."""
        with self._lock:
            return self.bases[0] if self.bases else self.end

    @property
    def first_offset(self) -> int:
        """The bucket's earliest offset as far as this index knows (a trimmed index lists the bucket)."""
        with self._lock:
            if self.complete or not self.bases:
                return self.bases[0] if self.bases else self.end
            kept = self.bases[0]
        older = self._listed_before(kept)
        return older[0] if older else kept
