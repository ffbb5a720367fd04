"""Process entry points for the subscription race test (importable by multiprocessing's spawn start method)."""

from __future__ import annotations

from lakehouse import Lakehouse
from lakehouse.errors import SubscriptionConflict


def advance_once(url: str, options: dict, table: str, consumer: str, bucket: int, barrier) -> str:
    """Read the subscription, wait for the other runners, then advance ``bucket`` by one: "won" or "lost"."""
    lh = Lakehouse.open(url, **options)
    try:
        sub = lh.subscription(table, consumer, create=False)
        target = {bucket: sub.position[bucket] + 1}
        barrier.wait()
        try:
            sub.advance(target)
        except SubscriptionConflict:
            return "lost"
        return "won"
    finally:
        lh.close()
