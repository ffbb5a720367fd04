"""A model's life as its user changes it: SQL that changes its columns, a model table dropped and created again,
a source declared with other columns, null keys, a crash followed by ``--once``, two runners at once. Each case
ends in right tables or in one clear error that writes nothing and blocks no fix."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from lakehouse.lakehouse import Lakehouse
from layers.errors import DeployMismatch, LayerConflict, ModelChanged, ModelKeyError, ModelSchemaChanged
from layers.project import load_project
from layers.rounds import latest_round, read_report, report_exists
from layers.runner import Runner
from tests.support.crash import start_worker

pytestmark = pytest.mark.usefixtures("spark")

SOURCES = """
sources:
  ods.o:
    columns: {id: int64, grp: string, v: int64}
    primary_key: [id]
    buckets: 2
"""
M_SQL = "-- primary_key: [id]\n-- buckets: 2\nSELECT id, grp, v FROM ods.o\n"
A_SQL = "-- primary_key: [grp]\n-- buckets: 2\nSELECT grp, count(*) AS n, sum(v) AS total FROM dwd.m GROUP BY grp\n"


def make_project(root: Path, models: dict[str, str], sources: str = SOURCES) -> Path:
    (root / "models").mkdir(parents=True, exist_ok=True)
    for old in (root / "models").glob("*.sql"):
        old.unlink()
    (root / "sources.yml").write_text(sources)
    for name, sql in models.items():
        (root / "models" / f"{name}.sql").write_text(sql)
    return root


def rows(n: int, start: int = 0, grp=None) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "grp": [grp if grp is not None else f"g{i % 3}" for i in ids],
            "v": pa.array(ids, pa.int64()),
        }
    )


def table_rows(lh: Lakehouse, name: str) -> list[dict]:
    t = lh.union_read(name)
    t = t.select([c for c in t.column_names if not c.startswith("__")])
    key = lh.table(name).primary_key
    return t.sort_by([(k, "ascending") for k in key]).to_pylist()


def expected_a(lh: Lakehouse) -> list[dict]:
    groups: dict[str, dict] = {}
    for r in table_rows(lh, "ods.o"):
        g = groups.setdefault(r["grp"], {"grp": r["grp"], "n": 0, "total": 0})
        g["n"] += 1
        g["total"] += r["v"]
    return [groups[g] for g in sorted(groups)]


@pytest.fixture
def setup(tmp_path, spark):
    root = make_project(tmp_path / "project", {"dwd.m": M_SQL, "ads.a": A_SQL})
    lh = Lakehouse.open(f"file://{tmp_path / 'wh'}")
    layers = Runner(lh, load_project(root), spark)
    layers.deploy()
    lh.log("ods.o").append(rows(10), "upsert")
    layers.run_once()
    return lh, root


def test_sql_that_gains_a_column_at_the_end_is_carried_on_by_deploy_and_backfilled(setup, spark):
    """A model's SQL edited to select one more column: its rounds stop (naming the column, advising deploy) until
    a deploy adds the column; the next round, a full one (the SQL changed), fills it for every row in place."""
    lh, root = setup
    (root / "models" / "dwd.m.sql").write_text(M_SQL.replace("v FROM", "v, upper(grp) AS grp_uc FROM"))
    lh.log("ods.o").append(rows(1, 10), "upsert")
    before = lh.log("dwd.m").end_offsets()
    uuid = lh.table("dwd.m").table_uuid
    layers = Runner(lh, load_project(root), spark)
    with pytest.raises(ModelSchemaChanged, match=r"dwd\.m.*grp_uc") as caught:
        layers.run_once()
    assert "lakestream layers deploy" in str(caught.value) and "table drop" not in str(caught.value)
    assert lh.log("dwd.m").end_offsets() == before
    problems = {s.model: s.problem for s in layers.status()}  # status says it, for the model whose SQL changed
    assert "grp_uc" in problems["dwd.m"] and problems["ads.a"] is None
    layers = Runner(lh, load_project(root), spark)
    assert layers.deploy() == []  # nothing created: the column added to the table
    assert lh.table("dwd.m").schema.names == ["id", "grp", "v", "grp_uc"] and lh.table("dwd.m").table_uuid == uuid
    reports = {r.model: r for r in layers.run_once()}
    assert "SQL changed" in reports["dwd.m"].reason
    got = table_rows(lh, "dwd.m")
    assert [r["id"] for r in got] == list(range(11))
    assert all(r["grp_uc"] == r["grp"].upper() for r in got)  # the rows from before the change too
    assert table_rows(lh, "ads.a") == expected_a(lh)


def test_sql_that_changes_its_columns_otherwise_is_refused_naming_it_and_writes_nothing(setup, spark):
    """A column inserted before the table's last ones (so are removed, retyped, reordered ones): not a carry-on."""
    lh, root = setup
    (root / "models" / "dwd.m.sql").write_text(M_SQL.replace("grp, v FROM", "upper(grp) AS grp_uc, grp, v FROM"))
    lh.log("ods.o").append(rows(1, 10), "upsert")
    before = lh.log("dwd.m").end_offsets()
    layers = Runner(lh, load_project(root), spark)
    with pytest.raises(ModelSchemaChanged, match=r"dwd\.m.*grp_uc") as caught:
        layers.run_once()
    assert "lakestream table drop dwd.m" in str(caught.value)
    assert lh.log("dwd.m").end_offsets() == before
    with pytest.raises(DeployMismatch, match="grp_uc"):  # deploy says the same
        layers.deploy()
    problems = {s.model: s.problem for s in layers.status()}
    assert "grp_uc" in problems["dwd.m"] and problems["ads.a"] is None


