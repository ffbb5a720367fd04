"""Who runs a round: its intent names an owner, which heartbeats while the round runs.

A round's intent (`layers.rounds`) is created with the runner that creates it as its ``owner`` (an id,
host, pid and the process's start time) and a ``heartbeat`` (the owner's wall clock, seconds since the epoch).
While the round runs, its `RoundLease` rewrites the heartbeat every `HEARTBEAT_SECONDS` with a compare-and-swap
(``If-Match``), so the intent shows that a live runner holds it. Another runner that finds the round unfinished
resumes it only when its owner is gone (`owner_alive`):

* released: a runner whose round raised lets go of it on the way out (`RoundLease.release`);
* dead on this host: same host name, and no process with that pid and start time (kill -9, a crash);
* silent: no heartbeat for `LEASE_SECONDS` (a runner on another host that died, or lost the store).

Taking a round over is itself a compare-and-swap of the intent, so of several runners that find the same dead
owner one takes it. A runner whose heartbeat is refused (someone took the round over after its lease lapsed)
stops before its next append or advance with `LayerConflict`; what it appended is recognised by the log, as
any retry's (the idempotent producer), so a lapse never writes anything twice.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psutil

from layers.errors import LayerConflict
from object_store import NotFound, ObjectStore, PreconditionFailed

__all__ = ["HEARTBEAT_SECONDS", "LEASE_SECONDS", "Owner", "RoundLease", "owner_alive", "take_over"]

log = logging.getLogger(__name__)

#: How often a running round's owner rewrites its heartbeat.
HEARTBEAT_SECONDS = 10.0
#: A round whose owner has not heartbeated for this long may be taken over by another runner.
LEASE_SECONDS = 60.0

#: Owner ids of the rounds this process is running now (another runner in this process is alive iff listed).
_RUNNING: set[str] = set()
_RUNNING_LOCK = threading.Lock()


def _process_started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


@dataclass(frozen=True)
class Owner:
    """A runner: a random id, and where it runs (host, pid and the process's start time, which tell a reused
    pid from the runner's own)."""

    id: str
    host: str
    pid: int
    started: float

    @classmethod
    def new(cls) -> Owner:
        pid = os.getpid()
        return cls(uuid.uuid4().hex, socket.gethostname(), pid, _process_started(pid) or 0.0)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "host": self.host, "pid": self.pid, "started": self.started}

    @classmethod
    def from_json(cls, doc: Any) -> Owner | None:
        if not isinstance(doc, dict):
            return None
        return cls(
            str(doc.get("id", "")), str(doc.get("host", "")), int(doc.get("pid", 0)), float(doc.get("started", 0))
        )

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def owner_alive(owner: Owner | None, heartbeat: float, *, lease_seconds: float = LEASE_SECONDS) -> bool:
    """Whether the runner ``owner`` may still be running its round (see the module)."""
    if owner is None:
        return False
    if owner.host == socket.gethostname():
        if owner.pid == os.getpid():
            with _RUNNING_LOCK:
                return owner.id in _RUNNING
        started = _process_started(owner.pid)
        if started is None or (owner.started and abs(started - owner.started) > 1.0):
            return False
    return time.time() - heartbeat < lease_seconds


