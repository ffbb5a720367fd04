"""Wrappers around a real store for log and producer tests: faults that cannot be caused otherwise (a PUT
that fails, or lands and loses its answer; a slow store) and observers that count requests; an executor that
lets something else happen between a round's tasks and its commit."""

from __future__ import annotations

import threading
from typing import Any

from lakehouse.executor import LocalExecutor
from object_store import ObjectStore, StoreUnavailable


class ThenRun(LocalExecutor):
    """Runs the real tasks, then ``then()`` (another tiering round, a compaction, maintenance), before the
    caller commits: a race whose order the test chooses."""

    def __init__(self, then) -> None:
        super().__init__(workers=1)
        self.then = then

    def map(self, fn, items):
        out = super().map(fn, items)
        self.then()
        return out


class FailingPuts:
    """PUTs of keys containing ``match`` raise StoreUnavailable, ``times`` times (after applying, if
    ``apply`` is set: the write landed, the answer was lost for good). ``failed`` lists the keys hit."""

    def __init__(self, store: ObjectStore, match: str, *, times: int = 1, apply: bool = False) -> None:
        self.real_put = store.put
        self.match, self.times, self.apply = match, times, apply
        self.failed: list[str] = []
        store.put = self.put  # type: ignore[method-assign]

    def put(self, key: str, data: bytes, **kw: Any) -> str:
        if self.match in key and self.times > 0:
            self.times -= 1
            self.failed.append(key)
            if self.apply:
                self.real_put(key, data, **kw)
            raise StoreUnavailable(f"injected: PutObject {key} timed out")
        return self.real_put(key, data, **kw)


class GatedPuts:
    """PUTs of log segments wait for ``gate`` (a slow store)."""

    def __init__(self, store: ObjectStore) -> None:
        self.gate = threading.Event()
        self.real_put = store.put
        store.put = self.put  # type: ignore[method-assign]

    def put(self, key: str, data: bytes, **kw: Any) -> str:
        if "/log/" in key:
            self.gate.wait(30)
        return self.real_put(key, data, **kw)


class CountingPuts:
    """Records the key of every PUT."""

    def __init__(self, store: ObjectStore) -> None:
        self.real_put, self.keys = store.put, []
        store.put = self.put  # type: ignore[method-assign]

    def put(self, key: str, data: bytes, **kw: Any) -> str:
        self.keys.append(key)
        return self.real_put(key, data, **kw)


class CountingReads:
    """Counts HEADs and LISTs."""

    def __init__(self, store: ObjectStore) -> None:
        self.heads = self.lists = 0
        self.real_head, self.real_list = store.head, store.list
        store.head, store.list = self.head, self.list  # type: ignore[method-assign]

    def head(self, key: str) -> Any:
        self.heads += 1
        return self.real_head(key)

    def list(self, *args: Any, **kw: Any) -> Any:
        self.lists += 1
        return self.real_list(*args, **kw)
