"""Subprocess entry points for tiering races and crashes (importable by multiprocessing's spawn).

    python -m tests.lakehouse._tiering_workers <url> <options-json> <table> <kill-point> [tier|compact]

runs one tiering round (or compaction) that kills its own process with SIGKILL at ``kill-point``:

    mid-write         after the first task wrote its files, while others have not run
    tasks-done        every task wrote its files, nothing committed
    metadata-written  the new metadata file exists, the catalog pointer still names the old one
    pointer-swapped   the commit landed; the process dies before returning
"""

from __future__ import annotations

import json
import sys

from lakehouse import Lakehouse
from lakehouse.executor import LocalExecutor
from tests.support.crash import die


class KillingStore:
    """The real store, except that the process dies right after a chosen write."""

    def __init__(self, store, point: str) -> None:
        self._store, self._point = store, point

    def __getattr__(self, name):
        return getattr(self._store, name)

    def put(self, key, data, **kwargs):
        etag = self._store.put(key, data, **kwargs)
        if self._point == "metadata-written" and key.endswith(".metadata.json") and kwargs.get("if_none_match"):
            die()
        pointer = key.startswith("_lakestream/catalog/tables/")
        if self._point == "pointer-swapped" and pointer and kwargs.get("if_match"):
            die()
        return etag


class KillingExecutor(LocalExecutor):
    def __init__(self, point: str) -> None:
        super().__init__(workers=1)
        self._point = point

    def map(self, fn, items):
        if self._point == "mid-write":
            fn(items[0])
            die()
        out = super().map(fn, items)
        if self._point == "tasks-done":
            die()
        return out


def tier_once(url: str, options: dict, table: str, barrier=None) -> dict:
    """One tiering round; returns the result or the error's class name."""
    lh = Lakehouse.open(url, **options)
    if barrier is not None:
        barrier.wait()
    try:
        return {"result": lh.tier(table, max_split_rows=50).to_dict()}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return {"error": type(exc).__name__, "message": str(exc)}
    finally:
        lh.close()


def main() -> None:
    url, options, table, point = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    job = sys.argv[5] if len(sys.argv) > 5 else "tier"
    lh = Lakehouse.open(url, **options)
    lh.store = KillingStore(lh.store, point)
    if job == "compact":
        from lakehouse.maintenance import compact

        definition = lh.table(table)
        compact(lh.store, lh.lake_table(table), definition, executor=KillingExecutor(point), min_input_files=2)
    else:
        from lakehouse.tiering.round import tier

        tier(lh.store, lh.catalog, lh.log(table), executor=KillingExecutor(point), max_split_rows=50)
    print("survived", flush=True)


if __name__ == "__main__":
    main()
