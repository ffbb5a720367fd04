"""Process entry points for log race tests (importable by multiprocessing's spawn start method)."""

from __future__ import annotations

import pyarrow as pa

from lakehouse import Lakehouse


def append_batches(url: str, options: dict, table: str, worker: int, batches: int, rows: int, barrier) -> list:
    """Append `batches` batches of `rows` rows; every row carries (worker, batch, row) so it is traceable."""
    lh = Lakehouse.open(url, **options)
    log = lh.log(table)
    barrier.wait()
    results = []
    for b in range(batches):
        ids = [worker * 10_000_000 + b * 1000 + r for r in range(rows)]
        batch = pa.table({"id": ids, "worker": [worker] * rows, "batch": [b] * rows})
        res = log.append(batch, "insert")
        results.append(res.ranges)
    lh.close()
    return results


#: Objects a parent leaves to the children it forks (they inherit them; nothing is pickled).
INHERITED: dict = {}


def append_with_inherited_log(keys: range) -> int:
    """In a forked child: append through the parent's `Lakehouse` (its Log, pool and S3 client)."""
    lh = INHERITED["lakehouse"]
    data = INHERITED["make_rows"](keys)
    return lh.log(INHERITED["table"]).append(data, "upsert").rows
