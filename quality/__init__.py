"""Quality checks of the lake and the warehouse layers (docs/guides/quality.md).

Modules that moved keep their old import path for a release, with a DeprecationWarning (`object_store.moved`).
"""

from __future__ import annotations

from object_store.moved import keep_old_paths

keep_old_paths(
    {
        "quality.publish": "quality.published_tag",
        "quality.publication": "quality.warehouse_publication",
        "quality.metrics_store": "quality.metrics.table",
        "quality.commit_metrics": "quality.metrics.partials",
        "quality.sketch": "quality.metrics.sketch",
    }
)