def test_a_model_table_created_again_is_built_in_full_and_its_downstream_follows(setup, spark):
    lh, root = setup
    (root / "models" / "dwd.m.sql").write_text(M_SQL.replace("v FROM", "v, upper(grp) AS grp_uc FROM"))
    lh.drop_table("dwd.m")
    layers = Runner(lh, load_project(root), spark)
    layers.deploy()
    lh.log("ods.o").append(rows(1, 10), "upsert")
    reports = layers.run_once()
    got = table_rows(lh, "dwd.m")
    assert [r["id"] for r in got] == list(range(11))
    assert all(r["grp_uc"] == r["grp"].upper() for r in got)
    assert table_rows(lh, "ads.a") == expected_a(lh)
    assert [r.idle for r in reports] == [False, False]
    assert all("created again" in r.reason for r in reports), [r.reason for r in reports]
    assert all(r.idle for r in layers.run_once())  # caught up now


def test_a_source_declared_with_another_column_never_advises_dropping_it(setup, spark):
    lh, root = setup
    make_project(root, {"dwd.m": M_SQL, "ads.a": A_SQL}, SOURCES.replace("v: int64}", "v: int64, note: string}"))
    layers = Runner(lh, load_project(root), spark)
    for action in (layers.deploy, layers.run_once):
        with pytest.raises(DeployMismatch) as caught:
            action()
        message = str(caught.value)
        assert "source ods.o" in message and "added column note" in message
        assert "drop" not in message.lower()
    assert len(table_rows(lh, "ods.o")) == 10


class DiesBeforeAppending(Runner):
    """A runner stopped (as by Ctrl+C) just before its round's first append: its round stays unfinished."""

    def _append(self, record, upserts, deletes):
        raise KeyboardInterrupt


@pytest.fixture
def unfinished(setup, spark):
    """Round 1 of dwd.m (over 2 new rows) left unfinished by a stopped runner: (lh, project root, project)."""
    lh, root = setup
    project = load_project(root)
    lh.log("ods.o").append(rows(2, 10), "upsert")
    with pytest.raises(KeyboardInterrupt):
        DiesBeforeAppending(lh, project, spark).run_once(["dwd.m"])
    return lh, root, project


