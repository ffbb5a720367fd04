"""``lakestream layers plan``: a project deployed to a file:// warehouse, changed on disk, planned. Every model's
columns are typed without Spark, so nothing here starts it (the deployer fails the test if it would)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakehouse import Lakehouse
from lakestream.cli.layers import layers_app
from layers import load_project
from layers.deploy_plan import CARRY_ON, CREATE, REBUILD, REMOVED, SOURCE_CHANGED, UNCHANGED, plan_deploy
from layers.deploy_record import DEPLOYED_KEY, Deployment, read_deployment, write_deployment
from layers.deployer import Deployer
from layers.errors import ModelSchemaChanged
from layers.rounds import RoundRecord, sql_digest
from tests.support.projects import model

SOURCES = """
sources:
  ods.o:
    columns: {id: int64, grp: string, v: int64}
    primary_key: [id]
    buckets: 2
"""
M_SQL = "SELECT id, grp, v FROM ods.o"
MODELS = {
    "dwd.m": model(M_SQL, "[id]", "-- buckets: 2\n"),
    "ads.a": model("SELECT grp, count(*) AS n FROM dwd.m GROUP BY grp", "[grp]", "-- buckets: 2\n"),
    "dwd.s": model("SELECT * FROM dwd.m", "[id]", "-- buckets: 2\n"),
}


def write_project(root: Path, models: dict[str, str], sources: str = SOURCES) -> Path:
    (root / "models").mkdir(parents=True, exist_ok=True)
    for old in (root / "models").glob("*.sql"):
        old.unlink()
    (root / "sources.yml").write_text(sources)
    for name, text in models.items():
        (root / "models" / f"{name}.sql").write_text(text)
    return root


def deploy(lh: Lakehouse, root: Path) -> list[str]:
    return Deployer(lh, load_project(root), lambda: pytest.fail("no Spark needed")).deploy()


def plan_of(lh: Lakehouse, root: Path):
    return plan_deploy(lh, load_project(root))


@pytest.fixture
def deployed(tmp_path):
    """A deployed warehouse with 10 rows in ods.o's log, 6 of them tiered to its lake; and the project folder."""
    lh = Lakehouse.open((tmp_path / "wh").as_uri())
    root = write_project(tmp_path / "project", MODELS)
    deploy(lh, root)
    ids = list(range(6))
    lh.log("ods.o").append(pa.table({"id": ids, "grp": [f"g{i % 2}" for i in ids], "v": ids}), "upsert")
    lh.tier("ods.o")
    ids = list(range(6, 10))
    lh.log("ods.o").append(pa.table({"id": ids, "grp": [f"g{i % 2}" for i in ids], "v": ids}), "upsert")
    yield lh, root
    lh.close()


def with_model(root: Path, name: str, text: str | None) -> Path:
    models = dict(MODELS)
    if text is None:
        del models[name]
    else:
        models[name] = text
    return write_project(root, models)


def test_deploy_records_the_project_and_an_unchanged_project_plans_nothing(deployed) -> None:
    lh, root = deployed
    record = read_deployment(lh.store)
    assert record is not None and record.generation == 1
    assert list(record.tables) == ["ods.o", "dwd.m", "ads.a", "dwd.s"]
    m = record.tables["dwd.m"]
    assert (m.kind, m.sql, m.sql_digest, m.inputs) == ("model", M_SQL, sql_digest(M_SQL), ("ods.o",))
    assert m.columns == (("id", "int64"), ("grp", "string"), ("v", "int64"))
    assert (m.primary_key, m.buckets) == (("id",), 2)
    assert record.tables["ods.o"].kind == "source" and record.tables["ods.o"].sql == ""

    plan = plan_of(lh, root)
    assert plan.recorded and plan.generation == 1
    assert plan.actions() == {t: UNCHANGED for t in ("ods.o", "dwd.m", "ads.a", "dwd.s")}
    assert all(t.rows_to_read is None and t.sql_changed is False for t in plan.tables)
    etag = lh.store.head(DEPLOYED_KEY).etag
    deploy(lh, root)  # the same version again (every layers job deploys first): the record is not rewritten
    assert read_deployment(lh.store).generation == 1 and lh.store.head(DEPLOYED_KEY).etag == etag
    deploy(lh, with_model(root, "dwd.m", model(M_SQL.replace("SELECT id", "SELECT  id"), "[id]", "-- buckets: 2\n")))
    assert read_deployment(lh.store).generation == 2


