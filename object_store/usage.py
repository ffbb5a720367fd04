"""What the store was asked to do: requests by kind and bytes each way, per operation and per process.

Every backend counts each request it makes to the store in one place (the S3 backend: each HTTP attempt,
retries included, from botocore's ``before-send`` and ``response-received`` events; the local backend: in its
primitives, the requests S3 would have served). A request is counted in the process's total and in every
scope open in the current context::

    from object_store import measure_usage

    with measure_usage() as used:          # nested scopes each see their own requests
        store.put("a", b"xyz")
    used.requests["PUT"], used.bytes_sent  # 1, 3

Scopes live in a `contextvars.ContextVar`, so concurrent operations in one process do not mix: a thread sees
the scopes of the code that started it only when that code hands its context on
(``pool.submit(contextvars.copy_context().run, fn, ...)``, or `ContextThreadPoolExecutor`), as lakehouse's local
executor does. A task running in another process (Spark) measures itself (`measured`) and returns its `Usage`;
the driver adds it to its scopes with `add_to_scopes`.

Counting takes no lock: each thread adds to its own cell of a meter, and reading a meter sums the cells.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

#: Request kinds, as S3 bills them: PUT, COPY, POST and LIST are the write class (tier 1), GET and HEAD the
#: read class (tier 2), DELETE is free.
WRITE_CLASS = ("PUT", "COPY", "POST", "LIST")
READ_CLASS = ("GET", "HEAD")
FREE = ("DELETE",)
KINDS = (*WRITE_CLASS, *READ_CLASS, *FREE)
_INDEX = {kind: i for i, kind in enumerate(KINDS)}
_SENT = len(KINDS)
_RECEIVED = _SENT + 1


@dataclass(frozen=True)
class Usage:
    """Requests by kind (`KINDS`) and payload bytes sent to and received from the store (headers not counted)."""

    requests: Mapping[str, int] = field(default_factory=dict)
    bytes_sent: int = 0
    bytes_received: int = 0

    @property
    def write_requests(self) -> int:
        """PUT, COPY, POST and LIST requests: S3's write class."""
        return sum(self.requests.get(k, 0) for k in WRITE_CLASS)

    @property
    def read_requests(self) -> int:
        """GET and HEAD requests: S3's read class."""
        return sum(self.requests.get(k, 0) for k in READ_CLASS)

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def __add__(self, other: Usage) -> Usage:
        kinds = {**self.requests, **other.requests}
        return Usage(
            requests={k: self.requests.get(k, 0) + other.requests.get(k, 0) for k in KINDS if k in kinds},
            bytes_sent=self.bytes_sent + other.bytes_sent,
            bytes_received=self.bytes_received + other.bytes_received,
        )

    def __bool__(self) -> bool:
        return bool(self.bytes_sent or self.bytes_received or any(self.requests.values()))

    def to_dict(self) -> dict[str, Any]:
        """A JSON form: ``{"requests": {"PUT": 3, ...}, "bytes_sent": ..., "bytes_received": ...}`` (kinds never
        made are left out)."""
        return {
            "requests": {k: v for k, v in self.requests.items() if v},
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any] | None) -> Usage:
        """The inverse of `to_dict`; None or ``{}`` (a result written before usage was recorded) is no usage."""
        doc = doc or {}
        return cls(
            requests={str(k): int(v) for k, v in (doc.get("requests") or {}).items()},
            bytes_sent=int(doc.get("bytes_sent", 0)),
            bytes_received=int(doc.get("bytes_received", 0)),
        )

    @classmethod
    def sum(cls, usages: Iterable[Usage]) -> Usage:
        total = cls()
        for u in usages:
            total = total + u
        return total


