"""`Layers`: deploy a project's tables and run its models' rounds, exactly once.

A *round* of model M consumes what its inputs appended since its last round and writes the resulting changes of
M's table to M's log (tiering then moves them into the lake as for any table):

1. The round's range: per input the position of M's subscription (consumer ``layers.<M>``) to the log's end now.
   Its intent (`layers.rounds`) is created with ``If-None-Match: *`` before anything is written, so
   two runners of M cannot both run it (`LayerConflict`), and a runner killed at any point leaves an intent the
   next run resumes with the same range.
2. The new rows of the keys the range can affect are computed with Spark SQL over the inputs **as of the
   round's end** (as-of reads make a round deterministic for its range), the old rows of the same keys read from
   M's table as of its log's ends when the round began, and the difference appended: upserts and key-only
   deletes, sorted by key, in chunks within the log's append limits, under producer ``layers.<M>`` and the
   round's own sequences (`layers.writer.round_sequence`). A retried round appends the same chunks
   under the same sequences, and the log recognises the buckets that already hold them.
3. Only then each input subscription advances to the round's end (a compare-and-swap), which ends the round.

Which keys a range affects follows the model's plan (`layers.planner`):

* ``keyed``: the changed keys of the driving table, plus, for each dimension, the driving rows that join to its
  changed keys (hop by hop, as of the round's end: a row whose join column changed is itself a changed row).
  Every input is read restricted to those rows and what they join to, so a round reads its changes, not the table.
* ``retract``/``regroup``: the groups of those driving rows' joined rows, both as of the round's start (where
  they were) and as of its end (where they are); the model's SQL then recomputes exactly those groups (a
  ``LEFT SEMI JOIN`` on the group expressions; a group with no row left is deleted).
* ``recompute``, every model's first round and a rebuild: the whole SQL, diffed against the whole table bucket by
  bucket in Spark tasks, which append their buckets themselves (`layers.writer`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, GreaterThanOrEqual, In, LessThanOrEqual
from sqlglot import exp
from sqlglot.optimizer.merge_subqueries import merge_subqueries

from lakehouse.boundaries import hold, read_boundary, release
from lakehouse.changelog import distinct_rows, semi_join
from lakehouse.errors import (
    InvalidArgument,
    SubscriptionConflict,
    SubscriptionNotFound,
    TableAlreadyExists,
    TableNotFound,
)
from layers.drift import table_differences
from layers.engine import Filtered, SparkSql, referenced_columns
from layers.errors import DeployMismatch, LayerConflict, ModelChanged, ModelSchemaChanged
from layers.lease import Owner, RoundLease, take_over
from layers.planner import KEYED, RECOMPUTE, RECOMPUTE_GROUP, ModelPlan, Retraction, explain
from layers.rounds import (
    RoundRecord,
    RoundReport,
    create_round,
    forget_rounds,
    latest_round,
    prune,
    read_report,
    report_exists,
    round_boundary,
    write_report,
)
from layers.writer import append_round, check_keys, diff_rows
from object_store import StoreUnavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.lakehouse import Lakehouse
    from lakehouse.subscriptions import Subscription
    from layers.project import Project

__all__ = ["Layers", "ModelStatus", "RoundReport", "consumer_of", "producer_of"]

log = logging.getLogger(__name__)

Positions = dict[str, dict[int, int]]
APPEND_ATTEMPTS = 5
#: The longest pause of `Layers.follow` while the store does not answer.
FOLLOW_MAX_BACKOFF = 30.0
#: Key lists up to this long are pushed into reads as IN filters; longer ones as their range (see `_read_in`).
IN_LIST_LIMIT = 64
#: The column tagging the two sides (0: as of the start, 1: as of the end) of a retraction's one query.
SIDE = "__side"


def sql_digest(sql: str) -> str:
    """The digest a round records of the model's SQL (a changed SQL makes the next round a full one)."""
    return hashlib.sha256(sql.encode()).hexdigest()


def consumer_of(model: str) -> str:
    """The subscription name (in each input table) of ``model``'s rounds."""
    return f"layers.{model}"


def producer_of(model: str) -> str:
    """The producer id of ``model``'s appends to its own log."""
    return f"layers.{model}"


@dataclass(frozen=True)
class ModelStatus:
    """Where a model stands: per input its subscription's position and lag, and its last round. ``problem``:
    what keeps its next round from running, if anything is known to (its table no longer matches its SQL, an
    input's declaration no longer matches its table, a missing table)."""

    model: str
    strategy: str
    positions: Positions
    lag_records: dict[str, int]
    lag_seconds: float | None
    last_round: RoundReport | None
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "strategy": self.strategy,
            "positions": {t: {str(b): o for b, o in p.items()} for t, p in self.positions.items()},
            "lag_records": self.lag_records,
            "lag_seconds": self.lag_seconds,
            "last_round": self.last_round.to_json() if self.last_round else None,
            "problem": self.problem,
        }