def test_a_model_added_is_created_and_its_cost_is_its_inputs_rows(deployed) -> None:
    lh, root = deployed
    plan = plan_of(lh, with_model(root, "dwd.n", model("SELECT id, v FROM ods.o", "[id]")))
    assert plan["dwd.n"].action == CREATE and plan["dwd.n"].changes == ("added",)
    # 6 rows in the lake's snapshot + 4 log records not tiered yet
    assert plan["dwd.n"].rows_to_read == 10
    assert {n: a for n, a in plan.actions().items() if n != "dwd.n"} == dict.fromkeys(MODELS, UNCHANGED) | {
        "ods.o": UNCHANGED
    }


def test_a_model_removed_is_listed_and_left_alone(deployed) -> None:
    lh, root = deployed
    plan = plan_of(lh, with_model(root, "ads.a", None))
    assert plan["ads.a"].action == REMOVED and "lakestream table drop ads.a" in plan["ads.a"].why
    assert plan.actions()["dwd.m"] == UNCHANGED
    assert [t.table for t in plan.tables][-1] == "ads.a"


def test_sql_changed_rebuilds_the_model_and_everything_downstream_with_a_diff(deployed) -> None:
    lh, root = deployed
    changed = model("SELECT id, grp, v * 2 AS v FROM ods.o", "[id]", "-- buckets: 2\n")
    plan = plan_of(lh, with_model(root, "dwd.m", changed))
    m = plan["dwd.m"]
    assert (m.action, m.changes, m.sql_changed) == (REBUILD, ("sql changed",), True)
    assert "-SELECT id, grp, v FROM ods.o" in m.sql_diff and "+SELECT id, grp, v * 2 AS v FROM ods.o" in m.sql_diff
    assert m.rows_to_read == 10
    for reader in ("ads.a", "dwd.s"):
        assert plan[reader].action == REBUILD and plan[reader].upstream == ("ods.o", "dwd.m")[1:]
        assert plan[reader].changes == ("upstream rebuilt",)
        assert plan[reader].rows_to_read == 0  # dwd.m has no rows yet: no round ran
    assert plan["ods.o"].action == UNCHANGED


def test_sql_changed_only_in_form_carries_on(deployed) -> None:
    lh, root = deployed
    reformatted = model("select id,\n  grp,   v -- the value\nfrom ods.o", "[id]", "-- buckets: 2\n")
    plan = plan_of(lh, with_model(root, "dwd.m", reformatted))
    assert plan["dwd.m"].action == CARRY_ON and "only in form" in plan["dwd.m"].why
    assert plan.actions()["ads.a"] == UNCHANGED and plan.actions()["dwd.s"] == UNCHANGED


def test_a_column_added_at_the_end_carries_on_and_select_star_readers_get_it(deployed) -> None:
    lh, root = deployed
    added = model("SELECT id, grp, v, CAST(upper(grp) AS STRING) AS g FROM ods.o", "[id]", "-- buckets: 2\n")
    plan = plan_of(lh, with_model(root, "dwd.m", added))
    m = plan["dwd.m"]
    assert (m.action, m.columns_added, m.changes) == (CARRY_ON, ("g",), ("sql changed", "columns added"))
    assert m.rows_to_read == 10
    s = plan["dwd.s"]  # SELECT *: the column reaches it, its SQL is the same
    assert (s.action, s.columns_added, s.sql_changed) == (CARRY_ON, ("g",), False)
    assert plan["ads.a"].action == UNCHANGED
    assert "deploy adds it" in m.why and "backfills it" in m.why
    changed = with_model(root, "dwd.m", added)
    deploy(lh, changed)  # carried on: the columns added, no table created again, the record follows
    assert lh.table("dwd.m").schema.names[-1] == "g" and lh.table("dwd.s").schema.names[-1] == "g"
    assert plan_of(lh, changed).actions() == {t: UNCHANGED for t in ("ods.o", "dwd.m", "ads.a", "dwd.s")}


