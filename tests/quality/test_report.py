"""Quality reports (issue 26 item 5): the figures of a table (metadata only, exact), runs kept in the warehouse
(create-only, newest first), self-contained escaped HTML pages written locally and to the warehouse, and the page
as headless Chromium renders it (a screenshot that is not blank, the DOM showing the expected figures)."""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
import re
import shutil
import subprocess
import time
import zlib
from datetime import UTC, datetime, timedelta
from html import escape as html_escape
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pytest

from layers.rounds import consumer_of, model_of_consumer, self_consumer_of
from quality.errors import InvalidArgument, QualityError
from quality.report import (
    FILTER_JS,
    INDEX_KEY,
    REPORTS_PREFIX,
    lineage,
    render_index,
    render_run,
    report_data,
    write_report,
)
from quality.results import GX, RECONCILE, CheckResult, QualityRun, Violation
from quality.runs import RUNS_PREFIX, RunAlreadySaved, load_run, load_runs, new_run_id, save_run
from quality.stats import table_stats

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
NAME = "ods.q"
EVIL = "<script>alert('x')</script>"
DOCS = "_lakestream/quality/gx/docs/ods.orders/index.html"
T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


def batch(keys, tag: str) -> pa.Table:
    keys = list(keys)
    return pa.table({"k": pa.array(keys, pa.int64()), "v": [f"{tag}-{k}" for k in keys]})


# ---- stats ----------------------------------------------------------------------------------------------------


def test_table_stats_exact_figures(lakehouse) -> None:
    lh = lakehouse
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=3)
    log = lh.log(NAME)
    log.append(batch(range(40), "a"), op="upsert")

    empty = table_stats(lh, NAME)  # nothing tiered yet: no snapshot, everything is lag
    assert empty["snapshot_id"] is None
    assert empty["files"] == {"count": 0, "bytes": 0, "records": 0, "delete_files": 0}
    assert sum(b["lag_records"] for b in empty["buckets"]) == 40
    assert all(b["lake_offset"] == 0 for b in empty["buckets"])

    lh.tier(NAME)
    log.append(batch(range(30, 50), "b"), op="upsert")
    lh.tier(NAME)
    tiered = log.end_offsets()
    sub = lh.subscription(NAME, "c1")  # at the log's end: behind by what comes next
    appended_at = time.time()
    log.append(batch(range(45, 62), "c"), op="upsert")  # 17 records not in the lake
    ends = log.end_offsets()
    time.sleep(0.3)
    stats = table_stats(lh, NAME)
    elapsed = time.time() - appended_at

    json.dumps(stats)  # JSON values only
    table = lh.lake_table(NAME)
    assert stats["table"] == NAME
    assert stats["snapshot_id"] == table.current_snapshot().snapshot_id
    assert [b["bucket"] for b in stats["buckets"]] == [0, 1, 2]
    for b in stats["buckets"]:
        i = b["bucket"]
        assert (b["log_start"], b["log_end"], b["lake_offset"]) == (0, ends[i], tiered[i])
        assert b["lag_records"] == ends[i] - tiered[i]
        if b["lag_records"]:
            assert 0.3 <= b["lag_seconds"] <= elapsed + 0.5
        else:
            assert b["lag_seconds"] == 0.0
    assert sum(b["lag_records"] for b in stats["buckets"]) == 17
    assert stats["log_records"] == sum(ends.values()) == 40 + 20 + 17

    [s] = stats["subscriptions"]
    assert s["consumer"] == "c1" and s["stale"] is False
    assert s["lag_records"] == 17
    assert 0.3 <= s["lag_seconds"] <= elapsed + 0.5
    assert 0.3 <= s["idle_seconds"] <= (datetime.now(UTC) - sub.advanced_at).total_seconds()

    files = list(table.scan().plan_files())
    assert stats["files"]["count"] == len(files) > 0
    delete_files = {d.file_path: d for t in files for d in t.delete_files}.values()  # merge-on-read's marks
    data_bytes = sum(t.file.file_size_in_bytes for t in files)
    assert stats["files"]["bytes"] == data_bytes + sum(d.file_size_in_bytes for d in delete_files)
    assert stats["files"]["delete_files"] == len(delete_files)
    assert stats["files"]["records"] == sum(t.file.record_count for t in files)

    sub.advance(ends)
    lh.tier(NAME)  # caught up: no lag anywhere
    caught = table_stats(lh, NAME)
    assert all(b["lag_records"] == 0 and b["lag_seconds"] == 0.0 for b in caught["buckets"])
    assert caught["subscriptions"][0]["lag_records"] == 0 and caught["subscriptions"][0]["lag_seconds"] == 0.0
    assert caught["snapshot_id"] != stats["snapshot_id"]


# ---- runs -----------------------------------------------------------------------------------------------------


def small_run(run_id: str, ok: bool = True) -> QualityRun:
    violations = [] if ok else [Violation("content", NAME, "a row differs", bucket=0, offsets=(3, 9), keys=(7,))]
    return QualityRun(
        run_id=run_id,
        started="2026-11-20T08:00:00+00:00",
        finished="2026-11-20T08:00:05+00:00",
        results=[CheckResult(RECONCILE, NAME, snapshot_id=11, seconds=1.5, rows=90, violations=violations)],
        tables={NAME: {"table": NAME, "buckets": [{"bucket": 0, "lag_records": 3}]}},
        published={NAME: 11},
    )


