"""Reconciliation of a table's lake against its log: ``reconcile(lh, table, full=False)``.

**Metadata**, along the current snapshot's ancestry: per-bucket offsets of tiering snapshots never decrease
and never pass the log's end; a tiering commit of a log table adds exactly the records of the range it claims
(``added-records`` == the offsets it advanced) and removes none; no data file is live twice. Every run, new
commits or not, confirms that each file of the current snapshot (and each file a checked commit added or
removed) exists with its recorded size, from a listing of the table's data location compared with the
manifests: a missing file is ``file-missing``, another size ``file-size``, and such a file is never read (the
content of its bucket is reported unverified instead).

**Content**, per commit (incremental, the default): each commit since the last checked snapshot is checked
against its own offset range, by digests (`quality.digest`) of the rows it touched:

* tiering, log table: the added rows == the log's records of the range (as lake rows);
* tiering, primary-key table: the added rows == the removed files' rows whose key did not change + the last
  change of every changed key that leaves a row (copy-on-write, as `lakehouse.merge.keyed_rows.rewrite_bucket` does),
  and no file the commit kept holds a changed key;
* any other commit (compaction, or a rogue writer): the added rows == the removed rows.

Each commit's check reads what the commit wrote and removed plus its log range, so its cost grows with the
commit, not the table. Checked commits are recorded in the warehouse (``_lakestream/quality/reconcile/
<table>.json``); the next run starts after the last one. By induction from an empty table (or from a full
check), the lake at every checked snapshot equals the log replayed to its offsets.

**Full** (``full=True``, and whenever the chain cannot be followed: the first run, or the last checked snapshot
was expired): per bucket, the lake at the current snapshot against the retained log replayed to its offsets.
Rows older than the log's retention cannot be checked against it (they are counted, ``unverified_rows``);
every row with an offset in the retained log, and every key changed there, is.

A mismatch names table, bucket, offset range, snapshot and sample keys with expected and actual rows: both
sides' row hashes are in memory, so their multiset difference names the rows exactly.

Where (one job per module): `reader` reads the lake and the log for a check; `checker` holds a run's findings and
what every check shares (files confirmed by listing, rows compared, buckets run as tasks); `commits` the checks
run on commits; `full` the full check; `state` what is kept between runs and the retention record; `run` the
``reconcile`` function that chooses and orders them.
"""

from __future__ import annotations

from quality.reconcile.run import reconcile
from quality.reconcile.state import state_key

__all__ = ["reconcile", "state_key"]