def test_a_source_that_gains_a_column_carries_its_select_star_reader_on_and_deploy_agrees(deployed) -> None:
    lh, root = deployed
    models = {**MODELS, "dwd.t": model("SELECT * FROM ods.o", "[id]", "-- buckets: 2\n")}
    deploy(lh, write_project(root, models))
    wider = write_project(root, models, SOURCES.replace("v: int64}", "v: int64, w: string}"))
    plan = plan_of(lh, wider)
    o = plan["ods.o"]  # declared before the table was altered: said, and not breaking for its readers
    assert (o.action, o.columns_added) == (SOURCE_CHANGED, ("w",))
    assert set(plan.actions().values()) == {SOURCE_CHANGED, UNCHANGED, CARRY_ON}
    assert plan["dwd.t"].action == CARRY_ON and plan["dwd.t"].columns_added == ("w",)
    lh.alter_table("ods.o", add_columns="w:string")
    assert plan_of(lh, wider).actions()["ods.o"] == UNCHANGED
    deploy(lh, wider)  # carried on: the column is added to dwd.t's table, nothing else changes
    assert lh.table("dwd.t").schema.names == ["id", "grp", "v", "w"]
    assert set(plan_of(lh, wider).actions().values()) == {UNCHANGED}


def test_a_column_added_in_the_middle_is_breaking(deployed) -> None:
    lh, root = deployed
    plan = plan_of(lh, with_model(root, "dwd.m", model("SELECT id, 1 AS one, grp, v FROM ods.o", "[id]")))
    assert plan["dwd.m"].action == REBUILD and "columns reordered" in plan["dwd.m"].changes


def test_a_column_removed_rebuilds_the_model_and_downstream_and_deploy_still_refuses(deployed) -> None:
    lh, root = deployed
    changed = with_model(root, "dwd.m", model("SELECT id, grp FROM ods.o", "[id]", "-- buckets: 2\n"))
    plan = plan_of(lh, changed)
    m = plan["dwd.m"]
    assert (m.action, m.columns_removed) == (REBUILD, ("v",)) and "column v removed" in m.why
    assert plan["dwd.s"].action == REBUILD and plan["dwd.s"].columns_removed == ("v",)
    assert plan["dwd.s"].upstream == ("dwd.m",)
    assert plan["ads.a"].action == REBUILD and plan["ads.a"].changes == ("upstream rebuilt",)
    with pytest.raises(ModelSchemaChanged):  # the plan changes nothing about deploy: refused, nothing recorded
        deploy(lh, changed)
    assert read_deployment(lh.store).tables["dwd.m"].sql == M_SQL and read_deployment(lh.store).generation == 1


@pytest.mark.parametrize(
    ("header", "change", "words"),
    [
        ("-- buckets: 2\n-- bucket_key: id\n", "key changed", "primary key changed from ['id'] to ['id', 'grp']"),
        ("-- buckets: 4\n", "buckets changed", "buckets changed from 2 to 4"),
    ],
)
def test_key_or_buckets_changed_rebuilds_the_model_and_downstream(deployed, header, change, words) -> None:
    lh, root = deployed
    key = "[id, grp]" if change == "key changed" else "[id]"
    plan = plan_of(lh, with_model(root, "dwd.m", model(M_SQL, key, header)))
    m = plan["dwd.m"]
    assert m.action == REBUILD and m.changes == (change,) and words in m.why and m.sql_changed is False
    assert plan["ads.a"].action == REBUILD and plan["dwd.s"].action == REBUILD


def test_a_source_declared_otherwise_is_said_and_its_readers_rebuilt(deployed) -> None:
    lh, root = deployed
    plan = plan_of(lh, write_project(root, MODELS, SOURCES.replace("buckets: 2", "buckets: 3")))
    assert plan["ods.o"].action == SOURCE_CHANGED and "lakestream table alter ods.o" in plan["ods.o"].why
    assert plan["ods.o"].buckets == (2, 3)
    assert {plan[m].action for m in MODELS} == {REBUILD}


