"""`lakestream layers deploy|run|rebuild|status`: the commands' plumbing against a stand-in runner (fast), then on
a file:// warehouse with the real runner and Spark (the example project, a few ODS rows)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakestream.cli import app

REPO = Path(__file__).resolve().parents[2]
TPCH = REPO / "examples" / "tpch"
MODELS = ["dwd.orders_enriched", "ads.revenue_by_nation_month"]

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, ["layers", *args], catch_exceptions=False, env={"COLUMNS": "400"})


# -- a stand-in for layers.runner (the contract the commands are written against) ------------------


@dataclass(frozen=True)
class Report:
    model: str
    round: int = 0
    strategy: str = "keyed"
    reason: str = "r"
    positions: dict = field(default_factory=dict)
    input_changes: int = 3
    affected: int = 2
    upserts: int = 2
    deletes: int = 0
    seconds: float = 0.5
    idle: bool = False
    resumed: bool = False

    def to_json(self) -> dict:
        return {"model": self.model, "round": self.round, "strategy": self.strategy, "idle": self.idle}


@dataclass(frozen=True)
class Status:
    model: str
    strategy: str
    positions: dict
    lag_records: dict
    lag_seconds: float | None
    last_round: Report | None

    def to_json(self) -> dict:
        return {"model": self.model, "lag_records": self.lag_records, "lag_seconds": self.lag_seconds}


class FakeLayers:
    calls: list = []
    follow_behaviour = None

    def __init__(self, lh, project, spark=None, *, spark_master="local[2]"):
        self.project = project
        self.calls.append(("init", spark_master))

    def deploy(self):
        self.calls.append(("deploy",))
        return ["ods.orders"]

    def run_once(self, models=None):
        self.calls.append(("run_once", models))
        return [Report(m, idle=(m != self.project.order[0])) for m in (models or self.project.order)]

    def rebuild(self, model, *, abandon=False):
        self.calls.append(("rebuild", model, abandon))
        return Report(model, strategy="rebuild", upserts=7)

    def status(self):
        return [
            Status("dwd.orders_enriched", "keyed", {"ods.orders": {0: 5, 1: 7}}, {"ods.orders": 4}, 1.5, Report("x")),
            Status("ads.revenue_by_nation_month", "regroup", {}, {}, None, None),
        ]

    def follow(self, *, poll_seconds=0.2, stop=None, max_rounds=None, on_round=None, models=None):
        self.calls.append(("follow", poll_seconds, max_rounds, models))
        type(self).follow_behaviour(stop, on_round)

    def close(self):
        self.calls.append(("close",))


@pytest.fixture
def fake(monkeypatch, tmp_path):
    module = types.ModuleType("layers.runner")
    module.Runner = FakeLayers
    FakeLayers.calls = []
    monkeypatch.setitem(sys.modules, "layers.runner", module)
    monkeypatch.setenv("LAKESTREAM_WAREHOUSE", tmp_path.as_uri())
    return FakeLayers


def test_run_needs_once_or_follow(fake) -> None:
    for args in ([], ["--once", "--follow"]):
        result = invoke("run", "--project", str(TPCH), *args)
        assert result.exit_code == 1
        assert "give one of --once" in result.output
    assert fake.calls == []  # nothing opened


@pytest.mark.parametrize("command", [["run", "--once"], ["rebuild"]])
def test_a_model_the_project_lacks_is_one_line_and_exit_1(fake, command) -> None:
    result = invoke(*command, "--project", str(TPCH), "--model", "dwd.nope")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "--model dwd.nope: no model of this project" in lines[0]
    assert "its models are dwd.orders_enriched, ads.revenue_by_nation_month" in " ".join(result.output.split())
    result = invoke(*command, "--project", str(TPCH), "--model", "ods.orders")
    assert result.exit_code == 1 and "a source, not a model" in result.output
    assert ("close",) in fake.calls and not any(c[0] in ("run_once", "rebuild") for c in fake.calls)


def test_a_broken_project_is_one_line_and_exit_1(fake, tmp_path) -> None:
    result = invoke("run", "--once", "--project", str(tmp_path / "missing"))
    assert result.exit_code == 1
    assert "does not exist" in result.output and fake.calls == []


def test_deploy_prints_created_and_already_there(fake) -> None:
    result = invoke("deploy", "--project", str(TPCH))
    assert result.exit_code == 0, result.output
    assert "1 created, 4 already there" in result.output
    assert fake.calls == [("init", "local[2]"), ("deploy",), ("close",)]  # Spark only to infer types
    result = invoke("deploy", "--project", str(TPCH), "--json")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert {line["table"]: (line["kind"], line["created"]) for line in lines} == {
        "ods.orders": ("source", True),
        "ods.customer": ("source", False),
        "ods.nation": ("source", False),
        "dwd.orders_enriched": ("model", False),
        "ads.revenue_by_nation_month": ("model", False),
    }


def test_run_once_prints_a_table_or_json_lines(fake) -> None:
    result = invoke("run", "--once", "--project", str(TPCH), "--spark-master", "local[1]")
    assert result.exit_code == 0, result.output
    assert "dwd.orders_enriched" in result.output and "keyed (idle)" in result.output
    assert fake.calls == [("init", "local[1]"), ("run_once", None), ("close",)]

    fake.calls.clear()
    result = invoke("run", "--once", "--project", str(TPCH), "--model", "ADS.revenue_by_nation_month", "--json")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert lines == [{"model": "ads.revenue_by_nation_month", "round": 0, "strategy": "keyed", "idle": True}]
    assert ("run_once", ["ads.revenue_by_nation_month"]) in fake.calls


def test_follow_prints_rounds_until_sigint_and_exits_0(fake) -> None:
    def behaviour(stop: threading.Event, on_round) -> None:
        on_round(Report("dwd.orders_enriched", round=0))
        on_round(Report("ads.revenue_by_nation_month", round=0))
        on_round(Report("dwd.orders_enriched", round=1, idle=True))  # idle: not shown
        on_round(Report("dwd.orders_enriched", round=2))
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl+C: the command's handler sets the stop event
        assert stop.wait(5)

    fake.follow_behaviour = behaviour
    before = signal.getsignal(signal.SIGINT)
    result = invoke("run", "--follow", "--project", str(TPCH), "--poll-seconds", "0.5", "--max-rounds", "9")
    assert result.exit_code == 0, result.output
    assert signal.getsignal(signal.SIGINT) is before  # restored
    assert ("follow", 0.5, 9, None) in fake.calls and fake.calls[-1] == ("close",)
    assert result.output.count("┃ model") == 2  # one table per pass: rounds 0, then round 2 (flushed at the end)

    result = invoke("run", "--follow", "--json", "--project", str(TPCH))
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [(line["model"], line["round"]) for line in lines] == [
        ("dwd.orders_enriched", 0),
        ("ads.revenue_by_nation_month", 0),
        ("dwd.orders_enriched", 2),
    ]

    fake.calls.clear()
    result = invoke("run", "--follow", "--json", "--project", str(TPCH), "--model", "DWD.orders_enriched")
    assert result.exit_code == 0, result.output
    assert ("follow", 0.2, None, ["dwd.orders_enriched"]) in fake.calls


def test_rebuild_and_status(fake) -> None:
    result = invoke("rebuild", "--project", str(TPCH), "--model", "dwd.orders_enriched", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["strategy"] == "rebuild"
    assert ("rebuild", "dwd.orders_enriched", False) in fake.calls
    result = invoke("rebuild", "--project", str(TPCH), "--model", "dwd.orders_enriched", "--abandon")
    assert result.exit_code == 0, result.output
    assert ("rebuild", "dwd.orders_enriched", True) in fake.calls

    result = invoke("status", "--project", str(TPCH))
    assert result.exit_code == 0, result.output
    assert "ods.orders @ 12 (2 buckets)" in result.output and "caught up" in result.output
    assert "ods.orders: 4" in result.output
    result = invoke("status", "--project", str(TPCH), "--json")
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [line["model"] for line in lines] == MODELS


# -- the real runner on a file:// warehouse -------------------------------------------------------------------


@pytest.fixture
def warehouse(monkeypatch, tmp_path) -> str:
    url = (tmp_path / "wh").as_uri()
    monkeypatch.setenv("LAKESTREAM_WAREHOUSE", url)
    return url


def test_deploy_twice_is_idempotent(warehouse) -> None:
    from lakehouse import Lakehouse

    first = invoke("deploy", "--project", str(TPCH))
    assert first.exit_code == 0, first.output
    assert "5 created, 0 already there" in first.output
    second = invoke("deploy", "--project", str(TPCH))
    assert second.exit_code == 0, second.output
    assert "0 created, 5 already there" in second.output
    with Lakehouse.open(warehouse) as lh:
        assert sorted(str(t) for t in lh.list_tables()) == sorted(["ods.nation", "ods.customer", "ods.orders", *MODELS])


def test_deploy_over_a_table_of_another_shape_is_one_line_and_exit_1(warehouse) -> None:
    import pyarrow as pa

    from lakehouse import Lakehouse

    with Lakehouse.open(warehouse) as lh:
        lh.create_table(
            "ods.nation",
            pa.schema([pa.field("n_nationkey", pa.int64(), nullable=False)]),
            primary_key=["n_nationkey"],
            buckets=1,
        )
    result = invoke("deploy", "--project", str(TPCH))
    assert result.exit_code == 1
    assert result.output.startswith("error: source ods.nation: sources.yml") and len(result.output.splitlines()) == 1


def test_run_once_status_rebuild_equal_the_sql(warehouse, spark, monkeypatch) -> None:
    """The commands build their own session: in this process that is the tests' session (getOrCreate), which
    they must not stop."""
    from lakehouse import Lakehouse
    from layers import load_project
    from tests.layers._tpch_sql import produce, sql_rows, table_rows

    monkeypatch.setattr(spark, "stop", lambda: None)
    project = load_project(TPCH)
    assert invoke("deploy", "--project", str(TPCH)).exit_code == 0
    with Lakehouse.open(warehouse) as lh:
        produce(lh, project)

    def run_and_check(expected_strategies: list[str]) -> list[dict]:
        result = invoke("run", "--once", "--json", "--project", str(TPCH))
        assert result.exit_code == 0, result.output
        reports = [json.loads(line) for line in result.output.splitlines()]
        assert [(r["model"], r["strategy"]) for r in reports] == list(zip(MODELS, expected_strategies, strict=True))
        with Lakehouse.open(warehouse) as lh:
            for model in MODELS:
                got = table_rows(lh, project, model)
                assert got and got == sql_rows(spark, lh, project, model), model
        return reports

    first = run_and_check(["recompute", "recompute"])  # a model's first round: the whole SQL
    assert all(r["upserts"] > 0 and r["round"] == 0 for r in first)

    # the nation 9 customer's orders wait: not in dwd; then changes that move keys between joins and groups
    with Lakehouse.open(warehouse) as lh:
        assert all(row["o_custkey"] != 4 for row in table_rows(lh, project, "dwd.orders_enriched"))
        produce(lh, project, round_=1)
    second = run_and_check(["keyed", "regroup"])
    assert all(r["round"] == 1 and r["input_changes"] > 0 for r in second), second
    assert second[0]["deletes"] == 1  # order 5

    table = invoke("run", "--once", "--project", str(TPCH))  # nothing new: idle rounds, shown as such
    assert table.exit_code == 0 and table.output.count("(idle)") == 2, table.output

    status = invoke("status", "--json", "--project", str(TPCH))
    assert status.exit_code == 0, status.output
    lines = [json.loads(line) for line in status.output.splitlines()]
    assert [s["model"] for s in lines] == MODELS
    assert all(s["lag_seconds"] is None and set(s["lag_records"].values()) == {0} for s in lines), lines
    assert [s["last_round"]["round"] for s in lines] == [1, 1]
    text = invoke("status", "--project", str(TPCH))
    assert text.exit_code == 0 and "caught up" in text.output and "round 1 keyed" in text.output, text.output

    # --follow: a new order flows through both layers; --max-rounds 2 ends it after those two rounds
    import datetime
    from decimal import Decimal

    import pyarrow as pa

    with Lakehouse.open(warehouse) as lh:
        order = {
            "o_orderkey": 100,
            "o_custkey": 0,
            "o_orderstatus": "O",
            "o_totalprice": Decimal("5.00"),
            "o_orderdate": datetime.date(2024, 1, 20),
            "o_orderpriority": "3-MEDIUM",
        }
        lh.log("ods.orders").append(pa.Table.from_pylist([order], schema=project.schema_of("ods.orders")), "upsert")
    followed = invoke("run", "--follow", "--max-rounds", "2", "--poll-seconds", "0.05", "--project", str(TPCH))
    assert followed.exit_code == 0, followed.output
    assert "dwd.orders_enriched" in followed.output and "ads.revenue_by_nation_month" in followed.output
    with Lakehouse.open(warehouse) as lh:
        for model in MODELS:
            assert table_rows(lh, project, model) == sql_rows(spark, lh, project, model), model

    rebuilt = invoke("rebuild", "--json", "--project", str(TPCH), "--model", "ads.revenue_by_nation_month")
    assert rebuilt.exit_code == 0, rebuilt.output
    report = json.loads(rebuilt.output)
    assert (report["strategy"], report["upserts"], report["deletes"]) == ("rebuild", 0, 0)  # == incremental state
