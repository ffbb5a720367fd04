from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakestream.cli import app

runner = CliRunner()
TPCH = Path(__file__).resolve().parents[2] / "examples" / "tpch"


def test_demo_runs_and_checks_itself(tmp_path) -> None:
    args = ["demo", "--warehouse", str(tmp_path / "wh"), "--big-mib", "12", "--changes", "20000", "--local"]
    result = runner.invoke(app, args, env={"COLUMNS": None})  # as piped to a log: not a terminal
    assert result.exit_code == 0, result.output
    assert "all checks passed" in result.output and "exactly once" in result.output
    assert "1 winner/round" in result.output and "none lost" in result.output
    # whole lines, the metadata file's path too (wrapped and cut at 80 columns before)
    assert "…" not in result.output
    assert "(8 writers x 5); CAS: 200 increments, none lost; multipart 12 MiB" in result.output, result.output
    location = next(line for line in result.output.splitlines() if line.startswith("Read the lake"))
    assert location.endswith(".metadata.json") and str(tmp_path / "wh") in location, result.output


@pytest.mark.parametrize(("option", "value"), [("--changes", "10"), ("--changes", "-5"), ("--big-mib", "-1")])
def test_demo_refuses_sizes_it_cannot_run_with(tmp_path, option: str, value: str) -> None:
    """These failed halfway with "empty batch, nothing to append" or "big.bin has 0 bytes, expected -1048576"."""
    result = runner.invoke(app, ["demo", "-w", str(tmp_path / "wh"), "--local", option, value])
    assert result.exit_code == 2 and "greater than or equal to" in result.output, result.output
    assert not (tmp_path / "wh").exists()


@pytest.mark.slow
def test_demo_with_spark_as_make_demo_runs_it(tmp_path) -> None:
    """What `make demo` runs, in a fresh process: Spark local[2] tiering included. Its orders' commits are above a
    driver budget of 10,000 rows, as 4 million changes are above the default's: the demo's session collects their
    metrics (it warned "metrics not collected ... give a Spark session" twice)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env["LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS"] = "10000"
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "lakestream"),
            "demo",
            "-w",
            str(tmp_path / "wh"),
            "--changes",
            "60000",
            "--big-mib",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all checks passed" in proc.stdout and "local[2]" in proc.stdout
    assert "metrics not collected" not in proc.stdout + proc.stderr, proc.stderr


@pytest.mark.slow
def test_the_demos_quality_step_collects_metrics_with_its_spark_session(tmp_path, spark, monkeypatch, caplog) -> None:
    """`make demo` warned twice "metrics not collected ... above the driver's budget ... give a Spark session"
    while its own session ran: its quality step checked the demo's tables without it. The demo's steps on a few
    changes, with a driver budget below a tiering commit, as 4 million changes are below the default's."""
    import io
    import logging

    from rich.console import Console

    from lakehouse import Lakehouse
    from lakestream.demo import pipeline
    from lakestream.demo.quality import quality_step
    from quality.metrics import load_commits

    monkeypatch.setenv("LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS", "100")
    console = Console(file=io.StringIO())
    lh = Lakehouse.open(tmp_path.as_uri())
    ns, state = "demo_t", {"spark": spark}
    expected = pipeline.Expected(keyspace=1000)
    pipeline.create_tables(lh, ns)
    pipeline.produce(lh, ns, expected, 2000, 0, console)
    pipeline.tier(lh, ns, state, console)
    with caplog.at_level(logging.WARNING):
        quality_step(lh, ns, state, console)
    assert "metrics not collected" not in caplog.text, caplog.text
    assert load_commits(lh, f"{ns}.orders")  # collected, on Spark's executors