class Layers:
    """A project's models over one warehouse (see the module). ``spark`` is started on first need (master
    ``spark_master``) unless given; `close` stops a session started here."""

    def __init__(
        self,
        lh: Lakehouse,
        project: Project,
        spark: SparkSession | None = None,
        *,
        spark_master: str | None = "local[2]",
    ) -> None:
        self.lh = lh
        self.project = project
        self.plans: dict[str, ModelPlan] = {p.model: p for p in explain(project)}
        self.spark_master = spark_master
        self._spark = spark
        self._own_spark = False
        self._sql: SparkSql | None = None
        #: Per model, what its last incremental round of the current `run_once` changed (see `Handover`).
        self._handed: dict[str, Handover] = {}
        #: Models (and tables) found as the project declares them (`_verify`): checked once per runner.
        self._verified: set[str] = set()
        self._verified_tables: set[str] = set()
        self.owner = Owner.new()
        #: Models whose boundary this runner saw released (or released itself) after their last round.
        self._released: dict[str, bool] = {}

    # ---- Spark -----------------------------------------------------------------------------------------

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from lakehouse.spark import spark_session

            self._spark = spark_session(master=self.spark_master, app_name="lakestream-layers")
            self._own_spark = True
        return self._spark

    @property
    def sql(self) -> SparkSql:
        if self._sql is None:
            from lakehouse.spark.source import register

            register(self.spark, self.lh)
            self._sql = SparkSql(self.spark, self.lh)
        return self._sql

    def close(self) -> None:
        if self._own_spark and self._spark is not None:
            self._spark.stop()
        self._spark = self._sql = None

    def __enter__(self) -> Layers:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ---- deploy ----------------------------------------------------------------------------------------

    def deploy(self) -> list[str]:
        """Create every table the project declares that does not exist yet (sources, then models in dependency
        order); returns the names created. Idempotent; a concurrent deploy that created a table first is fine.

        Raises:
            DeployMismatch: a table exists with other columns, types or key than the project declares.
        """
        created = []
        for name in self.project.tables:
            schema, settings = self._declared(name)
            try:
                existing = self.lh.table(name)
            except TableNotFound:
                existing = None
            if existing is None:
                try:
                    self.lh.create_table(name, schema, **settings)
                    created.append(name)
                    continue
                except TableAlreadyExists:
                    existing = self.lh.table(name)
            self._check_existing(name, existing, schema, settings)
        return created

    def _declared(self, name: str, *, schema: pa.Schema | None = None) -> tuple[pa.Schema, dict[str, Any]]:
        if name in self.project.sources:
            d = self.project.sources[name].definition
            schema = schema or d.schema
        else:
            model = self.project.models[name]
            schema = schema or model.schema or self._inferred_schema(name)
            d = model
        settings = {
            "buckets": d.buckets,
            "primary_key": list(d.primary_key) or None,
            "bucket_key": d.bucket_key,
            "partition_by": list(d.partition_by) or None,
        }
        return schema, settings

    def _inferred_schema(self, name: str) -> pa.Schema:
        """A model's output schema as Spark computes it (over empty inputs), key columns not null."""
        model = self.project.models[name]
        views = {t: self.lh.table(t).schema.empty_table() for t in model.inputs}
        result = self.sql.run(model.qualified, views).schema
        return pa.schema([pa.field(f.name, f.type, f.name not in model.primary_key) for f in result])

    def _check_existing(self, name: str, existing: Any, schema: pa.Schema, settings: Mapping[str, Any]) -> None:
        differences = table_differences(existing, schema, settings)
        if differences:
            raise self._mismatch(name, differences)

    def _mismatch(self, name: str, differences: Sequence[str]) -> DeployMismatch:
        """The error for table ``name`` differing from the project: a model's table can be built again from its
        inputs, a source's holds ingested data and is never to be dropped."""
        what = "; ".join(differences)
        if name in self.project.models:
            model = self.project.models[name]
            return ModelSchemaChanged(
                f"model {name}: its table in {self.lh.url} differs from what its SQL ({model.path}) declares: "
                f"{what}. A model's table holds only what its SQL derives from its inputs, so it can be built "
                f"again: drop it (lakestream table drop {name} --yes) and run lakestream layers deploy; its next "
                "round builds it in full from its inputs, and the models reading it follow. Or restore the SQL. "
                "Nothing was written",
                path=model.path,
                model=name,
            )
        source = self.project.sources[name]
        return DeployMismatch(
            f"source {name}: sources.yml ({source.path}) declares it otherwise than its table in {self.lh.url}: "
            f"{what}. The table and the data ingested into it are unchanged: lakestream tables keep the schema "
            f"they were created with. Make the declaration in sources.yml match the table again (lakestream table "
            f"describe {name} shows it), or declare a new table under another name for the new shape",
            path=source.path,
            model=name,
        )

    def _verify(self, name: str) -> None:
        """Before a round of ``name``: its table and its inputs' tables are as the project declares them (column
        names, and types where the project knows them without Spark; key; buckets), once per runner.

        Raises:
            ModelSchemaChanged: the model's SQL (or header) no longer matches its table.
            DeployMismatch: a source's declaration no longer matches its table.
        """
        if name in self._verified:
            return
        for table in (*self.project.models[name].inputs, name):
            if table in self._verified_tables:
                continue
            if table in self.project.sources:
                schema = self.project.sources[table].definition.schema
            else:  # a type only Spark knows is null here: it is checked as the round's rows are cast
                schema = pa.schema([pa.field(c.name, c.type or pa.null()) for c in self.project.models[table].columns])
            _, settings = self._declared(table, schema=schema)
            differences = table_differences(self.lh.table(table), schema, settings)
            if differences:
                raise self._mismatch(table, differences)
            self._verified_tables.add(table)
        self._verified.add(name)

    # ---- running ---------------------------------------------------------------------------------------

    def run_once(self, models: Sequence[str] | None = None) -> list[RoundReport]:
        """Each model (all, or ``models``), in dependency order, brought up to what its inputs hold now (so a model
        sees what the models before it wrote in this call): a round a stopped runner left unfinished is finished
        first (a report ``resumed``), then a round over what came since."""
        try:
            return [report for name in self._chosen(models) for report in self._round(name)]
        finally:
            self._handed.clear()  # held for the later models of this call only

    def rebuild(self, model: str, *, abandon: bool = False) -> RoundReport:
        """Recompute ``model`` in full over its inputs now and append the difference to its table: the same
        exactly-once path as a round. An unfinished round is finished first, or with ``abandon`` given up
        (the way out of a round that cannot finish: the rebuild's diff makes the table right whatever that round
        appended)."""
        (name,) = self._chosen([model])
        return self._round(name, rebuild=True, abandon=abandon)[-1]

    def follow(
        self,
        *,
        poll_seconds: float = 0.2,
        stop: threading.Event | None = None,
        max_rounds: int | None = None,
        on_round: Callable[[RoundReport], None] | None = None,
        models: Sequence[str] | None = None,
    ) -> None:
        """Run rounds as soon as inputs advance, until ``stop`` is set (or ``max_rounds`` rounds that did
        something have run), sleeping ``poll_seconds`` when nothing moved. A store that stops answering
        (`StoreUnavailable`) pauses the loop with a growing delay (up to `FOLLOW_MAX_BACKOFF` seconds) and
        the interrupted round is resumed; any other error ends it."""
        stop = stop or threading.Event()
        ran = 0
        failures = 0
        while not stop.is_set():
            busy = False
            try:
                reports = self.run_once(models)
            except StoreUnavailable as exc:
                failures += 1
                delay = min(FOLLOW_MAX_BACKOFF, poll_seconds * 2**failures)
                log.warning("layers: the store did not answer (%s); the round is resumed in %.1f s", exc, delay)
                stop.wait(delay)
                continue
            failures = 0
            for report in reports:
                if report.idle:
                    continue
                busy = True
                ran += 1
                if on_round is not None:
                    on_round(report)
            if max_rounds is not None and ran >= max_rounds:
                return
            if not busy:
                stop.wait(poll_seconds)

    def _chosen(self, models: Sequence[str] | None) -> list[str]:
        if models is None:
            return list(self.project.order)
        unknown = [m for m in models if m not in self.project.models]
        if unknown:
            raise InvalidArgument(
                f"no model {', '.join(unknown)} in project {self.project.path}; its models: "
                f"{', '.join(self.project.order) or 'none'}"
            )
        return [m for m in self.project.order if m in models]

    def _subscriptions(self, name: str) -> tuple[dict[str, Subscription], set[str]]:
        """The model's position in each input, and the inputs where it had none (a first round, or an input
        table created again since: its subscriptions went with the old table)."""
        subs: dict[str, Subscription] = {}
        fresh: set[str] = set()
        consumer = consumer_of(name)
        for table in self.project.models[name].inputs:
            try:
                subs[table] = self.lh.subscription(table, consumer, create=False)
                continue
            except SubscriptionNotFound:
                try:  # one of an earlier table of this name applies to nothing
                    self.lh.drop_subscription(table, consumer)
                except SubscriptionNotFound:
                    pass
            subs[table] = self.lh.subscription(table, consumer, start="latest")
            fresh.add(table)
        return subs, fresh

    def _table_created_again(self, name: str, latest: RoundRecord, table_uuid: str) -> bool:
        """Whether ``name``'s rounds up to ``latest`` were those of an earlier table of this name."""
        if latest.table_uuid:
            return latest.table_uuid != table_uuid
        try:  # a round recorded without the uuid: its table's own pin went with the table
            self.lh.subscription(name, f"{consumer_of(name)}.self", create=False)
        except SubscriptionNotFound:
            return True
        return False

    def _round(self, name: str, *, rebuild: bool = False, abandon: bool = False) -> list[RoundReport]:
        """Bring ``name`` up to its inputs now (see `run_once`): the reports of the rounds it ran."""
        started = time.monotonic()
        model = self.project.models[name]
        plan = self.plans[name]
        store = self.lh.store
        self._verify(name)
        table_uuid = self.lh.table(name).table_uuid
        input_uuids = {t: self.lh.table(t).table_uuid for t in model.inputs}
        latest = latest_round(store, name)
        created_again = latest is not None and self._table_created_again(name, latest, table_uuid)
        if created_again:  # the rounds of a dropped table of this name: this one starts afresh
            forget_rounds(store, name, table_uuid)
            latest = latest_round(store, name)
        subs, fresh = self._subscriptions(name)
        renewed = (
            []
            if latest is None
            else sorted(
                t for t in model.inputs if t in fresh or latest.input_uuids.get(t, input_uuids[t]) != input_uuids[t]
            )
        )
        if latest is not None and any(
            _after(subs[t].position, latest.end.get(t, {})) for t in model.inputs if t not in renewed
        ):
            raise LayerConflict(
                f"model {name}: another runner finished a round after round {latest.number} while this one started; "
                "only one runner of a model may run. Nothing was written by this one"
            )
        digest = sql_digest(model.sql)
        reports: list[RoundReport] = []
        finished = latest is not None and report_exists(store, name, latest.number)
        if finished and not self._released.get(name):
            boundary = read_boundary(store, self.lh.table(name))
            if boundary is not None and boundary.held:  # its runner stopped between the report and the release
                self._release_boundary(name)
            self._released[name] = True
        if latest is not None and not finished:
            if renewed or abandon:
                why = (
                    f"input {', '.join(renewed)} was created again: the round's range is gone"
                    if renewed
                    else "abandoned by a rebuild, which makes the table right whatever it appended"
                )
                reports.append(self._abandon(latest, why))
            else:
                if latest.sql and latest.sql != digest:
                    raise ModelChanged(
                        f"model {name}: its SQL ({model.path}) changed while round {latest.number} was unfinished; "
                        "that round must finish with the SQL it started with. Restore the SQL and run again (the next "
                        "round recomputes the model in full), or give the unfinished round up: lakestream layers "
                        f"rebuild --model {name} --abandon (recomputes the model in full with the new SQL)",
                        path=model.path,
                        model=name,
                    )
                lease = take_over(store, latest.key, name, latest.number, self.owner)
                self._hold_boundary(name)
                reports.append(self._run(latest, subs, started, lease, resumed=True))  # a round a runner left
                started = time.monotonic()
                subs = {t: s.refresh() for t, s in subs.items()}
        number = 0 if latest is None else latest.number + 1
        ends = {t: self.lh.log(t).end_offsets() for t in model.inputs}
        if rebuild:
            kind, start, reason = "rebuild", None, "rebuild round: the whole SQL, diffed"
        elif latest is None:
            kind, start, reason = "full", None, "first round: the whole SQL, diffed"
            if created_again:
                reason = "first round of its table, created again: the whole SQL, diffed"
        elif renewed:
            kind, start = "full", None
            reason = f"input {', '.join(renewed)} was created again since the last round: the whole SQL, diffed"
        elif latest.sql and latest.sql != digest:
            kind, start, reason = "full", None, "the model's SQL changed since its last round: the whole SQL, diffed"
        else:
            kind, start, reason = "incremental", {t: subs[t].position for t in model.inputs}, ""
            if start == ends:
                if not reports:
                    reports.append(RoundReport(name, -1, plan.strategy, "no input advanced", ends, idle=True))
                return reports
        output = self.lh.log(name).end_offsets()
        self._pin_own_table(name, output)
        record = RoundRecord(name, number, kind, start, ends, output, digest, table_uuid, input_uuids, reason)
        lease = create_round(store, record, self.owner)
        self._hold_boundary(name)
        reports.append(self._run(record, subs, started, lease))
        return reports

    def _run(
        self,
        record: RoundRecord,
        subs: Mapping[str, Subscription],
        started: float,
        lease: RoundLease,
        *,
        resumed: bool = False,
    ) -> RoundReport:
        """`_execute` a round held by ``lease``. A new round that fails before it could have appended leaves no
        intent (the next round starts afresh, with whatever was fixed); otherwise the round stays unfinished and
        the next runner resumes it at once."""
        try:
            report = self._execute(record, subs, started, lease, resumed=resumed)
        except Exception:
            if resumed or lease.appended:
                lease.release()
            else:
                lease.delete()
                self._release_boundary(record.model)  # nothing appended: the boundary is whole as it is
            raise
        except BaseException:
            lease.release()
            raise
        lease.finish()
        return report

    def _abandon(self, record: RoundRecord, why: str) -> RoundReport:
        """Give up unfinished round ``record`` (never a live runner's): its report says so, and it is no round
        boundary (`layers.rounds.round_boundary`); the full round that follows makes the table right."""
        lease = take_over(self.lh.store, record.key, record.model, record.number, self.owner)
        try:
            report = RoundReport(
                record.model,
                record.number,
                "abandoned",
                why,
                record.end,
                abandoned=True,
                finished_at=time.time(),
                output=self.lh.log(record.model).end_offsets(),
            )
            write_report(self.lh.store, report)
        finally:
            lease.finish()
        log.warning("layers: %s round %d abandoned: %s", record.model, record.number, why)
        return report

    def _hold_boundary(self, name: str) -> None:
        """Hold tiering of M's table at its newest round boundary (`layers.rounds.round_boundary`)
        before a round appends: tiering never takes half a round into the lake (`lakehouse.boundaries`)."""
        self._released[name] = False
        boundary = round_boundary(self.lh.store, name, self.lh.log(name).end_offsets)
        ends = boundary[1] if boundary is not None else self.lh.log(name).end_offsets()
        hold(self.lh.store, self.lh.table(name), ends, writer=producer_of(name))

    def _release_boundary(self, name: str) -> None:
        """The round is whole (its report is written): tiering may take M's table to its log's end."""
        release(self.lh.store, self.lh.table(name), writer=producer_of(name))
        self._released[name] = True

    def _pin_own_table(self, name: str, output: dict[int, int]) -> None:
        """Keep M's own table readable as of ``output`` (the old rows of the round about to start) until the
        next round: a subscription ``layers.<M>.self`` of M's table, which retention and expiry respect."""
        own = self.lh.subscription(name, f"{consumer_of(name)}.self", start=output)
        if own.position != output:
            try:
                own.advance(output)
            except SubscriptionConflict:
                raise LayerConflict(
                    f"model {name}: another runner is starting a round at the same time; only one runner of a model "
                    "may run. Nothing was written by this one"
                ) from None

    def _execute(
        self,
        record: RoundRecord,
        subs: Mapping[str, Subscription],
        started: float,
        lease: RoundLease,
        *,
        resumed: bool = False,
    ) -> RoundReport:
        name = record.model
        plan = self.plans[name]
        self._handed.pop(name, None)
        if resumed and record.kind == "incremental" and all(subs[t].position == record.end[t] for t in subs):
            # appended and advanced before the runner died, only the report was missing: the inputs' range may
            # be gone already (the subscriptions no longer pin it), and there is nothing left to do
            report = RoundReport(
                name,
                record.number,
                record.kind,
                "finished before a crash; reported on resume",
                record.end,
                resumed=True,
                finished_at=time.time(),
                output=self.lh.log(name).end_offsets(),
            )
            write_report(self.lh.store, report)
            self._release_boundary(name)
            return report

        def appending() -> None:  # from here on the round may have written: its intent must stay
            lease.check()
            lease.appended = True

        if record.start is None or plan.strategy == RECOMPUTE:
            strategy = record.kind if record.kind == "rebuild" else RECOMPUTE
            reason = record.reason or f"{record.kind} round: the whole SQL, diffed"
            if record.start is not None:
                reason = plan.reason
            upserts, deletes, changes, affected = self._full(record, appending)
        else:
            strategy, reason = plan.strategy, plan.reason
            rows, gone, left, changes, affected, note = self._incremental(record, plan)
            reason = f"{reason} ({note})" if note else reason
            appending()
            end = _contiguous_end(record.output, self._append(record, rows, gone))
            if end is not None:
                self._handed[name] = Handover(record.output, end, left, rows)
            upserts, deletes = rows.num_rows, gone.num_rows
        lease.check()
        for table, sub in subs.items():
            target = record.end[table]
            if sub.position == target:
                continue
            try:
                sub.advance(target)
            except SubscriptionConflict:
                if sub.refresh().position != target:
                    raise LayerConflict(
                        f"model {name}: another runner moved its position in {table} during round {record.number}; "
                        "only one runner of a model may run (its output was appended exactly once)"
                    ) from None
        report = RoundReport(
            name,
            record.number,
            strategy,
            reason,
            record.end,
            input_changes=changes,
            affected=affected,
            upserts=upserts,
            deletes=deletes,
            seconds=time.monotonic() - started,
            resumed=resumed,
            finished_at=time.time(),
            output=self.lh.log(name).end_offsets(),
        )
        write_report(self.lh.store, report)
        self._release_boundary(name)
        prune(self.lh.store, name, record.number)
        log.info(
            "layers: %s round %d (%s): %d upserts, %d deletes",
            name,
            record.number,
            strategy,
            report.upserts,
            report.deletes,
        )
        return report

    def _append(self, record: RoundRecord, upserts: pa.Table, deletes: pa.Table) -> list[tuple[int, int, int]]:
        """Append the round's rows; where they landed (bucket, first offset, last offset)."""
        out = self.lh.log(record.model)
        producer = producer_of(record.model)
        return append_round(out, upserts, "upsert", producer, record.number) + append_round(
            out, deletes, "delete", producer, record.number
        )

    # ---- a round's rows --------------------------------------------------------------------------------

    def _full(self, record: RoundRecord, appending: Callable[[], None]) -> tuple[int, int, int, int]:
        """The whole SQL as of the round's end, diffed and appended per bucket by Spark tasks
        (`layers.writer`; ``appending`` is called before the first append): (upserts, deletes, input
        changes, rows)."""
        from layers.writer import write_full

        model = self.project.models[record.model]
        with self.sql.dataframe(model.qualified, {t: record.end[t] for t in model.inputs}) as new:
            upserts, deletes, rows = write_full(
                self.lh,
                record.model,
                record.number,
                producer_of(record.model),
                record.output,
                new,
                model.primary_key,
                before_append=appending,
            )
        return upserts, deletes, 0, rows

    def _incremental(self, record: RoundRecord, plan: ModelPlan) -> tuple[pa.Table, pa.Table, pa.Table, int, int, str]:
        """(upserts, key-only deletes, the old rows they replace or delete, input changes, affected, note)."""
        assert record.start is not None
        model = self.project.models[record.model]
        driving_keys, changes = self._affected_driving_keys(plan, record.start, record.end)
        key = model.primary_key
        empty = self._output_schema(record.model).empty_table()
        if driving_keys.num_rows == 0:
            return empty, empty.select(list(key)), empty, changes, 0, ""
        select = _merged(model.qualified)
        note = ""
        old: pa.Table | None = None  # the old rows of the keys the round covers, once read
        if plan.strategy == KEYED:
            views = self._restricted(plan, driving_keys, record.end)
            new = self.sql.run(select, views)
            wanted = driving_keys.rename_columns(
                [next(o for o, d in plan.output_key if d == c) for c in driving_keys.column_names]
            ).select(list(key))
        else:
            if len(plan.mappings) == 1:
                # one input: its before-images are the rows that left, its new rows those that came
                d = plan.driving
                before, after = self._images(d, record.start[d], record.end[d], referenced_columns(select, d))
            else:
                before = self._restricted(plan, driving_keys, record.start)
                after = self._restricted(plan, driving_keys, record.end)
            retraction = plan.retraction
            if retraction is not None:
                new, wanted, old, regrouped = self._retract(record, select, retraction, before, after)
                note = (
                    f"this round: {wanted.num_rows} group(s) by retraction, {regrouped} of them recomputed from their "
                    "rows"
                )
            else:
                groups_query = _groups_query(select)
                groups = distinct_rows(
                    pa.concat_tables(
                        [self.sql.run(groups_query, before), self.sql.run(groups_query, after)],
                        promote_options="permissive",
                    )
                )
                new = self._regroup(record, select, groups)
                index = {g.output: i for i, g in enumerate(plan.group_by) if g.output}
                wanted = pa.table({k: groups[f"__g{index[k]}"] for k in key})
                note = f"this round: {groups.num_rows} group(s) recomputed from their rows"
        check_keys(record.model, new, key)  # before the semi join, which would drop null keys unseen
        new = semi_join(new, wanted, key)  # keys outside the round's (a table read under two aliases)
        if old is None:
            old = self._read_rows(record.model, record.output, wanted)
        upserts, deletes = self._diff(record.model, new, old)
        left = semi_join(old, pa.concat_tables([upserts.select(list(key)), deletes]), key) if old.num_rows else old
        return upserts, deletes, left.select(empty.schema.names).cast(empty.schema), changes, wanted.num_rows, note

    def _images(
        self, table: str, start: Mapping[int, int], end: Mapping[int, int], columns: Sequence[str] | None = None
    ) -> tuple[dict, dict]:
        """The rows of ``table`` that changes in [start, end) replaced (as of ``start``) and those that replaced
        them (as of ``end``), from its net changelog with before-images: the old rows are looked up once, pruned
        by key statistics, and the new ones come from the log. Only ``columns`` (default all; the key too).
        When ``table`` is a model whose round in this `run_once` wrote exactly [start, end), that round's old and
        new rows are those images already (`Handover`): nothing is read."""
        handed = self._handed.get(table)
        if handed is not None and handed.covers(start, end):
            key = self.project.primary_key_of(table)
            names = [n for n in self.lh.table(table).schema.names if columns is None or n in columns or n in key]
            return {table: handed.before.select(names)}, {table: handed.after.select(names)}
        changes = self.lh.changes(table, start, end, before_images=True, columns=columns)
        names = [n for n in self.lh.table(table).schema.names if n in changes.column_names]
        op = changes["_op"]
        left = pc.is_in(op, pa.array(["update_before", "delete"]))
        return {table: changes.filter(left).select(names)}, {table: changes.filter(pc.invert(left)).select(names)}

    def _regroup(self, record: RoundRecord, select: exp.Select, groups: pa.Table) -> pa.Table:
        """The model's rows of ``groups`` (``__g0``, ... in GROUP BY order), from all their rows as of the
        round's end. A one-input model whose group expressions can be inverted reads only the groups' rows, in
        the driver (`group_rows`); otherwise the input is read by Spark, with a filter of the groups' rows
        pushed into the read where one can be built (`groups_filter`)."""
        inputs = self.project.models[record.model].inputs
        views: dict[str, Any] = {t: record.end[t] for t in inputs}
        if len(inputs) == 1:
            (table,) = inputs
            rows = group_rows(self.lh, table, record.end[table], select, groups)
            if rows is not None:
                views[table] = rows
            else:
                pushed = groups_filter(select, groups)
                if pushed is not None:  # only the groups' rows cross into Spark (the semi join still decides)
                    views[table] = Filtered(record.end[table], pushed)
        views["__groups"] = groups
        return self.sql.run(_restrict_to_groups(select, "__groups"), views)

    def _retract(
        self,
        record: RoundRecord,
        select: exp.Select,
        retraction: Retraction,
        before: Mapping[str, pa.Table],
        after: Mapping[str, pa.Table],
    ) -> tuple[pa.Table, pa.Table, pa.Table, int]:
        """New rows of the groups the changed rows left or joined: the old row minus the aggregates of the
        changed rows as of the start plus those as of the end (the model's own SQL over the restricted inputs
        computes both). A group is recomputed from its rows when retraction cannot settle it: the row holding
        its max/min left, a sum reached zero from rows that may be null, no ``count(*)`` says it emptied.
        Returns (new rows, the keys they cover, those keys' old rows, groups recomputed)."""
        model = record.model
        schema = _nullable(self._output_schema(model))  # a null key is reported by `check_keys`, not by a cast
        key = list(self.project.models[model].primary_key)
        gone, came = self._aggregates(select, before, after, schema)
        keys = distinct_rows(pa.concat_tables([gone.select(key), came.select(key)]))
        old = self._read_rows(model, record.output, keys)
        group_of = retraction.group_outputs

        def by_group(table: pa.Table) -> dict[tuple, dict]:
            return {tuple(r[c] for c in group_of): r for r in table.to_pylist()}

        olds, befores, afters = by_group(old), by_group(gone), by_group(came)
        rows, regroup = [], []
        for group in {**olds, **befores, **afters}:
            row = retraction.combine(olds.get(group), befores.get(group), afters.get(group))
            if row is RECOMPUTE_GROUP:
                regroup.append(group)
            elif row is not None:
                rows.append(row)
        new = pa.Table.from_pylist(rows, schema=schema)
        if regroup:
            types = [schema.field(c).type for c in group_of]
            groups = pa.table({f"__g{i}": pa.array([g[i] for g in regroup], t) for i, t in enumerate(types)})
            recomputed = self._regroup(record, select, groups).select(schema.names).cast(schema)
            new = pa.concat_tables([new, recomputed])
        return new, keys, old, len(regroup)

    def _aggregates(
        self, select: exp.Select, before: Mapping[str, pa.Table], after: Mapping[str, pa.Table], schema: pa.Schema
    ) -> tuple[pa.Table, pa.Table]:
        """The model's SQL over the changed rows as of the start (``before``) and as of the end (``after``).
        A one-input model runs it once, over both sides tagged with a ``__side`` column added to its GROUP BY
        (one Spark job, not two)."""
        sided = _sided(select)
        if sided is None or len(before) != 1 or set(before) != set(after):
            return tuple(self.sql.run(select, v).select(schema.names).cast(schema) for v in (before, after))  # type: ignore[return-value]
        (table,) = before
        if before[table].num_rows + after[table].num_rows == 0:
            return schema.empty_table(), schema.empty_table()
        both = pa.concat_tables(
            [
                rows.append_column(SIDE, pa.array(np.full(rows.num_rows, side, np.int8)))
                for side, rows in enumerate((before[table], after[table].cast(before[table].schema)))
            ]
        )
        out = self.sql.run(sided, {table: both})
        side = out[SIDE]
        return tuple(  # type: ignore[return-value]
            out.filter(pc.equal(side, i)).select(schema.names).cast(schema) for i in (0, 1)
        )

    def _affected_driving_keys(self, plan: ModelPlan, start: Positions, end: Positions) -> tuple[pa.Table, int]:
        """The driving table's keys a change in the range can affect (see the module), and the number of
        change rows read."""
        driving_key = self.project.primary_key_of(plan.driving)
        changed: dict[str, pa.Table] = {}
        parts = []
        for mapping in plan.mappings:
            table = mapping.table
            if table not in changed:
                changed[table] = self._changed_keys(table, start[table], end[table])
            keys = changed[table]
            for hop in mapping.path:
                values = keys.select(list(hop.from_columns)).rename_columns(list(hop.to_columns))
                to_key = list(self.project.primary_key_of(hop.to_table))
                columns = [*to_key, *(c for c in hop.to_columns if c not in to_key)]
                keys = self._read_in(hop.to_table, end[hop.to_table], values, columns).select(to_key)
            parts.append(keys.select(list(driving_key)))
        schema = self.lh.table(plan.driving).schema
        key_schema = pa.schema([schema.field(k) for k in driving_key])
        keys = pa.concat_tables([p.cast(key_schema) for p in parts]) if parts else key_schema.empty_table()
        return distinct_rows(keys), sum(t.num_rows for t in changed.values())

    def _changed_keys(self, table: str, start: Mapping[int, int], end: Mapping[int, int]) -> pa.Table:
        """The keys written to ``table``'s log in [start, end): read from the log alone (whether each was an
        insert, an update or a delete does not matter here, so the lake is not consulted)."""
        key = list(self.project.primary_key_of(table))
        schema = self.lh.table(table).schema
        key_schema = pa.schema([schema.field(k) for k in key])
        log_ = self.lh.log(table)
        parts = [
            log_.read(b, start[b], end[b]).select(key).cast(key_schema) for b in sorted(end) if start.get(b, 0) < end[b]
        ]
        return distinct_rows(pa.concat_tables(parts)) if parts else key_schema.empty_table()

    def _restricted(self, plan: ModelPlan, driving_keys: pa.Table, offsets: Positions) -> dict[str, pa.Table]:
        """Each input as of ``offsets``, restricted to the driving rows of ``driving_keys`` and the rows they
        join to (a table read under several aliases gets the union of its restrictions)."""
        rows: dict[str, pa.Table] = {}  # alias -> rows
        by_table: dict[str, list[pa.Table]] = {}
        driving = next(m for m in plan.mappings if m.role == "driving")
        rows[driving.alias] = self._read_in(driving.table, offsets[driving.table], driving_keys)
        pending = [m for m in plan.mappings if m.role != "driving"]
        while pending:
            progressed = False
            for mapping in list(pending):
                # this alias's hop towards the driving table: its parent must be read already
                hop = mapping.path[0]
                if hop.to_alias not in rows:
                    continue
                values = rows[hop.to_alias].select(list(hop.to_columns)).rename_columns(list(hop.from_columns))
                rows[mapping.alias] = self._read_in(mapping.table, offsets[mapping.table], values)
                pending.remove(mapping)
                progressed = True
            if not progressed:  # cannot happen for a planned join tree
                raise AssertionError(f"unreachable aliases {[m.alias for m in pending]}")
        for mapping in plan.mappings:
            by_table.setdefault(mapping.table, []).append(rows[mapping.alias])
        return {
            t: distinct_rows(pa.concat_tables(parts)) if len(parts) > 1 else parts[0] for t, parts in by_table.items()
        }

    def _read_in(
        self, table: str, offsets: Mapping[int, int], values: pa.Table, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """The rows of ``table`` as of ``offsets`` whose columns ``values.column_names`` equal a row of
        ``values`` (the first column pushed into the read as an IN filter, the rest matched here; many values
        of the primary key: `Lakehouse.lookup`); only ``columns`` (default all) are read."""
        definition = self.lh.table(table)
        names = list(columns) if columns is not None else definition.schema.names
        empty = pa.schema([definition.schema.field(n) for n in names]).empty_table()
        if values.num_rows == 0:
            return empty
        first = values.column_names[0]
        wanted = pc.unique(
            values[first].drop_null().combine_chunks()
            if isinstance(values[first], pa.ChunkedArray)
            else values[first].drop_null()
        )
        if len(wanted) == 0:
            return empty
        if len(wanted) > IN_LIST_LIMIT and sorted(values.column_names) == sorted(definition.primary_key):
            # many keys: a point lookup (only the row groups holding one decoded, no filter or merge pass)
            return self.lh.lookup(table, values, as_of=dict(offsets), columns=names).select(names)
        keep = None
        if len(wanted) <= IN_LIST_LIMIT:
            row_filter = In(first, wanted.to_pylist())
        else:
            # pyiceberg binds and evaluates an IN list literal by literal, per data file (20,000 keys cost 15 s of
            # planning in a profile): push the range for file and row-group pruning, match exactly each batch as
            # it is read (only matching rows are held). A hash lookup per batch: a `KeySet`'s binary search
            # took 0.9 s over the 10 M orders a hop from 10,000 customers reads, `is_in` 0.2 s
            low, high = pc.min_max(wanted).values()
            row_filter = And(GreaterThanOrEqual(first, low.as_py()), LessThanOrEqual(first, high.as_py()))
            cast = functools.cache(wanted.cast)

            def keep(rows: pa.Table) -> pa.Table:
                return rows.filter(pc.is_in(rows[first], value_set=cast(rows.schema.field(first).type)))

        found = self.lh.union_read(table, columns=names, row_filter=row_filter, as_of=dict(offsets), keep=keep)
        if len(values.column_names) > 1:
            found = semi_join(found, values, values.column_names)
        return found.select(names)

    def _read_rows(self, model: str, offsets: Mapping[int, int], keys: pa.Table) -> pa.Table:
        return self._read_in(model, offsets, keys) if keys.num_rows else self._output_schema(model).empty_table()

    def _output_schema(self, model: str) -> pa.Schema:
        return self.lh.table(model).schema

    def _diff(self, model: str, new: pa.Table, old: pa.Table) -> tuple[pa.Table, pa.Table]:
        return diff_rows(model, new, old, self._output_schema(model), self.project.models[model].primary_key)

    # ---- status ----------------------------------------------------------------------------------------

    def status(self) -> list[ModelStatus]:
        """Each model's position per input, its lag (records and seconds) and its last round's report."""
        out = []
        for name in self.project.order:
            positions: Positions = {}
            lag_records: dict[str, int] = {}
            seconds: list[float] = []
            for table in self.project.models[name].inputs:
                try:
                    sub = self.lh.subscription(table, consumer_of(name), create=False)
                except (SubscriptionNotFound, TableNotFound):
                    continue
                positions[table] = sub.position
                lag = sub.lag()
                lag_records[table] = sum(b.records for b in lag.values())
                seconds.extend(b.seconds for b in lag.values() if b.records and b.seconds is not None)
            out.append(
                ModelStatus(
                    name,
                    self.plans[name].strategy,
                    positions,
                    lag_records,
                    max(seconds) if seconds else None,
                    read_report(self.lh.store, name),
                    self._problem(name),
                )
            )
        return out

    def _problem(self, name: str) -> str | None:
        try:
            self._verify(name)
        except (DeployMismatch, TableNotFound) as exc:
            return str(exc)
        return None


# ---- helpers ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Handover:
    """What a model's incremental round changed in its table: its log's [start, end) holds exactly these
    appends, ``before`` the rows they replaced or deleted (as of ``start``), ``after`` the rows they wrote. A
    later model of the same `Layers.run_once` reading that range takes its before- and after-images from here
    instead of looking them up in the table (`Layers._images`): the same rows, already in memory."""

    start: Mapping[int, int]
    end: Mapping[int, int]
    before: pa.Table
    after: pa.Table

    def covers(self, start: Mapping[int, int], end: Mapping[int, int]) -> bool:
        return _same_offsets(self.start, start) and _same_offsets(self.end, end)


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema])


