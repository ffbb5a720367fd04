"""Subscriptions: durable, named consumer positions of a table, kept in the warehouse (not on a local disk).

A subscription is one JSON object per (table, consumer)::

    _lakestream/subscriptions/<ns>.<table>/<consumer>.json
        {"format-version": 1, "table": "ods.orders", "table-uuid": "...", "consumer": "dwd.orders_enriched",
         "position": {"0": 120, "1": 98}, "created-at": "...", "advanced-at": "...", "advances": 7}

Its position maps every bucket to an offset: the consumer has processed the table as of those offsets
(`Lakehouse.union_read(as_of=position)` is the state it has seen; the records from there on are what it has
not). Creating one is a create-only put (``If-None-Match: *``); `Subscription.advance` is a compare-and-swap
(``If-Match`` on the ETag it read), so two runners of one consumer can never both advance it: the second gets
`SubscriptionConflict` and nothing is written. Positions only move forward (`SubscriptionBackwards`).

**Pins.** A subscription at position P needs (a) every lake snapshot an as-of read at P scans
(`lakehouse.read.union.plan_as_of`: per bucket the retained snapshot holding the most of it without passing P), and
(b) each bucket's log from that snapshot's offset (the plan's base) on, for the as-of read's tail and for the
changes after P. `pins` computes both for a table's subscriptions; snapshot expiry keeps those snapshots and
log retention keeps those records (the maintenance modules receive the pins as arguments; they never read
subscriptions). Without this, maintenance would delete the state a consumer resumes from (Fluss bug #1919).

**Races.** Maintenance reads the subscriptions once, before it decides what to delete, and uses that reading
for expiry and retention alike. An advance that lands meanwhile only moves forward: the stale reading pins an
older position, whose snapshots expiry keeps and whose log retention keeps, and the newer position is served
from the same snapshots and log (its plan's bases are at least as high). A subscription *created* meanwhile is
not seen by that run: one started at ``"latest"`` needs nothing maintenance may delete (its base is the lake's
current offset, whose snapshot and un-tiered log are never removed); one started at an older position is
checked again after it is written (`Lakehouse.subscription` removes it and raises `AsOfUnavailable` if the
state it needs was removed meanwhile), and is protected from every maintenance run that starts after it.
Run one table's maintenance from one place at a time (as the lake_maintenance DAG does).

A subscription of a table that was dropped and created again does not apply to the new table (its
``table-uuid`` differs): it is listed as stale, pins nothing and can only be dropped. `Lakehouse.drop_table`
deletes a table's subscriptions.

A subscription not advanced for longer than an idle age (`DEFAULT_IDLE_AGE`, 7 days) is reported by
`Lakehouse.maintain` (and logged as a warning): it holds the log and snapshots from its position on. Drop it
(`Lakehouse.drop_subscription`, ``lakestream subscription drop``) if its consumer is gone.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pyiceberg.table import Table

from lakehouse.errors import (
    InvalidArgument,
    InvalidSubscriptionName,
    SubscriptionBackwards,
    SubscriptionConflict,
    SubscriptionNotFound,
)
from lakehouse.log import Log
from lakehouse.read.union import AsOf, check_as_of, plan_as_of
from lakehouse.table.definition import RESERVED_NAMESPACE, TableDefinition, TableName
from object_store import NotFound, ObjectStore, PreconditionFailed

_log = logging.getLogger(__name__)

SUBSCRIPTIONS_PREFIX = f"{RESERVED_NAMESPACE}/subscriptions/"
#: A subscription not advanced for longer than this is reported as idle (`Lakehouse.maintain`).
DEFAULT_IDLE_AGE = timedelta(days=7)
_CONSUMER = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")


def check_consumer(consumer: object) -> str:
    """``consumer`` if it is a valid consumer name, else `InvalidSubscriptionName` (nothing read or written)."""
    if not isinstance(consumer, str) or not _CONSUMER.fullmatch(consumer):
        raise InvalidSubscriptionName(
            f"invalid subscription name {consumer!r}: a consumer name starts with a letter or '_' followed by "
            "letters, digits, '_', '.' or '-' (at most 128 characters), e.g. 'dwd.orders_enriched'"
        )
    return consumer


def table_prefix(table: TableName) -> str:
    """Where the subscriptions of ``table`` live."""
    return f"{SUBSCRIPTIONS_PREFIX}{table}/"


def subscription_key(table: TableName, consumer: str) -> str:
    return f"{table_prefix(table)}{check_consumer(consumer)}.json"


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class SubscriptionRecord:
    """What a subscription object holds (see the module docstring)."""

    table: TableName
    consumer: str
    table_uuid: str
    position: dict[int, int]
    created_at: datetime = field(default_factory=_now)
    advanced_at: datetime = field(default_factory=_now)
    advances: int = 0

    @property
    def key(self) -> str:
        return subscription_key(self.table, self.consumer)

    def to_json(self) -> bytes:
        doc = {
            "format-version": 1,
            "table": str(self.table),
            "table-uuid": self.table_uuid,
            "consumer": self.consumer,
            "position": {str(b): o for b, o in sorted(self.position.items())},
            "created-at": _stamp(self.created_at),
            "advanced-at": _stamp(self.advanced_at),
            "advances": self.advances,
        }
        return json.dumps(doc, indent=2).encode()

    @classmethod
    def from_json(cls, data: bytes, *, source: str = "") -> SubscriptionRecord:
        try:
            doc = json.loads(data)
            return cls(
                table=TableName.parse(doc["table"]),
                consumer=check_consumer(doc["consumer"]),
                table_uuid=str(doc["table-uuid"]),
                position={int(b): int(o) for b, o in doc["position"].items()},
                created_at=datetime.fromisoformat(doc["created-at"]),
                advanced_at=datetime.fromisoformat(doc["advanced-at"]),
                advances=int(doc.get("advances", 0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidArgument(
                f"subscription {source or '(bytes)'} is unreadable ({exc}); drop it (lakestream subscription drop)"
            ) from None


@dataclass(frozen=True)
class BucketLag:
    """How far a subscription is behind one bucket's log: ``records`` not consumed, and ``seconds`` since the
    oldest of them was appended (0 when none; None when its segment is gone)."""

    records: int
    seconds: float | None


class Subscription:
    """A consumer's durable position in one table. Get one with `Lakehouse.subscription`.

    >>> sub = lh.subscription("ods.orders", "dwd.orders_enriched")
    >>> state = lh.union_read("ods.orders", as_of=sub.position)     # what the consumer has seen
    >>> sub.advance(lh.log("ods.orders").end_offsets())           # compare-and-swap: SubscriptionConflict if another
    """

    def __init__(
        self, store: ObjectStore, record: SubscriptionRecord, etag: str, *, log: Callable[[], Log], stale: bool = False
    ) -> None:
        #: True if it belongs to an earlier table of this name (dropped and created again): it pins nothing
        self.stale = stale
        self._store = store
        self._record = record
        self._etag = etag
        self._open_log = log

    # ---- what it is ------------------------------------------------------------------------------------

    @property
    def table(self) -> str:
        return str(self._record.table)

    @property
    def consumer(self) -> str:
        return self._record.consumer

    @property
    def position(self) -> dict[int, int]:
        """{bucket: offset} for every bucket, as last read or written by this object (`refresh` re-reads it)."""
        return dict(self._record.position)

    @property
    def created_at(self) -> datetime:
        return self._record.created_at

    @property
    def advanced_at(self) -> datetime:
        return self._record.advanced_at

    @property
    def record(self) -> SubscriptionRecord:
        return self._record

    @property
    def etag(self) -> str:
        return self._etag

    def idle_for(self, now: datetime | None = None) -> timedelta:
        """How long since it was created or last advanced."""
        return (now or _now()) - self._record.advanced_at

    # ---- changing it -----------------------------------------------------------------------------------

    def refresh(self) -> Subscription:
        """Read the stored subscription again (another runner may have advanced it). Raises `SubscriptionNotFound`
        if it was dropped."""
        try:
            obj = self._store.get(self._record.key)
        except NotFound:
            raise SubscriptionNotFound(
                f"subscription {self.consumer} of {self.table} was dropped; create it again (Lakehouse.subscription)"
            ) from None
        self._record = SubscriptionRecord.from_json(obj.data, source=f"{self._store.url}/{self._record.key}")
        self._etag = obj.etag
        return self

    def advance(self, position: AsOf) -> None:
        """Move the position forward to ``position`` ({bucket: offset}; buckets not named keep theirs), as a
        compare-and-swap on what this object last read or wrote. Advancing to the same position records that the
        consumer is alive (it is no longer idle).

        Raises:
            InvalidArgument: a bucket the table lacks, an offset that is negative, not an integer or past the end
                of the log. Nothing was written.
            SubscriptionBackwards: a bucket would move back. Nothing was written.
            SubscriptionConflict: another runner advanced (or dropped) it since this object read it. Nothing was
                written; ``refresh`` to continue from the stored position.
        """
        if not isinstance(position, Mapping):
            raise InvalidArgument(
                f"subscription {self.consumer} of {self.table}: a position maps buckets to offsets "
                f"({{0: 120, 1: 98, ...}}), got {position!r}"
            )
        log_ = self._open_log()
        merged: dict[Any, Any] = {**self._record.position, **position}
        try:
            new = check_as_of(merged, log_.definition, log_)
        except InvalidArgument as exc:
            raise InvalidArgument(
                f"subscription {self.consumer} of {self.table}: cannot advance to {dict(position)}: {exc}"
            ) from None
        back = {b: (self._record.position[b], o) for b, o in new.items() if o < self._record.position.get(b, 0)}
        if back:
            raise SubscriptionBackwards(
                f"subscription {self.consumer} of {self.table} cannot move back: "
                + ", ".join(f"bucket {b} from {old} to {o}" for b, (old, o) in sorted(back.items()))
                + " (positions only move forward; drop the subscription and create it again to start over)"
            )
        record = SubscriptionRecord(
            table=self._record.table,
            consumer=self.consumer,
            table_uuid=self._record.table_uuid,
            position=new,
            created_at=self._record.created_at,
            advanced_at=_now(),
            advances=self._record.advances + 1,
        )
        try:
            etag = self._store.put(record.key, record.to_json(), if_match=self._etag)
        except (PreconditionFailed, NotFound):
            current = None
            try:
                current = SubscriptionRecord.from_json(self._store.get(record.key).data).position
            except (NotFound, InvalidArgument):
                pass
            now = "it was dropped" if current is None else f"it is now at {current}"
            raise SubscriptionConflict(
                f"subscription {self.consumer} of {self.table} changed since it was read (another runner of this "
                f"consumer advanced or dropped it): {now}. Nothing was written; refresh() and continue from the "
                "stored position",
                current=current,
            ) from None
        self._record, self._etag = record, etag

    def lag(self, now: datetime | None = None) -> dict[int, BucketLag]:
        """Per bucket, the records appended at or after the position and the age of the oldest of them (from its
        segment's header: one LIST per bucket and one HEAD per bucket that is behind; no data is read)."""
        log_ = self._open_log()
        ends = log_.end_offsets()
        at = (now or _now()).timestamp()
        out = {}
        for b, end in ends.items():
            pos = self._record.position.get(b, 0)
            records = max(0, end - pos)
            seconds: float | None = 0.0
            if records:
                appended = log_.appended_at(b, pos)
                seconds = None if appended is None else max(0.0, at - appended / 1e6)
            out[b] = BucketLag(records, seconds)
        return out

    def drop(self) -> None:
        """Delete the subscription (whatever its position now): it pins nothing from then on."""
        self._store.delete(self._record.key)

    def __repr__(self) -> str:
        return f"Subscription({self.table!r}, {self.consumer!r}, position={self.position})"


# ---- reading them ----------------------------------------------------------------------------------------


def read_subscription(store: ObjectStore, table: TableName, consumer: str) -> tuple[SubscriptionRecord, str] | None:
    """The stored subscription and its ETag, or None."""
    key = subscription_key(table, consumer)
    try:
        obj = store.get(key)
    except NotFound:
        return None
    return SubscriptionRecord.from_json(obj.data, source=f"{store.url}/{key}"), obj.etag


def list_subscriptions(store: ObjectStore, table: TableName | None = None) -> list[tuple[SubscriptionRecord, str]]:
    """Every stored subscription (of ``table``), with its ETag, by table then consumer. An unreadable object is
    skipped with a warning (a listing must not fail on it)."""
    prefix = table_prefix(table) if table is not None else SUBSCRIPTIONS_PREFIX
    out = []
    for info in store.list(prefix):
        if not info.key.endswith(".json"):
            continue
        try:
            obj = store.get(info.key)
            out.append((SubscriptionRecord.from_json(obj.data, source=f"{store.url}/{info.key}"), obj.etag))
        except NotFound:
            continue  # dropped meanwhile
        except InvalidArgument as exc:
            _log.warning("skipping %s", exc)
    out.sort(key=lambda re: (re[0].table, re[0].consumer))
    return out


def delete_subscriptions(store: ObjectStore, table: TableName) -> int:
    """Delete every subscription of ``table``; how many there were."""
    n = 0
    for info in store.list(table_prefix(table)):
        store.delete(info.key)
        n += 1
    return n


# ---- what they pin ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pins:
    """What a table's subscriptions need kept: ``log`` maps a bucket to the first offset its log must keep and
    the subscriptions that need it; ``snapshots`` maps a lake snapshot id to the subscriptions whose as-of read
    scans it. Handed to `lakehouse.maintenance` expiry and retention as arguments."""

    log: dict[int, tuple[int, str]] = field(default_factory=dict)
    snapshots: dict[int, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.log or self.snapshots)


def pins(records: Iterable[SubscriptionRecord], table: Table, definition: TableDefinition) -> Pins:
    """The snapshots and log ranges the as-of reads at ``records``' positions need (see the module docstring).
    Subscriptions of an earlier table of the same name (another ``table-uuid``) pin nothing."""
    log_floor: dict[int, tuple[int, list[str]]] = {}
    snapshots: dict[int, list[str]] = {}
    for record in records:
        if record.table_uuid != definition.table_uuid or record.table != definition.name:
            continue
        who = f"subscription {record.consumer}"
        position = {b: record.position.get(b, 0) for b in range(definition.buckets)}
        plan = plan_as_of(table, definition, position)
        for snapshot_id, _ in plan.scans:
            snapshots.setdefault(snapshot_id, []).append(who)
        for b, base in plan.bases.items():
            floor = log_floor.get(b)
            if floor is None or base < floor[0]:
                log_floor[b] = (base, [who])
            elif base == floor[0]:
                floor[1].append(who)
    return Pins(
        log={b: (o, ", ".join(who)) for b, (o, who) in sorted(log_floor.items())},
        snapshots={s: ", ".join(who) for s, who in snapshots.items()},
    )


def idle(records: Iterable[SubscriptionRecord], older_than: timedelta = DEFAULT_IDLE_AGE) -> list[SubscriptionRecord]:
    """The subscriptions not advanced for longer than ``older_than``."""
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise InvalidArgument(f"an idle age must be a timedelta >= 0, got {older_than!r}")
    cutoff = _now() - older_than
    return [r for r in records if r.advanced_at < cutoff]


def idle_message(record: SubscriptionRecord, now: datetime | None = None) -> str:
    age = (now or _now()) - record.advanced_at
    return (
        f"subscription {record.consumer} of {record.table} has not advanced for {_age(age)} (since "
        f"{_stamp(record.advanced_at)}): it keeps the log and lake snapshots from its position "
        f"{record.position} from being deleted. Drop it if its consumer is gone: "
        f"lakestream subscription drop {record.table} {record.consumer}"
    )


def _age(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    days, rest = divmod(seconds, 86400)
    return f"{days}d {rest // 3600}h" if days else f"{rest // 3600}h {rest % 3600 // 60}m"


__all__ = [
    "DEFAULT_IDLE_AGE",
    "SUBSCRIPTIONS_PREFIX",
    "BucketLag",
    "Pins",
    "Subscription",
    "SubscriptionRecord",
    "check_consumer",
    "delete_subscriptions",
    "idle",
    "idle_message",
    "list_subscriptions",
    "pins",
    "read_subscription",
]
