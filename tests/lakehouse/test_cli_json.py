"""``--json`` on every command that prints: each line of stdout is one JSON object (a table's rows one per line, a
single result one line), errors stay ``error:`` lines on stderr."""

from __future__ import annotations

import base64
import json
from datetime import date
from decimal import Decimal

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakehouse import Lakehouse
from lakestream.cli import app

runner = CliRunner()
NAME = "ods.orders"
SCHEMA = pa.schema(
    [
        ("o_orderkey", pa.int64()),
        ("o_totalprice", pa.decimal128(12, 2)),
        ("o_orderdate", pa.date32()),
        ("o_tag", pa.binary()),
    ]
)


def rows(keys: range, price: str = "1.50") -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "o_orderkey": list(keys),
            "o_totalprice": pa.array([Decimal(price)] * n, pa.decimal128(12, 2)),
            "o_orderdate": pa.array([date(2024, 2, 29)] * n, pa.date32()),
            "o_tag": pa.array([b"\x00\xff"] * n, pa.binary()),
        }
    )


def lines(*args: str, code: int = 0) -> list[dict]:
    """The command's stdout, each line parsed as JSON (it must be)."""
    result = runner.invoke(app, [*args, "--json"], env={"COLUMNS": None})
    assert result.exit_code == code, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def one(*args: str) -> dict:
    (doc,) = lines(*args)
    return doc


@pytest.fixture
def wh(tmp_path) -> list[str]:
    with Lakehouse.open(tmp_path.as_uri()) as lh:
        lh.create_table(NAME, SCHEMA, primary_key=["o_orderkey"], buckets=2)
        lh.log(NAME).append(rows(range(10)), "upsert")
    return ["-w", tmp_path.as_uri()]


def test_settings_and_store(wh, tmp_path) -> None:
    settings = one("config", *wh)
    assert settings["warehouse"] == tmp_path.as_uri() and settings["s3_endpoint"] is None
    assert one("store", "probe", *wh) == {"store": tmp_path.as_uri(), "conditional_writes": True}
    keys = lines("store", "ls", "_lakestream/", *wh)
    assert any(k["key"] == f"_lakestream/tables/{NAME}.json" for k in keys)
    assert all(set(k) == {"key", "size", "etag", "last_modified"} for k in keys)


def test_tables(wh, tmp_path) -> None:
    created = one("table", "create", "ods.c", "--schema", "id:int64!, name:string", "--primary-key", "id", *wh)
    assert created["kind"] == "primary-key" and created["primary_key"] == ["id"] and created["buckets"] == 4
    assert created["columns"] == [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "name", "type": "string", "nullable": True},
    ]
    described = one("table", "describe", NAME, *wh)
    assert described["name"] == NAME and described["log_records"] == 10
    assert sum(described["end_offsets"].values()) == 10 and set(described["end_offsets"]) == {"0", "1"}
    assert [t["name"] for t in lines("table", "list", *wh)] == ["ods.c", NAME]
    assert lines("table", "list", "nope", *wh) == []  # no tables: no lines, no sentence

    lines("tier", *wh, "--local")
    location = one("table", "location", NAME, *wh)
    assert location["table"] == NAME and location["metadata_location"].endswith(".metadata.json")
    registered = one("table", "register", "ods.copy", location["metadata_location"], *wh)
    assert registered == {"table": "ods.copy", "metadata_location": location["metadata_location"]}
    # the prompt goes to stderr: stdout stays JSON (CliRunner echoes the answer to stdout, as a terminal shows it)
    result = runner.invoke(app, ["table", "drop", "ods.c", *wh, "--json"], input="y\n")
    assert result.exit_code == 0 and "cannot be undone" in result.stderr, result.output
    assert "cannot be undone" not in result.stdout
    dropped = [json.loads(line) for line in result.stdout.splitlines() if line.strip() != "y"]
    assert dropped == [
        {
            "table": "ods.c",
            "lake_table": True,
            "objects_deleted": dropped[0]["objects_deleted"],
            "definition": True,
            "lake_location": None,
            "subscriptions": 0,
        }
    ]


def test_log_and_reads(wh) -> None:
    offsets = lines("log", "offsets", NAME, *wh)
    assert [o["bucket"] for o in offsets] == [0, 1] and sum(o["records"] for o in offsets) == 10
    assert all(o["start_offset"] == 0 and o["end_offset"] == o["records"] for o in offsets)
    tail = lines("log", "tail", NAME, "--bucket", "0", "--limit", "3", *wh)
    assert len(tail) == 3 and [r["_offset"] for r in tail] == [offsets[0]["records"] - 3 + i for i in range(3)]
    assert tail[0]["_op"] == "upsert" and tail[0]["o_totalprice"] == "1.50"  # a decimal exactly, as a string
    assert tail[0]["o_orderdate"] == "2024-02-29" and base64.b64decode(tail[0]["o_tag"]) == b"\x00\xff"
    assert "T" in tail[0]["_timestamp"]  # ISO 8601

    tiered = lines("tier", *wh, "--local")
    assert [t["table"] for t in tiered] == [NAME] and tiered[0]["rows"] == 10
    assert tiered[0]["offsets"] == {str(o["bucket"]): o["end_offset"] for o in offsets}
    usage, cost = tiered[0]["usage"], tiered[0]["cost"]  # the round's requests, priced (AWS list prices)
    assert usage["requests"]["PUT"] >= tiered[0]["files_added"] + 1 and usage["bytes_sent"] > 0
    assert cost["total"] > 0
    assert cost["total"] == pytest.approx(cost["write_requests"] + cost["read_requests"] + cost["transfer"])
    with Lakehouse.open(wh[1]) as lh:
        lh.log(NAME).append(rows(range(3), "9.99"), "upsert")
        start = lh.lake_offsets(NAME)
    read = lines("table", "read", NAME, "--limit", "100", *wh)
    assert sorted(r["o_orderkey"] for r in read) == list(range(10))
    assert {r["o_orderkey"]: r["o_totalprice"] for r in read}[2] == "9.99"  # fresh: the log tail too
    assert len(lines("table", "read", NAME, "--lake", "--limit", "4", *wh)) == 4
    changes = lines("table", "changes", NAME, "--start", ",".join(f"{b}:{o}" for b, o in start.items()), *wh)
    assert sorted((c["o_orderkey"], c["_op"]) for c in changes) == [(k, "update_after") for k in range(3)]