NULL_KEYED = "-- primary_key: [grp]\n-- buckets: 2\nSELECT grp, count(*) AS n FROM ods.o GROUP BY grp\n"


@pytest.mark.parametrize("when", ["full", "incremental", "rebuild"])
def test_a_null_key_is_one_clear_error_and_the_fixed_sql_runs(tmp_path, spark, when):
    root = make_project(tmp_path / "project", {"ads.s": NULL_KEYED})
    lh = Lakehouse.open(f"file://{tmp_path / 'wh'}")
    layers = Runner(lh, load_project(root), spark)
    layers.deploy()
    lh.log("ods.o").append(rows(6), "upsert")
    if when != "full":
        layers.run_once()
    lh.log("ods.o").append(rows(2, 6, grp=None).set_column(1, "grp", pa.nulls(2, pa.string())), "upsert")
    before = latest_round(lh.store, "ads.s")
    ends = lh.log("ads.s").end_offsets()
    with pytest.raises(ModelKeyError) as caught:
        layers.rebuild("ads.s") if when == "rebuild" else layers.run_once()
    message = str(caught.value)
    assert "ads.s" in message and "null" in message and "['grp']" in message and "'n': 2" in message, message
    assert len(message.splitlines()) == 1
    assert lh.log("ads.s").end_offsets() == ends  # nothing appended
    after = latest_round(lh.store, "ads.s")  # and no unfinished round left behind
    assert (after and after.number) == (before and before.number)
    (root / "models" / "ads.s.sql").write_text(
        "-- primary_key: [grp]\n-- buckets: 2\n"
        "SELECT coalesce(grp, '-') AS grp, count(*) AS n FROM ods.o GROUP BY coalesce(grp, '-')\n"
    )
    fixed = Runner(lh, load_project(root), spark)
    fixed.run_once()
    assert {r["grp"]: r["n"] for r in table_rows(lh, "ads.s")} == {"g0": 2, "g1": 2, "g2": 2, "-": 2}


def test_once_after_a_crash_finishes_the_round_then_runs_to_now(unfinished, spark):
    lh, root, project = unfinished
    lh.log("ods.o").append(rows(3, 12), "upsert")  # the inputs move on
    reports = Runner(lh, project, spark).run_once()
    assert [(r.model, r.resumed) for r in reports] == [("dwd.m", True), ("dwd.m", False), ("ads.a", False)]
    assert [r["id"] for r in table_rows(lh, "dwd.m")] == list(range(15))
    assert table_rows(lh, "ads.a") == expected_a(lh)


def test_a_live_runners_round_is_not_taken_over(setup, spark):
    lh, root = setup
    project = load_project(root)
    lh.log("ods.o").append(rows(2, 10), "upsert")
    inside, release = threading.Event(), threading.Event()

    class Slow(Runner):
        def _append(self, record, upserts, deletes):
            inside.set()
            assert release.wait(120)
            return super()._append(record, upserts, deletes)

    errors: list[BaseException] = []
    first = Slow(Lakehouse.open(lh.url), project, spark)
    thread = threading.Thread(target=lambda: _catch(errors, first.run_once, ["dwd.m"]))
    thread.start()
    try:
        assert inside.wait(120)
        before = lh.log("dwd.m").end_offsets()
        with pytest.raises(LayerConflict, match=rf"round 1 .*being run by .*pid {os.getpid()}"):
            Runner(Lakehouse.open(lh.url), project, spark).run_once(["dwd.m"])
        assert lh.log("dwd.m").end_offsets() == before
    finally:
        release.set()
        thread.join(120)
    assert not errors, errors
    assert report_exists(lh.store, "dwd.m", 1) and read_report(lh.store, "dwd.m").round == 1