@pytest.mark.backends("local", "s3")
def test_runs_roundtrip_order_and_create_only(lakehouse) -> None:
    lh = lakehouse
    assert load_runs(lh) == []
    ids = [new_run_id(T0 + timedelta(minutes=m)) for m in (5, 0, 10, 2)]
    assert sorted(ids) == [ids[1], ids[3], ids[0], ids[2]]  # sortable by time
    assert len({new_run_id(T0) for _ in range(20)}) == 20  # the random tail tells runs of one instant apart
    runs = {i: small_run(i, ok=n % 2 == 0) for n, i in enumerate(ids)}
    for run in runs.values():
        assert save_run(lh, run) == f"{RUNS_PREFIX}{run.run_id}.json"

    loaded = load_runs(lh)
    assert [r.run_id for r in loaded] == sorted(ids, reverse=True)
    assert [r.to_dict() for r in loaded] == [runs[i].to_dict() for i in sorted(ids, reverse=True)]
    assert [r.run_id for r in load_runs(lh, limit=2)] == sorted(ids, reverse=True)[:2]
    assert load_run(lh, ids[1]).to_dict() == runs[ids[1]].to_dict()
    assert load_run(lh, ids[1]).violations[0].offsets == (3, 9)

    changed = small_run(ids[0], ok=False)
    with pytest.raises(RunAlreadySaved, match=f"{re.escape(ids[0])} is already kept"):
        save_run(lh, changed)
    assert load_run(lh, ids[0]).to_dict() == runs[ids[0]].to_dict()  # the first one stays
    assert isinstance(RunAlreadySaved("x"), QualityError)

    with pytest.raises(QualityError, match="no quality run"):
        load_run(lh, new_run_id())
    with pytest.raises(InvalidArgument):
        load_run(lh, "../escape")
    lh.store.put(f"{RUNS_PREFIX}99991231T000000.000000Z-badbad.json", b"{not json")
    assert [r.run_id for r in load_runs(lh)] == sorted(ids, reverse=True)  # unreadable: skipped


# ---- report ---------------------------------------------------------------------------------------------------


def stats_for(table: str, lag: list[int], files: int, snapshot: int) -> dict:
    return {
        "table": table,
        "snapshot_id": snapshot,
        "buckets": [
            {
                "bucket": b,
                "log_start": 0,
                "log_end": 5000 + b * 1000 + lag[b],
                "lake_offset": 5000 + b * 1000,
                "lag_records": lag[b],
                "lag_seconds": 42.5 if lag[b] else 0.0,
            }
            for b in range(len(lag))
        ],
        "subscriptions": [
            {"consumer": "dwd.orders_enriched", "lag_records": 777, "lag_seconds": 12.0, "idle_seconds": 30.0}
            | {"stale": False}
        ],
        "files": {"count": files, "bytes": files * 3_500_000, "records": 98_765, "delete_files": 0},
        "log_records": 20_000,
    }


def the_run(run_id: str | None = None) -> QualityRun:
    """A failing run: orders reconciles clean with a GX suite, its evil-named neighbour has violations."""
    evil_table = f"ods.{EVIL}"
    results = [
        CheckResult(
            RECONCILE,
            "ods.orders",
            snapshot_id=5550001,
            seconds=3.25,
            rows=123_456,
            details={"commits_checked": 7, "full": False},
        ),
        CheckResult(
            GX + ":orders_suite",
            "ods.orders",
            snapshot_id=5550001,
            seconds=1.5,
            rows=4_000,
            details={"data_docs": DOCS, "expectations": 12},
        ),
        CheckResult(
            RECONCILE,
            evil_table,
            snapshot_id=6660002,
            seconds=0.75,
            rows=2_048,
            details={"commits_checked": 2, "note": EVIL},
            violations=[
                Violation(
                    "content",
                    evil_table,
                    f"bucket 1 differs from the log: {EVIL}",
                    bucket=1,
                    offsets=(1200, 1300),
                    snapshot_id=6660002,
                    keys=("order-4711", EVIL),
                    expected={"amount": 10},
                    actual={"amount": 11},
                ),
                Violation(
                    "records-count",
                    evil_table,
                    "added-records 99 != 100 records",
                    snapshot_id=6660002,
                    expected=100,
                    actual=99,
                ),
            ],
        ),
    ]
    return QualityRun(
        run_id=run_id or new_run_id(T0 + timedelta(hours=6)),
        started=(T0 + timedelta(hours=6)).isoformat(),
        finished=(T0 + timedelta(hours=6, seconds=8)).isoformat(),
        results=results,
        tables={
            "ods.orders": stats_for("ods.orders", [1234, 0], files=17, snapshot=5550001),
            evil_table: stats_for(evil_table, [5, 9], files=3, snapshot=6660002),
        },
        published={"ods.orders": 5550001, evil_table: 6660001},
    )


def history_runs() -> list[QualityRun]:
    out = []
    for h in range(5):
        at = T0 + timedelta(hours=h)
        out.append(
            QualityRun(
                run_id=new_run_id(at),
                started=at.isoformat(),
                finished=(at + timedelta(seconds=4)).isoformat(),
                results=[CheckResult(RECONCILE, "ods.orders", snapshot_id=100 + h, seconds=1.0 + h, rows=1000)],
                tables={"ods.orders": stats_for("ods.orders", [100 * h, 10], files=10 + h, snapshot=100 + h)},
                published={"ods.orders": 100 + h},
            )
        )
    return out


