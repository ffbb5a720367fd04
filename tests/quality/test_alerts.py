"""Alerts (quality.alerts): one per incident, again only after a recovery (with a recovery message), routed to
the table's owner, delivered over real HTTP to a local server, never twice when two runs race on the incident
record (compare-and-swap), retried per channel; bad routing configuration is refused naming the file and field."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from object_store.local import LocalStore
from quality.alerts import (
    INCIDENTS_KEY,
    AlertConfigError,
    load_routing,
    load_routing_file,
    open_incidents,
    parse_routing,
    send_alerts,
    task_result,
)
from quality.results import CheckResult, Violation
from tests.support.alerting import lost_rows, routing_for

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


class Hooks:
    """A loopback HTTP server that records every POST (path, JSON body); paths under /down/ answer 500."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict]] = []
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                down = self.path.startswith("/down/")
                if not down:
                    hooks.received.append((self.path, body))
                self.send_response(500 if down else 200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def take(self, path: str | None = None) -> list[dict]:
        out = [b for p, b in self.received if path is None or p == path]
        self.received = [(p, b) for p, b in self.received if path is not None and p != path]
        return out


@pytest.fixture
def hooks():
    h = Hooks()
    yield h
    h.server.shutdown()
    h.server.server_close()


@pytest.fixture
def local(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "wh")


def passed(table="ods.orders", check="reconcile") -> CheckResult:
    return CheckResult(check, table, snapshot_id=78)


def test_one_alert_per_incident_a_recovery_message_and_again_only_after_recovery(hooks, local) -> None:
    routing = routing_for(hooks)

    def run(n: int, results):
        return send_alerts(local, results, routing, run_id=f"run-{n}", now=T0 + timedelta(minutes=n))

    [alert] = run(1, [lost_rows()])
    assert alert.event == "open" and alert.owner == "orders-team" and not alert.failed
    [opened] = hooks.take("/orders")
    assert opened["event"] == "open" and opened["table"] == "ods.orders" and opened["check"] == "reconcile"
    assert opened["severity"] == "fail" and opened["kind"] == "violation" and opened["owner"] == "orders-team"
    [v] = opened["violations"]
    assert (v["bucket"], v["offsets"], v["keys"], v["snapshot_id"]) == (2, [100, 140], [17, 18], 77)
    assert opened["run_id"] == "run-1" and opened["opened_at"] == "2026-11-27T12:01:00+00:00"
    [slack] = hooks.take("/slack")
    assert slack["text"] == "[lakestream] FAILED reconcile on ods.orders"
    assert "bucket 2, offsets [100, 140), keys [17, 18]" in slack["blocks"][1]["text"]["text"]
    assert hooks.take() == []
    assert run(2, [lost_rows()]) == [] and hooks.take() == []  # still open: not again
    assert run(3, [passed(), passed("dwd.other")]) and hooks.take("/slack")
    [recovered] = hooks.take("/orders")
    assert recovered["event"] == "recovered" and recovered["incident"] == opened["incident"]
    assert recovered["opened_at"] == opened["opened_at"] and recovered["run_id"] == "run-3"
    assert open_incidents(local) == []  # closed: removed from the record
    assert run(4, [passed()]) == [] and hooks.take() == []
    assert [a.event for a in run(5, [lost_rows()])] == ["open"]  # a new incident
    assert [b["event"] for b in hooks.take("/orders")] == ["open"]


def test_what_opens_an_incident_and_who_hears_of_it(hooks, local) -> None:
    gx = CheckResult(
        "gx:dwd.orders_enriched",
        "dwd.orders_enriched",
        snapshot_id=5,
        violations=[
            Violation("gx-expectation", "dwd.orders_enriched", "nulls in c_name", expected={"column": "c_name"}),
            Violation("gx-expectation", "dwd.orders_enriched", "values out of range", expected={"column": "price"}),
        ],
    )
    warn = CheckResult(
        "anomaly:null_fraction:o_custkey",
        "ods.orders",
        snapshot_id=9,
        details={"column": "o_custkey", "anomalies": [{"message": "null_fraction ... is 0.2"}], "warnings": ["x"]},
    )
    error = CheckResult("reconcile", "ods.customer", error="StoreUnavailable: no answer")
    skipped = CheckResult("layer", "ads.revenue", not_evaluated="upstream dwd.orders_enriched failed (gx)")
    failed_task = task_result("lake_quality", "check", "SparkSubmit exited 1")
    alerts = send_alerts(
        local, [gx, warn, error, skipped, failed_task, passed("ods.nation")], routing_for(hooks), run_id="r1", now=T0
    )
    assert len(alerts) == 6
    orders = sorted(hooks.take("/orders"), key=lambda b: (b["table"], b["column"] or ""))
    assert [(b["table"], b["column"], b["kind"], b["severity"]) for b in orders] == [
        ("dwd.orders_enriched", "c_name", "violation", "fail"),
        ("dwd.orders_enriched", "price", "violation", "fail"),
        ("ods.orders", "o_custkey", "anomaly", "warn"),
    ]
    assert hooks.take("/slack")[0]["text"].startswith("[lakestream] ")
    platform = sorted(hooks.take("/platform"), key=lambda b: b["table"])  # the default owner
    assert [(b["table"], b["check"], b["kind"]) for b in platform] == [
        ("ads.revenue", "layer", "not evaluated"),
        ("dag:lake_quality", "task:check", "error"),
        ("ods.customer", "reconcile", "error"),
    ]
    assert "StoreUnavailable: no answer" in platform[2]["message"]
    # the suite runs again and only c_name still fails: price recovers, c_name stays open (no message)
    gx.violations = gx.violations[:1]
    [again] = send_alerts(local, [gx], routing_for(hooks), run_id="r2", now=T0 + timedelta(minutes=1))
    assert (again.event, again.incident["column"]) == ("recovered", "price")
    # a check that could not run recovers nothing: the error is one more incident of its own
    send_alerts(
        local,
        [CheckResult("gx:dwd.orders_enriched", "dwd.orders_enriched", error="boom")],
        routing_for(hooks),
        run_id="r3",
        now=T0,
    )
    keys = {(i["table"], i["check"], i["column"]) for i in open_incidents(local)}
    assert ("dwd.orders_enriched", "gx:dwd.orders_enriched", "c_name") in keys
    assert ("dwd.orders_enriched", "gx:dwd.orders_enriched", None) in keys


class RacingStore:
    """A store that makes two runs (threads "a" and "b") collide on the incident record: each one's first read of
    it waits for the other's, so both read the same record; and "b" writes only after "a" has written and read
    the record back (so a lost write by "b" cannot hide behind "a" reading "b"'s claim)."""

    def __init__(self, store) -> None:
        self.store, self.url = store, store.url
        self.barrier = threading.Barrier(2, timeout=30)
        self.a_read_back = threading.Event()
        self.reads: dict[str, int] = {}

    def get(self, key: str):
        name = threading.current_thread().name
        try:
            return self.store.get(key)
        finally:
            if key == INCIDENTS_KEY:
                self.reads[name] = self.reads.get(name, 0) + 1
                if self.reads[name] == 1:
                    self.barrier.wait()
                elif name == "a":
                    self.a_read_back.set()

    def put(self, key, data, **kwargs):
        if key == INCIDENTS_KEY and threading.current_thread().name == "b":
            assert self.a_read_back.wait(timeout=30)
        return self.store.put(key, data, **kwargs)


@pytest.mark.backends("local", "s3")
@pytest.mark.parametrize("first", ["failing", "recovering"])
def test_two_runs_racing_on_the_record_send_once(hooks, store, first) -> None:
    routing = routing_for(hooks)
    results = [lost_rows()]
    if first == "recovering":  # an incident open and announced; both runs see it pass
        send_alerts(store, results, routing, run_id="r0", now=T0)
        hooks.take()
        results = [passed()]
    racing = RacingStore(store)  # local files and a real S3 server (SeaweedFS): both enforce the conditions
    sent: dict[str, list] = {}

    def run(name: str) -> None:
        sent[name] = send_alerts(racing, results, routing, run_id=name, now=T0 + timedelta(minutes=1))

    threads = [threading.Thread(target=run, args=(n,), name=n) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert [len(sent["a"]), len(sent["b"])] == [1, 0]  # "a" won the swap and claimed the incident; "b" nothing
    event = "open" if first == "failing" else "recovered"
    assert [b["event"] for b in hooks.take("/orders")] == [event]
    assert len(hooks.take("/slack")) == 1 and hooks.take() == []


@pytest.mark.backends("local", "s3")
@pytest.mark.subprocess
def test_four_processes_racing_on_the_record_send_once(hooks, store_spec) -> None:
    """The same failing check reported by four processes at once (as four Airflow workers might): one alert per
    channel, whoever wins the record's compare-and-swap; local files and a real S3 server (SeaweedFS)."""
    import time

    from tests.support.crash import start_worker

    url, options = store_spec
    start_at = time.time() + 8  # past every worker's imports: they race on the record together
    worker = ("tests.quality._alerts_worker", url, json.dumps(options), hooks.url)
    workers = [start_worker(*worker, f"p{i}", start_at) for i in range(4)]
    sent = []
    for w in workers:
        out, err = w.communicate(timeout=180)
        assert w.returncode == 0, err[-2000:]
        sent.append(json.loads(out.strip().splitlines()[-1])["sent"])
    assert sum(sent) == 1, sent  # one process claimed the incident and told its owner; the others nothing
    assert [b["event"] for b in hooks.take("/orders")] == ["open"]
    assert len(hooks.take("/slack")) == 1 and hooks.take() == []


def test_a_channel_that_failed_is_retried_alone_and_a_dead_claim_is_taken_over(hooks, local) -> None:
    routing = parse_routing(
        {"owners": {"o": {"webhook": [f"{hooks.url}/ok", f"{hooks.url}/down/x"]}}, "default_owner": "o"}
    )
    [alert] = send_alerts(local, [lost_rows()], routing, run_id="r1", now=T0)
    assert alert.delivered == [f"webhook:{hooks.url}/ok"] and list(alert.failed) == [f"webhook:{hooks.url}/down/x"]
    assert "HTTP 500" in alert.failed[f"webhook:{hooks.url}/down/x"]
    assert len(hooks.take("/ok")) == 1
    # the next run sends to the failed channel only (it is still down; /ok is not sent again)
    [retry] = send_alerts(local, [lost_rows()], routing, run_id="r2", now=T0 + timedelta(minutes=1))
    assert retry.failed and hooks.take() == []
    # the channel is fixed: the next run delivers, and the incident counts as told
    fixed = parse_routing({"owners": {"o": {"webhook": [f"{hooks.url}/ok", f"{hooks.url}/x"]}}, "default_owner": "o"})
    send_alerts(local, [lost_rows()], fixed, run_id="r3", now=T0 + timedelta(minutes=2))
    assert [p for p, _ in hooks.received] == ["/x"] and hooks.take()
    assert send_alerts(local, [lost_rows()], fixed, run_id="r4", now=T0 + timedelta(minutes=3)) == []
    # a run that claimed the recovery and died before recording it: within claim_seconds nobody sends it
    record = json.loads(local.get(INCIDENTS_KEY).data)
    [inc] = record["incidents"].values()
    inc.update(
        status="recovered",
        recovered_at="x",
        claim={"run": "dead", "at": "2026-11-27T12:04:00+00:00", "status": "recovered"},
    )
    local.put(INCIDENTS_KEY, json.dumps(record).encode())
    assert send_alerts(local, [passed()], fixed, run_id="r5", now=T0 + timedelta(minutes=5)) == []
    [late] = send_alerts(local, [passed()], fixed, run_id="r6", now=T0 + timedelta(minutes=30))
    assert late.event == "recovered" and len(hooks.take("/x")) == 1 and open_incidents(local) == []


def test_an_incident_that_recovers_before_anyone_was_told_is_dropped(hooks, local) -> None:
    routing = parse_routing({"owners": {"o": {"webhook": f"{hooks.url}/down/y"}}, "default_owner": "o"})
    [alert] = send_alerts(local, [lost_rows()], routing, run_id="r1", now=T0)
    assert alert.failed
    assert send_alerts(local, [passed()], routing, run_id="r2", now=T0 + timedelta(minutes=1)) == []
    assert open_incidents(local) == [] and hooks.received == []


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"owner": {}}, "alerts.yml: unknown keys ['owner']"),
        ({"owners": {"t": {"webhook": "ftp://x"}}}, "alerts.yml: owners.t.webhook: 'ftp://x' is not an http(s) URL"),
        ({"owners": {"t": {"sms": "1"}}}, "alerts.yml: owners.t has unknown channels ['sms']"),
        ({"owners": {"t": {"email": "nobody"}}}, "alerts.yml: owners.t.email: 'nobody' is not an e-mail address"),
        ({"owners": {"t": {"slack": 3}}}, "alerts.yml: owners.t.slack must be a string or a list of strings"),
        ({"owners": {"t": {}}, "tables": {"ods.x": "u"}}, "alerts.yml: tables.ods.x names owner 'u', which owners"),
        ({"owners": {"t": {}}, "default_owner": "u"}, "alerts.yml: default_owner names owner 'u'"),
    ],
)
def test_bad_routing_is_refused_naming_the_file_and_field(doc, message) -> None:
    with pytest.raises(AlertConfigError) as info:
        parse_routing(doc, path="alerts.yml")
    assert str(info.value).startswith(message)


