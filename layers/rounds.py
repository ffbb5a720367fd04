"""The durable record of a model's rounds: what each round consumed, written before it writes anything.

A round of model M is numbered ``r`` (0, 1, ...). Before it writes, its *intent* is created with
``If-None-Match: *`` at ``_lakestream/layers/<M>/round-<r>.json``: the input range (``start``, ``end`` per input
table; ``start`` is None for a full round), and the output log's end offsets when it began (``output``). Only one
runner can create round ``r``: the other gets `LayerConflict`. The round is done when every input subscription
of M stands at ``end`` and then its report is written next to it (``report-<r>.json``); until then any runner
resumes it from its intent: the same range, the same as-of reads, so the same rows, appended under the same
producer id and sequences (the log recognises what already landed).
The report also feeds ``lakestream layers status``; old intents and reports are deleted (the newest few are kept).

**Round boundaries.** A round appends to its model's log bucket by bucket, so the log's end seen at an arbitrary
moment may hold half a round. The ends *between* rounds are known exactly: round ``r``'s intent records in
``output`` the ends when it began, which are the ends after round ``r - 1``; and once the newest round's report
exists, the log's end (read while no newer intent appears) is the end after it. `round_boundary` gives the newest
such ends: a runner holds its model's tiering boundary there while a round appends (`lakehouse.tiering.boundaries`), so
every lake snapshot of a model holds whole rounds, and
`boundary_round` maps a snapshot's ends back to the round that produced them (whose inputs' positions the
snapshot reflects: quality's cross-table expectations read the inputs as of them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lakehouse.table.definition import RESERVED_NAMESPACE
from layers.errors import LayerConflict, RoundUnknown
from layers.lease import Owner, RoundLease
from object_store import NotFound, ObjectStore, PreconditionFailed
from object_store.usage import Usage

__all__ = [
    "LAYERS_PREFIX",
    "RoundRecord",
    "RoundReport",
    "boundary_round",
    "consumer_of",
    "is_self_consumer",
    "model_of_consumer",
    "self_consumer_of",
    "producer_of",
    "sql_digest",
    "create_round",
    "forget_rounds",
    "latest_round",
    "prune",
    "read_intent",
    "read_report",
    "round_boundary",
    "rounds",
]

LAYERS_PREFIX = f"{RESERVED_NAMESPACE}/layers/"
#: Rounds whose intent and report are kept (the newest ones; older ones are deleted after each round).
KEEP_ROUNDS = 8

Positions = dict[str, dict[int, int]]


def sql_digest(sql: str) -> str:
    """The digest a round records of the model's SQL (a changed SQL makes the next round a full one)."""
    return hashlib.sha256(sql.encode()).hexdigest()


def consumer_of(model: str) -> str:
    """The subscription name (in each input table) of ``model``'s rounds."""
    return f"layers.{model}"


def self_consumer_of(model: str) -> str:
    """The subscription name in ``model``'s own table that holds its log for the model's rounds (retention keeps
    what a resumed round or a rebuild reads back): internal, not a reader of the table."""
    return f"{consumer_of(model)}.self"


def is_self_consumer(name: str) -> bool:
    """Whether subscription ``name`` is a model's own (`self_consumer_of`)."""
    return name.startswith("layers.") and name.endswith(".self")


def model_of_consumer(name: str) -> str | None:
    """The model whose rounds read through subscription ``name`` (the inverse of `consumer_of`), or None if
    ``name`` is no model's reader: another consumer's, or a model's own (`is_self_consumer`)."""
    prefix = consumer_of("")
    if not name.startswith(prefix) or is_self_consumer(name) or len(name) == len(prefix):
        return None
    return name[len(prefix) :]


def producer_of(model: str) -> str:
    """The producer id of ``model``'s appends to its own log."""
    return f"layers.{model}"


def _key(model: str, kind: str, number: int) -> str:
    return f"{LAYERS_PREFIX}{model}/{kind}-{number:012d}.json"