def anomaly_result(severity: str = "warn") -> CheckResult:
    """The run's anomaly check of ods.orders' changes, flagging its newest commit (snapshot 5550001)."""
    message = f"changes of ods.orders at snapshot 5550001 is 3: outside [40, 60] {EVIL}"
    return CheckResult(
        "anomaly:changes",
        "ods.orders",
        snapshot_id=5550001,
        details={
            "metric": "changes",
            "column": None,
            "severity": severity,
            "anomalies": [{"snapshot_id": 5550001, "value": 3.0, "message": message}],
        },
    )


def series_points(n: int, last_value: float = 3.0) -> list[list]:
    """``n`` hourly commits of about 50 changes up to the run's start, the newest (snapshot 5550001) ``last_value``."""
    pts = [[(T0 + timedelta(hours=i - n + 6)).isoformat(), 5540000 + i, 50.0 + (i % 3)] for i in range(n - 1)]
    return [*pts, [(T0 + timedelta(hours=6)).isoformat(), 5550001, last_value]]


def report_extras() -> dict:
    """What `report_data` reads for `the_run` plus its anomaly result: series and open incidents, plain data."""
    return {
        "metrics": {
            "ods.orders": [
                {"metric": "changes", "column": None, "points": series_points(30)},
                {
                    "metric": "rows",
                    "column": None,
                    "points": [[p[0], p[1], 1000.0 + 50 * i] for i, p in enumerate(series_points(30))],
                },
                {"metric": "null_fraction", "column": "v", "points": [[p[0], p[1], 0.01] for p in series_points(30)]},
            ]
        },
        "incidents": [
            {
                "table": "ods.orders",
                "check": "anomaly:changes",
                "column": None,
                "kind": "anomaly",
                "severity": "warn",
                "opened_at": T0.isoformat(),
                "last_seen": (T0 + timedelta(hours=6)).isoformat(),
                "sent": "open",
                "delivered": ["webhook"],
                "message": f"changes dropped {EVIL}",
            },
            {
                "table": "ods.missing",
                "check": "reconcile",
                "column": None,
                "kind": "error",
                "severity": "fail",
                "opened_at": T0.isoformat(),
                "last_seen": T0.isoformat(),
                "sent": None,
                "delivered": [],
                "message": "TableNotFound",
            },
        ],
    }


EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)


VOID = {"meta", "br", "input", "img", "hr", "link", "col", "wbr"}


