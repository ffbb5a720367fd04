"""The warehouse publication: one consistent set of checked snapshots across the layers, recorded atomically.

`quality.published_tag` moves each table's tag ``published`` on its own, so ``published`` of a DWD model may hold rows
computed from ODS rows that ``published`` of the ODS table does not hold yet (or the other way round). The
publication is the set readers take together: per table a snapshot that passed its checks, its pinned metadata
file (`lakehouse.iceberg.pinned`, for engines given a bare metadata file) and, for a model, the round that snapshot
holds and the input positions that round read. It is *consistent*: every model's round read each input only up to
offsets the input's snapshot in the set holds (in snapshot terms: what the round read is an ancestor of, or
equal to, the input's published snapshot), so no published model row comes from an input row that is not
published.

**Choosing the set** (`plan_publication`), table by table in dependency order (a model after its inputs, which
the newest round record names): the candidates of a table are the snapshots its checks passed on (all of its
results in the run passed on that snapshot), its tag ``published`` (moved only to such snapshots), its entry in
the current publication and, for a model none of those fit, the passes of the recent recorded runs; still
retained, newest first. A source takes the newest. A model takes the newest whose round (`layers.rounds.
boundary_round` maps the snapshot's log offsets to the round whose output it holds) read every input only up
to the offsets of that input's chosen snapshot (and from the same table: its ``table_uuid``), walking back over
the candidates: after ODS was tiered further and its check failed, the DWD snapshot whose round read ODS past
the published ODS snapshot is skipped and the previous one, which matches, is kept. A table with no such
snapshot is left out, with the reason (``left_out``), and so is every model over it.

**Writing it** (`publish_warehouse`). One JSON record, ``_lakestream/quality/publication.json``, replaced by
compare-and-swap (``If-Match`` its ETag; ``If-None-Match: *`` for the first) with a ``generation`` one higher,
then a create-only history entry ``_lakestream/quality/publication/generation-<n>.json``. In order:

1. the set is planned; if it equals the current record's, nothing is written (tags and history are repaired);
2. each new snapshot gets a *pending* tag ``publication-pending-<generation>-<token>`` (a ref-only commit), so
   expiry and orphan removal keep it from now on, and its pinned metadata file is written;
3. the record is swapped in; a publisher that lost the swap drops its pending tags and plans again on the
   winner's record (`PublicationError` after `WRITE_ATTEMPTS` losses);
4. the history entry is created, then each table's tag ``publication`` moves to its entry (dropping the pending
   tags of this and older generations); a newer record written meanwhile stops the moves (its writer moves them).

A process killed at any point leaves a whole record, the previous one or the new one: the record is one object
replaced in one request. Until step 3 the previous record's snapshots still have their tag ``publication``, and
from step 2 on the new ones have their pending tag, so maintenance keeps both. A kill between 3 and 4 leaves
the tag ``publication`` of some tables behind the record (the next publish moves it, and writes a missing
history entry); the record is what counts, the tag is how lake readers (``ref="publication"``) reach it.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import CommitFailedException

from lakehouse.errors import SnapshotNotFound
from lakehouse.iceberg.offsets import COMMIT_USER_PROPERTY, TIERING_USER, tiering_snapshots
from lakehouse.iceberg.pinned import pin_metadata, pinned_location
from object_store import NotFound, ObjectStore, PreconditionFailed
from object_store.errors import LakestreamError
from quality.errors import PublicationError
from quality.published_tag import PUBLISHED
from quality.results import CheckResult
from quality.runs import QUALITY_PREFIX

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

log = logging.getLogger(__name__)

__all__ = [
    "PENDING_PREFIX",
    "PUBLICATION",
    "PUBLICATION_KEY",
    "Entry",
    "Publication",
    "history_key",
    "plan_publication",
    "publish_warehouse",
    "read_history",
    "read_publication",
]

#: The tag of each table's snapshot in the current publication (``lh.lake_read(name, ref="publication")``).
PUBLICATION = "publication"
#: Tags protecting the snapshots of a publication being written (step 2 of the module's order).
PENDING_PREFIX = "publication-pending-"
PUBLICATION_KEY = f"{QUALITY_PREFIX}publication.json"
HISTORY_PREFIX = f"{QUALITY_PREFIX}publication/"
#: Compare-and-swaps lost to other publishers before giving up.
WRITE_ATTEMPTS = 20
#: Tag commits lost to other writers of a table before giving up on that table's tag.
TAG_ATTEMPTS = 20
#: Recorded runs whose passes a model walks back over when none of its newer candidates fits.
RECENT_RUNS = 10
FORMAT = 1


@dataclass(frozen=True)
class Entry:
    """One table in a publication: its snapshot, the metadata file pinned to it, the table's ``table_uuid``,
    the log offsets the snapshot holds and, for a model, the round the snapshot holds (None: a source, or a
    model's snapshot before its first round) and the input offsets that round read."""

    table: str
    snapshot_id: int
    metadata_location: str
    table_uuid: str
    offsets: dict[int, int] = field(default_factory=dict)
    round: int | None = None
    inputs: dict[str, dict[int, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.snapshot_id,
            "metadata_location": self.metadata_location,
            "table_uuid": self.table_uuid,
            "offsets": {str(b): o for b, o in sorted(self.offsets.items())},
            "round": self.round,
            "inputs": {t: {str(b): o for b, o in sorted(p.items())} for t, p in sorted(self.inputs.items())},
        }

    @classmethod
    def from_json(cls, table: str, doc: Mapping[str, Any]) -> Entry:
        return cls(
            table=table,
            snapshot_id=int(doc["snapshot_id"]),
            metadata_location=doc["metadata_location"],
            table_uuid=doc.get("table_uuid", ""),
            offsets={int(b): int(o) for b, o in (doc.get("offsets") or {}).items()},
            round=doc.get("round"),
            inputs={t: {int(b): int(o) for b, o in p.items()} for t, p in (doc.get("inputs") or {}).items()},
        )


@dataclass(frozen=True)
class Publication:
    """A warehouse publication: its ``generation`` (1 for the first), when it was recorded (seconds since the
    epoch), its entries by table, the tables left out with why, and the quality run it came from."""

    generation: int
    published_at: float
    entries: dict[str, Entry]
    left_out: dict[str, str] = field(default_factory=dict)
    run_id: str | None = None

    @property
    def snapshots(self) -> dict[str, int]:
        return {t: e.snapshot_id for t, e in self.entries.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "generation": self.generation,
            "published_at": self.published_at,
            "run_id": self.run_id,
            "tables": {t: e.to_json() for t, e in self.entries.items()},
            "left_out": dict(self.left_out),
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Publication:
        doc = json.loads(data)
        return cls(
            generation=int(doc["generation"]),
            published_at=float(doc["published_at"]),
            entries={t: Entry.from_json(t, e) for t, e in doc["tables"].items()},
            left_out=dict(doc.get("left_out") or {}),
            run_id=doc.get("run_id"),
        )


def history_key(generation: int) -> str:
    return f"{HISTORY_PREFIX}generation-{generation:012d}.json"


def _parse(data: bytes, key: str) -> Publication:
    try:
        return Publication.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PublicationError(
            f"the publication record {key} cannot be read ({type(exc).__name__}: {exc}): it was not written by "
            "this version's quality.warehouse_publication. Move it aside and publish again (lakestream check --publish)"
        ) from None


def _read(store: ObjectStore) -> tuple[Publication | None, str | None]:
    try:
        obj = store.get(PUBLICATION_KEY)
    except NotFound:
        return None, None
    return _parse(obj.data, PUBLICATION_KEY), obj.etag


def read_publication(lh: Lakehouse) -> Publication | None:
    """The current warehouse publication, or None before the first.

    Raises:
        PublicationError: the record is not one this version can read.
    """
    return _read(lh.store)[0]


def read_history(lh: Lakehouse, generation: int) -> Publication | None:
    """The publication of ``generation`` as it was recorded (None: not kept)."""
    try:
        return _parse(lh.store.get(history_key(generation)).data, history_key(generation))
    except NotFound:
        return None


# ---- choosing the set ------------------------------------------------------------------------------------


def _passes(results: Iterable[CheckResult]) -> dict[str, int]:
    """Per table, the snapshot all its results passed on (tables with a result not ok, or results on several
    snapshots, have none)."""
    by_table: dict[str, list[CheckResult]] = {}
    for r in results:
        by_table.setdefault(str(r.table), []).append(r)
    out: dict[str, int] = {}
    for table, mine in by_table.items():
        snapshots = {r.snapshot_id for r in mine}
        if all(r.ok for r in mine) and len(snapshots) == 1 and None not in snapshots:
            (out[table],) = {s for s in snapshots if s is not None}
    return out


def _offsets_at(lake: Any, snapshot_id: int, buckets: int) -> dict[int, int]:
    """The log offsets the lake holds at ``snapshot_id``: its newest tiering ancestor's (itself included)."""
    metadata = lake.metadata
    by_id = {s.snapshot_id: o for s, o in tiering_snapshots(metadata, buckets, lake.io)}
    snap = metadata.snapshot_by_id(snapshot_id)
    while snap is not None:
        if snap.snapshot_id in by_id:
            return by_id[snap.snapshot_id]
        if snap.summary is not None and snap.summary[COMMIT_USER_PROPERTY] == TIERING_USER:
            break  # a tiering snapshot whose offsets do not parse: the lake's offsets are unknown
        snap = metadata.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return dict.fromkeys(range(buckets), 0)


def _order(names: Iterable[str], inputs: Mapping[str, Sequence[str]]) -> list[str]:
    """``names`` with every model after its inputs (depth first; a cycle cannot occur in a deployed project)."""
    out: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for upstream in inputs.get(name, ()):
            visit(upstream)
        out.append(name)

    for name in sorted(names):
        visit(name)
    return out


class _Runs:
    """The passes of the recent recorded runs, read once and only when a model walks back that far."""

    def __init__(self, lh: Lakehouse) -> None:
        self.lh = lh
        self._passes: list[dict[str, int]] | None = None

    def of(self, table: str) -> list[int]:
        if self._passes is None:
            from quality.runs import load_runs

            try:
                self._passes = [_passes(run.results) for run in load_runs(self.lh, limit=RECENT_RUNS)]
            except (LakestreamError, OSError) as exc:
                log.warning("recorded runs not read (%s): walking back over the run's passes only", exc)
                self._passes = []
        return [p[table] for p in self._passes if table in p]


def plan_publication(
    lh: Lakehouse,
    results: Sequence[CheckResult],
    *,
    previous: Publication | None = None,
    tables: Sequence[str] | None = None,
) -> tuple[dict[str, Entry], dict[str, str]]:
    """The consistent set (see the module): ``(entries, left_out)`` over ``tables`` (default: the tables of
    ``results``), their inputs, and the tables of ``previous``. Pins no metadata file yet: each entry's
    ``metadata_location`` is where its pinned file is (`publish_warehouse` writes it)."""
    from lakehouse.table.aliases import read_aliases
    from layers.errors import RoundUnknown
    from layers.physical import logical_inputs
    from layers.rounds import boundary_round, latest_round

    aliases = read_aliases(lh.store)  # rounds are kept by the physical table serving a model (blue/green)
    passes = _passes(results)
    names = set(tables) if tables else {str(r.table) for r in results}
    if previous is not None:
        names |= set(previous.entries)
    inputs: dict[str, list[str]] = {}
    todo = list(names)
    while todo:  # the models' inputs too: a model is published only with them
        name = todo.pop()
        try:
            record = latest_round(lh.store, aliases.physical(name))
        except (LakestreamError, OSError):
            record = None
        if record is not None:
            record = logical_inputs(aliases, record)
        inputs[name] = sorted(record.end) if record is not None else []
        for upstream in inputs[name]:
            if upstream not in names:
                names.add(upstream)
                todo.append(upstream)
    recent = _Runs(lh)
    entries: dict[str, Entry] = {}
    left_out: dict[str, str] = {}
    for name in _order(names, inputs):
        try:
            definition = lh.table(name)
            lake = lh.lake_table(name)
        except (LakestreamError, OSError) as exc:
            left_out[name] = f"cannot be loaded ({type(exc).__name__}: {exc})"
            continue
        metadata = lake.metadata
        published = metadata.refs.get(PUBLISHED)
        before = previous.entries.get(name) if previous is not None else None
        first = [passes.get(name), published.snapshot_id if published is not None else None]
        first.append(before.snapshot_id if before is not None and before.table_uuid == definition.table_uuid else None)

        def retained(ids: Iterable[int | None], metadata: Any = metadata) -> list[int]:
            snaps = {s.snapshot_id: s for i in ids if i is not None and (s := metadata.snapshot_by_id(i)) is not None}
            order = sorted(snaps.values(), key=lambda s: (s.sequence_number or 0, s.timestamp_ms), reverse=True)
            return [s.snapshot_id for s in order]

        candidates = retained(first)
        why: list[str] = []
        if not inputs[name]:  # a source: its newest checked snapshot
            if candidates:
                sid = candidates[0]
                entries[name] = Entry(
                    name,
                    sid,
                    pinned_location(lake, sid),
                    definition.table_uuid,
                    _offsets_at(lake, sid, definition.buckets),
                )
            else:
                left_out[name] = "no retained snapshot passed its checks"
            continue
        tried: set[int] = set()
        chosen: Entry | None = None
        for pool in (candidates, None):
            if pool is None:  # walk back further: the passes of the recent runs
                pool = [s for s in retained([*first, *recent.of(name)]) if s not in tried]
            for sid in pool:
                tried.add(sid)
                offsets = _offsets_at(lake, sid, definition.buckets)
                try:
                    record = boundary_round(lh.store, aliases.physical(name), offsets, lh.log(name).end_offsets)
                except RoundUnknown as exc:
                    why.append(f"snapshot {sid}: {exc}")
                    continue
                if record is not None:
                    record = logical_inputs(aliases, record)
                problem = _mismatch(sid, record, definition.table_uuid, entries, left_out)
                if problem is not None:
                    why.append(problem)
                    continue
                chosen = Entry(
                    name,
                    sid,
                    pinned_location(lake, sid),
                    definition.table_uuid,
                    offsets,
                    record.number if record is not None else None,
                    dict(record.end) if record is not None else {},
                )
                break
            if chosen is not None:
                break
        if chosen is not None:
            entries[name] = chosen
        else:
            left_out[name] = "; ".join(why) if why else "no retained snapshot passed its checks"
    return entries, left_out


def _mismatch(
    sid: int, record: Any, table_uuid: str, entries: Mapping[str, Entry], left_out: Mapping[str, str]
) -> str | None:
    """Why model snapshot ``sid``, holding round ``record``, does not fit the inputs' chosen entries."""
    if record is None:
        return None  # before the model's first round: it read nothing
    if record.table_uuid and record.table_uuid != table_uuid:
        return f"snapshot {sid}: its round {record.number} is of an earlier table of the same name"
    for upstream, read in sorted(record.end.items()):
        entry = entries.get(upstream)
        if entry is None:
            return f"input {upstream} is not published ({left_out.get(upstream, 'no entry')})"
        if record.input_uuids.get(upstream, entry.table_uuid) != entry.table_uuid:
            return f"snapshot {sid}: its round {record.number} read an earlier table {upstream}"
        ahead = {b: o for b, o in read.items() if o > entry.offsets.get(b, 0)}
        if ahead:
            return (
                f"snapshot {sid}: its round {record.number} read {upstream} up to offsets "
                f"{dict(sorted(read.items()))}, "
                f"past the offsets {dict(sorted(entry.offsets.items()))} of {upstream}'s snapshot {entry.snapshot_id} "
                f"(buckets {sorted(ahead)})"
            )
    return None


# ---- writing it -------------------------------------------------------------------------------------------


def _tag_commit(lh: Lakehouse, table: str, change: Any) -> bool:
    """Apply ``change(metadata, manage_snapshots) -> bool`` (False: nothing to commit) as one ref-only commit,
    retried on fresh metadata while other writers win the catalog's compare-and-swap. Returns whether it
    committed."""
    for attempt in range(TAG_ATTEMPTS):
        lake = lh.lake_table(table)
        manage = lake.manage_snapshots()
        if not change(lake.metadata, manage):
            return False
        try:
            manage.commit()
            return True
        except CommitFailedException:
            if attempt == TAG_ATTEMPTS - 1:
                raise
    return False


def _protect(lh: Lakehouse, entries: Mapping[str, Entry], tag: str) -> list[str]:
    """Tag each entry's snapshot ``tag`` unless its ``publication`` tag already points there (step 2); write
    its pinned metadata file. Returns the tables tagged."""
    tagged = []
    for name, entry in entries.items():

        def change(metadata: Any, manage: Any, entry: Entry = entry, name: str = name) -> bool:
            ref = metadata.refs.get(PUBLICATION)
            if ref is not None and ref.snapshot_id == entry.snapshot_id:
                return False
            if metadata.snapshot_by_id(entry.snapshot_id) is None:
                raise SnapshotNotFound(f"{name}: snapshot {entry.snapshot_id} was expired after it was planned")
            manage.create_tag(entry.snapshot_id, tag)
            return True

        if _tag_commit(lh, name, change):
            tagged.append(name)
        pin_metadata(lh.lake_table(name), entry.snapshot_id)
    return tagged


def _unprotect(lh: Lakehouse, tables: Iterable[str], tag: str) -> None:
    for name in tables:
        try:
            _tag_commit(lh, name, lambda m, manage: tag in m.refs and (manage.remove_tag(tag) or True))
        except (LakestreamError, OSError, CommitFailedException) as exc:  # the next publish drops it
            log.warning("pending tag %s of %s not removed: %s", tag, name, exc)


def _pending_generation(tag: str) -> int | None:
    if not tag.startswith(PENDING_PREFIX):
        return None
    number = tag[len(PENDING_PREFIX) :].split("-", 1)[0]
    return int(number) if number.isdigit() else None


def _sync_tags(lh: Lakehouse, record: Publication, left_before: Iterable[str] = ()) -> None:
    """Move each entry's tag ``publication`` to its snapshot and drop pending tags of this generation and older
    (step 4); drop the tag of tables left out. Stops when a newer record appears (its writer moves the tags)."""
    names = [*record.entries, *(t for t in dict.fromkeys([*record.left_out, *left_before]) if t not in record.entries)]
    for name in names:
        current, _ = _read(lh.store)
        if current is not None and current.generation > record.generation:
            return
        entry = record.entries.get(name)

        def change(metadata: Any, manage: Any, entry: Entry | None = entry) -> bool:
            changed = False
            ref = metadata.refs.get(PUBLICATION)
            if entry is not None and (ref is None or ref.snapshot_id != entry.snapshot_id):
                if metadata.snapshot_by_id(entry.snapshot_id) is None:
                    return False  # cannot happen while a tag protects it; nothing to point at
                manage.create_tag(entry.snapshot_id, PUBLICATION)
                changed = True
            elif entry is None and ref is not None:
                manage.remove_tag(PUBLICATION)
                changed = True
            for tag in metadata.refs:
                generation = _pending_generation(tag)
                if generation is not None and generation <= record.generation:
                    manage.remove_tag(tag)
                    changed = True
            return changed

        try:
            _tag_commit(lh, name, change)
        except (LakestreamError, OSError, CommitFailedException) as exc:
            log.warning("tag %s of %s not moved to the publication's snapshot: %s", PUBLICATION, name, exc)


def _write_history(store: ObjectStore, record: Publication) -> None:
    try:
        store.put(history_key(record.generation), record.to_json(), if_none_match=True)
    except PreconditionFailed:
        pass  # written already (by this publication's writer before it died, or a repair)


def _write_record(store: ObjectStore, record: Publication, etag: str | None) -> None:
    """Swap ``record`` in (step 3). Raises PreconditionFailed if another publisher wrote first."""
    if etag is None:
        store.put(PUBLICATION_KEY, record.to_json(), if_none_match=True)
    else:
        store.put(PUBLICATION_KEY, record.to_json(), if_match=etag)


def publish_warehouse(
    lh: Lakehouse,
    results: Sequence[CheckResult],
    *,
    tables: Sequence[str] | None = None,
    run_id: str | None = None,
) -> Publication | None:
    """Plan the consistent set from ``results`` (and the checks behind the tags ``published`` and the current
    publication) and record it as the next generation (see the module); returns the current publication
    afterwards (the same record when the set did not change; None if there is none and nothing to publish).

    Raises:
        PublicationError: other publishers won every compare-and-swap, or the record cannot be read; the
            current publication stays as it was.
    """
    for _ in range(WRITE_ATTEMPTS):
        current, etag = _read(lh.store)
        entries, left_out = plan_publication(lh, results, previous=current, tables=tables)
        if current is not None:
            if read_history(lh, current.generation) is None:
                _write_history(lh.store, current)  # its writer died before writing it
            same = {t: e.snapshot_id for t, e in entries.items()} == current.snapshots
            if same and set(left_out) == set(current.left_out):  # a reason's wording alone is no new generation
                _sync_tags(lh, current)
                return current
        elif not entries:
            return None
        generation = (current.generation if current is not None else 0) + 1
        pending = f"{PENDING_PREFIX}{generation}-{uuid.uuid4().hex[:12]}"
        try:
            tagged = _protect(lh, entries, pending)
        except SnapshotNotFound:
            continue  # expired since it was planned (it had no tag yet): plan again (a later publish drops the
            # pending tags made so far, as those of an older generation)
        record = Publication(generation, time.time(), entries, left_out, run_id)
        try:
            _write_record(lh.store, record, etag)
        except PreconditionFailed:
            _unprotect(lh, tagged, pending)
            continue  # another publisher recorded meanwhile: plan again on its record
        _write_history(lh.store, record)
        _sync_tags(lh, record, left_before=current.entries if current is not None else ())
        return record
    raise PublicationError(
        f"the publication {PUBLICATION_KEY} was written by other publishers {WRITE_ATTEMPTS} times while this one "
        "tried; the current publication stands. Run the publish again once the others are done"
    )
