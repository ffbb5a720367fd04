"""Great Expectations, imported and run quietly.

GX 1.x logs hundreds of INFO lines when imported (``great_expectations._docs_decorators``), and more when a
context starts; next to Airflow's logging (root at INFO) they drown everything else. GX is therefore only
imported inside `quiet` (never at module level), with the ``great_expectations`` loggers at WARNING, its
``FutureWarning``s about pandas silenced, analytics off and progress bars off in every context built here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["DOCS_SITE", "ephemeral_context", "quiet"]

#: GX's own loggers: their level is raised to WARNING while GX is imported or used.
LOGGERS = ("great_expectations",)
#: The Data Docs site of contexts built here.
DOCS_SITE = "lakestream"

_lock = threading.RLock()


@contextlib.contextmanager
def quiet() -> Iterator[ModuleType]:
    """GX's module, with its loggers at WARNING (at least) and its import-time warnings silenced for the
    duration; the levels set before are restored afterwards."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    with _lock:
        saved: list[tuple[logging.Logger, int]] = []
        for name in LOGGERS:
            logger = logging.getLogger(name)
            saved.append((logger, logger.level))
            if logger.level < logging.WARNING:  # NOTSET or DEBUG/INFO: inherits Airflow's INFO otherwise
                logger.setLevel(logging.WARNING)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", UserWarning)
                import great_expectations as gx

                yield gx
        finally:
            for logger, level in saved:
                logger.setLevel(level)


def ephemeral_context(gx: ModuleType, docs_dir: str | Path) -> Any:
    """An in-memory GX context (nothing written but Data Docs, which go to ``docs_dir``), without analytics or
    progress bars. Call inside `quiet`."""
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
        data_docs_sites={
            DOCS_SITE: {
                "class_name": "SiteBuilder",
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            }
        },
    )
    return gx.get_context(mode="ephemeral", project_config=config)