class Balance(HTMLParser):
    """Every element closed, in order (void elements aside), and each id once: the page parses as written."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids += [v or "" for k, v in attrs if k == "id"]
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, (tag, self.open[-5:])
        self.open.pop()


def assert_well_formed(page: str) -> None:
    parser = Balance()
    parser.feed(page)
    parser.close()
    assert parser.open == [] and len(parser.ids) == len(set(parser.ids)), (parser.open, parser.ids)


def assert_self_contained(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert_well_formed(page)
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    # the only script is the filter's, inline, and the policy allows exactly it (by its hash), nothing else
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, re.DOTALL)
    assert page.lower().count("<script") == len(scripts) <= 1
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy.partition("script-src")[2]
    if scripts:
        [(attributes, code)] = scripts
        assert attributes == "" and code == FILTER_JS
        digest = base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
        assert f"script-src 'sha256-{digest}'" in policy
    else:
        assert "script-src" not in policy
    assert "<link" not in page.lower() and "@import" not in page
    assert "<svg" in page  # charts drawn inline


def test_render_run_shows_figures_escaped_and_self_contained() -> None:
    run, history = the_run(), history_runs()
    page = render_run(run, history)
    assert_self_contained(page)
    assert 'id="status">FAIL<' in page
    assert "2 violations" in page or "2 violations" in re.sub(r"<[^>]+>", "", page)
    # escaped: the evil name and values appear only as text
    assert EVIL not in page and "&lt;script&gt;" in page
    assert "ods.&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    # violations: code, bucket, offsets, snapshot, sample keys, expected vs actual
    for text in (
        "content",
        "records-count",
        "[1,200, 1,300)",
        "6660002",
        "order-4711",
        "{&quot;amount&quot;: 10}",
        "{&quot;amount&quot;: 11}",
    ):
        assert text in page, text
    # buckets: log end, lake offset, lag in records and time; subscriptions
    for text in ("6,234", "1,234", "5,000", "42.50 s", "dwd.orders_enriched", "777", "12.00 s", "30.00 s"):
        assert text in page, text
    # the last reconciliation and its cost, GX with a relative Data Docs link, files
    for text in (
        "commits_checked",
        "3.25 s",
        "123,456",
        "orders_suite",
        f'href="../../../{DOCS}"',
        "17</b>",
        "56.7 MB",
        "98,765",
    ):
        assert text in page, text
    # trends over the history and this run: 6 runs, one point per run and table that has figures
    assert "Trends over the last 6 runs" in page
    assert page.count("<circle") == 3 * (6 + 1)  # lag, lag seconds, files: orders in 6 runs + evil in 1
    assert page.count("<rect") == 6  # check time per run


def test_metrics_charts_mark_the_run_s_anomalies_and_open_incidents_are_listed() -> None:
    """Per table, a small chart per metrics series (data handed to the renderer), the points the run's anomaly
    checks flagged in red with the message as tooltip; an Incidents section lists the open incidents (table,
    check, column, since, last seen, notified). All escaped, no script added; without the data, neither."""
    run = the_run()
    run.results.append(anomaly_result())
    page = render_run(run, history_runs(), data=report_extras())
    assert_self_contained(page)
    section = page[re.search(r'<section class="box tsec" id="t\d+" data-table="ods.orders"', page).start() :]
    section = section[: section.index("</section>")]
    for caption in ("<figcaption>changes", "<figcaption>rows", "<figcaption>null_fraction:v"):
        assert caption in section, caption
    # the flagged commit: one red point, its tooltip the anomaly's message, escaped
    assert page.count('class="anomaly"') == 1 and '<span class="chip fail">1 anomaly</span>' in section
    [tip] = re.findall(r'<circle class="anomaly"[^>]*><title>([^<]*)</title>', section)
    assert "snapshot 5550001" in tip and "Anomaly (warn): changes of ods.orders at snapshot 5550001 is 3" in tip
    assert EVIL not in page and "outside [40, 60] &lt;script&gt;" in tip
    assert section.count("<polyline") == 3
    # the incidents, each linked to its table's section when the run has one
    incidents = page[page.index('id="incidents"') :]
    incidents = incidents[: incidents.index("</section>")]
    assert "Incidents (2 open)" in incidents
    assert re.search(r'<a href="#t\d+">ods.orders</a></td><td><code>anomaly:changes</code>', incidents)
    assert '<span class="chip pass">yes</span> <span class="muted">webhook</span>' in incidents
    assert "<td>ods.missing</td>" in incidents and '<span class="chip error">not yet</span>' in incidents
    assert T0.isoformat() in incidents and "changes dropped &lt;script&gt;" in incidents
    # nothing read: no section, no charts; read and empty: said so
    plain = render_run(run, history_runs())
    assert 'id="incidents"' not in plain and "Metrics per commit" not in plain and 'class="anomaly"' not in plain
    empty = render_run(run, history_runs(), data={"metrics": {}, "incidents": []})
    assert "No metrics recorded yet" in empty
    passing = QualityRun("r1", T0.isoformat(), T0.isoformat(), results=[CheckResult(RECONCILE, "ods.a", rows=1)])
    assert "No open incidents." in render_run(passing, [], data={"metrics": {}, "incidents": []})


def test_a_failing_check_s_incident_is_named_not_contradicted() -> None:
    """The page said "No open incidents." while a check failed: incidents are opened when the run's alerts are
    sent (the alerts task, after the check), so at report time the record does not have them yet. The page lists
    what this run's failing checks and warnings open, and which of them are open already."""
    run = the_run()
    run.results.append(anomaly_result())  # a warning: opens a warn incident too
    page = render_run(run, history_runs(), data={"metrics": {}, "incidents": []})
    assert_self_contained(page)
    incidents = page[page.index('id="incidents"') :]
    incidents = incidents[: incidents.index("</section>")]
    assert "No open incidents." not in incidents
    text = re.sub(r"<[^>]+>", "", incidents)
    assert "No incident is open in the alerts record yet" in text
    assert "this run opens 2 when its alerts are sent" in text
    assert "ods.&lt;script&gt;" in incidents and "anomaly:changes" in incidents  # both findings, escaped
    assert EVIL not in page
    # one of them open already (an earlier run's alert): listed as open, the other still to open
    opened = report_extras()["incidents"][:1]
    page = render_run(run, history_runs(), data={"metrics": {}, "incidents": opened})
    incidents = page[page.index('id="incidents"') :]
    text = re.sub(r"<[^>]+>", "", incidents[: incidents.index("</section>")])
    assert "Incidents (1 open)" in text and "this run opens 1 more when its alerts are sent" in text


def test_an_anomaly_check_s_details_are_rendered_not_dumped() -> None:
    """The anomaly check's details (judged points, anomalies, warnings) were shown as JSON cut at 160 characters:
    each judged point is a line (value, band, centre, method), each anomaly's message in full."""
    message = "null_fraction of column v of ods.orders at snapshot 5550001 is 1: " + "outside the band " * 12 + EVIL
    judged = {
        "snapshot_id": 5550001,
        "committed_at": T0.isoformat(),
        "value": 1.0,
        "method": "window",
        "centre": 0.0,
        "scale": 0.0,
        "low": 0.0,
        "high": 0.0,
        "relative_change": None,
    }
    details = {
        "metric": "null_fraction",
        "column": "v",
        "severity": "warn",
        "points": 12,
        "judged": [
            judged,
            {
                **judged,
                "snapshot_id": 5550000,
                "value": 0.0,
                "method": "skipped",
                "skipped": "3 earlier points, 10 needed",
            },
        ],
        "anomalies": [{**judged, "message": message}],
        "warnings": [message],
    }
    run = QualityRun(
        "r1",
        T0.isoformat(),
        T0.isoformat(),
        results=[CheckResult("anomaly:null_fraction:v", "ods.orders", snapshot_id=5550001, rows=12, details=details)],
    )
    page = render_run(run, [])
    assert_self_contained(page)
    checks = page[page.index("<th>Check</th>") :]
    assert "{&quot;" not in checks and "…" not in checks  # no JSON, nothing cut
    text = re.sub(r"<[^>]+>", " ", page)
    assert "null_fraction of column v" in text and "severity warn" in text and "12 points" in text
    assert re.search(r"snapshot\s+5550001\s.*value 1\b.*outside \[0, 0\].*median 0", text)
    assert "3 earlier points, 10 needed" in text
    assert html_escape(message) in page  # in full, escaped
    assert '<span class="chip warn">WARN</span>' in page


