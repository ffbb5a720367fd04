"""One quality run end to end (issue 26, item 6): `lakestream check` reconciles every table, records the run and
its report, moves `published` only for tables whose checks passed, and exits 1 on a violation;
`lakestream report` writes the pages again; jobs/check.py checks without publishing and publishes from the
latest run. Reconciliation only here (suites and layers have their own tests); both backends."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

from jobs import check as job
from lakehouse import Lakehouse
from lakehouse.iceberg.datafiles import LakeContext
from lakestream.cli import app
from quality.check import publish_run, run_checks
from quality.published_tag import published_snapshot
from quality.results import CheckResult
from quality.runs import load_runs
from tests.support.keyed_tables import NAME, batch, build
from tests.support.rogue import live_files, rewrite

OTHER = "ods.clicks"


def two_tables(lh: Lakehouse) -> None:
    build(lh, "pk")  # ods.t
    lh.create_table(OTHER, batch([1], "x").schema, bucket_key="k", buckets=2)
    lh.log(OTHER).append(batch(range(50), "c"))
    lh.tier(OTHER)


def current(lh: Lakehouse, name: str) -> int:
    return lh.lake_table(name).current_snapshot().snapshot_id


def cli(lh: Lakehouse, *args: str):
    """The command against ``lh``'s warehouse, its credentials in the environment as a user would set them."""
    options = lh.store.connection_options()
    names = {"endpoint_url": "LAKESTREAM_S3_ENDPOINT", "access_key_id": "AWS_ACCESS_KEY_ID"}
    names["secret_access_key"] = "AWS_SECRET_ACCESS_KEY"
    env = {var: options[key] for key, var in names.items() if key in options}
    return CliRunner().invoke(app, [*args, "--warehouse", lh.url], env=env, catch_exceptions=False)


