"""Runs one `Runner.run_once` of the example project and is killed with SIGKILL at a chosen point (run as a
module by tests/layers/test_runner.py): a fault-injecting wrapper around the real runner, not a mock. In a full
round, and in an incremental round on the executors (`layers.executor_rounds`), the appends run in Spark tasks, and
"between_appends" has a task kill the driver after it appended."""

from __future__ import annotations

import json
import os
import sys

from lakehouse.lakehouse import Lakehouse
from lakehouse.log.log import Log
from lakehouse.spark import spark_session
from lakehouse.subscriptions import Subscription
from layers import runner as runner_module
from layers import writer as writer_module
from layers.project import load_project
from layers.runner import Runner
from tests.layers._tpch import EXAMPLE
from tests.support.crash import die, kill


class KillingWriter(writer_module.BucketWriter):
    """Kills the driver (this process) from inside a Spark task, once the task's first bucket is appended.
    Defined in ``__main__``, so cloudpickle ships the class itself (with the driver's pid) to the workers."""

    DRIVER = os.getpid()

    def write(self, batches):
        for summary in super().write(batches):
            kill(self.DRIVER)
            yield summary


class KillingKeysWriter(writer_module.KeysWriter):
    """`KillingWriter` for an incremental round on the executors."""

    DRIVER = os.getpid()

    def write(self, batches):
        for summary in super().write(batches):
            kill(self.DRIVER)
            yield summary


def _arm_tasks(owner: object, function: str, killer: type, point: str, model: str) -> None:
    """Kill at ``point`` of a round whose appends run in Spark tasks: ``owner.function`` writes them (the driver is
    killed before it, or after it returned), ``killer`` replaces its writer class (a task kills the driver)."""
    original = getattr(owner, function)

    def write(lh, name, *args, **kw):
        if name == model and point == "before_append":
            die()
        result = original(lh, name, *args, **kw)
        if name == model and point == "before_advance":
            die()
        return result

    setattr(owner, function, write)
    if point == "between_appends":
        setattr(writer_module, killer.__mro__[1].__name__, killer)
    elif point in ("between_advances", "before_report"):
        arm(point, model)


def arm_executors(point: str, model: str) -> None:
    """Kill at ``point`` of ``model``'s incremental round on the executors (its appends run in Spark tasks)."""
    from layers import executor_rounds as executor_rounds_module

    _arm_tasks(executor_rounds_module, "write_keys", KillingKeysWriter, point, model)


def arm_full(point: str, model: str) -> None:
    """Kill at ``point`` of ``model``'s full round (its appends run in Spark tasks)."""
    _arm_tasks(writer_module, "write_full", KillingWriter, point, model)


def arm(point: str, model: str) -> None:
    """Kill at ``point`` of ``model``'s round."""
    if point == "before_append":
        original = Runner._append

        def before(self, record, upserts, deletes):
            if record.model == model:
                die()
            return original(self, record, upserts, deletes)

        Runner._append = before
    elif point == "between_appends":
        original_append = Log.append

        def append(self, data, op="insert", **kw):
            result = original_append(self, data, op, **kw)
            if str(self.name) == model and op == "upsert":
                die()
            return result

        Log.append = append
    elif point == "before_advance":
        original = Runner._append

        def after(self, record, upserts, deletes):
            original(self, record, upserts, deletes)
            if record.model == model:
                die()

        Runner._append = after
    elif point == "between_advances":
        original_advance = Subscription.advance

        def advance(self, position):
            original_advance(self, position)
            if self.consumer == runner_module.consumer_of(model):
                die()

        Subscription.advance = advance
    elif point == "before_report":
        original_report = runner_module.write_report

        def write_report(store, report):
            if report.model == model:
                die()
            return original_report(store, report)

        runner_module.write_report = write_report
    else:
        raise SystemExit(f"unknown point {point}")


if __name__ == "__main__":
    url, point, model, full = json.loads(sys.argv[1])  # full: True, False, or "executors"
    {True: arm_full, False: arm, "executors": arm_executors}[full](point, model)
    lh = Lakehouse.open(url)
    budget = 0 if full == "executors" else None
    # the JVM flags of the tests' own session (serial GC, C1 JIT): a driver living a few seconds compiles less
    spark = spark_session(master="local[1]", app_name="lakestream-crash-worker", scheduler_only=True)
    layers = Runner(lh, load_project(EXAMPLE), spark, driver_budget_rows=budget)
    layers.run_once()
    print("finished without being killed", flush=True)
