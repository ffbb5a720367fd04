"""Modules of quality/ that moved (issue 58) keep their old import path for a release: the same module, with a
DeprecationWarning that names the new path; ``quality.metrics``, now a package, still offers what callers imported
from the module it was."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

MOVED = {
    "quality.publish": "quality.published_tag",
    "quality.publication": "quality.warehouse_publication",
    "quality.metrics_store": "quality.metrics.table",
    "quality.commit_metrics": "quality.metrics.partials",
    "quality.sketch": "quality.metrics.sketch",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_imports_the_moved_module_with_a_warning(old: str, new: str, monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported before by another test: ask the finder again
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__.name == new
    assert any(w.category is DeprecationWarning and f"{old} moved to {new}" in str(w.message) for w in caught)


def test_the_old_paths_names_import_from_them() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from quality.commit_metrics import COLUMN_METRICS, TABLE_METRICS  # noqa: PLC0415 - the old form
        from quality.metrics_store import maintain_metrics  # noqa: PLC0415
        from quality.publication import publish_warehouse  # noqa: PLC0415
        from quality.publish import PUBLISHED  # noqa: PLC0415
    from quality.metrics.partials import COLUMN_METRICS as columns
    from quality.metrics.table import maintain_metrics as maintain
    from quality.published_tag import PUBLISHED as published
    from quality.warehouse_publication import publish_warehouse as publish

    assert (COLUMN_METRICS, maintain_metrics, publish_warehouse, PUBLISHED) == (columns, maintain, publish, published)
    assert TABLE_METRICS


def test_quality_metrics_still_offers_what_its_callers_import() -> None:
    from quality import metrics
    from quality.metrics.collect import collect_metrics, is_new_for
    from quality.metrics.table import load_commits, load_series, metrics_dataframe

    assert metrics.collect_metrics is collect_metrics and metrics.is_new_for is is_new_for
    assert (metrics.load_commits, metrics.load_series, metrics.metrics_dataframe) == (
        load_commits,
        load_series,
        metrics_dataframe,
    )
    assert issubclass(metrics.MetricsError, Exception) and metrics.MAX_COMMITS > 0


def test_quality_reconcile_still_offers_what_its_callers_import() -> None:
    from quality.reconcile import reconcile, state_key
    from quality.reconcile.run import reconcile as run_reconcile
    from quality.reconcile.state import state_key as state_key_of

    assert reconcile is run_reconcile and state_key is state_key_of
    assert state_key("ods.t") == "_lakestream/quality/reconcile/ods.t.json"