def test_failing_tables_come_first_and_a_model_s_own_subscription_is_hidden() -> None:
    """The first detailed section is a failing table's whatever the names (each group in name order), and a
    model's own subscription (`layers.<model>.self`, its log kept for its rounds) is not listed as a reader."""
    stats = stats_for("ods.b", [0, 0], files=1, snapshot=1)
    stats["subscriptions"] = [
        {"consumer": "layers.dwd.x", "lag_records": 3, "lag_seconds": 1.0, "idle_seconds": 2.0, "stale": False},
        {"consumer": "layers.dwd.x.self", "lag_records": 0, "lag_seconds": 0.0, "idle_seconds": 2.0, "stale": False},
    ]
    bad = Violation("records-count", "ods.z", "added-records 1 != 2 records", expected=2, actual=1)
    run = QualityRun(
        run_id="r1",
        started=T0.isoformat(),
        finished=T0.isoformat(),
        results=[
            CheckResult(
                RECONCILE, name, snapshot_id=1, seconds=0.1, rows=1, violations=[bad] if name == "ods.z" else []
            )
            for name in ("ods.a", "ods.b", "ods.y", "ods.z")
        ],
        tables={"ods.b": stats},
    )
    run.results[2] = CheckResult(RECONCILE, "ods.y", snapshot_id=1, seconds=0.1, rows=1, error="unreadable")
    page = render_run(run, [])
    order = [page.index(f"<span>ods.{t}</span></h2>") for t in ("y", "z", "a", "b")]
    assert order == sorted(order)  # failing (y: an error, z: a violation) first, then passing, each by name
    assert "layers.dwd.x</code>" in page and "layers.dwd.x.self" not in page
    assert "1 internal subscription not shown" in page


def sections(page: str) -> dict[str, tuple[str, bool]]:
    """Per table section: (data-status, whether its <details> is open)."""
    found = re.findall(
        r'<section class="box tsec" id="t\d+" data-table="([^"]*)" data-status="(pass|fail)"><details( open)?>'
        r"<summary><h2>",
        page,
    )
    return {table: (status, bool(opened)) for table, status, opened in found}


def test_sections_collapse_and_the_filter_only_enhances() -> None:
    """Failing tables' sections are open, passing ones collapsed; every section is in the HTML (the filter box
    is hidden until the script shows it, and the script only reads the page and sets hidden/open)."""
    run = the_run()
    page = render_run(run, history_runs())
    evil = "ods.&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"
    assert sections(page) == {evil: ("fail", True), "ods.orders": ("pass", False)}
    # every table's figures are in the page whether or not its section is open (nothing waits for the script)
    assert "5,550,001" in page or "5550001" in page
    assert '<div class="filter box" id="filter" hidden>' in page
    assert 'id="filter-q"' in page and 'id="filter-fails"' in page
    assert page.count('<li data-table="') == 2
    assert page.index('id="filter"') < page.index('<ul class="toc">') < page.index('class="box tsec"')
    # the script touches the page only through hidden / open / text, and reads the hash's filter and q
    for needle in ('params.get("filter") === "failures"', 'params.get("q")', ".hidden =", ".open = true"):
        assert needle in FILTER_JS, needle
    assert "innerHTML" not in FILTER_JS and "fetch(" not in FILTER_JS and "eval(" not in FILTER_JS
    # a page with no table has neither box nor script
    empty = render_run(QualityRun("r0", "", ""), [])
    assert 'id="filter"' not in empty and "<script" not in empty
    assert_self_contained(empty)


def test_style_and_script_are_the_package_s_assets() -> None:
    """The style and the script are files of the package (package data, read with importlib.resources): the page
    carries each file's text, the script's exactly as its hash allows."""
    assets = files("quality.report") / "assets"
    css, js = (assets / "report.css").read_text(encoding="utf-8"), (assets / "report.js").read_text(encoding="utf-8")
    assert FILTER_JS == js.rstrip("\n") and FILTER_JS.startswith("(function () {")
    page = render_run(the_run(), [])
    assert f"<style>\n{css}</style>" in page and f"<script>{FILTER_JS}</script>" in page


