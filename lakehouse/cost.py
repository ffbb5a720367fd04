"""What a table's pipeline cost the object store in a period: its producers' writes, its lake commits' work and
its storage, in requests, bytes and dollars at a price list.

Everything is read from what the table keeps anyway, so nothing is recorded twice and nothing has to be kept
running to know it:

- **producers**: the log's own objects (`lakehouse.log.activity`): appends, objects and bytes of the period,
  and the requests those writes made (a floor: lost races are not seen);
- **lake commits** (tiering, compaction): the usage each recorded in its snapshot's summary
  (`lakehouse.iceberg.commit_usage`), its tasks' requests included; commits of the period among the snapshots
  still retained (an expired snapshot's figures went with it), and commits made before usage was recorded are
  counted, not priced;
- **storage**: the bytes held now (the lake's current snapshot and the log) for the period's length.

A layers model's table is written by its own log's tiering: those commits are in its lines. The rounds' work
itself (Spark SQL, reading the inputs) and the quality checks' are in their own reports (``usage``: `lakestream
layers run --json`, `lakestream check --json`), which keep only the newest round: not summed over a period here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyiceberg.table import Table

from lakehouse.errors import InvalidArgument
from lakehouse.iceberg.commit_usage import CommitUsage, commit_usage
from lakehouse.log.activity import LogActivity, log_activity
from lakehouse.table.definition import TableDefinition
from object_store import ObjectStore
from object_store.pricing import PriceList
from object_store.usage import Usage

#: Seconds in the month storage prices are quoted per (365.25 / 12 days).
MONTH_SECONDS = 365.25 / 12 * 86_400


@dataclass(frozen=True)
class CostLine:
    """One part of a table's cost: what it is, how many operations, the requests and bytes they made, dollars."""

    part: str
    operations: int
    usage: Usage
    dollars: float
    #: operations whose requests are not known (commits that recorded no usage)
    unmeasured: int = 0
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "operations": self.operations,
            "unmeasured": self.unmeasured,
            "write_requests": self.usage.write_requests,
            "read_requests": self.usage.read_requests,
            "usage": self.usage.to_dict(),
            "dollars": self.dollars,
            "note": self.note,
        }


@dataclass(frozen=True)
class TableCost:
    """A table's cost over ``[since, until)`` at ``prices``: `lines` by part, and storage."""

    table: str
    since: datetime
    until: datetime
    prices: PriceList
    lines: tuple[CostLine, ...] = ()
    stored_bytes: int = 0
    storage_dollars: float = 0.0
    log: LogActivity | None = field(default=None, compare=False)

    @property
    def usage(self) -> Usage:
        return Usage.sum(line.usage for line in self.lines)

    @property
    def requests_dollars(self) -> float:
        return sum(line.dollars for line in self.lines)

    @property
    def total(self) -> float:
        return self.requests_dollars + self.storage_dollars

    def per_day(self) -> float:
        """The period's total scaled to a day."""
        seconds = (self.until - self.since).total_seconds()
        return self.total * 86_400 / seconds if seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "lines": [line.to_dict() for line in self.lines],
            "stored_bytes": self.stored_bytes,
            "storage_dollars": self.storage_dollars,
            "requests_dollars": self.requests_dollars,
            "total_dollars": self.total,
            "dollars_per_day": self.per_day(),
            "prices": self.prices.to_dict(),
        }


def line(part: str, operations: int, usage: Usage, prices: PriceList, unmeasured: int = 0, note: str = "") -> CostLine:
    return CostLine(part, operations, usage, prices.price(usage).total, unmeasured, note)


def table_cost(
    store: ObjectStore,
    definition: TableDefinition,
    lake: Table | None,
    since: datetime,
    until: datetime,
    prices: PriceList,
) -> TableCost:
    """What ``definition``'s table (its lake table ``lake``, None if it has none yet) cost in ``[since, until)``.

    Raises:
        InvalidArgument: a time without a timezone, or a period that does not end after it starts.
    """
    if since.tzinfo is None or until.tzinfo is None:
        raise InvalidArgument(f"a cost period needs timezone-aware times (e.g. UTC): got {since} .. {until}")
    if until <= since:
        raise InvalidArgument(f"a cost period must end after its start: got {since} .. {until}")
    activity = log_activity(store, definition, since, until)
    what = "appends" if activity.log_format == "commits" else "segments, one per bucket an append touched"
    lines = [
        line(
            "producers",
            activity.appends,
            activity.usage,
            prices,
            note=f"{what}; a floor: lost races not seen",
        )
    ]
    lake_bytes = 0
    if lake is not None:
        since_ms, until_ms = int(since.timestamp() * 1000), int(until.timestamp() * 1000)
        for c in commit_usage(lake.metadata.snapshots, since_ms, until_ms):
            lines.append(_commit_line(c, prices))
        current = lake.current_snapshot()
        if current is not None and current.summary is not None:
            lake_bytes = int(current.summary["total-files-size"] or 0)
    stored = lake_bytes + activity.retained_bytes
    months = (until - since).total_seconds() / MONTH_SECONDS
    return TableCost(
        str(definition.name),
        since,
        until,
        prices,
        tuple(lines),
        stored,
        prices.storage(stored, months),
        activity,
    )


def _commit_line(c: CommitUsage, prices: PriceList) -> CostLine:
    unmeasured = c.commits - c.measured
    note = f"{unmeasured} commits recorded no usage" if unmeasured else ""
    return line(f"lake commits: {c.user}", c.commits, c.usage, prices, unmeasured, note)