def test_tier_and_read_commands(tmp_path) -> None:
    import pyarrow as pa

    from lakehouse import Lakehouse

    wh = tmp_path.as_uri()
    lh = Lakehouse.open(wh)
    lh.create_table("ods.t", pa.schema([("k", pa.int64()), ("v", pa.string())]), primary_key=["k"], buckets=2)
    lh.log("ods.t").append(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}), op="upsert")
    result = runner.invoke(app, ["tier", "-w", wh, "--local"])
    assert result.exit_code == 0, result.output
    assert "ods.t" in result.output and "+2/-0" in result.output
    lh.log("ods.t").append(pa.table({"k": [2], "v": ["b2"]}), op="upsert")
    lh.log("ods.t").append(pa.table({"k": [3], "v": ["c"]}), op="delete")
    union = runner.invoke(app, ["table", "read", "ods.t", "-w", wh, "--columns", "k,v"])
    assert union.exit_code == 0 and "b2" in union.output and "2 rows (union read)" in union.output
    lake = runner.invoke(app, ["table", "read", "ods.t", "-w", wh, "--lake", "--where", "k >= 2"])
    assert lake.exit_code == 0 and "2 rows (lake)" in lake.output and "b2" not in lake.output
    again = runner.invoke(app, ["tier", "-w", wh, "-t", "ods.t"])
    # merge-on-read: the new version and a position delete file per changed bucket, no data file removed
    assert again.exit_code == 0 and re.search(r"\+[23]/-0", again.output), again.output
    bad = runner.invoke(app, ["tier", "-w", wh, "-t", "ods.nope"])
    assert bad.exit_code == 1 and "no table ods.nope" in bad.output
    both = runner.invoke(app, ["tier", "-w", wh, "--local", "--spark-master", "local[1]"])
    assert both.exit_code == 1 and "not both" in both.output
    # log retention removed the tiered records: the tail shows what the log still holds
    from datetime import timedelta

    assert lh.apply_log_retention("ods.t", retention=timedelta(0)).segments_deleted > 0
    bucket = lh.log("ods.t").append(pa.table({"k": [9], "v": ["new"]}), op="upsert").ranges
    ((b, (first, _)),) = bucket.items()
    kept = Lakehouse.open(wh).log("ods.t").start_offsets()[b]
    assert kept > 0  # the last 20 records would start at 0, which is gone
    tail = runner.invoke(app, ["log", "tail", "ods.t", "--bucket", str(b), "-w", wh])
    assert tail.exit_code == 0 and f"records {kept}..{first} of end offset {first + 1}" in tail.output, tail.output


def test_store_probe_and_ls(tmp_path) -> None:
    wh = tmp_path.as_uri()
    assert runner.invoke(app, ["store", "probe", "-w", wh]).exit_code == 0
    (tmp_path / "x").write_bytes(b"abc")
    result = runner.invoke(app, ["store", "ls", "-w", wh])
    assert result.exit_code == 0 and "x" in result.output


def test_store_probe_against_s3(seaweedfs) -> None:
    env = {
        "LAKESTREAM_S3_ENDPOINT": seaweedfs.endpoint_url,
        "AWS_ACCESS_KEY_ID": seaweedfs.store_options()["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": seaweedfs.store_options()["secret_access_key"],
    }
    result = runner.invoke(app, ["store", "probe", "-w", f"s3://{seaweedfs.bucket}/cli"], env=env)
    assert result.exit_code == 0, result.output
    env["AWS_SECRET_ACCESS_KEY"] = "wrong-secret-xyz"
    result = runner.invoke(app, ["store", "probe", "-w", f"s3://{seaweedfs.bucket}/cli"], env=env)
    assert result.exit_code == 1 and "refused our credentials" in result.output
    assert "wrong-secret-xyz" not in result.output


def test_errors_are_clear_and_exit_non_zero() -> None:
    result = runner.invoke(app, ["store", "ls", "-w", "ftp://nope/x"])
    assert result.exit_code == 1 and "unsupported warehouse URL" in result.output


def test_table_and_log_commands(tmp_path) -> None:
    from decimal import Decimal

    import pyarrow as pa

    from lakehouse import Lakehouse

    wh = ["-w", tmp_path.as_uri()]
    schema = "o_orderkey:int64, o_totalprice:decimal(12,2), o_comment:string, o_orderdate:date"
    result = runner.invoke(
        app, ["table", "create", "ods.orders", "--schema", schema, "--primary-key", "o_orderkey", *wh]
    )
    assert result.exit_code == 0, result.output
    assert "primary-key table" in result.output and "decimal128(12, 2)" in result.output
    again = runner.invoke(app, ["table", "create", "ods.orders", "--schema", schema, *wh])
    assert again.exit_code == 1 and "already exists" in again.output
    bad = runner.invoke(app, ["table", "create", "ods.x", "--schema", "a:blob", *wh])
    assert bad.exit_code == 1 and "unknown type 'blob'" in bad.output

    log = Lakehouse.open(tmp_path.as_uri()).log("ods.orders")
    log.append(
        pa.table(
            {
                "o_orderkey": list(range(40)),
                "o_totalprice": pa.array([Decimal("1.00")] * 40, pa.decimal128(12, 2)),
                "o_comment": ["hello"] * 40,
                "o_orderdate": pa.array([0] * 40, pa.int32()).cast(pa.date32()),
            }
        ),
        "upsert",
    )
    ends = log.end_offsets()
    result = runner.invoke(app, ["log", "offsets", "ods.orders", *wh])
    assert result.exit_code == 0 and "40" in result.output
    result = runner.invoke(app, ["log", "tail", "ods.orders", "--bucket", "1", "--from", "0", "--limit", "3", *wh])
    assert result.exit_code == 0 and "upsert" in result.output and f"of end offset {ends[1]}" in result.output
    result = runner.invoke(app, ["table", "list", *wh])
    assert "ods.orders" in result.output
    result = runner.invoke(app, ["table", "describe", "ods.orders", *wh])
    assert "log records    40" in result.output
    result = runner.invoke(app, ["log", "tail", "ods.orders", "--bucket", "9", *wh])
    assert result.exit_code == 1 and "buckets 0..3" in result.output
    result = runner.invoke(app, ["table", "describe", "ods.nope", *wh])
    assert result.exit_code == 1 and "no table ods.nope" in result.output
    result = runner.invoke(app, ["log", "tail", "ods.orders", "--bucket", "1", "--limit", "-3", *wh])
    assert result.exit_code == 2 and "greater than or equal to 1" in result.output, result.output
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["table", "list", "-w", (tmp_path / "empty").as_uri()])
    assert result.exit_code == 0 and "no tables in" in result.output, result.output


