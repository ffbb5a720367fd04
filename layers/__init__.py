"""Warehouse layers: a project of Spark SQL models over lakestream tables (ODS -> DWD -> ADS), each writing its
own table incrementally and exactly once (docs/guides/layers.md).

The project format and its checks (`load_project`) and each model's incremental strategy (`explain`) are pure
Python (sqlglot reads the SQL); the rounds (`layers.runner.Runner`) run their SQL on Spark.

The names below are loaded on first use, so ``lakestream`` (which imports the ``layers`` sub-app) starts without
importing sqlglot.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from object_store.moved import keep_old_paths

# Renamed so that a name says what is inside (issue 58); the old paths work for one more release.
keep_old_paths(
    {
        "layers.executors": "layers.executor_rounds",
        "layers.plan": "layers.deploy_plan",
        "layers.planner": "layers.strategy",
        "layers.deploy": "layers.deployer",
        "layers.deployed": "layers.deploy_record",
    }
)

_EXPORTS = {
    "KEYED": "strategy",
    "RECOMPUTE": "strategy",
    "REGROUP": "strategy",
    "RETRACT": "strategy",
    "WINDOW": "strategy",
    "Aggregate": "strategy",
    "GroupKey": "strategy",
    "Hop": "strategy",
    "InputMapping": "strategy",
    "ModelPlan": "strategy",
    "explain": "strategy",
    "Lineage": "lineage",
    "column_lineage": "lineage",
    "plan_model": "strategy",
    "Model": "project",
    "Project": "project",
    "Source": "project",
    "load_project": "project",
}
__all__ = [  # the names of _EXPORTS
    "KEYED",
    "RECOMPUTE",
    "REGROUP",
    "RETRACT",
    "WINDOW",
    "Aggregate",
    "GroupKey",
    "Hop",
    "InputMapping",
    "Lineage",
    "Model",
    "ModelPlan",
    "Project",
    "Source",
    "column_lineage",
    "explain",
    "load_project",
    "plan_model",
]

if TYPE_CHECKING:
    from layers.lineage import Lineage, column_lineage
    from layers.project import Model, Project, Source, load_project
    from layers.strategy import (
        KEYED,
        RECOMPUTE,
        REGROUP,
        RETRACT,
        WINDOW,
        Aggregate,
        GroupKey,
        Hop,
        InputMapping,
        ModelPlan,
        explain,
        plan_model,
    )


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
