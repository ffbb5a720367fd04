"""One quality run: every check on every table, then publishing, figures, the run record and its report.

``run_checks(lh, ...)`` is what `lakestream check`, ``jobs/check.py`` and the ``lake_quality`` DAG call:

0. the metrics of each table's new commits (`quality.metrics`, recorded in the warehouse's
   ``_lakestream.metrics``; one that cannot be collected is logged, not a failed check);
1. `quality.reconcile.reconcile` of each table (lake == log at every committed offset; its buckets' reads on
   Spark's executors when a Spark session is given);
2. with a project, table by table in dependency order (the project's sources, then its models, then any other
   table): its Great Expectations suite (`quality.expectations`) on the snapshot just reconciled (on Spark's
   executors when the snapshot is above the driver's budget, `quality_driver_budget_rows`, and a Spark session
   is given; else in the driver, a sample above the budget), and, with a Spark session, a model against its SQL
   (`quality.layers`). A suite that references a table, or a model
   that reads one, whose checks so far in this run are not all ok is *not evaluated* (its outcome over a
   corrupt input proves nothing): the result says which table failed, is not ok, and is no violation. In
   dependency order every check of a model's inputs has run before the model's, so this goes on downstream;
   a suite's reference to a table checked later counts by that table's reconciliation; then the suites'
   anomaly checks (`quality.anomaly`, ``meta.anomalies``) on the tables' metrics series, each cut at the
   snapshot just reconciled;
3. unless ``publish=False``: the tag ``published`` of each table whose checks all passed on one snapshot moves
   there (`quality.published_tag`); a table with a failing check keeps its tag, and the run says why; then the
   warehouse publication (`quality.warehouse_publication`): one consistent set of checked snapshots across the layers,
   recorded as its next generation;
4. the figures of each table (`quality.stats`), the run record (`quality.runs`, in the warehouse) and its HTML
   page and index (`quality.report`), with the tables' metrics charts and the open incidents
   (`quality.report.report_data`).

A check that cannot run (a missing table, a store that does not answer) is a result with ``error`` set, not an
exception: the other tables are still checked, and the run is not ok.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.executor import SparkExecutor
from object_store.errors import LakestreamError
from object_store.usage import measure_usage
from quality.anomaly import ANOMALY
from quality.reconcile import reconcile
from quality.results import GX, LAYER, RECONCILE, CheckResult, QualityRun, upstream_failure

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _guarded(check: str, table: str, run: Callable[[], CheckResult | list[CheckResult]]) -> list[CheckResult]:
    """Run one check; an error that keeps it from running becomes a failed result naming it."""
    started = time.perf_counter()
    with measure_usage() as used:
        try:
            out = run()
        except (LakestreamError, OSError) as exc:
            log.warning("%s of %s could not run: %s", check, table, exc)
            error = f"{type(exc).__name__}: {exc}"
            out = CheckResult(check, table, seconds=time.perf_counter() - started, error=error)
    results = out if isinstance(out, list) else [out]
    if results and not results[0].usage:  # a check giving several results records its usage on the first
        results[0].usage = used.usage()
    return results


def run_checks(
    lh: Lakehouse,
    *,
    tables: Sequence[str] | None = None,
    full: bool = False,
    project: str | Path | None = None,
    spark: Any = None,
    publish: bool = True,
    report_dir: str | Path | None = None,
    sample: int = 100,
    on_result: Callable[[CheckResult], None] | None = None,
    metrics: bool = True,
) -> QualityRun:
    """Check ``tables`` (default: every table of the warehouse), record the run and write its report.

    ``project`` (a layers project folder) adds its expectation suites and, given ``spark``, its layer checks
    (``sample`` random keys plus the newest round's; all with ``full``). ``on_result`` sees each result as it
    comes (the CLI prints them). ``metrics`` first records the metrics of each table's new commits
    (`quality.metrics.collect_metrics`; nothing new costs a metadata load per table); a table whose metrics
    cannot be collected is logged, not a failed check."""
    from quality import runs

    started = _now()
    names = [str(t) for t in tables] if tables else [str(t) for t in lh.list_tables()]
    results: list[CheckResult] = []

    def add(items: list[CheckResult]) -> None:
        for r in items:
            results.append(r)
            if on_result is not None:
                on_result(r)

    if metrics:
        _collect_metrics(lh, names, spark)
    executor = SparkExecutor(spark) if spark is not None else None  # the buckets' reads on Spark's executors
    for name in names:
        add(_guarded(RECONCILE, name, functools.partial(reconcile, lh, name, full=full, executor=executor)))
    if project is not None:
        _project_checks(lh, Path(project), names, results, add, spark, full=full, sample=sample)
        add(_guarded(ANOMALY, "(suites)", lambda: _anomalies(lh, Path(project), names, results)))
    run_id = runs.new_run_id()
    if publish:
        published = _publish(lh, names, results)
        _publish_warehouse(lh, names, results, run_id)
    else:
        published = _published(lh, names)
    run = QualityRun(
        run_id=run_id,
        started=started,
        finished=_now(),
        results=results,
        tables={name: _stats(lh, name) for name in names},
        published=published,
    )
    runs.save_run(lh, run)
    _report(lh, run, report_dir)
    return run


def _anomalies(lh: Lakehouse, project: Path, names: list[str], done: list[CheckResult]) -> list[CheckResult]:
    """The project's anomaly checks (suites' ``meta.anomalies``) of ``names``, on the metrics series recorded in
    ``_lakestream.metrics``, each cut at the snapshot its table's reconciliation checked (so a result is made on
    the snapshot ``published`` would move to)."""
    from quality.anomaly import anomaly_results, anomaly_specs, points_needed
    from quality.expectations import load_suites
    from quality.metrics import load_series

    snapshots = {r.table: r.snapshot_id for r in done if r.check == RECONCILE}
    suites = load_suites(project)
    # each series is read back only as far as its specs look (not the table's whole recorded history), counted
    # from the snapshot the run checked
    needed: dict[tuple[str, str, str | None], int] = {}
    for spec in anomaly_specs(suites):
        key = (spec.table, spec.metric, spec.column)
        needed[key] = max(needed.get(key, 0), points_needed(spec))

    def series(table: str, metric: str, column: str | None) -> Any:
        return load_series(
            lh, table, metric, column, last=needed.get((table, metric, column)), until=_checked_at(lh, snapshots, table)
        )

    return anomaly_results(suites, series, now=datetime.now(UTC), tables=names, snapshots=snapshots)


def _checked_at(lh: Lakehouse, snapshots: dict[str, int | None], table: str) -> datetime | None:
    """When the snapshot the run checked of ``table`` was committed (None: not known; now is used)."""
    sid = snapshots.get(table)
    if sid is None:
        return None
    try:
        snap = lh.lake_table(table).metadata.snapshot_by_id(sid)
    except Exception:  # noqa: BLE001 - the series is then counted up to now
        return None
    return None if snap is None else datetime.fromtimestamp(snap.timestamp_ms / 1000, UTC)


def _project_checks(
    lh: Lakehouse,
    project: Path,
    names: list[str],
    done: list[CheckResult],
    add: Callable[[list[CheckResult]], None],
    spark: Any,
    *,
    full: bool,
    sample: int,
) -> None:
    """The suites and (with ``spark``) layer checks of ``names``, table by table in dependency order; ``done``
    holds the run's results so far (``add`` appends to it)."""
    from layers.project import load_project
    from quality.expectations import load_suites, run_suite
    from quality.layers import check_layers, not_evaluated

    suites = load_suites(project)
    try:
        loaded = load_project(project)  # its dependency order, and with Spark its models
    except LakestreamError:
        if spark is not None:
            raise
        loaded = None  # suites alone still run, in name order
    snapshots = {r.table: r.snapshot_id for r in done if r.check == RECONCILE}
    order = [*(loaded.tables if loaded is not None else ()), *sorted(suites)]
    for name in [t for t in dict.fromkeys(order) if t in names] + [t for t in names if t not in order]:
        suite = suites.get(name)
        if suite is not None:
            why = upstream_failure(done, [r.table for r in suite.references if r.table and r.table != name])
            if why is not None:
                add([not_evaluated(lh, f"{GX}:{suite.name}", name, why)])
            else:
                add(
                    _guarded(
                        GX,
                        name,
                        functools.partial(run_suite, lh, name, suite, snapshot_id=snapshots.get(name), spark=spark),
                    )
                )
        if spark is not None and loaded is not None and name in loaded.models:
            add(
                _guarded(
                    LAYER,
                    name,
                    functools.partial(
                        check_layers, lh, loaded, spark=spark, models=[name], prior=done, full=full, sample=sample
                    ),
                )
            )


