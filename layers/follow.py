"""`follow`: rounds as soon as inputs advance, until stopped; a store that stops answering pauses it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from layers.rounds import RoundReport
from object_store import StoreUnavailable

__all__ = ["FOLLOW_MAX_BACKOFF", "follow"]

log = logging.getLogger(__name__)

#: The longest pause of `follow` while the store does not answer.
FOLLOW_MAX_BACKOFF = 30.0


def follow(
    run_once: Callable[[], Sequence[RoundReport]],
    *,
    poll_seconds: float = 0.2,
    stop: threading.Event | None = None,
    max_rounds: int | None = None,
    on_round: Callable[[RoundReport], None] | None = None,
) -> None:
    """Run rounds as soon as inputs advance, until ``stop`` is set (or ``max_rounds`` rounds that did
    something have run), sleeping ``poll_seconds`` when nothing moved. A store that stops answering
    (`StoreUnavailable`) pauses the loop with a growing delay (up to `FOLLOW_MAX_BACKOFF` seconds) and
    the interrupted round is resumed; any other error ends it."""
    stop = stop or threading.Event()
    ran = 0
    failures = 0
    while not stop.is_set():
        busy = False
        try:
            reports = run_once()
        except StoreUnavailable as exc:
            failures += 1
            delay = min(FOLLOW_MAX_BACKOFF, poll_seconds * 2**failures)
            log.warning("layers: the store did not answer (%s); the round is resumed in %.1f s", exc, delay)
            stop.wait(delay)
            continue
        failures = 0
        for report in reports:
            if report.idle:
                continue
            busy = True
            ran += 1
            if on_round is not None:
                on_round(report)
        if max_rounds is not None and ran >= max_rounds:
            return
        if not busy:
            stop.wait(poll_seconds)