@pytest.mark.parametrize(
    "command",
    [
        ["table", "list"],
        ["table", "read", "ods.t"],
        ["table", "read", "ods.t", "--json"],
        ["table", "location", "ods.t"],
        ["table", "describe", "ods.t"],
        ["log", "offsets", "ods.t"],
        ["store", "ls"],
        ["catalog", "list"],
        ["subscription", "list"],
        ["tier", "--local"],
        ["report"],
        ["published"],
        ["check"],
        ["metrics", "show", "ods.t"],
        ["layers", "status", "--project", str(TPCH)],
        ["layers", "plan", "--project", str(TPCH)],
        ["layers", "run", "--once", "--project", str(TPCH)],
    ],
)
def test_a_missing_warehouse_is_an_error_and_is_not_created(tmp_path, command) -> None:
    """`table list -w file:///typo` printed "no tables" and created the directory: a typo was a new warehouse."""
    typo = tmp_path / "wharehouse"
    result = runner.invoke(app, [*command, "-w", typo.as_uri()], env={"COLUMNS": None})
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: no warehouse at ") and str(typo) in line and "table create" in line, line
    assert result.stdout == "" and not typo.exists()


def test_table_create_still_creates_a_warehouse(tmp_path) -> None:
    new = tmp_path / "new" / "wh"
    result = runner.invoke(app, ["table", "create", "ods.t", "--schema", "k:int64", "-w", new.as_uri()])
    assert result.exit_code == 0, result.output
    listed = runner.invoke(app, ["table", "list", "-w", new.as_uri()])
    assert listed.exit_code == 0 and "ods.t" in listed.output, listed.output


def test_data_and_types_are_printed_as_they_are(tmp_path) -> None:
    """Values and types are never read as rich markup: ``[b]x[/b]`` and ``timestamp[us, tz=UTC]`` stay."""
    import pyarrow as pa

    from lakehouse import Lakehouse

    wh = ["-w", tmp_path.as_uri()]
    lh = Lakehouse.open(tmp_path.as_uri())
    schema = pa.schema([("k", pa.int64()), ("v", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))])
    lh.create_table("ods.m", schema, primary_key=["k"], buckets=1)
    lh.log("ods.m").append(pa.table({"k": [1], "v": ["[b]x[/b]"], "ts": pa.array([0], schema.field("ts").type)}))
    described = runner.invoke(app, ["table", "describe", "ods.m", *wh])
    assert described.exit_code == 0 and "ts timestamp[us, tz=UTC]" in described.output, described.output
    for args in (["log", "tail", "ods.m", "--bucket", "0"], ["table", "read", "ods.m", "--columns", "v"]):
        result = runner.invoke(app, [*args, *wh])
        assert result.exit_code == 0 and "[b]x[/b]" in result.output, result.output