def test_routing_file_of_a_project(tmp_path: Path) -> None:
    assert load_routing(tmp_path).owners == {}
    (tmp_path / "alerts.yml").write_text(
        "owners:\n  a: {email: [a@example.com]}\n  b: {slack: https://hooks.slack.com/x}\n"
        "tables:\n  ods.orders: a\n  'ods.*': b\ndefault_owner: b\n"
    )
    routing = load_routing(tmp_path)
    assert routing.owner_of("ods.orders") == "a" and routing.owner_of("ods.nation") == "b"
    assert routing.channels_of("dag:x") == ("b", routing.owners["b"])
    (tmp_path / "alerts.yml").write_text("owners: [a\n")
    with pytest.raises(AlertConfigError, match=r"alerts\.yml: not valid YAML"):
        load_routing(tmp_path)


def test_e_mail_goes_through_the_sender_given_and_is_retried_where_there_is_none(local) -> None:
    routing = parse_routing({"owners": {"o": {"email": ["a@example.com", "b@example.com"]}}, "default_owner": "o"})
    [alert] = send_alerts(local, [lost_rows()], routing, run_id="r1", now=T0)  # no sender (outside Airflow)
    assert list(alert.failed) == ["email:a@example.com,b@example.com"] and "no e-mail sender" in str(alert.failed)
    mails = []
    [alert] = send_alerts(
        local,
        [lost_rows()],
        routing,
        run_id="r2",
        now=T0,
        send_email=lambda to, subject, body: mails.append((to, subject, body)),
    )
    [(to, subject, body)] = mails
    assert to == ["a@example.com", "b@example.com"] and subject == "[lakestream] FAILED reconcile on ods.orders"
    assert "- content: bucket 2, offsets [100, 140), keys [17, 18]: 2 rows of the log are not in the lake" in body
    assert alert.delivered and not alert.failed


def test_the_example_routing_parses_and_routes_every_example_table() -> None:
    """examples/tpch/alerts.example.yml: the owners with webhook placeholders; every table of the example has one.
    It is not the project's alerts.yml, so the example's runs post nowhere until a user copies it there."""
    from layers.project import load_project

    example = Path(__file__).resolve().parents[2] / "examples" / "tpch"
    assert load_routing(example).owners == {}
    routing = load_routing_file(example / "alerts.example.yml")
    assert routing.channels_of("ods.orders")[0] == "orders-team" == routing.channels_of("dwd.orders_enriched")[0]
    assert routing.channels_of("ods.nation")[0] == "platform" == routing.channels_of("dag:lake_quality")[0]
    for table in load_project(example).tables:
        owner, channels = routing.channels_of(table)
        assert channels.webhooks and all(u.startswith("https://hooks.example.com/") for u in channels.webhooks), table
