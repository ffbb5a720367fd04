"""Blue/green rebuild of the warehouse layers, triggered by hand: `spark-submit jobs/run_layers.py --green`
(build the changed models and their downstream beside the live tables until caught up), then `--cutover`
(switch every reader to them at once; refused, and retried, while they are behind). See docs/guides/layers.md,
"Blue/green rebuilds". Defined only when LAKESTREAM_LAYERS_GREEN_PROJECT names the new project folder: the
warehouse_layers DAG keeps running the live one until the cutover (then point LAKESTREAM_LAYERS_PROJECT at it).

Configuration (environment; see dags/README.md):
    LAKESTREAM_LAYERS_GREEN_PROJECT  the changed project folder to build and switch to
    AIRFLOW_CONN_LAKESTREAM_SPARK    the Spark master, e.g. 'spark://local%5B2%5D' for local[2]
    LAKESTREAM_JOBS_DIR              where run_layers.py lives (default: <repo>/jobs)
"""

from __future__ import annotations

import os

from _lakestream_common import jobs_dir, spark_submit
from airflow.sdk import dag

GREEN_PROJECT_ENV = "LAKESTREAM_LAYERS_GREEN_PROJECT"


@dag(schedule=None, catchup=False, max_active_runs=1, tags=["lakestream", "layers"], doc_md=__doc__)
def warehouse_layers_bluegreen():
    project = os.path.abspath(os.environ[GREEN_PROJECT_ENV])
    application = os.path.join(jobs_dir(), "run_layers.py")
    green = spark_submit("green", application, ["--project", project, "--green"])
    cutover = spark_submit("cutover", application, ["--project", project, "--cutover"])
    green >> cutover


if os.environ.get(GREEN_PROJECT_ENV):
    warehouse_layers_bluegreen()
