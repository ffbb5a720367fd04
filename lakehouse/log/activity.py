"""What producers wrote to a table's log in a period, read from the log itself: objects, bytes and the requests
they cost.

No producer keeps a ledger; the log's objects are the record. One listing of the log (a LIST request per 1,000
objects) finds them with their sizes and times:

- a **commits** log (`lakehouse.log.chain`): every append is one data object, named by its creation time, and a
  commit record. The appends of a period are the data objects named in it; each cost a PUT for its data, a PUT
  for its record and the GET that looked for the record first (a record created again after a lost race, or the
  walk to the chain's head after one, is not seen: the figures are a floor). A data object of a producer killed
  before its commit is counted as written (it was paid for) until retention removes it.
- a **segments** log: every append wrote one segment per bucket; the segments last modified in the period,
  a PUT each (a race lost on create cost a PUT and a HEAD more, not seen here).

``retained_bytes`` is every byte the log holds now, in the period or not: what storage is paid on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lakehouse.log.chain import data_prefix
from lakehouse.table.definition import COMMITS_LOG, TableDefinition
from object_store import ObjectStore
from object_store.usage import Usage


@dataclass(frozen=True)
class LogActivity:
    """What producers wrote to one table's log in ``[since, until)``."""

    log_format: str
    appends: int
    objects: int
    bytes_written: int
    retained_objects: int
    retained_bytes: int

    @property
    def usage(self) -> Usage:
        """The requests those writes made, at least (see the module), and the bytes they sent."""
        if self.log_format == COMMITS_LOG:
            requests = {"PUT": 2 * self.appends, "GET": self.appends}
        else:
            requests = {"PUT": self.objects}
        return Usage(requests={k: v for k, v in requests.items() if v}, bytes_sent=self.bytes_written)


def log_activity(store: ObjectStore, definition: TableDefinition, since: datetime, until: datetime) -> LogActivity:
    """What was written to ``definition``'s log from ``since`` (inclusive) to ``until`` (exclusive): timezone-aware
    datetimes (`lakehouse.cost.table_cost` checks them). Lists the log once."""
    appends = objects = written = retained = retained_bytes = 0
    if definition.log_format == COMMITS_LOG:
        # data objects are named <micros since the epoch>-<uuid>.arrow: the name is the append's time
        lo, hi = _micros(since), _micros(until)
        for info in store.list(data_prefix(definition.name)):
            retained += 1
            retained_bytes += info.size
            leaf = info.key.rpartition("/")[2]
            stamp = leaf.partition("-")[0]
            if stamp.isdigit() and lo <= int(stamp) < hi:
                appends += 1
                objects += 1
                written += info.size
    else:
        for bucket in range(definition.buckets):
            for info in store.list(definition.name.bucket_prefix(bucket)):
                retained += 1
                retained_bytes += info.size
                if since <= info.last_modified < until:
                    objects += 1
                    written += info.size
        appends = objects  # an append of several buckets wrote a segment in each: appends are not told apart
    return LogActivity(definition.log_format, appends, objects, written, retained, retained_bytes)


def _micros(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000)
