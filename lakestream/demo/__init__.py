"""`make demo`: the whole pipeline on embedded defaults (a file:// warehouse, Spark local[2], no server).

TPC-H-shaped tables (orders and customers with primary keys, a keyless event log) receive a few million
changes through Producers, including updates and deletes; Spark tiers them into Iceberg exactly once;
union read serves the fresh state before the lake catches up; then the storage guarantees everything
stands on. Every step checks its own result against state the demo tracked independently, and the demo
exits non-zero if any check fails.

The steps come from the packages they show, assembled here in order: the pipeline (`lakestream.demo.pipeline`),
the warehouse layers (`lakestream.demo.layers`), the quality checks (`lakestream.demo.quality`) and the storage
guarantees (`lakestream.demo.storage`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from rich.console import Console

from lakestream.console import OutputConsole, new_table
from lakestream.demo import pipeline
from lakestream.demo.common import DemoCheckFailed, DemoResult, Step
from lakestream.demo.layers import layers_step
from lakestream.demo.quality import quality_step
from lakestream.demo.storage import storage_step
from object_store import ObjectStore

__all__ = ["DemoCheckFailed", "DemoResult", "Step", "run_demo"]


def run_demo(
    store: ObjectStore,
    console: Console | None = None,
    *,
    big_mib: int = 16,
    changes: int = 4_000_000,
    spark_master: str | None = "local[2]",
    on_step: Callable[[Step], None] | None = None,
) -> DemoResult:
    """Run every step against ``store`` (under a fresh namespace / prefix) and print a summary; ``on_step`` is
    called with each step as it completes."""
    from lakehouse.lakehouse import Lakehouse

    console = console or OutputConsole()
    stamp = f"{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}"
    ns, run = f"demo_{stamp}", f"demo/{stamp}"
    where = f"Spark {spark_master}" if spark_master else "the local executor"
    console.print(f"[bold]lakestream demo[/] on {store.url} (namespace {ns}); tiering on {where}")
    lh = Lakehouse(store)
    expected = pipeline.Expected(keyspace=max(10, changes // 2))
    state: dict = {}
    steps = []
    half = changes // 2
    for name, fn in (
        ("create tables", lambda: pipeline.create_tables(lh, ns)),
        (f"produce {half:,} changes", lambda: pipeline.produce(lh, ns, expected, half, 0, console)),
        ("start Spark", lambda: pipeline.start_spark(state, spark_master)),
        ("tier round 1", lambda: pipeline.tier(lh, ns, state, console)),
        (f"produce {changes - half:,} more", lambda: pipeline.produce(lh, ns, expected, changes - half, 1, console)),
        ("union read (fresh)", lambda: pipeline.union(lh, ns, expected, console, lake_behind=True)),
        ("tier round 2", lambda: pipeline.tier(lh, ns, state, console)),
        ("lake == log", lambda: pipeline.union(lh, ns, expected, console, lake_behind=False)),
        ("warehouse layers", lambda: layers_step(store, stamp, state, console)),
        ("quality checks", lambda: quality_step(lh, ns, state, console)),
        ("storage guarantees", lambda: storage_step(store, run, big_mib, console)),
    ):
        t0 = time.perf_counter()
        with console.status(name):
            result = fn()
        steps.append(Step(name, result, time.perf_counter() - t0))
        console.print(f"  [green]ok[/] {name} ({steps[-1].seconds:.1f} s): {result}")
        if on_step is not None:
            on_step(steps[-1])
    orders = f"{ns}.orders"
    done = DemoResult(
        steps, ns, lh.log(orders).end_offsets(), lh.lake_offsets(orders), lh.catalog.table_location(orders)
    )
    pipeline.offsets_table(orders, done, console)
    table = new_table("step", "result", "seconds", title=f"lakestream demo: all checks passed ({done.seconds:.0f} s)")
    for s in steps:
        table.add_row(s.name, s.result, f"{s.seconds:.1f}")
    console.print(table)
    console.print(f"Read the lake with any Iceberg engine: {done.metadata_location}")
    if state.get("spark") is not None:
        state["spark"].stop()
    lh.close()
    return done
