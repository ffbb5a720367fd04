"""The lake_quality DAG, parsed by real Airflow (in subprocesses, see conftest): scheduled by any tiering or layer
task's asset; check, then publish."""

from __future__ import annotations

from pathlib import Path

from tests.dags.conftest import LOCAL_2, PER_TABLE_ENV, REPO

EXAMPLE = REPO / "examples" / "tpch"
MODELS = ["dwd.orders_enriched", "ads.revenue_by_nation_month"]


def test_scheduled_by_the_tables_assets_check_then_publish(run_probe) -> None:
    result = run_probe("dagbag", LOCAL_2, env=PER_TABLE_ENV)  # tiered: ods.orders, ods.clicks; project: example
    assert result["import_errors"] == {}, result["output"]
    dag = result["dags"]["lake_quality"]
    assert dag["schedule_kind"] == "AssetAny"
    tables = ["ods.orders", "ods.clicks", *MODELS]
    assert dag["schedule_assets"] == [f"lakestream://{t}/" for t in tables]
    assert dag["max_active_runs"] == 1 and dag["catchup"] is False
    # every asset that schedules it is produced by a task of lake_tiering or warehouse_layers
    tasks = [t for d in ("lake_tiering", "warehouse_layers") for t in result["dags"][d]["tasks"].values()]
    produced = {uri for t in tasks for uri in t["outlets"]}
    assert set(dag["schedule_assets"]) <= produced
    check, publish = dag["tasks"]["check"], dag["tasks"]["publish"]
    assert publish["upstream"] == ["check"] and check["upstream"] == []
    selection = [arg for t in tables for arg in ("--table", t)]
    application = str(REPO / "jobs" / "quality.py")
    assert check["application"] == publish["application"] == application
    assert check["application_args"] == [*selection, "--project", str(EXAMPLE)]
    assert publish["application_args"] == [*selection, "--publish"]
    assert check["spark_submit"][LOCAL_2][:3] == ["spark-submit", "--master", "local[2]"]
    assert "AWS_SECRET_ACCESS_KEY" not in check["env_vars"]  # forwarded at run time only
    assert check["env_vars_at_run_time"]["AWS_SECRET_ACCESS_KEY"] == PER_TABLE_ENV["AWS_SECRET_ACCESS_KEY"]


def test_without_lists_it_follows_every_table(run_probe, tmp_path: Path) -> None:
    """No table list and no project: scheduled by the all-tables tiering task, checking every table."""
    env = {"LAKESTREAM_LAYERS_PROJECT": str(tmp_path / "none"), "LAKESTREAM_JOBS_DIR": str(tmp_path)}
    result = run_probe("dagbag", LOCAL_2, env=env)
    dag = result["dags"]["lake_quality"]
    assert dag["schedule_assets"] == ["lakestream://all-tables/"]
    assert result["dags"]["lake_tiering"]["tasks"]["tier_all_tables"]["outlets"] == ["lakestream://all-tables/"]
    assert dag["tasks"]["check"]["application_args"] == []
    assert dag["tasks"]["publish"]["application_args"] == ["--publish"]
    assert dag["tasks"]["check"]["application"] == str(tmp_path / "quality.py")
