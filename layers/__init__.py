"""Warehouse layers (issue 25): a project of Spark SQL models over lakestream tables, and its planner.

Pure Python (sqlglot reads the SQL); nothing here needs Spark or Airflow. Built so far: the project format and
its checks (`load_project`), and the incremental strategy of each model (`explain`). Execution, deploy, run,
status and the DAG come next (docs/layers.md).

The names below are loaded on first use, so ``lakestream`` (which imports the ``layers`` sub-app) starts without
importing sqlglot.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "KEYED": "planner",
    "RECOMPUTE": "planner",
    "REGROUP": "planner",
    "RETRACT": "planner",
    "Aggregate": "planner",
    "GroupKey": "planner",
    "Hop": "planner",
    "InputMapping": "planner",
    "ModelPlan": "planner",
    "explain": "planner",
    "plan_model": "planner",
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
    "Aggregate",
    "GroupKey",
    "Hop",
    "InputMapping",
    "Model",
    "ModelPlan",
    "Project",
    "Source",
    "explain",
    "load_project",
    "plan_model",
]

if TYPE_CHECKING:
    from layers.planner import (
        KEYED,
        RECOMPUTE,
        REGROUP,
        RETRACT,
        Aggregate,
        GroupKey,
        Hop,
        InputMapping,
        ModelPlan,
        explain,
        plan_model,
    )
    from layers.project import Model, Project, Source, load_project


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
