"""The warehouse_layers DAG, parsed and run by real Airflow (in subprocesses, see conftest)."""

from __future__ import annotations

from pathlib import Path

from tests.dags.conftest import LOCAL_2, MASTERS, PER_TABLE_ENV, REPO, assert_default_robustness

EXAMPLE = REPO / "examples" / "tpch"
DWD, ADS = "run__dwd__orders_enriched", "run__ads__revenue_by_nation_month"


def test_one_spark_submit_per_model_wired_from_the_dependency_graph(run_probe) -> None:
    result = run_probe("dagbag", *MASTERS, env=PER_TABLE_ENV)  # no LAKESTREAM_LAYERS_PROJECT: examples/tpch
    assert result["import_errors"] == {}, result["output"]
    dag = result["dags"]["warehouse_layers"]
    assert dag["schedule"] == "* * * * *"
    assert dag["max_active_runs"] == 1
    assert dag["catchup"] is False
    assert list(dag["tasks"]) == [DWD, ADS]  # dependency order
    assert dag["tasks"][DWD]["upstream"] == []
    assert dag["tasks"][ADS]["upstream"] == [DWD]

    application = str(REPO / "jobs" / "run_layers.py")
    for model, task in zip(["dwd.orders_enriched", "ads.revenue_by_nation_month"], dag["tasks"].values(), strict=True):
        tid = f"run__{model.replace('.', '__')}"
        assert task["operator"] == "ModelSubmitOperator" and task["spark_submit_task"]  # reports its lineage
        assert task["conn_id"] == "lakestream_spark"
        assert task["outlets"] == [f"lakestream://{model}/"]  # Airflow normalizes the URI with a trailing /
        args = ["--project", str(EXAMPLE), "--model", model]
        assert task["application"] == application
        assert task["application_args"] == args
        assert_default_robustness(task)
        for conn, master in MASTERS.items():
            command = task["spark_submit"][conn]
            assert command[:3] == ["spark-submit", "--master", master], conn
            assert command[-(len(args) + 2) :] == ["lakestream-" + tid, application, *args], conn
        assert task["spark_submit"][LOCAL_2] == [
            "spark-submit",
            "--master",
            "local[2]",
            "--conf",
            "spark.cores.max=1",
            "--name",
            f"lakestream-{tid}",
            application,
            *args,
        ]
        # Parsed (and serialized): no credentials; just before execute(): the worker's LAKESTREAM_* / AWS_*.
        assert task["env_vars"] == {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": "/opt/python/bin/python3"}
        forwarded = {k: PER_TABLE_ENV[k] for k in ("LAKESTREAM_WAREHOUSE", "AWS_SECRET_ACCESS_KEY")}
        assert task["env_vars_at_run_time"].items() >= {**task["env_vars"], **forwarded}.items()


def _diamond(folder: Path) -> Path:
    """A project in ``folder``: dwd.a and dwd.b read the source ods.f, ads.c joins both."""
    (folder / "models").mkdir(parents=True)
    (folder / "sources.yml").write_text(
        "sources:\n  ods.f:\n    columns: {f_id: int64, f_v: int64}\n    primary_key: [f_id]\n"
    )
    for name, sql in {
        "dwd.a": "SELECT f_id, f_v FROM ods.f",
        "dwd.b": "SELECT f_id, f_v FROM ods.f WHERE f_v > 0",
        "ads.c": "SELECT a.f_id, b.f_v * 2 AS f_v2 FROM dwd.a AS a JOIN dwd.b AS b ON a.f_id = b.f_id",
    }.items():
        (folder / "models" / f"{name}.sql").write_text(f"-- primary_key: [f_id]\n{sql}\n")
    return folder


def test_the_project_comes_from_the_environment(run_probe, tmp_path: Path) -> None:
    """A diamond: dwd.a and dwd.b read the source, ads.c reads both; the jobs folder moves too."""
    _diamond(tmp_path)
    jobs = tmp_path / "jobs"
    result = run_probe(
        "dagbag", LOCAL_2, env={"LAKESTREAM_LAYERS_PROJECT": str(tmp_path), "LAKESTREAM_JOBS_DIR": str(jobs)}
    )
    assert result["import_errors"] == {}, result["output"]
    tasks = result["dags"]["warehouse_layers"]["tasks"]
    assert {tid: task["upstream"] for tid, task in tasks.items()} == {
        "run__dwd__a": [],
        "run__dwd__b": [],
        "run__ads__c": ["run__dwd__a", "run__dwd__b"],
    }
    assert tasks["run__ads__c"]["application"] == str(jobs / "run_layers.py")
    assert tasks["run__ads__c"]["application_args"] == ["--project", str(tmp_path), "--model", "ads.c"]


def test_a_task_reports_its_model_s_tables_and_column_lineage_to_openlineage(run_probe, tmp_path: Path) -> None:
    """What a task of each model hands the OpenLineage provider, in the namespace of the worker's warehouse; a
    model the project does not have is an error naming the models (the provider logs it; the task runs on)."""
    project = _diamond(tmp_path / "project")
    result = run_probe(
        "lineage", str(project), "ads.c", "ODS.F", "dwd.nope", env={"LAKESTREAM_WAREHOUSE": "s3://lake/wh/"}
    )
    ns = "s3://lake/wh"  # normalized as the job normalizes it
    ads = result["ads.c"]
    assert [(d["namespace"], d["name"]) for d in ads["inputs"]] == [(ns, "dwd.a"), (ns, "dwd.b")]
    # The inputs' columns, typed (the source's types, through the models that copy them)
    assert [(f["name"], f["type"]) for f in ads["inputs"][0]["facets"]["schema"]["fields"]] == [
        ("f_id", "int64"),
        ("f_v", "int64"),
    ]
    [output] = ads["outputs"]
    assert (output["namespace"], output["name"]) == (ns, "ads.c")
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == ["f_id", "f_v2"]
    facet = output["facets"]["columnLineage"]
    assert facet["_schemaURL"].endswith("ColumnLineageDatasetFacet.json#/$defs/ColumnLineageDatasetFacet")

    def field(table: str, column: str, kind: str, subtype: str) -> dict:
        return {
            "namespace": ns,
            "name": table,
            "field": column,
            "transformations": [{"type": kind, "subtype": subtype, "masking": False}],
        }

    assert facet["fields"] == {
        "f_id": {"inputFields": [field("dwd.a", "f_id", "DIRECT", "IDENTITY")]},
        "f_v2": {"inputFields": [field("dwd.b", "f_v", "DIRECT", "TRANSFORMATION")]},
    }
    assert facet["dataset"] == [field("dwd.a", "f_id", "INDIRECT", "JOIN"), field("dwd.b", "f_id", "INDIRECT", "JOIN")]

    # A source has no task: no lineage to report; nor has a name of no table.
    assert result["ODS.F"]["error"] == "InvalidArgument"
    assert "a source" in result["ODS.F"]["message"]
    assert result["dwd.nope"]["error"] == "InvalidArgument"
    assert "the models are dwd.a, dwd.b, ads.c" in result["dwd.nope"]["message"]


def test_a_missing_project_is_an_import_error_that_says_what_to_set(run_probe, tmp_path: Path) -> None:
    result = run_probe("dagbag", env={"LAKESTREAM_LAYERS_PROJECT": str(tmp_path / "nowhere")})
    errors = result["import_errors"]
    assert list(errors) == ["warehouse_layers.py"], result["output"]
    message = " ".join(str(next(iter(errors.values()))).split())
    assert "is not a warehouse-layers project" in message and "LAKESTREAM_LAYERS_PROJECT" in message
    assert "warehouse_layers" not in result["dags"] and "lake_tiering" in result["dags"]
