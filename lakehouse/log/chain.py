"""The log as a chain of commits: an append is one data object and one small commit record, whatever its buckets.

A table whose definition says ``log_format = "commits"`` keeps its log under ``<ns>/<table>/log/``:

    data/<uuid>.arrow           the rows of one append, every bucket's in one object: each bucket's part an Arrow
                                IPC stream (user columns only, as a segment body), one after another
    commits/<n:020d>.json       commit ``n``: which data object, and per bucket in it the part's base offset,
                                record count, byte range and checksum; the producer id and sequence; the end
                                offset of every bucket after it

**Sequencing without a broker.** Commit ``n + 1`` is created with ``If-None-Match: *`` and takes its bases from
commit ``n``'s ends, so offsets stay what they were with one object per bucket: per bucket contiguous, from 0.
The data object is written first, unconditionally, under a fresh name; a producer that loses commit ``n + 1`` to
another learns the winner's ends and writes its small record again as ``n + 2``: the data is never sent twice.
An append is atomic across its buckets (one create decides), so `AppendIncomplete` cannot happen here.

**Readers** learn commits by listing forward from the last one they know (one GET per new commit record) and
read a bucket's part with a ranged GET; tiering reads each data object once for all its buckets' parts it needs.

**Exactly once.** A commit carries the append's producer id and sequence. A retry (same pair) looks back through the
newest ``dedup_window`` commits (default `KEEP_COMMITS`): found, with the same rows per bucket, it is that commit;
other rows under a used sequence, or a sequence at or below the producer's newest without its commit, is
`SequenceConflict`.

A data object whose commit never landed (the producer was killed between the two writes, or lost and found its
earlier attempt) is referenced by no commit: log retention removes it once older than its grace period.
"""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from lakehouse.errors import CorruptSegmentError
from lakehouse.log.segment import OPS, SegmentHeader
from lakehouse.table.definition import TableName
from object_store import LakestreamError, NotFound, ObjectStore, PreconditionFailed
from object_store.usage import ContextThreadPoolExecutor

#: Commit records a chain keeps in memory (the newest), at least; older ones are read again when needed.
KEEP_COMMITS = 20_000
#: Commit records walked one GET at a time after a lost race, before listing instead.
_MAX_WALK = 8
#: Every this many commits, the writer of one also writes the head hint (`head_hint_key`): a process that knows
#: nothing of the chain yet starts there, not at the first retained record (a week of records is millions).
HINT_EVERY = 64
#: Older commit records a retry's look-back reads from the store beyond those the process knows.
LOOK_BACK_READS = 256


def commits_prefix(name: TableName) -> str:
    return f"{name.prefix}log/commits/"


def commit_key(name: TableName, number: int) -> str:
    return f"{commits_prefix(name)}{number:020d}.json"


def head_hint_key(name: TableName) -> str:
    """A recent commit number, written every `HINT_EVERY` commits (unconditionally: a hint, never trusted as the
    head, only as where to start listing forward)."""
    return f"{name.prefix}log/commits-head.json"


def data_prefix(name: TableName) -> str:
    return f"{name.prefix}log/data/"


def new_data_key(name: TableName, now: float | None = None) -> str:
    """A fresh data object's key: its creation time first, so that a listing of the data objects is in the order
    they were written and log retention lists only those older than the first commit it keeps."""
    micros = int((time.time() if now is None else now) * 1_000_000)
    return f"{data_prefix(name)}{micros:016d}-{uuid.uuid4().hex}.arrow"


def number_of(key: str) -> int | None:
    """The commit number of a commit record's key, None for another key."""
    leaf = key.rpartition("/")[2]
    return int(leaf[:-5]) if leaf.endswith(".json") and leaf[:-5].isdigit() else None


@dataclass(frozen=True)
class Part:
    """One bucket's rows in a commit's data object: offsets ``base .. base + count - 1`` at bytes
    ``start .. start + length - 1``."""

    bucket: int
    base: int
    count: int
    start: int
    length: int
    checksum: str
    sends: tuple[int, int] | None = None