def test_check_publishes_what_passed_and_exits_1_on_a_violation(lakehouse: Lakehouse, tmp_path) -> None:
    lh = lakehouse
    two_tables(lh)
    result = cli(lh, "check", "--out", str(tmp_path / "pages"))
    assert result.exit_code == 0, result.output
    assert "passed" in result.output and NAME in result.output and OTHER in result.output
    good = {NAME: current(lh, NAME), OTHER: current(lh, OTHER)}
    assert {n: published_snapshot(lh, n) for n in good} == good
    (run,) = load_runs(lh)
    assert run.ok and run.published == good and set(run.tables) == set(good)
    assert run.tables[NAME]["buckets"] and lh.store.exists(f"_lakestream/quality/reports/{run.run_id}.html")
    assert (tmp_path / "pages" / "reports" / f"{run.run_id}.html").exists()

    # a rogue commit drops a row of ods.t; ods.clicks moves on cleanly
    f = live_files(lh, 1)[0]
    victim = LakeContext.of(lh.store, lh.lake_table(NAME)).read(f.file_path).column("k")[0].as_py()
    rewrite(lh, f, lambda rows: rows.filter(pc.not_equal(rows.column("k"), victim)))
    lh.log(OTHER).append(batch(range(50, 80), "c"))
    lh.tier(OTHER)
    result = cli(lh, "check")
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.output and "content" in result.output and "violation" in result.output
    assert published_snapshot(lh, NAME) == good[NAME]  # stays where it was
    assert published_snapshot(lh, OTHER) == current(lh, OTHER) != good[OTHER]
    latest = load_runs(lh)[0]
    assert not latest.ok and [v.table for v in latest.violations] == [NAME]
    # --table, --json
    result = cli(lh, "check", "--table", OTHER, "--json", "--no-publish")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["ok"] and [r["table"] for r in doc["results"]] == [OTHER]
    # the report again, into a folder
    result = cli(lh, "report", "--out", str(tmp_path / "again"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "again" / "index.html").exists()
    assert f"index: {tmp_path / 'again' / 'index.html'}" in result.output and "None" not in result.output
    result = cli(lh, "report")  # into the warehouse alone: no local paths to name
    assert result.exit_code == 0 and "None" not in result.output and "_lakestream/quality/index.html" in result.output


def test_a_table_that_cannot_be_checked_is_an_error_result_not_a_crash(lakehouse: Lakehouse) -> None:
    lh = lakehouse
    two_tables(lh)
    run = run_checks(lh, tables=[NAME, "ods.missing"])
    assert not run.ok
    missing = next(r for r in run.results if r.table == "ods.missing")
    assert missing.error and "TableNotFound" in missing.error
    assert next(r for r in run.results if r.table == NAME).ok
    assert run.published[NAME] == current(lh, NAME)  # the other table still published
    reconciled = next(r for r in run.results if r.table == NAME and r.check == "reconcile")
    assert reconciled.usage.read_requests >= 1  # what the check asked of the store (its state record, the log)
    assert reconciled.usage.requests["PUT"] >= 1  # the check's state record
    assert CheckResult.from_dict(reconciled.to_dict()).usage == reconciled.usage
    old = {k: v for k, v in reconciled.to_dict().items() if k != "usage"}  # a run recorded before usage was
    assert CheckResult.from_dict(old).usage.total_requests == 0


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_report_json(lakehouse: Lakehouse, tmp_path) -> None:
    two_tables(lakehouse)
    run = run_checks(lakehouse, publish=False)
    result = cli(lakehouse, "report", "--out", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "run_id": run.run_id,
        "report_key": f"_lakestream/quality/reports/{run.run_id}.html",
        "index_key": "_lakestream/quality/index.html",
        "report_path": str(tmp_path / "reports" / f"{run.run_id}.html"),
        "index_path": str(tmp_path / "index.html"),
    }


def test_report_without_a_run_says_what_to_do(lakehouse: Lakehouse) -> None:
    result = cli(lakehouse, "report")
    assert result.exit_code == 1 and "lakestream check" in result.output


@pytest.mark.subprocess
@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_the_job_checks_without_publishing_then_publishes_the_latest_run(lakehouse: Lakehouse, capsys) -> None:
    lh = lakehouse
    two_tables(lh)
    assert job.main(["--warehouse", lh.url, "--table", NAME]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["check"] == "reconcile" and lines[-1]["ok"] is True
    assert published_snapshot(lh, NAME) is None  # the check task never publishes
    assert job.main(["--warehouse", lh.url, "--publish"]) == 0
    assert published_snapshot(lh, NAME) == current(lh, NAME)
    assert published_snapshot(lh, OTHER) is None  # not in the run
    # a failing run: the check exits 1, publishing from it moves nothing and exits 1
    lh.log(NAME).append(batch(range(200, 230), "n"), op="upsert")
    lh.tier(NAME)
    before = published_snapshot(lh, NAME)
    f = live_files(lh, 0)[0]
    rewrite(lh, f, lambda rows: rows.slice(1))
    assert job.main(["--warehouse", lh.url, "--table", NAME]) == 1
    assert job.main(["--warehouse", lh.url, "--publish"]) == 1
    assert published_snapshot(lh, NAME) == before
    assert publish_run(lh, load_runs(lh)[0])[NAME] == before


def _built(tmp_path, spark):
    """The example project's ODS loaded, its layers built by one round each, every table tiered."""
    from layers.project import load_project
    from layers.runner import Runner
    from tests.support.example_ods import ALL, EXAMPLE, load_ods

    lh = Lakehouse.open((tmp_path / "wh").as_uri())
    load_ods(lh)
    layers = Runner(lh, load_project(EXAMPLE), spark)
    layers.deploy()
    layers.run_once()
    for name in ALL:
        lh.tier(name)
    return lh, layers


def test_check_names_a_deleted_data_file_with_and_without_full(lakehouse: Lakehouse) -> None:
    """A Parquet file of the current snapshot deleted by hand after a passing check: `lakestream check` (no new
    commit) and `check --full` both fail with `file-missing`, not "passed" and not an ERROR."""
    lh = lakehouse
    two_tables(lh)
    assert cli(lh, "check", "--table", OTHER).exit_code == 0
    f = lh.lake_table(OTHER).scan().plan_files()[0].file
    lh.store.delete(LakeContext.of(lh.store, lh.lake_table(OTHER)).key_of(f.file_path))
    for args in ((), ("--full",)):
        result = cli(lh, "check", "--table", OTHER, "--no-publish", *args)
        assert result.exit_code == 1, result.output
        assert "FAIL" in result.output and "ERROR" not in result.output and "file-mis" in result.output
        (v,) = load_runs(lh)[0].violations
        assert v.check == "file-missing" and f.file_path in v.message
        assert v.snapshot_id == current(lh, OTHER) and v.table == OTHER


def test_a_project_run_checks_and_publishes_what_passed_and_a_check_whose_upstream_failed_is_not_evaluated(
    tmp_path, spark
) -> None:
    """The example project, layers built and tiered: reconcile + suites + layer checks all pass and every table is
    published; a wrong row in dwd's log (tiered) fails its layer check and reconciliation stays clean, so dwd keeps
    its tag while the others move on. Then, the row put right and a second round run, a data file appended twice
    to dwd by a rogue commit fails dwd's own checks. The layer check of the ADS model that reads dwd, and ADS's
    suite (which counts dwd's rows), are "not evaluated: upstream dwd failed" (their outcome over a corrupt input
    proves nothing either way), not violations of their own: so in the run, its record (old records still load),
    the report and the CLI; ADS is not published. One build for both. Local warehouse (Spark builds the layers)."""
    import numpy as np

    from lakestream.demo.layers import orders
    from quality.report import render_run
    from quality.results import CheckResult
    from tests.support.example_ods import ALL, EXAMPLE, N_CUSTOMERS
    from tests.support.rogue import rogue_commit

    dwd, ads = "dwd.orders_enriched", "ads.revenue_by_nation_month"
    lh, layers = _built(tmp_path, spark)
    first = run_checks(lh, project=EXAMPLE, spark=spark)
    assert first.ok, [str(v) for v in first.violations] + [r.error for r in first.results if r.error]
    checks = {(r.table, r.check.split(":")[0]) for r in first.results}
    assert {(dwd, kind) for kind in ("layer", "gx", "reconcile")} <= checks
    assert first.published == {name: current(lh, name) for name in ALL}

    # a wrong row in dwd's log (tiered) fails its layer check and reconciliation stays clean, so dwd keeps its
    # tag while the others move on
    row = lh.union_read(dwd).slice(0, 1).drop_columns(["__bucket", "__offset", "__timestamp"])
    renamed = pa.array([f"{v}-WRONG" for v in row.column("n_name").to_pylist()], row.schema.field("n_name").type)
    wrong = row.set_column(row.schema.get_field_index("n_name"), "n_name", renamed)
    lh.log(dwd).append(wrong, "upsert")
    lh.tier(dwd)
    run = run_checks(lh, project=EXAMPLE, spark=spark, tables=[dwd, "ods.nation"])
    assert not run.ok
    assert {v.check for v in run.violations} == {"layer-row"}
    assert run.published[dwd] == first.published[dwd] != current(lh, dwd)
    assert run.published["ods.nation"] == current(lh, "ods.nation")
    lh.log(dwd).append(row, "upsert")  # put right (behind the runner's back, as it was broken)
    lh.tier(dwd)

    # a second round over new orders, tiered: every layer has a snapshot not published yet
    lh.log("ods.orders").append(orders(np.arange(1000, 1100), np.random.default_rng(3), N_CUSTOMERS), "upsert")
    layers.run_once()
    for name in ALL:
        lh.tier(name)
    f = lh.lake_table(dwd).scan().plan_files()[0].file
    rogue_commit(lh, add=[f], name=dwd)

    run = run_checks(lh, project=EXAMPLE, spark=spark)
    by = {(r.table, r.check.split(":")[0]): r for r in run.results}
    assert "file-twice" in {v.check for v in by[dwd, "reconcile"].violations}
    for check in ("layer", "gx"):
        r = by[ads, check]
        assert (r.status, r.violations, r.error) == ("not evaluated", [], None), [str(v) for v in r.violations]
        assert r.not_evaluated.startswith(f"upstream {dwd} failed (reconcile") and not r.ok
    assert by[ads, "reconcile"].ok  # its own lake == log still holds
    assert by[dwd, "layer"].not_evaluated is None  # dwd's own layer check ran: its inputs passed theirs
    assert run.published[ads] == first.published[ads] != current(lh, ads)
    assert not run.ok
    # the record keeps it (and one written before the field existed still loads)
    (saved,) = [r for r in load_runs(lh)[0].results if (r.table, r.check) == (ads, "layer")]
    assert saved.status == "not evaluated" and saved.not_evaluated == by[ads, "layer"].not_evaluated
    old = {k: v for k, v in by[dwd, "reconcile"].to_dict().items() if k not in ("status", "not_evaluated")}
    assert CheckResult.from_dict(old).status == "failed"
    page = render_run(run, [run])
    assert "NOT EVALUATED" in page and f"not evaluated: upstream {dwd} failed" in page
    # the CLI (suites only, without Spark): ADS's suite is not evaluated, shown as such
    result = cli(lh, "check", "--project", str(EXAMPLE), "--no-publish", "--table", dwd, "--table", ads)
    assert result.exit_code == 1, result.output
    assert "NOT EVALUATED" in result.output and "1 not evaluated" in " ".join(result.output.split())
    lh.close()


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_run_checks_judges_the_suites_anomaly_checks_and_holds_back_publish_on_a_fail(lakehouse, tmp_path) -> None:
    """A log table with regular commits (about 50 records each) and a suite whose ``meta.anomalies`` watches its
    changes per commit: run_checks collects the metrics and judges them (nothing flagged), then a commit of 5
    records is an anomaly. With severity fail the run is not ok and ``published`` stays; the same drop with
    severity warn is reported in details and ``published`` moves there. No Spark, local store."""
    lh = lakehouse
    lh.create_table(OTHER, batch([1], "x").schema, bucket_key="k", buckets=2)
    project = tmp_path / "project"
    (project / "expectations").mkdir(parents=True)
    suite = project / "expectations" / f"{OTHER}.json"

    def configure(severity: str) -> None:
        anomaly = {"metric": "changes", "min_history": 4, "min_deviation": 5, "severity": severity}
        doc = {"name": OTHER, "expectations": [], "meta": {"anomalies": [anomaly]}}
        suite.write_text(json.dumps(doc))

    start = 0
    for size in (50, 48, 52, 49, 51, 50):
        lh.log(OTHER).append(batch(range(start, start + size), "c"))
        lh.tier(OTHER)
        start += size
    configure("fail")
    run = run_checks(lh, tables=[OTHER], project=project)
    [anomaly] = [r for r in run.results if r.check == "anomaly:changes"]
    assert run.ok and anomaly.ok and anomaly.details["judged"] and anomaly.details["anomalies"] == []
    assert anomaly.snapshot_id == current(lh, OTHER) == run.published[OTHER] == published_snapshot(lh, OTHER)
    before = current(lh, OTHER)

    lh.log(OTHER).append(batch(range(start, start + 5), "c"))  # the planted drop
    lh.tier(OTHER)
    run = run_checks(lh, tables=[OTHER], project=project)
    [anomaly] = [r for r in run.results if r.check == "anomaly:changes"]
    assert not run.ok and not anomaly.ok and anomaly.snapshot_id == current(lh, OTHER) != before
    [v] = anomaly.violations
    assert v.check == "anomaly" and v.actual == 5.0 and "changes of ods.clicks" in v.message
    assert published_snapshot(lh, OTHER) == before == run.published[OTHER]

    configure("warn")  # the same commit judged again: a warning, published
    run = run_checks(lh, tables=[OTHER], project=project)
    [anomaly] = [r for r in run.results if r.check == "anomaly:changes"]
    assert run.ok and anomaly.ok and not anomaly.violations
    assert [a["value"] for a in anomaly.details["anomalies"]] == [5.0] and anomaly.details["warnings"]
    assert published_snapshot(lh, OTHER) == current(lh, OTHER) == run.published[OTHER] != before


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_a_warn_anomaly_shows_as_a_warning_in_the_terminal_and_the_report(lakehouse, tmp_path) -> None:
    """The issue's case: a column's null fraction goes 0 -> 1, watched with severity warn. The run's JSON and
    page had it, but `lakestream check` showed the row as `ok`; it says WARN with the warning, exits 0 (a warning
    holds nothing back), and the page renders the anomaly's details instead of cut JSON."""
    lh = lakehouse
    lh.create_table(OTHER, batch([1], "x").schema, bucket_key="k", buckets=2)
    project = tmp_path / "project"
    (project / "expectations").mkdir(parents=True)
    anomaly = {"metric": "null_fraction", "column": "v", "min_history": 4, "severity": "warn"}
    doc = {"name": OTHER, "expectations": [], "meta": {"anomalies": [anomaly]}}
    (project / "expectations" / f"{OTHER}.json").write_text(json.dumps(doc))
    start = 0
    for size in (50, 48, 52, 49, 51, 50):
        lh.log(OTHER).append(batch(range(start, start + size), "c"))
        lh.tier(OTHER)
        start += size
    nulls = batch(range(start, start + 50), "c").set_column(1, "v", pa.nulls(50, pa.string()))
    lh.log(OTHER).append(nulls)  # every v null: the null fraction 0 -> 1
    lh.tier(OTHER)
    result = cli(lh, "check", "--table", OTHER, "--project", str(project), "--out", str(tmp_path / "pages"))
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if "anomaly:null_fraction:v" in line]
    assert "WARN" in line and " ok " not in line, result.output
    assert "null_fraction of column v of ods.clicks" in result.output  # the warning itself, not a summary
    assert "1 warning" in result.output
    (run,) = load_runs(lh)
    page = (tmp_path / "pages" / "reports" / f"{run.run_id}.html").read_text()
    assert '<span class="chip warn">WARN</span>' in page
    assert "{&quot;snapshot_id&quot;" not in page  # the judged points are rendered, not dumped as JSON
    assert "outside [" in page and "null_fraction of column v of ods.clicks" in page