def test_without_a_record_the_tables_and_the_rounds_digest_are_compared(deployed) -> None:
    lh, root = deployed
    lh.store.delete(DEPLOYED_KEY)  # a warehouse deployed by an earlier version
    plan = plan_of(lh, root)
    assert not plan.recorded and set(plan.actions().values()) == {UNCHANGED}
    assert plan["dwd.m"].sql_changed is None  # no round yet: the deployed SQL is unknown

    def round_of(name: str, sql: str) -> None:  # a round's intent, as the runner writes it (no Spark here)
        record = RoundRecord(name, 0, "full", None, {}, {}, sql=sql_digest(sql))
        lh.store.put(record.key, record.to_json())

    round_of("dwd.m", M_SQL)
    assert plan_of(lh, root)["dwd.m"].sql_changed is False
    changed = model("SELECT id, grp, v + 1 AS v FROM ods.o", "[id]", "-- buckets: 2\n")
    plan = plan_of(lh, with_model(root, "dwd.m", changed))
    m = plan["dwd.m"]
    assert (m.action, m.sql_changed, m.sql_diff) == (REBUILD, True, "") and "unknown" in m.why
    assert plan["ads.a"].action == REBUILD

    round_of("ads.a", "SELECT 1")  # a model with rounds and a table, no longer in the project
    plan = plan_of(lh, with_model(root, "ads.a", None))
    assert plan["ads.a"].action == REMOVED


def test_concurrent_record_writes_lose_none_and_leave_a_whole_record(deployed) -> None:
    lh, _ = deployed
    record = read_deployment(lh.store)
    errors: list[BaseException] = []

    def version(thread: int, i: int) -> Deployment:  # a distinct project version per write
        tables = dict(record.tables)
        tables["dwd.m"] = replace(tables["dwd.m"], sql=f"{tables['dwd.m'].sql} -- {thread}.{i}")
        return Deployment(tables=tables)

    def writer(thread: int) -> None:
        try:
            for i in range(4):
                write_deployment(lh.store, version(thread, i))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    after = read_deployment(lh.store)
    assert after.generation == 1 + 3 * 4
    assert after.tables["ods.o"] == record.tables["ods.o"] and after.tables["dwd.m"].sql.startswith(
        record.tables["dwd.m"].sql
    )


def test_cli_plan_json_lines_and_table(deployed) -> None:
    lh, root = deployed
    url = lh.url
    changed = with_model(root, "dwd.m", model("SELECT id, grp FROM ods.o", "[id]", "-- buckets: 2\n"))
    result = CliRunner().invoke(
        layers_app, ["plan", "--project", str(changed), "--warehouse", url, "--json"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    by_table = {line["table"]: line for line in lines}
    assert list(by_table) == ["ods.o", "dwd.m", "ads.a", "dwd.s"]
    assert by_table["dwd.m"]["action"] == "rebuild" and by_table["dwd.m"]["columns_removed"] == ["v"]
    assert by_table["dwd.m"]["rows_to_read"] == 10 and by_table["dwd.m"]["compared_with"] == "record"
    assert by_table["ads.a"]["upstream"] == ["dwd.m"] and by_table["ods.o"]["action"] == "unchanged"

    result = CliRunner().invoke(
        layers_app, ["plan", "--project", str(changed), "--warehouse", url], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output
    assert "rebuild" in result.output and "3 of 4 tables change" in result.output

    result = CliRunner().invoke(layers_app, ["plan", "--project", str(root / "missing"), "--warehouse", url])
    assert result.exit_code == 1 and "does not exist" in result.output


def test_an_unreadable_record_is_one_clear_error_and_the_next_deploy_replaces_it(deployed) -> None:
    lh, root = deployed
    lh.store.put(DEPLOYED_KEY, b"{not json")
    result = CliRunner().invoke(layers_app, ["plan", "--project", str(root), "--warehouse", lh.url])
    assert result.exit_code == 1 and "cannot be read" in result.output and "layers deploy" in result.output
    assert lh.store.get(DEPLOYED_KEY).data == b"{not json"  # the plan wrote nothing
    deploy(lh, root)
    assert read_deployment(lh.store).generation == 1 and plan_of(lh, root).recorded