def _positions(doc: Any) -> Positions | None:
    if doc is None:
        return None
    return {table: {int(b): int(o) for b, o in offsets.items()} for table, offsets in doc.items()}


@dataclass(frozen=True)
class RoundRecord:
    """A round's intent: model, number, kind (``incremental``, ``full`` or ``rebuild``), the input range and
    the output log's ends when it began."""

    model: str
    number: int
    kind: str
    start: Positions | None
    end: Positions
    output: dict[int, int]
    #: sha256 of the model's SQL the round computes with ("" in records of older versions)
    sql: str = ""
    #: the ``table_uuid`` of the model's table, and of each input, when the round began ("" / {} in records of
    #: older versions): positions and rounds belong to those tables, not to tables created again under their names
    table_uuid: str = ""
    input_uuids: dict[str, str] = field(default_factory=dict)
    #: why a full round is full (its report says it)
    reason: str = ""
    #: an incremental round run on Spark's executors (`layers.executor_rounds`), decided once when the round began: a
    #: resumed round runs where it first ran, whatever the budget is now, so it appends the same chunks
    on_executors: bool = False

    @property
    def key(self) -> str:
        return _key(self.model, "round", self.number)

    def to_json(self) -> bytes:
        doc = {
            "model": self.model,
            "round": self.number,
            "kind": self.kind,
            "start": self.start,
            "end": self.end,
            "output": self.output,
            "sql": self.sql,
            "table_uuid": self.table_uuid,
            "input_uuids": self.input_uuids,
            "reason": self.reason,
            "executors": self.on_executors,
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> RoundRecord:
        doc = json.loads(data)
        return cls(
            model=doc["model"],
            number=int(doc["round"]),
            kind=doc["kind"],
            start=_positions(doc["start"]),
            end=_positions(doc["end"]) or {},
            output={int(b): int(o) for b, o in doc["output"].items()},
            sql=doc.get("sql", ""),
            table_uuid=doc.get("table_uuid", ""),
            input_uuids=dict(doc.get("input_uuids") or {}),
            reason=doc.get("reason", ""),
            on_executors=bool(doc.get("executors", False)),
        )


@dataclass(frozen=True)
class RoundReport:
    """What one round of a model did (``lakestream layers run`` prints it; ``status`` shows the last one).

    ``round`` is -1 and ``idle`` True when no input had advanced (nothing ran). ``positions``: every input's
    offsets after the round. ``input_changes``: change rows read from the inputs; ``affected``: output keys (or
    groups) recomputed; ``upserts``/``deletes``: rows appended to the model's log; ``output``: the model's log ends
    once its appends were done (the round's boundary; empty in reports of older versions). ``abandoned``: the
    round never finished; a rebuild (or a model or input table created again) replaced it, so its appends, if
    any, are no boundary (`round_boundary`). ``usage``: the round's requests to the store and their bytes up to
    its report (`object_store.usage`; none in reports of older versions)."""

    model: str
    round: int
    strategy: str
    reason: str
    positions: Positions
    input_changes: int = 0
    affected: int = 0
    upserts: int = 0
    deletes: int = 0
    seconds: float = 0.0
    idle: bool = False
    resumed: bool = False
    abandoned: bool = False
    finished_at: float = field(default=0.0, compare=False)
    output: dict[int, int] = field(default_factory=dict, compare=False)
    usage: Usage = field(default_factory=Usage, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "round": self.round,
            "strategy": self.strategy,
            "reason": self.reason,
            "positions": {t: {str(b): o for b, o in p.items()} for t, p in self.positions.items()},
            "input_changes": self.input_changes,
            "affected": self.affected,
            "upserts": self.upserts,
            "deletes": self.deletes,
            "seconds": round(self.seconds, 3),
            "idle": self.idle,
            "resumed": self.resumed,
            "abandoned": self.abandoned,
            "finished_at": self.finished_at,
            "output": {str(b): o for b, o in self.output.items()},
            "usage": self.usage.to_dict(),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RoundReport:
        output = {int(b): int(o) for b, o in (doc.get("output") or {}).items()}
        usage = Usage.from_dict(doc.get("usage"))
        return cls(**{**doc, "positions": _positions(doc["positions"]) or {}, "output": output, "usage": usage})


def latest_round(store: ObjectStore, model: str) -> RoundRecord | None:
    """The newest round's intent of ``model``, or None before its first round."""
    newest = None
    for info in store.list(f"{LAYERS_PREFIX}{model}/round-"):
        newest = info.key  # listed in key order: zero-padded numbers sort
    if newest is None:
        return None
    try:
        return RoundRecord.from_json(store.get(newest).data)
    except NotFound:  # pruned meanwhile by a runner that went on: look again
        return latest_round(store, model)


def read_intent(store: ObjectStore, model: str, number: int) -> RoundRecord | None:
    """Round ``number``'s intent, or None (never written, or pruned)."""
    try:
        return RoundRecord.from_json(store.get(_key(model, "round", number)).data)
    except NotFound:
        return None


def rounds(store: ObjectStore, model: str) -> list[RoundRecord]:
    """Every retained round intent of ``model``, oldest first (intents pruned while listed are left out)."""
    out = []
    for info in store.list(f"{LAYERS_PREFIX}{model}/round-"):
        try:
            out.append(RoundRecord.from_json(store.get(info.key).data))
        except NotFound:
            continue
    return out


def round_boundary(
    store: ObjectStore, model: str, log_end: Callable[[], dict[int, int]]
) -> tuple[int, dict[int, int]] | None:
    """The newest round boundary of ``model``'s log (see the module): ``(r, ends)`` where ``ends`` are the log's
    ends after round ``r`` (``r`` is -1 for the ends before round 0), or None if ``model`` never ran a round
    (a table no layer writes). ``log_end`` reads the log's current ends. An abandoned round is no boundary: its
    appends, if any, stay beyond the boundary until the round that replaced it finishes."""
    latest = latest_round(store, model)
    if latest is None:
        return None
    report = _report(store, model, latest.number)
    if report is None or report.abandoned:  # running, its runner died, or abandoned: the ends it began at
        return _start_boundary(store, model, latest)
    ends = log_end()
    again = latest_round(store, model)
    if again is None or again.number == latest.number:
        return latest.number, ends
    return _start_boundary(store, model, again)  # a round began meanwhile: its appends may be in `ends`


def _start_boundary(store: ObjectStore, model: str, record: RoundRecord) -> tuple[int, dict[int, int]]:
    """The boundary before ``record``'s appends: the ends it began at, or, after abandoned rounds, the ends the
    first of them began at."""
    while record.number > 0:
        previous = _report(store, model, record.number - 1)
        if previous is None or not previous.abandoned:
            break
        earlier = read_intent(store, model, record.number - 1)
        if earlier is None:  # pruned: the oldest retained is as far back as a boundary can be known
            break
        record = earlier
    return record.number - 1, dict(record.output)


def boundary_round(
    store: ObjectStore, model: str, ends: dict[int, int], log_end: Callable[[], dict[int, int]]
) -> RoundRecord | None:
    """The round of ``model`` whose output the log's state at ``ends`` holds: the newest finished round ``r``
    whose appends all lie below ``ends``, provided ``ends`` holds none of round ``r + 1``'s appends (rows written
    between rounds by anything else are part of the state). None when ``ends`` lies before round 0. Buckets
    missing from either side count as 0.

    Raises:
        RoundUnknown: ``ends`` holds part of a round, or predates the retained round records.
    """

    def le(a: dict[int, int], b: dict[int, int]) -> bool:
        return all(a.get(k, 0) <= b.get(k, 0) for k in set(a) | set(b))

    records = rounds(store, model)
    by_number = {r.number: r for r in records}
    for record in reversed(records):
        report = _report(store, model, record.number)
        if report is None or report.abandoned:
            continue  # running, its runner died, or abandoned: its appends are no boundary
        following = by_number.get(record.number + 1)
        after = report.output if report is not None and report.output else None
        if after is None:  # a report of an older version: the ends the next round began at, or the log's end now
            after = dict(following.output) if following is not None else log_end()
        if le(after, ends):
            if following is None or le(ends, following.output):
                return record
            break  # part of round r + 1's appends
    else:
        if records and records[0].number == 0 and le(ends, records[0].output):
            return None
    raise RoundUnknown(
        f"model {model}: log offsets {ends} are no round boundary of its retained rounds "
        f"({', '.join(str(r.number) for r in records) or 'none'}): they hold part of a round, or predate the "
        "round records kept (the newest few)"
    )


def _report(store: ObjectStore, model: str, number: int) -> RoundReport | None:
    try:
        return RoundReport.from_json(json.loads(store.get(_key(model, "report", number)).data))
    except NotFound:
        return None


def create_round(store: ObjectStore, record: RoundRecord, owner: Owner) -> RoundLease:
    """Create the round's intent, once, held by ``owner`` (`layers.lease`: it heartbeats from now on).

    Raises:
        LayerConflict: another runner created this round first.
    """
    doc = RoundLease.document(record.to_json(), owner)
    try:
        etag = store.put(record.key, json.dumps(doc, sort_keys=True).encode(), if_none_match=True)
    except PreconditionFailed:
        raise LayerConflict(
            f"model {record.model}: round {record.number} was started by another runner at the same time; only one "
            "runner of a model may run. Nothing was written by this one; if the other died, run again (its round "
            "is resumed exactly once)"
        ) from None
    return RoundLease(store, record.key, doc, etag, owner)


def write_report(store: ObjectStore, report: RoundReport) -> None:
    store.put(_key(report.model, "report", report.round), json.dumps(report.to_json(), sort_keys=True).encode())


def report_exists(store: ObjectStore, model: str, number: int) -> bool:
    """Whether round ``number`` of ``model`` finished: its report is written after its subscriptions advanced."""
    return store.exists(_key(model, "report", number))


def read_report(store: ObjectStore, model: str) -> RoundReport | None:
    """The newest round report of ``model``, or None."""
    keys = [info.key for info in store.list(f"{LAYERS_PREFIX}{model}/report-")]
    for key in reversed(keys):
        try:
            return RoundReport.from_json(json.loads(store.get(key).data))
        except NotFound:
            continue
    return None


def prune(store: ObjectStore, model: str, newest: int) -> None:
    """Delete intents and reports older than the newest `KEEP_ROUNDS` rounds."""
    for kind in ("round", "report"):
        for info in store.list(f"{LAYERS_PREFIX}{model}/{kind}-"):
            if _number(info.key) <= newest - KEEP_ROUNDS:
                try:
                    store.delete(info.key)
                except NotFound:
                    pass


def forget_rounds(store: ObjectStore, model: str, table_uuid: str) -> int:
    """Delete the round records of earlier tables named ``model`` (intents not of ``table_uuid``: the table was
    dropped and created again, and its round numbers start again at 0); returns how many intents. Rounds of the
    current table, which a concurrent runner may have begun meanwhile, are kept. Reports go before intents, so an
    interrupted call leaves intents that the next call deletes."""
    current: set[int] = set()
    earlier: list[str] = []
    for info in list(store.list(f"{LAYERS_PREFIX}{model}/round-")):
        try:
            record = RoundRecord.from_json(store.get(info.key).data)
        except NotFound:
            continue
        if record.table_uuid == table_uuid:
            current.add(record.number)
        else:
            earlier.append(info.key)
    reports = [i.key for i in store.list(f"{LAYERS_PREFIX}{model}/report-") if _number(i.key) not in current]
    for key in [*reports, *earlier]:
        try:
            store.delete(key)
        except NotFound:
            pass
    return len(earlier)


def _number(key: str) -> int:
    return int(key.rsplit("-", 1)[1].split(".")[0])