def test_all_tables_commands_print_each_table_or_its_error(tmp_path) -> None:
    """As the jobs do: a table's result, or ``{"table", "error", "type"}``; exit 1 if any failed."""
    from tests.lakehouse._broken import BROKEN, GOOD, warehouse_with_broken_tables

    wh = ["-w", tmp_path.as_uri()]
    warehouse_with_broken_tables(tmp_path.as_uri())
    for command in (["tier", "--local"], ["compact", "--min-input-files", "2"], ["maintain"], ["table", "list"]):
        out = lines(*command, *wh, code=1)
        by_table = {o.get("table", o.get("name")): o for o in out}
        failed = {"ods.bad"} if command == ["table", "list"] else {"ods.b", "ods.bad"}
        assert set(by_table) == set(BROKEN + GOOD), out
        assert {t for t, o in by_table.items() if "error" in o} == failed, out
        assert all(by_table[t]["type"] for t in failed)


def test_catalog(wh) -> None:
    lines("tier", *wh, "--local")
    assert lines("catalog", "list", *wh) == [{"kind": "namespace", "name": "ods", "identifier": ["ods"]}]
    assert lines("catalog", "list", "ods", *wh) == [{"kind": "table", "name": NAME, "identifier": ["ods", "orders"]}]
    assert one("catalog", "properties", *wh)["py-catalog-impl"] == "lakehouse.iceberg.catalog.ObjectStoreCatalog"
    assert one("catalog", "repair", *wh) == {"resolved": []}


def test_subscriptions(wh) -> None:
    with Lakehouse.open(wh[1]) as lh:
        lh.subscription(NAME, "billing", start="earliest")
    (listed,) = lines("subscription", "list", *wh)
    assert listed["table"] == NAME and listed["consumer"] == "billing" and listed["records_behind"] == 10
    assert listed["position"] == {"0": 0, "1": 0} and listed["stale"] is False
    shown = one("subscription", "show", NAME, "billing", *wh)
    assert [b["bucket"] for b in shown["buckets"]] == [0, 1] and shown["advances"] == 0
    assert sum(b["records_behind"] for b in shown["buckets"]) == 10 and shown["pinned_snapshots"] == []
    assert one("subscription", "drop", NAME, "billing", "--yes", *wh) == {
        "table": NAME,
        "consumer": "billing",
        "dropped": True,
    }
    assert lines("subscription", "list", *wh) == []


def test_demo(tmp_path) -> None:
    out = lines("demo", "-w", str(tmp_path / "wh"), "--local", "--changes", "2000", "--big-mib", "6")
    *steps, summary = out
    assert [s["step"] for s in steps][:2] == ["create tables", "produce 1,000 changes"]
    assert all(set(s) == {"step", "result", "seconds"} for s in steps)
    assert summary["ok"] is True and summary["log_end"] == summary["lake_offsets"]
    assert summary["metadata_location"].endswith(".metadata.json")


def test_errors_stay_on_stderr(wh) -> None:
    result = runner.invoke(app, ["table", "describe", "ods.nope", "--json", *wh])
    assert result.exit_code == 1 and result.stdout == "" and "error: no table ods.nope" in result.stderr


def test_json_reads_every_row_unless_a_limit_is_given(tmp_path) -> None:
    """``table read --json`` stopped at 20 rows and said nothing: a script got a silently cut table."""
    wh = ["-w", tmp_path.as_uri()]
    with Lakehouse.open(tmp_path.as_uri()) as lh:
        lh.create_table(NAME, SCHEMA, primary_key=["o_orderkey"], buckets=2)
        lh.log(NAME).append(rows(range(25)), "upsert")
        start = {b: 0 for b in range(2)}
    assert sorted(r["o_orderkey"] for r in lines("table", "read", NAME, *wh)) == list(range(25))
    assert len(lines("table", "read", NAME, "--limit", "7", *wh)) == 7  # a limit asked for still holds
    since = ",".join(f"{b}:{o}" for b, o in start.items())
    assert len(lines("table", "changes", NAME, "--start", since, *wh)) == 25
    assert len(lines("table", "changes", NAME, "--start", since, "--limit", "3", *wh)) == 3


def test_the_table_view_says_when_it_cuts(tmp_path) -> None:
    wh = ["-w", tmp_path.as_uri()]
    with Lakehouse.open(tmp_path.as_uri()) as lh:
        lh.create_table(NAME, SCHEMA, primary_key=["o_orderkey"], buckets=2)
        lh.log(NAME).append(rows(range(25)), "upsert")
    cut = runner.invoke(app, ["table", "read", NAME, *wh], env={"COLUMNS": None})
    assert cut.exit_code == 0 and "25 rows (union read); showing the first 20 (--limit N shows more)" in cut.stdout
    whole = runner.invoke(app, ["table", "read", NAME, "--limit", "30", *wh], env={"COLUMNS": None})
    assert whole.exit_code == 0 and "25 rows (union read)\n" in whole.stdout and "showing" not in whole.stdout
