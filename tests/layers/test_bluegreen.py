"""Blue/green rebuilds (`layers.bluegreen`): a changed model and its downstream built beside the live tables,
readers by name kept on the live ones, one cutover, rollback, a build killed and resumed, a cutover killed before
and after its switch and run again, a cutover refused while the green set is behind."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import TableAlreadyExistsError
from typer.testing import CliRunner

from lakehouse.lakehouse import Lakehouse
from lakehouse.table.aliases import AliasedTableError, read_aliases
from lakehouse.table.definition import TableName
from layers.bluegreen import GREEN_KEY, build_green, cleanup, cutover, rollback
from layers.errors import GreenBehind
from layers.project import load_project
from layers.runner import Runner
from quality.layers import check_layers
from quality.results import RECONCILE, CheckResult
from quality.warehouse_publication import publish_warehouse
from tests.conftest import duckdb_connection
from tests.support.crash import crash

pytestmark = pytest.mark.usefixtures("spark")

MODELS = ("ods.o", "dwd.m", "ads.a")  # the source and both models

SOURCES = """
sources:
  ods.o:
    columns: {id: int64, grp: string, v: int64}
    primary_key: [id]
    buckets: 2
"""
M_V1 = "-- primary_key: [id]\n-- buckets: 2\nSELECT id, grp, v FROM ods.o\n"
# v2 changes what v means and adds a column: a rebuild of dwd.m and of ads.a, which reads it
M_V2 = (
    "-- primary_key: [id]\n-- buckets: 2\n"
    "SELECT id, grp, CAST(v * 10 AS BIGINT) AS v, CAST(v + 1 AS BIGINT) AS w FROM ods.o\n"
)
A_SQL = (
    "-- primary_key: [grp]\n-- buckets: 2\n"
    "SELECT grp, count(*) AS n, CAST(sum(v) AS BIGINT) AS total FROM dwd.m GROUP BY grp\n"
)


def project(root: Path, m_sql: str) -> Path:
    (root / "models").mkdir(parents=True)
    (root / "sources.yml").write_text(SOURCES)
    (root / "models" / "dwd.m.sql").write_text(m_sql)
    (root / "models" / "ads.a.sql").write_text(A_SQL)
    return root


def rows(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "grp": [f"g{i % 3}" for i in ids], "v": pa.array(ids, pa.int64())}
    )


def read(lh: Lakehouse, name: str | TableName) -> list[dict]:
    t = lh.union_read(name)
    t = t.select([c for c in t.column_names if not c.startswith("__")])
    return t.sort_by([(t.column_names[0], "ascending")]).to_pylist()


def expected(ids: range, version: int) -> tuple[list[dict], list[dict]]:
    """dwd.m and ads.a as the SQL of ``version`` computes them in full over ods.o holding ``ids``."""
    if version == 1:
        m = [{"id": i, "grp": f"g{i % 3}", "v": i} for i in ids]
    else:
        m = [{"id": i, "grp": f"g{i % 3}", "v": i * 10, "w": i + 1} for i in ids]
    groups: dict[str, dict] = {}
    for r in m:
        g = groups.setdefault(r["grp"], {"grp": r["grp"], "n": 0, "total": 0})
        g["n"] += 1
        g["total"] += r["v"]
    return m, [groups[g] for g in sorted(groups)]


def state(lh: Lakehouse) -> tuple[list[dict], list[dict]]:
    return read(lh, "dwd.m"), read(lh, "ads.a")


@pytest.fixture
def live(tmp_path, spark):
    """Version 1 deployed and run over ids 0-5; version 2's project folder beside it."""
    v1 = load_project(project(tmp_path / "v1", M_V1))
    v2 = load_project(project(tmp_path / "v2", M_V2))
    lh = Lakehouse.open(f"file://{tmp_path / 'wh'}", alias_cache_seconds=0)
    runner = Runner(lh, v1, spark)
    runner.deploy()
    lh.log("ods.o").append(rows(6), "upsert")
    runner.run_once()
    assert state(lh) == expected(range(6), 1)
    return lh, v1, v2


