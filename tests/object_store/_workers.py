"""Process entry points for race tests (importable by multiprocessing's spawn start method)."""

from __future__ import annotations

from object_store import PreconditionFailed, open_store


def race_create_only(url: str, options: dict, worker: int, rounds: int, barrier) -> list[int]:
    """Each round, every worker tries to create `race/<round>` at once; return the rounds this one won."""
    store = open_store(url, **options)
    won = []
    for r in range(rounds):
        barrier.wait()
        try:
            store.put(f"race/{r:03d}", f"worker-{worker}".encode(), if_none_match=True)
            won.append(r)
        except PreconditionFailed:
            pass
    return won


def cas_increment(url: str, options: dict, key: str, times: int) -> int:
    """Increment the integer at `key` `times` times by compare-and-swap; return the attempts it took."""
    store = open_store(url, **options)
    attempts = 0
    for _ in range(times):
        while True:
            attempts += 1
            obj = store.get(key)
            try:
                store.put(key, str(int(obj.data) + 1).encode(), if_match=obj.etag)
                break
            except PreconditionFailed:
                continue
    return attempts