def _collect_metrics(lh: Lakehouse, names: list[str], spark: Any) -> None:
    from quality.metrics import collect_metrics

    try:
        collect_metrics(lh, tables=names, spark=spark)
    except (LakestreamError, OSError) as exc:  # metrics describe the data; they are no check of it
        log.warning("%s (`lakestream metrics collect` goes on where this stopped)", exc)


def _publish(lh: Lakehouse, names: list[str], results: list[CheckResult]) -> dict[str, int | None]:
    """Move ``published`` of each table whose checks all passed on one snapshot; say why for the others."""
    from quality.errors import PublishRefused
    from quality.published_tag import publish, published_snapshot

    out: dict[str, int | None] = {}
    for name in names:
        mine = [r for r in results if r.table == name]
        snapshot = next((r.snapshot_id for r in mine if r.check == RECONCILE), None)
        try:
            if snapshot is None:
                out[name] = published_snapshot(lh, name)
                continue
            out[name] = publish(lh, name, snapshot, mine)
        except PublishRefused as exc:
            log.warning("%s", exc)
            out[name] = _published_or_none(lh, name)
        except (LakestreamError, OSError) as exc:
            log.warning("published of %s not moved: %s", name, exc)
            out[name] = _published_or_none(lh, name)
    return out


def publish_run(lh: Lakehouse, run: QualityRun, *, tables: Sequence[str] | None = None) -> dict[str, int | None]:
    """Publish from a recorded run (``jobs/check.py --publish``, the DAG's task after a passing check): each
    table (of ``tables``, default all of the run's) whose checks in ``run`` all passed on one snapshot gets
    ``published`` there. Returns where ``published`` points per table afterwards."""
    names = [str(t) for t in tables] if tables else list(run.tables) or sorted({r.table for r in run.results})
    moved = _publish(lh, names, run.results)
    _publish_warehouse(lh, names, run.results, run.run_id)
    return moved