def _same_offsets(a: Mapping[int, int], b: Mapping[int, int]) -> bool:
    return all(a.get(bucket, 0) == b.get(bucket, 0) for bucket in {*a, *b})


def _contiguous_end(start: Mapping[int, int], landed: Sequence[tuple[int, int, int]]) -> dict[int, int] | None:
    """The offsets after appends that landed at ``landed`` (bucket, first, last) from ``start`` on, or None when
    they leave a gap (another writer's rows between them)."""
    end = dict(start)
    for bucket, first, last in sorted(landed):
        if first != end.get(bucket, 0):
            return None
        end[bucket] = last + 1
    return end


def _merged(query: exp.Query) -> exp.Query:
    return merge_subqueries(query.copy()) if isinstance(query, exp.Select) else query


#: Regroups of at most this many groups push a filter of their rows into the input's read.
GROUPS_FILTER_LIMIT = 256
#: A regroup's months of a date column are pushed into its read as their days (an IN list) up to this many
#: months (about 1,800 days); more as the range from the first to the last.
MONTHS_AS_DAYS_LIMIT = 60


def group_terms(select: exp.Select) -> list[tuple[int, str, str]]:
    """The group expressions of a one-input GROUP BY that can be inverted to a condition on an input column:
    (group index, column, kind) with kind ``eq`` (the group expression is the column itself) or ``month``
    (``trunc(col, 'MM')``, possibly cast). A cast column is not inverted: a cast may merge values."""
    terms: list[tuple[int, str, str]] = []
    for i, g in enumerate(select.args["group"].expressions):
        if isinstance(g, exp.Column):
            terms.append((i, g.name, "eq"))
            continue
        inner = g
        while isinstance(inner, exp.Cast):
            inner = inner.this
        if (
            isinstance(inner, exp.DateTrunc | exp.TimestampTrunc)
            and isinstance(inner.this, exp.Column)
            and str(inner.args.get("unit").name if inner.args.get("unit") else "").upper() in ("MM", "MON", "MONTH")
        ):
            terms.append((i, inner.this.name, "month"))
    return terms