@dataclass(frozen=True)
class Commit:
    """One append: the data object, its parts by bucket, and every bucket's end offset after it."""

    number: int
    data: str
    producer: str
    sequence: int
    op: str
    timestamp_us: int
    schema_version: int
    algorithm: str
    parts: tuple[Part, ...]
    ends: tuple[int, ...]

    def part(self, bucket: int) -> Part | None:
        for p in self.parts:
            if p.bucket == bucket:
                return p
        return None

    def header(self, part: Part) -> SegmentHeader:
        """The segment header a reader of ``part`` decodes it with (as a per-bucket segment's)."""
        return SegmentHeader(
            count=part.count,
            op=self.op,
            timestamp_us=self.timestamp_us,
            producer=self.producer,
            sequence=self.sequence,
            checksum=part.checksum,
            algorithm=self.algorithm,
            sends=part.sends,
            schema_version=self.schema_version,
        )

    def starts(self) -> tuple[int, ...]:
        """Every bucket's end offset before this commit."""
        out = list(self.ends)
        for p in self.parts:
            out[p.bucket] = p.base
        return tuple(out)

    def to_json(self) -> bytes:
        doc = {
            "n": self.number,
            "data": self.data.rpartition("/")[2],
            "producer": self.producer,
            "seq": self.sequence,
            "op": self.op,
            "ts": self.timestamp_us,
            "schema-version": self.schema_version,
            "algorithm": self.algorithm,
            "parts": [[p.bucket, p.base, p.count, p.start, p.length, p.checksum, *(p.sends or ())] for p in self.parts],
            "ends": list(self.ends),
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, body: bytes, *, key: str, name: TableName, buckets: int) -> Commit:
        """Parse commit record ``key``; `CorruptSegmentError` naming the table and the record if it is not one."""
        try:
            doc = json.loads(body)
            parts = tuple(
                Part(
                    int(p[0]),
                    int(p[1]),
                    int(p[2]),
                    int(p[3]),
                    int(p[4]),
                    str(p[5]),
                    (int(p[6]), int(p[7])) if len(p) > 6 else None,
                )
                for p in doc["parts"]
            )
            commit = cls(
                number=int(doc["n"]),
                data=f"{data_prefix(name)}{doc['data']}",
                producer=str(doc["producer"]),
                sequence=int(doc["seq"]),
                op=str(doc["op"]),
                timestamp_us=int(doc["ts"]),
                schema_version=int(doc.get("schema-version", 0)),
                algorithm=str(doc.get("algorithm", "crc32c")),
                parts=parts,
                ends=tuple(int(e) for e in doc["ends"]),
            )
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise CorruptSegmentError(
                f"{name}: log commit record {key} cannot be read ({type(exc).__name__}: {exc}); the offsets it "
                "committed are unknown. It is not skipped: restore the object or re-create the log from its source"
            ) from None
        bad = (
            commit.number != number_of(key)
            or commit.op not in OPS
            or len(commit.ends) != buckets
            or any(
                not 0 <= p.bucket < buckets or p.count < 1 or p.base + p.count > commit.ends[p.bucket] for p in parts
            )
        )
        if bad:
            raise CorruptSegmentError(
                f"{name}: log commit record {key} does not describe commit {number_of(key)} of a {buckets}-bucket "
                "table (written by another tool or table?). It is not skipped: restore the object or re-create the log"
            )
        return commit


def encode_data(bodies: dict[int, bytes]) -> tuple[bytes, dict[int, tuple[int, int]]]:
    """One data object of every bucket's body, in bucket order, and each body's ``(start, length)`` in it."""
    ranges, position = {}, 0
    for bucket in sorted(bodies):
        ranges[bucket] = (position, len(bodies[bucket]))
        position += len(bodies[bucket])
    return b"".join(bodies[b] for b in sorted(bodies)), ranges