class RoundLease:
    """A round's intent held by this runner: heartbeats in a thread until `finish`, `release` or `delete`.

    ``doc`` is the intent's JSON as stored under ``etag``; ``appended`` is set once the round may have written
    (the first append started), after which the intent must stay, whatever happens."""

    def __init__(
        self,
        store: ObjectStore,
        key: str,
        doc: dict[str, Any],
        etag: str,
        owner: Owner,
        *,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
    ) -> None:
        self.store = store
        self.key = key
        self.owner = owner
        self.appended = False
        self._doc = doc
        self._etag = etag
        self._lost: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        with _RUNNING_LOCK:
            _RUNNING.add(owner.id)
        self._thread = threading.Thread(
            target=self._beat, args=(heartbeat_seconds,), name=f"lakestream-lease-{key}", daemon=True
        )
        self._thread.start()

    @staticmethod
    def document(record_json: bytes, owner: Owner) -> dict[str, Any]:
        """An intent's JSON with ``owner`` holding it as of now."""
        doc = json.loads(record_json)
        doc["owner"] = owner.to_json()
        doc["heartbeat"] = time.time()
        return doc

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            with self._lock:
                if self._stop.is_set() or self._lost:
                    return
                self._write({**self._doc, "heartbeat": time.time()}, "heartbeat")

    def _write(self, doc: dict[str, Any], what: str) -> bool:
        """CAS ``doc`` over the intent as this lease last wrote it; False (and the lease lost) if it changed."""
        try:
            self._etag = self.store.put(self.key, json.dumps(doc, sort_keys=True).encode(), if_match=self._etag)
            self._doc = doc
            return True
        except (PreconditionFailed, NotFound):
            self._lost = f"its intent {self.key} was changed by another runner ({what} refused)"
            return False
        except Exception as exc:  # noqa: BLE001 - a missed heartbeat is retried at the next one
            log.warning("layers: %s of %s not written: %s", what, self.key, exc)
            return True

    def check(self) -> None:
        """Raise `LayerConflict` if another runner took the round over (see the module)."""
        if self._lost:
            raise LayerConflict(
                f"this runner's round was taken over: {self._lost}, after its heartbeat lapsed for "
                f"{LEASE_SECONDS:.0f} s. What it appended is recognised by the log (nothing is written twice); "
                "the other runner finishes the round"
            )

    def _stop_beating(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with _RUNNING_LOCK:
            _RUNNING.discard(self.owner.id)

    def finish(self) -> None:
        """The round finished (its report is written): stop heartbeating."""
        self._stop_beating()

    def release(self) -> None:
        """The round stops unfinished: let another runner resume it at once."""
        self._stop_beating()
        with self._lock:
            if not self._lost:
                doc = dict(self._doc)
                doc["owner"] = None
                self._write(doc, "release")

    def delete(self) -> None:
        """The round failed before it could have written anything: remove its intent, so the next round (perhaps
        with fixed SQL) starts afresh instead of resuming it."""
        self._stop_beating()
        if self.appended:
            raise AssertionError("a round that may have appended keeps its intent")
        with self._lock:
            if self._lost:
                return
            try:
                self.store.delete(self.key, if_match=self._etag)
            except (PreconditionFailed, NotFound):
                pass
            except Exception as exc:  # noqa: BLE001 - the intent stays and is resumed: still correct
                log.warning("layers: unfinished intent %s not removed: %s", self.key, exc)


def take_over(
    store: ObjectStore, key: str, model: str, number: int, owner: Owner, *, lease_seconds: float = LEASE_SECONDS
) -> RoundLease:
    """Hold round ``number`` of ``model`` (its intent at ``key``) for ``owner``, its previous owner being gone.

    Raises:
        LayerConflict: a live runner holds the round, or another runner took it over first.
    """
    obj = store.get(key)
    doc = json.loads(obj.data)
    held_by = Owner.from_json(doc.get("owner"))
    heartbeat = float(doc.get("heartbeat") or 0.0)
    if owner_alive(held_by, heartbeat, lease_seconds=lease_seconds):
        assert held_by is not None
        raise LayerConflict(
            f"model {model}: round {number} is being run by another runner ({held_by.describe()}, heartbeat "
            f"{max(0.0, time.time() - heartbeat):.0f} s ago); only one runner of a model may run. Nothing was "
            f"written by this one; if that runner is gone, its round is resumed once its heartbeat is "
            f"{lease_seconds:.0f} s old"
        )
    doc["owner"] = owner.to_json()
    doc["heartbeat"] = time.time()
    try:
        etag = store.put(key, json.dumps(doc, sort_keys=True).encode(), if_match=obj.etag)
    except (PreconditionFailed, NotFound):
        raise LayerConflict(
            f"model {model}: another runner took over round {number} at the same time; only one runner of a model "
            "may run. Nothing was written by this one"
        ) from None
    return RoundLease(store, key, doc, etag, owner)