def test_a_table_is_created_from_the_columns_describe_prints(tmp_path) -> None:
    """`table describe` prints Arrow's type names (``timestamp[us, tz=UTC]``, ``decimal128(12, 2)``) and
    ``not null``; `table create --schema` takes them back, and partitions with ``--partition-by``."""
    import pyarrow as pa

    from lakehouse import Lakehouse

    wh = ["-w", tmp_path.as_uri()]
    lh = Lakehouse.open(tmp_path.as_uri())
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), False),
            ("amount", pa.decimal128(12, 2)),
            ("at", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
            ("tag", pa.binary(16)),
            ("note", pa.large_string()),
            ("ref", pa.uuid()),
        ]
    )
    original = lh.create_table("ods.src", schema, primary_key=["id"], buckets=2)
    columns = original.describe()["columns"]
    result = runner.invoke(
        app,
        ["table", "create", "ods.copy", "--schema", columns, "--primary-key", "id", "--partition-by", "day(at)", *wh],
    )
    assert result.exit_code == 0, result.output
    copy = lh.table("ods.copy")
    assert copy.schema.equals(original.schema) and copy.partition_by == ("day(at)",)
    assert copy.describe()["columns"] == columns


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("v:decimal(40,2)", "precision p from 1 to 38"),  # a traceback (Arrow's ValueError)
        ("v:decimal(5,7)", "scale s from 0 to p"),  # created; then every tiering round failed
    ],
)
def test_table_create_refuses_a_decimal_the_lake_cannot_hold(tmp_path, spec: str, message: str) -> None:
    result = runner.invoke(app, ["table", "create", "ods.d", "--schema", f"k:int64, {spec}", "-w", tmp_path.as_uri()])
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output, result.output
    assert runner.invoke(app, ["table", "list", "-w", tmp_path.as_uri()]).output.startswith("no tables")


def test_table_create_takes_date32(tmp_path) -> None:
    """The README lists date32 among the column types; --schema refused it as an unknown type."""
    result = runner.invoke(app, ["table", "create", "ods.d", "--schema", "k:int64, d:date32", "-w", tmp_path.as_uri()])
    assert result.exit_code == 0 and "d date32[day]" in result.output, result.output


def test_table_drop_asks_first_and_drops_a_half_created_table(tmp_path) -> None:
    import pyarrow as pa

    from lakehouse import Lakehouse
    from lakehouse.table.definition import TableDefinition

    wh = ["-w", tmp_path.as_uri()]
    lh = Lakehouse.open(tmp_path.as_uri())
    lh.create_table("ods.t", pa.schema([("k", pa.int64())]), buckets=2)
    lh.log("ods.t").append(pa.table({"k": [1, 2, 3]}))
    # half-created, as create_table left a decimal(5, -2) table before issue 22: listed, unreadable, undroppable
    half = TableDefinition.build("ods.half", pa.schema([("v", pa.decimal128(5, -2))]), buckets=1)
    lh.store.put(half.name.definition_key, half.to_json(), if_none_match=True)
    with pytest.raises(Exception, match="Could not parse decimal"):
        lh.ensure_lake_table(half)

    kept = runner.invoke(app, ["table", "drop", "ods.t", *wh], input="n\n")
    assert kept.exit_code == 1 and "cannot be undone" in kept.output and "dropped" not in kept.output
    assert [str(t) for t in lh.list_tables()] == ["ods.half", "ods.t"]
    dropped = runner.invoke(app, ["table", "drop", "ods.t", *wh], input="y\n")
    assert dropped.exit_code == 0 and "dropped ods.t: lake table," in dropped.output, dropped.output
    half_dropped = runner.invoke(app, ["table", "drop", "ods.half", "--yes", *wh])
    assert half_dropped.exit_code == 0 and "dropped ods.half" in half_dropped.output, half_dropped.output
    assert lh.list_tables() == [] and not [p for p in (tmp_path / "ods").rglob("*") if p.is_file()]
    again = runner.invoke(app, ["table", "drop", "ods.t", "--yes", *wh])
    assert again.exit_code == 1 and "no table ods.t" in again.output