def test_details_are_small_tables_with_long_values_cut() -> None:
    """A check's details render as a table of key and value (a mapping as a nested table, a list of scalars
    comma separated), escaped, long values cut; not as ``key: value`` text."""
    long = "x" * 500
    details = {
        "commits_checked": 7,
        "buckets": {"0": 12, "1": EVIL},
        "files": ["a.parquet", "b.parquet"],
        "long": long,
        "data_docs": DOCS,
    }
    run = QualityRun(
        "r1", T0.isoformat(), T0.isoformat(), results=[CheckResult(RECONCILE, "ods.a", rows=1, details=details)]
    )
    page = render_run(run, [])
    assert_self_contained(page)
    assert "<tr><th>commits_checked</th><td><code>7</code></td></tr>" in page
    assert (
        '<tr><th>buckets</th><td><table class="mini"><tr><th>0</th><td><code>12</code></td></tr>'
        "<tr><th>1</th><td><code>&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</code></td></tr></table></td></tr>"
    ) in page
    assert "<tr><th>files</th><td><code>a.parquet</code>, <code>b.parquet</code></td></tr>" in page
    assert f"<tr><th>long</th><td><code>{'x' * 160}…</code></td></tr>" in page and "x" * 161 not in page
    assert f'<tr><th>data docs</th><td><a href="../../../{DOCS}">Data Docs</a></td></tr>' in page
    assert "commits_checked:" not in page  # no key: value text any more
    assert page.count('<table class="mini details">') == 2  # in the checks and in the last reconciliation


def sub(consumer: str) -> dict:
    return {"consumer": consumer, "lag_records": 0, "lag_seconds": 0.0, "idle_seconds": 1.0, "stale": False}


def test_lineage_lists_the_edges_from_subscriptions_and_ignores_a_model_s_own() -> None:
    """``layers.<model>`` in a table's subscriptions means the table feeds <model>; ``layers.<model>.self`` and
    other consumers are not edges. Levels go sources, then what they build; names link to their sections and a
    failing table is marked."""
    stats = {
        "ods.orders": [sub("layers.dwd.orders"), sub("layers.ads.revenue"), sub("spark.export")],
        "ods.customers": [sub("layers.dwd.orders")],
        "dwd.orders": [sub("layers.ads.revenue"), sub("layers.dwd.orders.self")],
        "ads.revenue": [sub("layers.ads.revenue.self")],
    }
    bad = Violation("records-count", "dwd.orders", "added-records 1 != 2 records", expected=2, actual=1)
    run = QualityRun(
        "r1",
        T0.isoformat(),
        T0.isoformat(),
        results=[
            CheckResult(RECONCILE, t, rows=1, violations=[bad] if t == "dwd.orders" else []) for t in sorted(stats)
        ],
        tables={t: {"subscriptions": subs} for t, subs in stats.items()},
    )
    assert lineage(run) == {"ads.revenue": ["dwd.orders", "ods.orders"], "dwd.orders": ["ods.customers", "ods.orders"]}
    page = render_run(run, [])
    assert_self_contained(page)
    section = page[page.index('<section class="box" id="lineage">') :]
    section = section[: section.index("</section>")]
    # near the top: before the trends and the table sections
    assert page.index('id="lineage"') < page.index("Trends over") < page.index('class="box tsec"')
    levels = re.findall(r'<div class="level"><h3>([^<]+)</h3>(.*?)</ul></div>', section)
    assert [title for title, _ in levels] == ["sources", "level 1", "level 2"]
    nodes = [re.findall(r'<li><span class="node(?: bad)?" data-node="([^"]+)"', body) for _, body in levels]
    assert nodes == [["ods.customers", "ods.orders"], ["dwd.orders"], ["ads.revenue"]]
    by_table = {t: i for i, t in re.findall(r'<section class="box tsec" id="(t\d+)" data-table="([^"]+)"', page)}
    assert set(by_table) == set(sections(page)) == set(stats)
    for table in stats:  # every name links to its table's section
        assert f'<a href="#{by_table[table]}"><code>{table}</code></a>' in section, table
    assert section.count('<span class="node bad" data-node="dwd.orders">') == 2  # its node, and as an input
    assert section.count('class="chip fail"') == 2
    assert "self" not in section and "spark.export" not in section
    # no model subscriptions: no lineage section
    assert 'id="lineage"' not in render_run(the_run(), [])


def test_model_of_consumer_inverts_consumer_of() -> None:
    assert model_of_consumer(consumer_of("dwd.orders")) == "dwd.orders"
    assert model_of_consumer(self_consumer_of("dwd.orders")) is None
    assert model_of_consumer("dwd.orders_enriched") is None and model_of_consumer("layers.") is None


def test_render_marks_passing_runs_and_links_the_index() -> None:
    history = history_runs()
    page = render_run(history[-1], history)
    assert 'id="status">PASS<' in page and "FAIL" not in page
    assert "Trends over the last 5 runs" in page  # later runs are not in an earlier run's trends
    assert "Trends over the last 1 runs" in render_run(history[0], history)
    assert "No quality runs yet" in render_index([])
    empty = render_run(QualityRun("r0", "", ""), [])  # no checks, no figures: still a page
    assert 'id="status">PASS<' in empty and "No checks ran." in empty
    failing = the_run()
    index = render_index([*history, failing])
    assert_self_contained(index)
    links = re.findall(r'href="reports/([^"]+)\.html"', index)
    ids = sorted([r.run_id for r in history] + [failing.run_id], reverse=True)
    assert links[0] == links[1] == ids[0]  # the banner links the latest run, then the list, newest first
    assert links[1:] == ids
    assert '<div class="big">FAIL</div>' in index  # the latest run failed
    assert index.count('<span class="chip fail">FAIL</span>') == 1  # its row; the 5 others pass
    assert index.count('<span class="chip pass">PASS</span>') == 5


