"""Run the warehouse layers every minute: one `spark-submit jobs/run_layers.py --model M` per model of the project,
each after the models it reads, each producing the asset `lakestream://<namespace.table>` of its table, and
reporting its model's inputs, table and column lineage to OpenLineage when Airflow's OpenLineage provider has a
transport configured.

Configuration (environment; see dags/README.md):
    LAKESTREAM_LAYERS_PROJECT      the project folder (default: <repo>/examples/tpch)
    AIRFLOW_CONN_LAKESTREAM_SPARK  the Spark master, e.g. 'spark://local%5B2%5D' for local[2]
    LAKESTREAM_JOBS_DIR            where run_layers.py lives (default: <repo>/jobs)
    LAKESTREAM_LAYERS_SCHEDULE     cron, an Airflow preset, or none (only when triggered); default * * * * *
"""

from __future__ import annotations

import os

from _lakestream_common import asset, jobs_dir, schedule, spark_submit, task_id
from _layers_graph import layers_graph, model_order, project_folder
from _layers_lineage import ModelSubmitOperator
from airflow.sdk import dag


@dag(
    schedule=schedule("LAKESTREAM_LAYERS_SCHEDULE", "* * * * *"),
    catchup=False,
    max_active_runs=1,
    tags=["lakestream", "layers"],
    doc_md=__doc__,
)
def warehouse_layers():
    project = project_folder()
    graph = layers_graph(project)
    application = os.path.join(jobs_dir(), "run_layers.py")
    tasks = {}
    for model in model_order(graph):
        tasks[model] = spark_submit(
            task_id("run", model),
            application,
            ["--project", project, "--model", model],
            operator=ModelSubmitOperator,
            project=project,
            model=model,
            outlets=[asset(model)],
        )
        for upstream in graph[model]:
            if upstream in tasks:  # a model it reads (sources have no task: producers feed them)
                tasks[upstream] >> tasks[model]


warehouse_layers()