def _publish_warehouse(lh: Lakehouse, names: list[str], results: list[CheckResult], run_id: str) -> Any:
    """After the tags ``published``: the warehouse publication (`quality.warehouse_publication`) of the consistent set
    these results (and earlier passes) allow. A publication that cannot be written is logged, not raised: the
    run is recorded either way, and the previous publication stands."""
    from quality.warehouse_publication import publish_warehouse

    try:
        publication = publish_warehouse(lh, results, tables=names, run_id=run_id)
    except (LakestreamError, OSError) as exc:
        log.warning("warehouse publication not written: %s", exc)
        return None
    if publication is not None:
        for table, why in publication.left_out.items():
            log.warning("%s is not in publication %d: %s", table, publication.generation, why)
    return publication


def _published(lh: Lakehouse, names: list[str]) -> dict[str, int | None]:
    return {name: _published_or_none(lh, name) for name in names}


def _published_or_none(lh: Lakehouse, name: str) -> int | None:
    from quality.published_tag import published_snapshot

    try:
        return published_snapshot(lh, name)
    except (LakestreamError, OSError):
        return None


def _stats(lh: Lakehouse, name: str) -> dict[str, Any]:
    from quality.stats import table_stats

    try:
        return table_stats(lh, name)
    except (LakestreamError, OSError) as exc:
        return {"table": name, "error": f"{type(exc).__name__}: {exc}"}


def _report(lh: Lakehouse, run: QualityRun, report_dir: str | Path | None) -> None:
    from quality.report import report_data, write_report

    try:
        # the page's metrics charts and open incidents, read here and handed to the renderer as plain data
        write_report(lh, run, out_dir=report_dir, data=report_data(lh, run))
    except (LakestreamError, OSError) as exc:  # the run is recorded; its page can be written again
        log.warning("report of run %s not written: %s (lakestream report writes it again)", run.run_id, exc)


__all__ = ["publish_run", "run_checks"]