def test_green_build_cutover_next_rounds_and_rollback(live, spark):
    lh, v1, v2 = live
    built = build_green(lh, v2, spark)
    assert built.tables == {"dwd.m": "dwd__g1.m", "ads.a": "ads__g1.a"} and built.behind == []
    assert state(lh) == expected(range(6), 1)  # readers by name: still the live version
    assert read(lh, TableName.parse("ads__g1.a")) == expected(range(6), 2)[1]
    for green in built.tables.values():  # the build tiered its tables (on Spark): the cutover has only a tail left
        physical = TableName.parse(green)
        assert lh.lake_offsets(physical) == lh.log(physical).end_offsets(), green

    lh.log("ods.o").append(rows(3, 6), "upsert")
    Runner(lh, v1, spark).run_once()  # the live rounds go on meanwhile, on the live tables
    assert state(lh) == expected(range(9), 1)
    with pytest.raises(
        GreenBehind, match=r"dwd.m: in ods.o at .* the live dwd.m at .*Run lakestream layers green"
    ) as e:
        cutover(lh, v2)
    assert e.value.behind and read_aliases(lh.store).generation == 0  # nothing switched
    assert state(lh) == expected(range(9), 1)

    assert build_green(lh, v2, spark).behind == []  # catches up, same tables
    switched = cutover(lh, v2)
    assert switched.tables == {"dwd.m": "dwd__g1.m", "ads.a": "ads__g1.a"}
    assert state(lh) == expected(range(9), 2)  # by name: the new version, as its SQL computes it in full
    assert state(Lakehouse.open(lh.url)) == expected(range(9), 2)
    assert not lh.store.exists(GREEN_KEY)

    lh.log("ods.o").append(rows(2, 9), "upsert")
    reports = Runner(lh, v2, spark).run_once()  # the next rounds run on the new tables, incrementally
    assert [(r.model, r.strategy != "recompute" and r.round > 0) for r in reports] == [
        ("dwd__g1.m", True),
        ("ads__g1.a", True),
    ]
    assert state(lh) == expected(range(11), 2)
    assert read(lh, TableName.parse("dwd.m")) == expected(range(9), 1)[0]  # the old table, kept as it was

    # quality follows the cutover: each model checked by the table serving it, all published together
    checked = check_layers(lh, v2, spark=spark, full=True)
    assert [(r.table, r.ok, r.rows > 0) for r in checked] == [("dwd.m", True, True), ("ads.a", True, True)], checked
    for name in ("ods.o", "dwd.m", "ads.a"):
        lh.tier(name)
    passed = [CheckResult(RECONCILE, t, snapshot_id=lh.lake_table(t).metadata.current_snapshot_id) for t in MODELS]
    publication = publish_warehouse(lh, passed)
    assert sorted(publication.entries) == sorted(MODELS) and not publication.left_out, publication.left_out

    rollback(lh, v2)
    assert state(lh) == expected(range(9), 1)  # the old version served again
    Runner(lh, v1, spark).run_once()
    assert state(lh) == expected(range(11), 1)
    assert cleanup(lh, v1) == []  # live and the rollback target are both kept


def test_other_engines_reading_the_name_see_the_live_table_after_a_cutover(live, spark):
    """After a cutover, pyiceberg's catalog (as `load_catalog` builds it from the warehouse's properties),
    `lakestream table location` and DuckDB on that location give the new version by name; a commit through the
    table loaded by name lands on it; what would change the name's table (drop, rename, create, register, a commit
    of a table loaded before the switch) is refused, naming the live table. A rollback gives the old one again."""
    from lakestream.cli import app

    lh, v1, v2 = live
    blue = load_catalog("lake", **lh.catalog_properties()).load_table("dwd.m")  # loaded before the switch
    build_green(lh, v2, spark)
    cutover(lh, v2)
    m, _ = expected(range(6), 2)

    catalog = load_catalog("lake", **lh.catalog_properties())
    table = catalog.load_table("dwd.m")
    assert table.name() == ("dwd__g1", "m")  # the table serving the name: commits through it go there
    lake = table.scan(selected_fields=("id", "grp", "v", "w")).to_arrow().sort_by("id").to_pylist()
    assert lake == m
    assert catalog.table_exists("dwd.m") and catalog.table_location("dwd.m") == table.metadata_location
    assert ("dwd", "m") in catalog.list_tables("dwd")

    shown = CliRunner().invoke(app, ["table", "location", "dwd.m", "-w", lh.url])
    assert shown.exit_code == 0, shown.output
    assert shown.output.strip() == table.metadata_location
    as_json = CliRunner().invoke(app, ["table", "location", "dwd.m", "-w", lh.url, "--json"])
    assert '"physical": "dwd__g1.m"' in as_json.output, as_json.output
    duck = duckdb_connection().sql(
        f"SELECT id, grp, v, w FROM iceberg_scan('{shown.output.strip().removeprefix('file://')}') ORDER BY id"
    )
    assert duck.fetchall() == [tuple(r.values()) for r in m]

    table.transaction().set_properties({"owner": "analytics"}).commit_transaction()
    assert lh.lake_table("dwd.m").properties["owner"] == "analytics"  # the live table's metadata
    assert "owner" not in lh.lake_table(TableName.parse("dwd.m")).properties  # not the old one's

    with pytest.raises(AliasedTableError, match=r"dwd\.m is served by dwd__g1\.m .*nothing was committed"):
        blue.transaction().set_properties({"owner": "stale"}).commit_transaction()
    with pytest.raises(ValueError, match="UUID does not match"):  # nor does it silently become another table
        blue.refresh()
    with pytest.raises(AliasedTableError, match=r"dwd\.m is served by dwd__g1\.m"):
        catalog.drop_table("dwd.m")
    with pytest.raises(AliasedTableError, match=r"dwd\.m is served by dwd__g1\.m"):
        catalog.rename_table("dwd.m", "dwd.m_old")
    with pytest.raises(AliasedTableError, match=r"dwd\.m is served by dwd__g1\.m"):
        catalog.rename_table("ads__g1.a", "dwd.m")
    with pytest.raises(TableAlreadyExistsError, match=r"dwd\.m is served by dwd__g1\.m"):
        catalog.create_table("dwd.m", table.schema())
    with pytest.raises(AliasedTableError, match=r"dwd\.m is served by dwd__g1\.m"):
        catalog.register_table("dwd.m", blue.metadata_location, overwrite=True)
    assert catalog.table_exists("dwd.m") and lh.catalog.table_exists("dwd.m")  # nothing was changed

    rollback(lh, v2)
    again = load_catalog("lake", **lh.catalog_properties()).load_table("dwd.m")
    assert again.name() == ("dwd", "m") and again.metadata_location == blue.metadata_location


