"""Warehouse layers (issue 25): a project of Spark SQL models over lakestream tables, and its planner.

Pure Python (sqlglot reads the SQL); nothing here needs Spark or Airflow. Built so far: the project format and
its checks (`load_project`), and the incremental strategy of each model (`explain`). Execution, deploy, run,
status and the DAG come next (docs/layers.md).
"""

from lakehouse.layers.planner import (
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
from lakehouse.layers.project import Model, Project, Source, load_project

__all__ = [
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
