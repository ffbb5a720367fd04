"""The quality step of ``make demo``: reconcile the demo's tables, then the layers' warehouse with the example's
suites and layer checks; publish; write the report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from lakestream.demo.common import DemoCheckFailed
from object_store import open_store

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

__all__ = ["quality_step"]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tpch"


def quality_step(lh: Lakehouse, ns: str, state: dict, console: Console) -> str:
    """The demo's quality step: reconcile the demo's tables (full, then after nothing new, incrementally); in the
    layers' warehouse tier every table, then reconcile, run the example's suites and check each layer against
    its SQL; publish; write the report next to a file:// warehouse. Raises if anything failed."""
    from lakehouse.lakehouse import Lakehouse
    from quality.check import run_checks

    tables = [str(t) for t in lh.list_tables(ns)]
    out = None
    if lh.url.startswith("file://"):
        out = Path(lh.url[len("file://") :]) / "quality-report"
    # the demo's own session (None with --local): metrics of commits above the driver's budget are collected and
    # the reconciliations read on its executors, not refused with "give a Spark session" while it runs
    spark = state.get("spark")
    first = run_checks(lh, tables=tables, report_dir=out, spark=spark)
    again = run_checks(lh, tables=tables, report_dir=out, spark=spark)
    runs = [first, again]
    commits = sum(r.details.get("commits_checked", 0) for r in again.results)
    if spark is not None and state.get("layers_url"):
        with Lakehouse(open_store(state["layers_url"], **lh.store.connection_options())) as layers:
            for name in layers.list_tables():
                layers.tier(name)
            runs.append(run_checks(layers, project=EXAMPLE, spark=spark, report_dir=out and out / "layers"))
    failed = [
        f"{r.table} {r.check}: {r.error or r.not_evaluated or '; '.join(map(str, r.violations))}"
        for run in runs
        for r in run.results
        if not r.ok
    ]
    if failed:
        raise DemoCheckFailed("quality checks failed: " + " | ".join(failed))
    checks = sum(len(r.results) for r in runs)
    rows = sum(r.rows for run in runs for r in run.results)
    published = sum(1 for run in runs[1:] for s in run.published.values() if s is not None)
    where = f"; reports {out / 'index.html'}, {out / 'layers' / 'index.html'}" if out else ""
    return (
        f"{checks} checks passed ({rows:,} rows compared; a second run re-checked {commits} commits), "
        f"{published} tables published{where}"
    )