class UsageMeter:
    """Counts of one scope (or the process), one cell per thread, summed when read. Read it at any time: while
    the scope's operation runs, a read sees what its threads counted so far."""

    def __init__(self) -> None:
        self._cells: dict[int, list[int]] = {}

    def _cell(self) -> list[int]:
        ident = threading.get_ident()
        cell = self._cells.get(ident)
        if cell is None:  # a thread's first request: dict.setdefault is atomic, so no two cells for one thread
            cell = self._cells.setdefault(ident, [0] * (len(KINDS) + 2))
        return cell

    def _add(self, index: int, sent: int, received: int) -> None:
        cell = self._cell()
        cell[index] += 1
        cell[_SENT] += sent
        cell[_RECEIVED] += received

    def _add_usage(self, usage: Usage) -> None:
        cell = self._cell()
        for kind, n in usage.requests.items():
            cell[_INDEX[kind]] += n
        cell[_SENT] += usage.bytes_sent
        cell[_RECEIVED] += usage.bytes_received

    def usage(self) -> Usage:
        totals = [0] * (len(KINDS) + 2)
        for cell in list(self._cells.values()):
            for i, n in enumerate(cell):
                totals[i] += n
        return Usage(
            requests={k: totals[i] for i, k in enumerate(KINDS) if totals[i]},
            bytes_sent=totals[_SENT],
            bytes_received=totals[_RECEIVED],
        )

    @property
    def requests(self) -> dict[str, int]:
        """Requests by kind (every kind present, zero if none was made)."""
        counted = self.usage().requests
        return {k: counted.get(k, 0) for k in KINDS}

    @property
    def bytes_sent(self) -> int:
        return self.usage().bytes_sent

    @property
    def bytes_received(self) -> int:
        return self.usage().bytes_received


_PROCESS = UsageMeter()
_SCOPES: contextvars.ContextVar[tuple[UsageMeter, ...]] = contextvars.ContextVar("lakestream_usage", default=())


def record(kind: str, *, sent: int = 0, received: int = 0) -> None:
    """Count one request of ``kind`` (one of `KINDS`) with its payload bytes, in the process and the open scopes.

    Backends call this once per request they make; code that reaches the store around the `ObjectStore` API
    (pyarrow's file system) calls it for what it knows it did."""
    index = _INDEX[kind]
    _PROCESS._add(index, sent, received)
    for meter in _SCOPES.get():
        meter._add(index, sent, received)


def record_received(received: int) -> None:
    """Add bytes received to a request already counted (a response's body, known only once it arrived)."""
    if received:
        _PROCESS._cell()[_RECEIVED] += received
        for meter in _SCOPES.get():
            meter._cell()[_RECEIVED] += received


def add_to_scopes(usage: Usage) -> None:
    """Add what a task in another process measured to the scopes open here (not to this process's total: those
    requests were another process's)."""
    if usage:
        for meter in _SCOPES.get():
            meter._add_usage(usage)


@contextlib.contextmanager
def measure_usage() -> Iterator[UsageMeter]:
    """A scope counting every request made in this context (any store) until it closes, nested scopes included."""
    meter = UsageMeter()
    token = _SCOPES.set((*_SCOPES.get(), meter))
    try:
        yield meter
    finally:
        _SCOPES.reset(token)


def current_usage() -> Usage:
    """What the innermost open scope counted so far (an empty `Usage` outside any scope): what an operation has
    asked of the store up to now, e.g. to record it in the commit that ends it."""
    scopes = _SCOPES.get()
    return scopes[-1].usage() if scopes else Usage()


def process_usage() -> Usage:
    """Every request this process made since it started (all stores, all threads)."""
    return _PROCESS.usage()


def measured(fn: Callable[..., T], *args: Any) -> tuple[T, Usage]:
    """``fn(*args)`` and the usage it caused (a task's, to return to its driver)."""
    with measure_usage() as meter:
        result = fn(*args)
    return result, meter.usage()


class ContextThreadPoolExecutor(ThreadPoolExecutor):
    """A `ThreadPoolExecutor` whose tasks run in a copy of the submitter's context: what they ask of the store
    counts in the submitter's usage scopes (``map`` submits through ``submit``, so it does too)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)