def test_a_round_of_a_runner_in_another_process_is_not_taken_over(setup, spark, tmp_path):
    lh, root = setup
    lh.log("ods.o").append(rows(2, 10), "upsert")
    inside, gate = tmp_path / "inside", tmp_path / "gate"
    args = json.dumps([lh.url, str(root), "dwd.m", str(inside), str(gate)])
    proc = start_worker("tests.layers._pausing_worker", args)
    try:
        deadline = time.monotonic() + 240
        while not inside.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        with pytest.raises(LayerConflict, match=rf"round 1 is being run by another runner \(pid {proc.pid} on "):
            Runner(lh, load_project(root), spark).run_once(["dwd.m"])
    finally:
        gate.touch()
        out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    assert [(r["round"], r["resumed"]) for r in json.loads(out)] == [(1, False)]
    assert [r["id"] for r in table_rows(lh, "dwd.m")] == list(range(12))


def test_a_dead_runners_round_is_resumed(unfinished, spark):
    lh, _, project = unfinished
    # as if another host's runner had held it and stopped heartbeating: its lease lapses
    record = latest_round(lh.store, "dwd.m")
    obj = lh.store.get(record.key)
    doc = json.loads(obj.data)
    doc["owner"] = {"id": "elsewhere", "host": socket.gethostname() + "-other", "pid": 1, "started": 0}
    doc["heartbeat"] = time.time()
    lh.store.put(record.key, json.dumps(doc).encode(), if_match=obj.etag)
    with pytest.raises(LayerConflict, match="being run by"):
        Runner(lh, project, spark).run_once(["dwd.m"])
    doc["heartbeat"] = time.time() - 3600
    lh.store.put(record.key, json.dumps(doc).encode())
    reports = Runner(lh, project, spark).run_once(["dwd.m"])
    assert reports[0].resumed and reports[0].round == record.number
    assert [r["id"] for r in table_rows(lh, "dwd.m")] == list(range(12))


def test_a_stuck_round_is_abandoned_by_a_rebuild(unfinished, spark):
    lh, root, project = unfinished
    sql = root / "models" / "dwd.m.sql"
    sql.write_text(M_SQL.replace("SELECT id, grp, v", "SELECT id, lower(grp) AS grp, v"))
    changed = load_project(root)
    with pytest.raises(ModelChanged, match="rebuild --model dwd.m --abandon"):
        Runner(lh, changed, spark).run_once(["dwd.m"])
    report = Runner(lh, changed, spark).rebuild("dwd.m", abandon=True)
    assert report.strategy == "rebuild"
    assert [r["id"] for r in table_rows(lh, "dwd.m")] == list(range(12))
    assert all(r.idle for r in Runner(lh, changed, spark).run_once(["dwd.m"]))


def _catch(errors, fn, *args):
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        errors.append(exc)


def test_an_abandoned_round_is_no_boundary(setup, spark):
    from layers.rounds import round_boundary
    from quality.layers import newest_finished_round

    lh, root = setup
    project = load_project(root)
    lh.log("ods.o").append(rows(2, 10), "upsert")

    class DiesAfterAppending(Runner):
        def _append(self, record, upserts, deletes):
            super()._append(record, upserts, deletes)
            raise KeyboardInterrupt  # appended, never advanced nor reported

    before = lh.log("dwd.m").end_offsets()
    with pytest.raises(KeyboardInterrupt):
        DiesAfterAppending(lh, project, spark).run_once(["dwd.m"])
    assert lh.log("dwd.m").end_offsets() != before
    unfinished = latest_round(lh.store, "dwd.m")
    Runner(lh, project, spark)._abandon(unfinished, "given up by the test")
    assert round_boundary(lh.store, "dwd.m", lh.log("dwd.m").end_offsets) == (0, before)
    assert newest_finished_round(lh, "dwd.m").number == 0
    assert lh.tier("dwd.m").offsets == before  # the abandoned round's appends stay out of the lake
    reports = Runner(lh, project, spark).run_once(["dwd.m"])
    assert [r.round for r in reports] == [2] and lh.tier("dwd.m").offsets == lh.log("dwd.m").end_offsets()