@pytest.mark.backends("local", "s3")
def test_write_report_locally_and_to_the_warehouse(lakehouse, tmp_path: Path) -> None:
    lh = lakehouse
    history = history_runs()
    for h in history:
        save_run(lh, h)
    lh.store.put(DOCS, b"<html>data docs</html>")
    run = the_run()
    run.results.append(anomaly_result("fail"))
    # the metrics table holds ods.orders' changes (one commit after the run: not the run's) and rows; the
    # alerts record an open incident
    from quality.alerts import parse_routing, send_alerts
    from quality.metrics.table import append_metrics

    points = series_points(120)
    rows = [
        {
            "table": "ods.orders",
            "snapshot_id": sid,
            "committed_at": datetime.fromisoformat(at),
            "kind": "tiering",
            "metric": metric,
            "column": None,
            "value": v,
        }
        for at, sid, v in [*points, [(T0 + timedelta(hours=7)).isoformat(), 5550002, 1.0]]
        for metric in ("changes", "rows")
    ]
    append_metrics(lh, rows, {"ods.orders": (5550002, 0)}, lambda table, sid, done: True)
    routing = parse_routing({"owners": {"o": {"webhook": "https://hooks.example.com/x"}}, "default_owner": "o"})
    send_alerts(lh.store, [anomaly_result("fail")], routing, run_id=run.run_id, post=lambda url, payload: None)
    data = report_data(lh, run)
    [changes, rows_series] = data["metrics"]["ods.orders"]
    assert (changes["metric"], rows_series["metric"]) == ("changes", "rows")
    assert changes["points"][-1][1:] == [5550001, 3.0] and len(changes["points"]) == 100  # the newest 100
    assert changes["points"] == [[datetime.fromisoformat(a).isoformat(), s, v] for a, s, v in points[-100:]]
    [incident] = data["incidents"]
    assert (incident["table"], incident["check"], incident["sent"]) == ("ods.orders", "anomaly:changes", "open")

    written = write_report(lh, run, out_dir=tmp_path / "out")  # history: the kept runs

    assert written["report_key"] == f"{REPORTS_PREFIX}{run.run_id}.html"
    assert written["index_key"] == INDEX_KEY == "_lakestream/quality/index.html"
    page = lh.store.get(written["report_key"]).data.decode()
    index = lh.store.get(INDEX_KEY).data.decode()
    assert page == render_run(run, history, data=data)
    assert page.count('class="anomaly"') == 1 and 'id="incidents"' in page
    assert "Trends over the last 6 runs" in page
    for r in [run, *history]:
        assert f'href="reports/{r.run_id}.html"' in index
        # the index's links resolve to the pages' keys
        assert posixpath.normpath(posixpath.join(posixpath.dirname(INDEX_KEY), f"reports/{r.run_id}.html")) == (
            f"{REPORTS_PREFIX}{r.run_id}.html"
        )
    # the Data Docs link, relative to the page's key, reaches the Data Docs in the warehouse
    [href] = re.findall(r'href="([^"]+)">open Data Docs', page)
    target = posixpath.normpath(posixpath.join(posixpath.dirname(written["report_key"]), unquote(href)))
    assert target == DOCS and lh.store.exists(target)
    assert posixpath.normpath(posixpath.join(posixpath.dirname(written["report_key"]), "../index.html")) == INDEX_KEY

    local_page = Path(written["report_path"])
    assert local_page == tmp_path / "out" / "reports" / f"{run.run_id}.html"
    assert Path(written["index_path"]).read_text() == index
    local = local_page.read_text()
    assert_self_contained(local)
    [local_href] = re.findall(r'href="([^"]+)">open Data Docs', local)
    assert local_href == f"{lh.store.url.rstrip('/')}/{DOCS}"
    if local_href.startswith("file://"):  # a local warehouse: the link opens the file
        assert Path(unquote(urlparse(local_href).path)).read_bytes() == b"<html>data docs</html>"
    assert (local_page.parent / "../index.html").resolve() == Path(written["index_path"]).resolve()


# ---- Chromium ---------------------------------------------------------------------------------------------------