@pytest.mark.parametrize("command", [["table", "list"], ["tier", "--local"], ["compact"], ["maintain"]])
def test_all_tables_commands_go_on_past_broken_tables_and_fail_at_the_end(tmp_path, command) -> None:
    """A half-created table (its lake metadata cannot be loaded) stopped tier, compact and maintain with a
    traceback; an unreadable definition stopped table list; a stray object among the definitions stopped all."""
    from lakehouse import Lakehouse
    from tests.lakehouse._broken import BROKEN, GOOD, warehouse_with_broken_tables

    wh = tmp_path.as_uri()
    warehouse_with_broken_tables(wh)
    args = [*command, "-w", wh, *(["--min-input-files", "2"] if command == ["compact"] else [])]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    output = " ".join(result.output.split())  # rich wraps long lines
    assert "ods.bad: table definition" in output and "is unreadable" in output
    for name in BROKEN + GOOD:
        assert f"{name}: {name}" not in output  # the table is named once
    if command == ["table", "list"]:  # ods.b's definition is fine: it is listed, and drop removes it
        assert "1 of 4 tables failed: ods.bad" in output, result.output
        assert all(name in output for name in GOOD) and "unreadable (see the error)" in output
        return
    assert "2 of 4 tables failed: ods.b, ods.bad" in output, result.output
    assert "ods.b: the lake table's metadata cannot be loaded" in output and "lakestream table drop ods.b" in output
    lh = Lakehouse.open(wh)
    for name in GOOD:
        if command[0] == "tier":
            assert lh.lake_offsets(name) == lh.log(name).end_offsets()
        else:
            assert name in output


def test_table_read_refuses_a_negative_limit(tmp_path) -> None:
    """``--limit -1`` printed every row but the last and "showing -1"."""
    import pyarrow as pa

    from lakehouse import Lakehouse

    Lakehouse.open(tmp_path.as_uri()).create_table("ods.t", pa.schema([("k", pa.int64())]), buckets=1)
    result = runner.invoke(app, ["table", "read", "ods.t", "--limit", "-1", "-w", tmp_path.as_uri()])
    assert result.exit_code == 2 and "greater than or equal to 0" in result.output, result.output
    result = runner.invoke(app, ["table", "read", "ods.t", "--limit", "0", "-w", tmp_path.as_uri()])
    assert result.exit_code == 0 and result.output.endswith("0 rows (union read)\n"), result.output


def test_catalog_list_shows_namespaces_and_tables_at_every_depth(tmp_path) -> None:
    import pyarrow as pa

    from lakehouse import Lakehouse

    wh = (tmp_path / "wh").as_uri()
    catalog = Lakehouse.open(wh).catalog
    catalog.create_namespace(("com", "org-1", "销售 部"))
    catalog.create_table(("com", "org-1", "销售 部", "my/table"), pa.schema([("id", pa.int64())]))
    lines = lambda *args: runner.invoke(app, ["catalog", "list", *args, "-w", wh]).output.splitlines()  # noqa: E731
    assert lines() == ["namespace  com"]
    assert lines("com") == ["namespace  com.org-1"]
    assert lines("com.org-1.销售 部") == ["table      com.org-1.销售 部.my/table"]
    result = runner.invoke(app, ["catalog", "list", "nope", "-w", wh])
    assert result.exit_code == 1 and "Namespace does not exist: nope" in result.output


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("lakestream.cli.core", "lakestream.cli"),  # split into one module per command group (issue 58)
        ("lakestream.streams", "lakehouse.spark.aggregate"),  # a feature of the Spark adapter, not of the app
    ],
)
def test_old_module_paths_import_the_moved_module_with_a_warning(monkeypatch, old: str, new: str) -> None:
    import importlib
    import warnings

    monkeypatch.delitem(sys.modules, old, raising=False)  # imported before by another test: no warning then
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        moved = importlib.import_module(old)
    assert moved is importlib.import_module(new)
    assert f"{old} moved to {new}" in " ".join(str(w.message) for w in caught if w.category is DeprecationWarning)


def test_what_callers_imported_from_the_old_cli_module_is_still_there(monkeypatch) -> None:
    from lakestream.cli import common

    monkeypatch.delitem(sys.modules, "lakestream.cli.core", raising=False)
    with pytest.warns(DeprecationWarning, match="lakestream.cli.core moved to lakestream.cli"):
        from lakestream.cli.core import app as old_app
        from lakestream.cli.core import fail, open_lakehouse
    assert old_app is app and fail is common.fail and open_lakehouse is common.open_lakehouse
