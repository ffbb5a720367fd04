"""Process entry points for log race tests (importable by multiprocessing's spawn start method)."""

from __future__ import annotations

import pyarrow as pa

from lakehouse import Lakehouse


def append_batches(
    url: str, options: dict, table: str, worker: int, batches: int, rows: int, barrier, replay: int = 0
) -> list:
    """Append `batches` batches of `rows` rows as producer ``p<worker>`` (sequence = batch number); every row
    carries (worker, batch, row) so it is traceable. Then, as a restarted producer would (a new `Lakehouse`,
    nothing cached), send the last ``replay`` batches again with their sequences: each must be recognised as
    already appended, where it landed the first time."""
    lh = Lakehouse.open(url, **options)
    log = lh.log(table)
    barrier.wait()
    results = []
    for b in range(batches):
        res = log.append(_batch(worker, b, rows), "insert", producer_id=f"p{worker}", sequence=b)
        results.append(res.ranges)
    lh.close()
    if replay:
        lh = Lakehouse.open(url, **options)
        log = lh.log(table)
        for b in range(batches - replay, batches):
            res = log.append(_batch(worker, b, rows), "insert", producer_id=f"p{worker}", sequence=b)
            assert res.ranges == results[b] and res.already_appended == frozenset(res.ranges), (worker, b, res)
        lh.close()
    return results


def _batch(worker: int, batch: int, rows: int) -> pa.Table:
    ids = [worker * 10_000_000 + batch * 1000 + r for r in range(rows)]
    return pa.table({"id": ids, "worker": [worker] * rows, "batch": [batch] * rows})


#: Objects a parent leaves to the children it forks (they inherit them; nothing is pickled).
INHERITED: dict = {}


def append_with_inherited_log(keys: range) -> int:
    """In a forked child: append through the parent's `Lakehouse` (its Log, pool and S3 client)."""
    lh = INHERITED["lakehouse"]
    data = INHERITED["make_rows"](keys)
    return lh.log(INHERITED["table"]).append(data, "upsert").rows