def groups_filter(select: exp.Select, groups: pa.Table) -> Any:
    """A pyiceberg filter keeping (at least) the input rows of ``groups`` (``__g0``, ...) of a one-input GROUP
    BY, from the group expressions it can invert (`group_terms`): a column (``col = value``) and a month of a
    date (``value <= col < next month``). None when none can be, or the groups are too many."""
    import datetime

    from pyiceberg.expressions import AlwaysTrue, EqualTo, IsNull, LessThan, Or

    if groups.num_rows == 0 or groups.num_rows > GROUPS_FILTER_LIMIT:
        return None
    terms = group_terms(select)
    if not terms:
        return None
    disjuncts = []
    for row in groups.to_pylist():
        conjunct: Any = AlwaysTrue()
        for i, column, kind in terms:
            value = row[f"__g{i}"]
            if kind == "eq":
                part: Any = IsNull(column) if value is None else EqualTo(column, value)
            elif isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
                first = value.replace(day=1)
                following = (first + datetime.timedelta(days=32)).replace(day=1)
                part = And(GreaterThanOrEqual(column, first.isoformat()), LessThan(column, following.isoformat()))
            else:
                continue
            conjunct = part if isinstance(conjunct, AlwaysTrue) else And(conjunct, part)
        if isinstance(conjunct, AlwaysTrue):
            return None
        disjuncts.append(conjunct)
    out = disjuncts[0]
    for d in disjuncts[1:]:
        out = Or(out, d)
    return out


