"""`Runner`: deploy a project's tables and run its models' rounds, exactly once.

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

Which keys a range affects follows the model's plan (`layers.strategy`); an incremental round's rows are computed
by `layers.incremental` in the driver while its input ranges hold at most ``driver_budget_rows`` records (the
setting ``layers_driver_budget_rows``, ``LAKESTREAM_LAYERS_DRIVER_BUDGET_ROWS``: seconds-fresh small rounds),
else in Spark's executor tasks (`layers.executor_rounds`: the driver holds plans and counts only). A ``recompute``
model's every round, every model's first round and a rebuild compute the whole SQL, diffed against the whole
table bucket by bucket in Spark tasks, which append their buckets themselves (`layers.writer`). Who may run a
round: `layers.lease`; the tables' checks before it: `layers.deployer`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from lakehouse.errors import SubscriptionConflict, SubscriptionNotFound
from lakehouse.settings import budget_rows
from lakehouse.tiering.boundaries import hold, read_boundary, release
from layers.deployer import Deployer
from layers.errors import LayerConflict, ModelChanged
from layers.executor_rounds import ExecutorRound, round_input_rows
from layers.follow import follow
from layers.incremental import Handover, RoundRows, contiguous_end
from layers.lease import Owner, RoundLease, take_over
from layers.physical import live_mapping, physical_project
from layers.rounds import (
    RoundRecord,
    RoundReport,
    consumer_of,
    create_round,
    forget_rounds,
    latest_round,
    producer_of,
    prune,
    report_exists,
    round_boundary,
    self_consumer_of,
    sql_digest,
    write_report,
)
from layers.selection import select_models
from layers.spark_sql import SparkSql
from layers.status import ModelStatus, model_statuses
from layers.strategy import RECOMPUTE, ModelPlan, explain
from layers.writer import append_round
from object_store.usage import UsageMeter, measure_usage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.lakehouse import Lakehouse
    from lakehouse.subscriptions import Subscription
    from layers.project import Project

__all__ = ["ModelStatus", "RoundReport", "Runner", "consumer_of", "producer_of", "sql_digest"]

log = logging.getLogger(__name__)

Positions = dict[str, dict[int, int]]


class Runner:
    """A project's models over one warehouse (see the module). ``spark`` is started on first need (master
    ``spark_master``) unless given; `close` stops a session started here. ``driver_budget_rows``: the input
    records up to which an incremental round runs in the driver (default: the setting
    ``layers_driver_budget_rows`` of ``lh``'s settings, else of the environment / YAML)."""

    def __init__(
        self,
        lh: Lakehouse,
        project: Project,
        spark: SparkSession | None = None,
        *,
        spark_master: str | None = "local[2]",
        driver_budget_rows: int | None = None,
        physical: Mapping[str, str] | None = None,
        record_deploy: bool = True,
    ) -> None:
        # Rounds name physical tables (`layers.physical`): this runner never resolves a name through the aliases,
        # so a cutover while a round runs cannot move the round's reads or writes to another table.
        self.lh = lh.without_aliases()
        self.driver_budget_rows = driver_budget(lh, driver_budget_rows)
        #: The project as its files name the models (``--model`` selects by these names).
        self.logical = project
        self._fixed = physical is not None
        self._record_deploy = record_deploy
        self.spark_master = spark_master
        self._spark = spark
        self._own_spark = False
        self._sql: SparkSql | None = None
        self.owner = Owner.new()
        #: Models whose boundary this runner saw released (or released itself) after their last round.
        self._released: dict[str, bool] = {}
        self._bind(dict(physical) if physical is not None else live_mapping(lh, project))

    def _bind(self, physical: Mapping[str, str]) -> None:
        """Run the models as the physical tables ``physical`` names (logical -> physical; the aliases' when not
        given): the project renamed (`layers.physical.physical_project`), its plans, deployer and round rows."""
        self.physical = {m: physical.get(m, m) for m in self.logical.models}
        project = physical_project(self.logical, self.physical)
        self.project = project
        self.plans: dict[str, ModelPlan] = {p.model: p for p in explain(project)}
        self.deployer = Deployer(
            self.lh, project, lambda: self.sql, logical=self.logical, names=self.physical, record=self._record_deploy
        )
        #: An incremental round's rows (`layers.incremental`); its ``handed`` is cleared after each `run_once`.
        self.rows = RoundRows(self.lh, project, lambda: self.sql)

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

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ---- deploy and status ---------------------------------------------------------------------------

    def deploy(self) -> list[str]:
        """Create the project's missing tables (`layers.deployer.Deployer.deploy`); the names created."""
        return self.deployer.deploy()

    def status(self) -> list[ModelStatus]:
        """Each model's position per input, its lag and its last round (`layers.status`)."""
        return model_statuses(self.lh, self.project, self.plans, self.deployer.problem)

    # ---- running ---------------------------------------------------------------------------------------

    def run_once(self, models: Sequence[str] | None = None) -> list[RoundReport]:
        """Each model (all, or ``models``), in dependency order, brought up to what its inputs hold now (so a model
        sees what the models before it wrote in this call): a round a stopped runner left unfinished is finished
        first (a report ``resumed``), then a round over what came since. Models are run as the physical tables
        the aliases name now (a cutover since the last call moves the next rounds to the new tables)."""
        if not self._fixed:
            physical = live_mapping(self.lh, self.logical, cached=True)
            if physical != self.physical:
                self._bind(physical)
        try:
            return [report for name in self._chosen(models) for report in self._round(name)]
        finally:
            self.rows.handed.clear()  # held for the later models of this call only

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
        """Run rounds as soon as inputs advance (`layers.follow.follow`)."""
        follow(
            lambda: self.run_once(models),
            poll_seconds=poll_seconds,
            stop=stop,
            max_rounds=max_rounds,
            on_round=on_round,
        )

    def _chosen(self, models: Sequence[str] | None) -> list[str]:
        """The physical names of the models chosen (``models``: logical names; default all)."""
        chosen = list(self.logical.order) if models is None else select_models(self.logical, models)
        return [self.physical[m] for m in chosen]

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
            self.lh.subscription(name, self_consumer_of(name), create=False)
        except SubscriptionNotFound:
            return True
        return False

    def _round(self, name: str, *, rebuild: bool = False, abandon: bool = False) -> list[RoundReport]:
        """Bring ``name`` up to its inputs now (see `run_once`): the reports of the rounds it ran."""
        started = time.monotonic()
        model = self.project.models[name]
        plan = self.plans[name]
        store = self.lh.store
        self.deployer.verify(name)
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
        if kind == "incremental" and plan.strategy != RECOMPUTE:
            record = replace(record, on_executors=round_input_rows(record) > self.driver_budget_rows)
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
            with measure_usage() as used:
                report = self._execute(record, subs, started, lease, resumed=resumed, used=used)
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
        before a round appends: tiering never takes half a round into the lake (`lakehouse.tiering.boundaries`)."""
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
        own = self.lh.subscription(name, self_consumer_of(name), start=output)
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
        used: UsageMeter | None = None,
    ) -> RoundReport:
        """Run the round; its report records ``used``'s requests (the round's usage scope) up to the report."""
        name = record.model
        plan = self.plans[name]
        self.rows.handed.pop(name, None)
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
            report = replace(report, usage=used.usage()) if used is not None else report
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
        elif record.on_executors:
            strategy = plan.strategy
            upserts, deletes, changes, affected, note = ExecutorRound(self.lh, self.project, self.sql).run(
                record, plan, appending
            )
            reason = f"{plan.reason} ({note})" if note else plan.reason
        else:
            strategy, reason = plan.strategy, plan.reason
            rows, gone, left, changes, affected, note = self.rows.compute(record, plan)
            reason = f"{reason} ({note})" if note else reason
            appending()
            end = contiguous_end(record.output, self._append(record, rows, gone))
            if end is not None:
                self.rows.handed[name] = Handover(record.output, end, left, rows)
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
        report = replace(report, usage=used.usage()) if used is not None else report
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


def driver_budget(lh: Lakehouse, rows: int | None = None) -> int:
    """The input records up to which an incremental round may run in the driver: ``rows`` if given, else the
    setting ``layers_driver_budget_rows`` of ``lh``'s settings (`Lakehouse.from_env`), else of the environment /
    YAML (`lakehouse.settings.load_settings`).

    Raises:
        ConfigError: the setting is not a whole number >= 0 (the message names it).
        InvalidArgument: ``rows`` is not a whole number >= 0.
    """
    return budget_rows(lh.settings, "layers_driver_budget_rows", rows)


def _after(position: Mapping[int, int], end: Mapping[int, int]) -> bool:
    """Whether a subscription ``position`` is past a round's ``end`` in some bucket."""
    return any(offset > end.get(bucket, 0) for bucket, offset in position.items())
