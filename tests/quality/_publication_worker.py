"""A publisher killed with SIGKILL at one point of `quality.warehouse_publication.publish_warehouse` (tests/quality/
test_warehouse_publication.py): ``python -m tests.quality._publication_worker STORE_URL POINT``, every table's current
snapshot taken as passed.

POINT: ``planned`` (the set planned, nothing tagged), ``protected`` (pending tags and pinned files written,
before the record's compare-and-swap), ``swapped`` (right after the swap, before the history entry and the
tags), ``history`` (after the history entry, before the tags ``publication`` move)."""

from __future__ import annotations

import sys

from lakehouse import Lakehouse
from object_store import open_store
from quality import warehouse_publication as publication
from quality.results import RECONCILE, CheckResult
from tests.support.crash import die


def main() -> None:
    url, point = sys.argv[1], sys.argv[2]
    lh = Lakehouse(open_store(url))
    results = [
        CheckResult(RECONCILE, str(t), snapshot_id=lh.lake_table(t).metadata.current_snapshot_id)
        for t in lh.list_tables()
    ]
    protect, write_record, write_history = publication._protect, publication._write_record, publication._write_history

    def at_protect(*a, **k):
        if point == "planned":
            die()
        return protect(*a, **k)

    def at_record(*a, **k):
        if point == "protected":
            die()
        write_record(*a, **k)
        if point == "swapped":
            die()

    def at_history(*a, **k):
        write_history(*a, **k)
        if point == "history":
            die()

    publication._protect, publication._write_record, publication._write_history = at_protect, at_record, at_history
    publication.publish_warehouse(lh, results)
    sys.exit(3)  # not killed: the point was never reached


if __name__ == "__main__":
    main()