def group_rows(
    lh: Lakehouse, table: str, offsets: Mapping[int, int], select: exp.Select, groups: pa.Table
) -> pa.Table | None:
    """The rows of ``table`` (the one input of a GROUP BY ``select``) as of ``offsets`` that belong to
    ``groups`` (``__g0``, ...) as far as the invertible group expressions tell (`group_terms`; the model's
    semi join on all of them still decides), read by the driver: a coarse filter pushed into the read (each
    ``eq`` column IN the groups' values, each month column within the groups' months: file and row-group
    pruning, cheap to evaluate), then the exact groups matched by a hash join on the inverted terms (a
    disjunction per group costs a comparison per group and row: 40 groups, 1.2 s over 10 M rows whose read
    alone takes 0.3-0.4 s). Only the columns the SQL uses are read. None (the caller reads through Spark)
    when no term can be inverted, a group's value there is null or of another type, or the groups are more
    than `GROUPS_FILTER_LIMIT`."""
    import datetime

    from pyiceberg.expressions import LessThan

    if groups.num_rows == 0 or groups.num_rows > GROUPS_FILTER_LIMIT:
        return None
    terms = group_terms(select)
    schema = lh.table(table).schema
    if not terms or any(c not in schema.names for _, c, _ in terms):
        return None
    wanted: dict[str, pa.Array] = {}
    conditions: list[Any] = []
    for i, column, kind in terms:
        values = groups[f"__g{i}"].combine_chunks()
        if values.null_count:
            return None
        column_type = schema.field(column).type
        if kind == "month":
            if not pa.types.is_date32(column_type) or not pa.types.is_date(values.type):
                return None
            months = pc.floor_temporal(values.cast(pa.date32()), unit="month")
            distinct = sorted(pc.unique(months).to_pylist())
            if len(distinct) <= MONTHS_AS_DAYS_LIMIT:
                # every day of those months: a range from the first to the last would keep most of a table
                # whose groups span its years (21 groups, 10 M rows: 7.2 M rows kept and 580 MiB, against 1.8 M)
                days = [
                    (month + datetime.timedelta(days=d)).isoformat()
                    for month in distinct
                    for d in range(31)
                    if (month + datetime.timedelta(days=d)).month == month.month
                ]
                conditions.append(In(column, days))
            else:
                following = (distinct[-1] + datetime.timedelta(days=32)).replace(day=1)
                conditions.append(GreaterThanOrEqual(column, distinct[0].isoformat()))
                conditions.append(LessThan(column, following.isoformat()))
            wanted[f"__k{i}"] = months
        else:
            try:
                values = values.cast(column_type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
            conditions.append(In(column, set(pc.unique(values).to_pylist())))
            wanted[f"__k{i}"] = values
    columns = referenced_columns(select, table)
    row_filter = conditions[0]
    for c in conditions[1:]:
        row_filter = And(row_filter, c)
    groups_keys = pa.table(wanted)

    def keep(rows: pa.Table) -> pa.Table:  # each batch as it is read: only the groups' rows are held
        keyed = rows
        for i, column, kind in terms:
            key = rows[column] if kind == "eq" else pc.floor_temporal(rows[column], unit="month")
            keyed = keyed.append_column(f"__k{i}", key)
        return semi_join(keyed, groups_keys, list(wanted)).select(rows.column_names)

    return lh.union_read(table, columns=columns, row_filter=row_filter, as_of=dict(offsets), keep=keep)


def _groups_query(select: exp.Select) -> exp.Select:
    """``SELECT DISTINCT <group expressions> AS __g0, ... FROM ... WHERE ...`` of a GROUP BY model."""
    out = select.copy()
    groups = out.args["group"].expressions
    out.set("expressions", [exp.alias_(g.copy(), f"__g{i}") for i, g in enumerate(groups)])
    for part in ("group", "having", "order", "limit"):
        out.set(part, None)
    out.set("distinct", exp.Distinct())
    return out


def _restrict_to_groups(select: exp.Select, view: str) -> exp.Select:
    """The model's query restricted to the groups in ``view`` (``__g0``, ...): a LEFT SEMI JOIN on the group
    expressions, null-safe."""
    out = select.copy()
    groups = out.args["group"].expressions
    condition = exp.and_(
        *(
            exp.NullSafeEQ(this=exp.column(f"__g{i}", table="__groups"), expression=g.copy())
            for i, g in enumerate(groups)
        )
    )
    join = exp.Join(
        this=exp.Table(this=exp.to_identifier(view), alias=exp.TableAlias(this=exp.to_identifier("__groups"))),
        side="LEFT",
        kind="SEMI",
        on=condition,
    )
    out.set("joins", [*(out.args.get("joins") or []), join])
    return out


def _sided(select: exp.Select) -> exp.Select | None:
    """``select`` (a GROUP BY over one table, no join) with a column ``__side`` of its table added to its
    output and its GROUP BY, or None for other shapes."""
    from_ = select.args.get("from_") or select.args.get("from")
    if (
        select.args.get("joins")
        or not select.args.get("group")
        or select.args.get("limit")  # a LIMIT would cut across both sides
        or from_ is None
        or not isinstance(from_.this, exp.Table)
        or any(isinstance(e, exp.Star) for e in select.expressions)
    ):
        return None
    side = exp.column(SIDE, table=from_.this.alias_or_name)
    out = select.copy()
    out.set("expressions", [*out.expressions, side.copy()])
    out.set("group", exp.Group(expressions=[*out.args["group"].expressions, side.copy()]))
    return out


def _after(position: Mapping[int, int], end: Mapping[int, int]) -> bool:
    """Whether a subscription ``position`` is past a round's ``end`` in some bucket."""
    return any(offset > end.get(bucket, 0) for bucket, offset in position.items())
