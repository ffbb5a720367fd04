"""Waiting out other writers: a commit that lost its CAS is retried once the table's pointer is quiet.

pyiceberg retries a commit that lost to another writer after sleeping ``min-wait * 2^attempt`` (capped,
10% jitter), then reloads the table and rebuilds its snapshot. On one table shared by several writers
that plays out badly (measured with 8 writer processes x 25 appends on SeaweedFS, 2 cores): the writer
that just won starts its next commit on the state it made itself and keeps winning, while the others
sleep. Each sleeper that wakes during that run reloads, rebuilds and commits for nothing (67-96 lost
rounds per 200 commits, each a reload, a manifest list, a metadata file and requests at the pointer,
all on the cores the winner needs), and when the winner stops, everyone may still be asleep for up to
the longest wait (a second): no commit for over 100 ms during 35-40% of the run.

So our tables (`lakehouse.iceberg.lake_table.LakeTable`) do what Ethernet does before sending (carrier sense):
after a lost commit, the reload that pyiceberg's retry starts with first waits until the pointer has not
changed for ``quiet`` seconds (HEAD requests on the pointer, a few hundred bytes each, every ``quiet``
seconds +-25%), for at most ``limit`` seconds. Writers then stay out of a busy writer's way and
take over within about ``quiet`` of it stopping. With pyiceberg's own waits shortened (the quiet
wait does the pacing) contending writers lose a fraction of the rounds they lost without it and the
pointer stands idle far less (BENCHMARKS.md, the catalog). The price is fairness: a writer that keeps committing keeps
the pointer, and the others wait up to ``limit`` per round.

``quiet`` must exceed the time between two commits of one busy writer (tens of milliseconds on a local store), or
waiters see a quiet pointer that is not and collide with it: that only costs a lost round, never correctness.
``limit`` bounds how long a busy writer can keep the others waiting: after it, the waiter tries anyway (and with
pyiceberg's retries, eventually wins a round). Both are table properties (`QUIET_MS`, `QUIET_MAX_MS`); the catalog
writes the defaults into every table it creates (``lakehouse.iceberg.catalog.DEFAULT_TABLE_PROPERTIES``). """

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping

#: Milliseconds the pointer must stay unchanged before a retry after a lost commit; 0 turns the wait off.
QUIET_MS = "lakestream.commit.quiet-ms"
#: The longest a retry waits for quiet, in milliseconds.
QUIET_MAX_MS = "lakestream.commit.quiet-max-ms"
DEFAULT_QUIET_MS = 100
DEFAULT_QUIET_MAX_MS = 2000


def quiet_settings(properties: Mapping[str, str]) -> tuple[float, float]:
    """``(quiet, limit)`` in seconds from a table's properties (defaults where unset or invalid)."""

    def ms(key: str, default: int) -> float:
        try:
            return max(0, int(properties.get(key, default))) / 1000
        except (TypeError, ValueError):
            return default / 1000

    return ms(QUIET_MS, DEFAULT_QUIET_MS), ms(QUIET_MAX_MS, DEFAULT_QUIET_MAX_MS)


def wait_until_quiet(
    etag_now: Callable[[], str | None],
    etag: str,
    quiet: float,
    limit: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Wait until ``etag_now()`` (the pointer's ETag, None if it cannot be read) returns the same ETag
    twice ``quiet`` seconds (+-25%) apart, starting from ``etag``; give up after ``limit`` seconds.

    Returns True when the pointer was quiet (or unreadable: the caller's reload decides what that means),
    False when ``limit`` ran out first.
    """
    if quiet <= 0:
        return True
    deadline = clock() + limit
    while clock() < deadline:
        sleep(min(random.uniform(0.75, 1.25) * quiet, max(0.0, deadline - clock())))
        now = etag_now()
        if now is None or now == etag:
            return True
        etag = now
    return False