def test_after_two_cutovers_and_a_cleanup_the_name_is_the_newest_table_for_other_engines(live, spark, tmp_path):
    """Two cutovers, then `cleanup` drops the first tables (``dwd.m`` itself: lakestream's own catalog names
    physical tables, so the drop reaches it although an alias serves the name): pyiceberg's catalog, its listing
    and DuckDB on `lakestream table location` give the newest generation by name, not a table two versions old."""
    from lakestream.cli import app

    lh, v1, v2 = live
    build_green(lh, v2, spark)
    cutover(lh, v2)
    v3_sql = M_V2.replace("v * 10", "v * 100")
    v3 = load_project(project(tmp_path / "v3", v3_sql))
    assert build_green(lh, v3, spark).tables == {"dwd.m": "dwd__g2.m", "ads.a": "ads__g2.a"}
    cutover(lh, v3)
    assert sorted(cleanup(lh, v3)) == ["ads.a", "dwd.m"]  # kept: the live tables and the rollback target
    m = [{"id": i, "grp": f"g{i % 3}", "v": i * 100, "w": i + 1} for i in range(6)]
    assert read(lh, "dwd.m") == m

    catalog = load_catalog("lake", **lh.catalog_properties())
    table = catalog.load_table("dwd.m")
    assert table.name() == ("dwd__g2", "m")
    assert table.scan(selected_fields=("id", "grp", "v", "w")).to_arrow().sort_by("id").to_pylist() == m
    assert ("dwd", "m") in catalog.list_tables("dwd")  # listed by name although its own table was dropped
    shown = CliRunner().invoke(app, ["table", "location", "dwd.m", "-w", lh.url])
    assert shown.exit_code == 0, shown.output
    duck = duckdb_connection().sql(
        f"SELECT id, grp, v, w FROM iceberg_scan('{shown.output.strip().removeprefix('file://')}') ORDER BY id"
    )
    assert duck.fetchall() == [tuple(r.values()) for r in m]


def test_a_build_killed_leaves_live_serving_and_runs_again(live, spark):
    lh, v1, v2 = live
    crash("tests.layers._green_crash_worker", lh.url, v2.path, timeout=240)
    assert lh.store.exists(GREEN_KEY) and read_aliases(lh.store).generation == 0
    assert state(lh) == expected(range(6), 1)  # the live version still serves

    built = build_green(lh, v2, spark)
    assert built.tables["dwd.m"] == "dwd__g1.m" and built.behind == []
    assert [(r.model, r.resumed) for r in built.reports][:1] == [("dwd__g1.m", True)]  # the killed round, resumed
    cutover(lh, v2)
    assert state(lh) == expected(range(6), 2)


@pytest.mark.parametrize("point", ["before_switch", "after_switch"])
def test_a_cutover_killed_leaves_one_version_serving_and_runs_again(live, spark, point):
    """kill -9 of a cutover just before the aliases' compare-and-swap leaves the live version serving; just after
    it, the new one serves, and the next cutover finishes the steps left (deployment record, build record)."""
    lh, v1, v2 = live
    built = build_green(lh, v2, spark)
    assert built.behind == []
    crash("tests.layers._cutover_crash_worker", lh.url, v2.path, point, timeout=240)
    assert lh.store.exists(GREEN_KEY)  # the build record goes last
    if point == "before_switch":
        assert read_aliases(lh.store).generation == 0
        assert state(lh) == expected(range(6), 1)  # the live version still serves, whole
    else:
        assert read_aliases(lh.store).current == {**read_aliases(lh.store).current, **built.tables}
        assert state(lh) == expected(range(6), 2)  # switched: the new version serves, whole
    switched = cutover(lh, v2)  # again: switches (before) or finishes what the killed one left (after)
    assert switched.tables == built.tables and not lh.store.exists(GREEN_KEY)
    assert state(lh) == expected(range(6), 2)
    lh.log("ods.o").append(rows(2, 6), "upsert")
    reports = Runner(lh, v2, spark).run_once()  # the new folder's rounds go on, incrementally, on the new tables
    assert [r.model for r in reports] == ["dwd__g1.m", "ads__g1.a"] and all(r.round > 0 for r in reports)
    assert state(lh) == expected(range(8), 2)