def png_rows(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, filtered scanlines) of a non-interlaced 8-bit PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height = int.from_bytes(body[:4], "big"), int.from_bytes(body[4:8], "big")
            depth, color, interlace = body[8], body[9], body[12]
            assert depth == 8 and interlace == 0
            channels = {0: 1, 2: 3, 4: 2, 6: 4}[color]
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = 1 + width * channels
    assert len(raw) == stride * height
    return width, height, [raw[i * stride : (i + 1) * stride] for i in range(height)]


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium")
    assert exe is not None
    return subprocess.run(
        [
            exe,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        timeout=90,
        check=False,
    )


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium on PATH (Debian: apt-get install chromium)")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    run = the_run()
    out = tmp_path / "out"
    (out / "reports").mkdir(parents=True)
    page = out / "reports" / f"{run.run_id}.html"
    run.results.append(anomaly_result())
    page.write_text(render_run(run, history_runs(), data=report_extras()), encoding="utf-8")
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>", encoding="utf-8")

    shots = {}
    for name, source in (("report", page), ("blank", blank)):
        png = tmp_path / f"{name}.png"
        done = chromium(f"--screenshot={png}", "--window-size=1280,2000", source.as_uri(), profile=tmp_path / name)
        assert png.exists(), done.stderr.decode(errors="replace")[-2000:]
        shots[name] = png.read_bytes()
    width, height, rows = png_rows(shots["report"])
    assert (width, height) == (1280, 2000)
    # a page with content: many different scanlines and byte values; the blank control has almost none
    assert len(shots["report"]) > 40_000
    assert len(set(rows)) > 300, len(set(rows))
    assert len(set(b"".join(rows))) > 100
    _, _, blank_rows = png_rows(shots["blank"])
    assert len(set(blank_rows)) < 10

    dom = chromium("--dump-dom", page.as_uri(), profile=tmp_path / "dom")
    text = dom.stdout.decode()
    assert 'id="status">FAIL</div>' in text, dom.stderr.decode(errors="replace")[-2000:]
    assert "order-4711" in text  # a violation's sample key
    assert '<td class="num"><span class="bar" style="width:80px"></span>1,234</td>' in text  # bucket 0's lag
    assert "&lt;script&gt;" in text and "<script>alert" not in text  # the evil name stayed text
    # the filter script ran (the policy allowed it by its hash): the box is shown, nothing filtered
    assert '<div class="filter box" id="filter">' in text
    assert '<span class="muted" id="filter-count">2 of 2 tables shown</span>' in text
    assert 'data-filtered="no"' in text

    # the hash filters: failures only hides the passing table's section and its entry in the list of tables
    filtered_uri = page.as_uri() + "#filter=failures"
    dom = chromium("--dump-dom", filtered_uri, profile=tmp_path / "dom-filtered")
    text = dom.stdout.decode()
    assert 'data-filtered="yes"' in text, dom.stderr.decode(errors="replace")[-2000:]
    assert '<span class="muted" id="filter-count">1 of 2 tables shown</span>' in text
    assert re.search(r'<section class="box tsec" id="t\d+" data-table="ods.orders" data-status="pass" hidden="">', text)
    assert re.search(r'<section class="box tsec" id="t\d+" data-table="ods.&lt;script[^"]*" data-status="fail">', text)
    assert '<li data-table="ods.orders" data-status="pass" hidden="">' in text
    # and by name: the passing table, opened
    dom = chromium("--dump-dom", page.as_uri() + "#q=orders", profile=tmp_path / "dom-q")
    text = dom.stdout.decode()
    assert '<span class="muted" id="filter-count">1 of 2 tables shown</span>' in text
    assert re.search(r'data-table="ods.orders" data-status="pass"><details open="">', text)
    # a link to a collapsed section opens it
    [anchor] = re.findall(r'id="(t\d+)" data-table="ods.orders"', text)
    dom = chromium("--dump-dom", f"{page.as_uri()}#{anchor}", profile=tmp_path / "dom-anchor")
    assert re.search(r'data-table="ods.orders" data-status="pass"><details open="">', dom.stdout.decode())
    # the filtered page looks different from the unfiltered one
    png = tmp_path / "filtered.png"
    chromium(f"--screenshot={png}", "--window-size=1280,2000", filtered_uri, profile=tmp_path / "filtered")
    assert png_rows(png.read_bytes())[:2] == (1280, 2000)
    assert png_rows(png.read_bytes())[2] != rows
    # the metrics charts, the flagged point among them: the passing table alone, its section opened (the
    # screenshot was looked at when this was written: three charts, the newest changes point red)
    charts = tmp_path / "charts.png"
    chromium(f"--screenshot={charts}", "--window-size=1280,2400", page.as_uri() + "#q=orders", profile=tmp_path / "c")
    assert png_rows(charts.read_bytes())[:2] == (1280, 2400)
    assert png_rows(charts.read_bytes())[2] != rows
    assert re.search(r'<circle class="anomaly"[^>]*><title>[^<]*snapshot 5550001', dom.stdout.decode())


def test_a_tables_page_shows_what_it_cost_the_store_in_the_day_before_the_run(tmp_path) -> None:
    """Beside its metrics, each table's section prices its last 24 hours (`Lakehouse.cost`, as `lakestream table
    cost` prints it): producers' appends read from the log, tiering's recorded requests, storage."""
    from lakehouse import Lakehouse
    from quality.report.data import report_data

    lh = Lakehouse.open((tmp_path / "wh").as_uri())
    lh.create_table("ods.orders", pa.schema([("k", pa.int64())]), primary_key=["k"], buckets=2)
    lh.log("ods.orders").append(pa.table({"k": pa.array(range(10), pa.int64())}), "upsert")
    lh.tier("ods.orders")
    now = datetime.now(UTC).isoformat()
    run = QualityRun("r1", now, now, results=[CheckResult(RECONCILE, "ods.orders", rows=10)])
    data = report_data(lh, run)
    cost = data["cost"]["ods.orders"]
    assert [(line["part"], line["operations"]) for line in cost["lines"]] == [
        ("producers", 1),
        ("lake commits: tiering", 1),
    ]
    page = render_run(run, [], data=data)
    section = page[page.index('data-table="ods.orders"') :]
    assert "Cost, last 24 hours: $0.0000" in section and "<td>producers</td>" in section
    assert "<td>lake commits: tiering</td>" in section and "<td>storage</td>" in section
    assert "Cost, last 24 hours" not in render_run(run, [], data={"metrics": {}, "incidents": []})
