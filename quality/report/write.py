"""Writing a run's page and the index of runs to the warehouse (and to a local folder)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quality.report.data import report_data
from quality.report.pages import render_index, render_run
from quality.results import QualityRun
from quality.runs import QUALITY_PREFIX, check_run_id, load_runs

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse

REPORTS_PREFIX = f"{QUALITY_PREFIX}reports/"


INDEX_KEY = f"{QUALITY_PREFIX}index.html"


def write_report(
    lh: Lakehouse,
    run: QualityRun,
    *,
    history: list[QualityRun] | None = None,
    out_dir: str | Path | None = None,
    data: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Render ``run`` and the index of runs and write them to the warehouse (``_lakestream/quality/reports/
    <run_id>.html`` and ``_lakestream/quality/index.html``, replacing earlier renderings) and, if ``out_dir`` is
    given, to ``<out_dir>/reports/<run_id>.html`` and ``<out_dir>/index.html``. ``history`` defaults to the
    kept runs (`quality.runs.load_runs`); the index lists it with ``run``. ``data`` (what the page shows beyond
    the run record: metrics charts, open incidents) defaults to `report_data` read now.

    In the local copy, Data Docs links point into the warehouse by its URL (they work when it is a local
    folder); in the warehouse copy they are relative.

    Returns ``{"report_key", "index_key", "report_path", "index_path"}`` (paths None without ``out_dir``)."""
    check_run_id(run.run_id)
    if history is None:
        history = load_runs(lh)
    if data is None:
        data = report_data(lh, run)
    runs = list({r.run_id: r for r in [*history, run]}.values())
    index_html = render_index(runs)
    report_key = f"{REPORTS_PREFIX}{run.run_id}.html"
    lh.store.put(report_key, render_run(run, history, data=data).encode())
    lh.store.put(INDEX_KEY, index_html.encode())
    written: dict[str, Any] = {
        "report_key": report_key,
        "index_key": INDEX_KEY,
        "report_path": None,
        "index_path": None,
    }
    if out_dir is not None:
        out = Path(out_dir)
        (out / "reports").mkdir(parents=True, exist_ok=True)
        base = str(lh.store.url).rstrip("/") + "/"
        report_path = out / "reports" / f"{run.run_id}.html"
        report_path.write_text(render_run(run, history, docs_base=base, data=data), encoding="utf-8")
        index_path = out / "index.html"
        index_path.write_text(index_html, encoding="utf-8")
        written.update(report_path=str(report_path), index_path=str(index_path))
    return written