class Chain:
    """What one process knows of a table's commit chain: the newest commits, learned by listing forward from the
    last one known, and per bucket where each known commit's part starts. Thread-safe."""

    def __init__(
        self,
        store: ObjectStore,
        name: TableName,
        buckets: int,
        *,
        pool: ThreadPoolExecutor | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.name, self.buckets, self._pool, self._clock = store, name, buckets, pool, clock
        self._lock = threading.Lock()
        #: Held while a record is created: the `Log`s sharing this chain take turns instead of racing each other.
        self.commit_lock = threading.Lock()
        self.commits: dict[int, Commit] = {}
        self.head = -1  # the newest commit known (-1: none)
        self.ends: tuple[int, ...] = (0,) * buckets
        #: The oldest commit number this chain holds without a gap up to ``head`` (None: nothing known yet).
        self.first_known: int | None = None
        #: Per bucket, the bases of the known commits' parts and the commit numbers holding them, in order.
        self._bases: list[list[int]] = [[] for _ in range(buckets)]
        self._numbers: list[list[int]] = [[] for _ in range(buckets)]
        self.confirmed_at = -float("inf")
        #: Commits older than the known ones, read on demand (an as-of read, a subscription behind, a retry's
        #: look-back): kept, the newest read `KEEP_COMMITS`, so the readers of each bucket do not read them again.
        self._older: OrderedDict[int, Commit] = OrderedDict()

    # ---- learning commits ---------------------------------------------------------------------------

    @property
    def age(self) -> float:
        return self._clock() - self.confirmed_at

    def refresh(self) -> tuple[int, ...]:
        """Learn the commits made since the newest one known (one LIST, one GET per new commit); return every
        bucket's end offset."""
        confirmed = self._clock()
        if self.head >= 0:
            numbers = self._listed(commit_key(self.name, self.head))
        else:  # nothing known yet: from the hint on (a few records), not from the first retained one
            hint = self.read_hint()
            numbers = self._listed(commit_key(self.name, hint - 1)) if hint else []
            if not numbers:  # no hint yet (a young chain), or retention removed the hinted commits
                numbers = self._listed(None)
        if numbers:
            read = (
                self._pool.map(self.read_commit, numbers)
                if self._pool is not None and len(numbers) > 1
                else map(self.read_commit, numbers)
            )
            for commit in read:
                if commit is not None:
                    self.learn(commit)
        with self._lock:
            self.confirmed_at = max(self.confirmed_at, confirmed)
            return self.ends

    def _listed(self, start_after: str | None) -> list[int]:
        return [
            n
            for info in self.store.list(commits_prefix(self.name), start_after=start_after)
            if (n := number_of(info.key)) is not None and n > self.head
        ]

    def read_hint(self) -> int | None:
        """The commit number of the head hint (None: none written yet, or unreadable: then it is not used)."""
        try:
            doc = json.loads(self.store.get(head_hint_key(self.name)).data)
            return int(doc["n"]) if isinstance(doc, dict) and int(doc["n"]) >= 0 else None
        except NotFound:
            return None
        except (ValueError, TypeError, KeyError):
            return None

    def _write_hint(self, number: int) -> None:
        try:
            self.store.put(head_hint_key(self.name), json.dumps({"n": number}).encode())
        except LakestreamError:  # only a hint: a fresh reader lists more, nothing is wrong
            pass

    def read_commit(self, number: int) -> Commit | None:
        """Commit ``number`` read from the store; None if it does not exist (not yet, or removed by retention)."""
        key = commit_key(self.name, number)
        try:
            body = self.store.get(key).data
        except NotFound:
            return None
        return Commit.from_json(body, key=key, name=self.name, buckets=self.buckets)

    def learn(self, commit: Commit) -> None:
        """Note ``commit`` (read, or made here). Commits are learned in order: one past the newest known first
        reads the ones in between; the first one learned (or one after a gap retention made) starts the
        known history."""
        if self.head >= 0 and commit.number > self.head + 1:
            for missing in range(self.head + 1, commit.number):
                found = self.read_commit(missing)
                if found is not None:
                    self.learn(found)
        with self._lock:
            if commit.number <= self.head:
                return
            if self.head >= 0 and commit.number == self.head + 1:
                if commit.starts() != self.ends:
                    raise CorruptSegmentError(
                        f"{self.name}: log commit {commit.number} starts at offsets {list(commit.starts())}, but "
                        f"commit {self.head} ends at {list(self.ends)}: the log has a gap or an overlap there. It is "
                        "not skipped: restore the commit records or re-create the log from its source"
                    )
            else:  # the first commit this chain learns, or one past commits retention removed unseen
                self.first_known = commit.number
                self.commits.clear()
                self._bases = [[] for _ in range(self.buckets)]
                self._numbers = [[] for _ in range(self.buckets)]
            self.commits[commit.number] = commit
            self.head, self.ends = commit.number, commit.ends
            for p in commit.parts:
                self._bases[p.bucket].append(p.base)
                self._numbers[p.bucket].append(commit.number)
            self._trim()

    def _trim(self) -> None:
        if len(self.commits) <= 2 * KEEP_COMMITS:
            return
        keep_from = self.head - KEEP_COMMITS + 1
        for n in [n for n in self.commits if n < keep_from]:
            del self.commits[n]
        for b in range(self.buckets):
            i = bisect.bisect_left(self._numbers[b], keep_from)
            del self._bases[b][:i], self._numbers[b][:i]
        self.first_known = keep_from

    # ---- appending ----------------------------------------------------------------------------------

    def commit(self, make: Callable[[int, tuple[int, ...]], Commit]) -> Commit:
        """Create the next commit record, ``make(number, ends_before)``, retrying on the next number after each
        lost race; return the commit that landed. A record found at a number that names ``make``'s own data object
        is this very commit (its create's response was lost and the store could not tell): it is the one landed.
        Another writer's record, even under the same producer id and sequence (a job's tasks append one bucket
        each under one pair), is a lost race."""
        number = self.head + 1
        ends = self.ends
        walked = 0
        while True:
            # A lost create costs a write request (priced as a PUT); a look first costs a read (a twelfth of it):
            # when other producers moved the head since this chain last saw it, the record found is learned and
            # the next number tried without a PUT. The create still decides a race in between.
            ours = make(number, ends)
            taken = self.read_commit(number)
            if taken is not None:
                self.learn(taken)
                if taken.data == ours.data:
                    return taken
                number, ends = max(self.head, number) + 1, self.ends
                continue
            try:
                self.store.put(commit_key(self.name, number), ours.to_json(), if_none_match=True)
            except PreconditionFailed:
                theirs = self.read_commit(number)
                if theirs is None:  # removed by retention meanwhile: the chain is far ahead, list it
                    self.refresh()
                    number, ends, walked = self.head + 1, self.ends, 0
                    continue
                self.learn(theirs)
                if theirs.data == ours.data:
                    return theirs
                walked += 1
                if walked >= _MAX_WALK:
                    self.refresh()
                    walked = 0
                number, ends = max(self.head, number) + 1, self.ends
                continue
            self.learn(ours)
            if number and number % HINT_EVERY == 0:  # (a hint of 0 says what listing from the start does)
                self._write_hint(number)
            return ours

    # ---- locating offsets ---------------------------------------------------------------------------

    def segments(self, bucket: int, start: int, end: int) -> list[tuple[int, int, int]]:
        """``(base, next base, commit number)`` of the known parts of ``bucket`` overlapping [start, end), oldest
        first (older parts than the known commits are found with `older`)."""
        with self._lock:
            bases, numbers = list(self._bases[bucket]), list(self._numbers[bucket])
            last_end = self.ends[bucket]
        bounds = [*bases, last_end]
        i = max(0, bisect.bisect_right(bounds, start) - 1)
        out = []
        for j in range(i, len(bases)):
            if bounds[j] >= end:
                break
            if bounds[j + 1] > start:
                out.append((bounds[j], bounds[j + 1], numbers[j]))
        return out

    def known_from(self, bucket: int) -> int:
        """The oldest offset of ``bucket`` the known commits cover (its end if they hold none of its parts)."""
        with self._lock:
            if self.first_known is None:
                return 0
            first = self.commits[self.first_known]
            return first.starts()[bucket]

    def first_retained(self) -> int | None:
        """The oldest commit number still in the store (one LIST: its first page); None if there is none.
        Commits are numbered without gaps from there to the head: retention removes the oldest only."""
        for info in self.store.list(commits_prefix(self.name)):
            if (n := number_of(info.key)) is not None:
                return n
        return None

    def start_offsets(self) -> tuple[int, ...]:
        """Every bucket's earliest offset still in the log: the first retained commit's starts (one LIST, one GET)."""
        for _ in range(3):  # the first one may go to retention between the listing and the read
            first = self.first_retained()
            if first is None:
                break
            c = self.get(first)
            if c is not None:
                return c.starts()
        return self.refresh()

    def older(self, bucket: int, start: int, end: int) -> list[tuple[int, int, int]]:
        """Like `segments`, for offsets older than the known commits: the first retained commit whose parts reach
        ``start`` is found by bisection over the commit numbers (a GET per step, one LIST for the oldest), then the
        commits from it are read until ``end``."""
        low = self.first_retained()
        high = self.first_known if self.first_known is not None else self.head + 1
        if low is None or low >= high:
            return []
        lo, hi = low, high
        while lo < hi:  # the first retained commit whose ends pass ``start`` in this bucket
            mid = (lo + hi) // 2
            c = self.get(mid)
            if c is None or c.ends[bucket] <= start:  # None: removed by retention meanwhile, so below ``start``
                lo = mid + 1
            else:
                hi = mid
        out = []
        for n in range(lo, high):
            c = self.get(n)
            if c is None or (p := c.part(bucket)) is None:
                continue
            if p.base >= end:
                break
            out.append((p.base, p.base + p.count, n))
        return out

    def get(self, number: int) -> Commit | None:
        """Commit ``number``: known, read before, or read now (None: not in the store)."""
        c = self.commits.get(number)
        if c is not None:
            return c
        with self._lock:
            c = self._older.get(number)
        if c is not None:
            return c
        c = self.read_commit(number)
        if c is not None:
            with self._lock:
                self._older[number] = c
                while len(self._older) > KEEP_COMMITS:
                    self._older.popitem(last=False)
        return c

    def newest_first(self, limit: int, reads: int = LOOK_BACK_READS) -> Iterator[Commit]:
        """The newest ``limit`` commits, newest first: the known ones from memory, then at most ``reads`` older
        ones read from the store (a process that has just started knows only the newest few)."""
        n = self.head
        while n >= 0 and limit > 0:
            c = self.commits.get(n)
            if c is None:
                if reads <= 0:
                    return
                c, reads = self.get(n), reads - 1
                if c is None:
                    return
            yield c
            n, limit = n - 1, limit - 1

    def since(self, offsets: dict[int, int]) -> Iterator[Commit]:
        """Every retained commit with a part at or past ``offsets[bucket]`` in one of its buckets, oldest first."""
        self.refresh()
        found: list[Commit] = []
        n = self.head
        while n >= 0:
            c = self.get(n)
            if c is None:
                break
            if all(c.ends[b] <= offsets.get(b, 0) for b in range(self.buckets)):
                break
            found.append(c)
            n -= 1
        yield from reversed(found)


#: A data object up to this size is read whole by the first reader of one of its parts and kept (`DataCache`), so
#: the readers of its other buckets (tiering's tasks, a union read's buckets) do not GET it again.
WHOLE_OBJECT_BYTES = 4 * 1024 * 1024
#: Bytes of data objects a `DataCache` keeps (least recently used dropped first).
CACHE_BYTES = 64 * 1024 * 1024


class DataCache:
    """Parts of small data objects served from one GET of the whole object per process, within a bounded budget.

    An append writes every bucket's rows into one object; read per bucket, each part would cost a GET of its own
    (a tiering round of 16 buckets, 16 GETs per object). Objects up to `WHOLE_OBJECT_BYTES` are fetched whole
    once (concurrent readers of one object wait for the same fetch) and kept, least recently used dropped first,
    up to `CACHE_BYTES`; larger ones are read by ranged GETs."""

    def __init__(self, store: ObjectStore, budget: int = CACHE_BYTES) -> None:
        self.store, self.budget = store, budget
        self._lock = threading.Lock()
        self._objects: OrderedDict[str, bytes] = OrderedDict()
        self._fetching: dict[str, Future[bytes]] = {}
        self._bytes = 0

    def part(self, commit: Commit, part: Part) -> bytes:
        size = max(p.start + p.length for p in commit.parts)
        if size > WHOLE_OBJECT_BYTES or len(commit.parts) == 1:
            return self.store.get_range(commit.data, part.start, part.length)
        return self._whole(commit.data)[part.start : part.start + part.length]

    def _whole(self, key: str) -> bytes:
        with self._lock:
            data = self._objects.get(key)
            if data is not None:
                self._objects.move_to_end(key)
                return data
            pending = self._fetching.get(key)
            mine = pending is None
            if mine:
                pending = self._fetching[key] = Future()
        assert pending is not None
        if not mine:
            return pending.result()
        try:
            data = self.store.get(key).data
        except BaseException as exc:
            with self._lock:
                del self._fetching[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._fetching[key]
            self._objects[key] = data
            self._bytes += len(data)
            while self._bytes > self.budget and self._objects:
                _, dropped = self._objects.popitem(last=False)
                self._bytes -= len(dropped)
        pending.set_result(data)
        return data


#: Tables whose chain and data cache a process keeps for its `Log`s (least recently used dropped first).
SHARED_TABLES = 64
_SHARED_LOCK = threading.Lock()
_SHARED: OrderedDict[tuple[int, int, str, int], tuple[Chain, DataCache]] = OrderedDict()


def shared(
    store: ObjectStore, name: TableName, buckets: int, table_uuid: str, clock: Callable[[], float] = time.time
) -> tuple[Chain, DataCache]:
    """The chain and data cache this process keeps for a table, shared by its `Log`s: tiering's tasks open a `Log`
    each, and without sharing every one of them listed and read the whole chain and each data object again (a
    round of 16 buckets read every record and object 16 times). Per process (a forked child starts its own), per
    store, table instance (``table_uuid``) and clock (tests inject theirs)."""
    # by the store object (tiering's tasks share one per process: `lakehouse.iceberg.datafiles.shared_store`); the
    # chain holds it, so its id names no other store while it is kept
    key = (os.getpid(), id(store), table_uuid, buckets)
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is not None and found[0]._clock is clock:
            _SHARED.move_to_end(key)
            return found
        pool = ContextThreadPoolExecutor(4, thread_name_prefix="log-chain")
        made = (Chain(store, name, buckets, pool=pool, clock=clock), DataCache(store))
        _SHARED[key] = made
        while len(_SHARED) > SHARED_TABLES:
            _SHARED.popitem(last=False)
        return made
