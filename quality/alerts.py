"""Alerts: tell a table's owner when one of its checks goes wrong, once per incident, and again when it passes.

**What opens an incident.** A result with violations (a reconciliation difference, a failed expectation, a layer
row, an anomaly of severity ``fail``), an anomaly of severity ``warn`` (a passing result whose
``details["anomalies"]`` is not empty), a check that could not run (``error``) or was not evaluated, and an
Airflow task that failed outright (`task_result`). Its key is ``(table, check, column)``: a GX suite that fails
on two columns is two incidents; a reconciliation is one, whatever its violations' codes.

**De-duplication.** Incidents live in the warehouse in one JSON record, ``_lakestream/quality/alerts/incidents.json``,
written only by compare-and-swap (``If-None-Match: *`` to create it, ``If-Match`` its ETag to replace it; retried
on a lost race, as ``layers.deploy_record``). A run (`send_alerts`):

1. reads the record, opens the incidents of its findings, marks *recovered* the open incidents of the checks that
   ran and found nothing for them, and *claims* (its run id and time) every incident whose owner has not yet been
   told its current state: one CAS. Two runs that race read the same record; one CAS wins, the other reads the
   winner's record, where the incidents are claimed already, and claims nothing;
2. sends the claimed alerts (opened: ``event: "open"``; recovered: ``event: "recovered"``);
3. records what was sent (CAS again): the incident's ``sent`` state; a recovered incident whose recovery was sent
   is removed (a new failure is a new incident, alerted again). A channel that failed is retried by the next run
   (channels already served are not sent again); a claim older than ``claim_seconds`` (a run that died between
   1 and 3) is taken over. An incident that recovers before anyone was told of it is dropped silently; one that
   fails again before its recovery was sent just stays open (no message: nobody saw it recover).

So concurrent runs never send one state twice; a run that dies after sending and before step 3 makes the next
one send again after ``claim_seconds`` (at least once, rather than lost).

**Routing.** ``PROJECT/alerts.yml`` names owners, their channels and their tables (`load_routing`)::

    owners:
      orders-team:
        webhook: https://hooks.example.com/lakestream      # a URL or a list: JSON POST of the alert
        slack: https://hooks.slack.com/services/T0/B0/XX   # Slack incoming webhooks (a URL or a list)
        email: [orders@example.com]                        # sent through Airflow's SMTP notifier in Airflow
      platform:
        email: data-platform@example.com
    tables:                       # a table name or a pattern (fnmatch): names first, then patterns in file order
      ods.orders: orders-team
      "dwd.*": orders-team
    default_owner: platform       # every other table, and failed Airflow tasks (table "dag:<dag_id>")

**Payload** (generic webhook; Slack gets ``text`` and ``blocks`` made from it; e-mail a subject and the same
lines): see `Alert.payload` and docs/guides/quality.md.

No Airflow here: e-mail is a callable given by the caller (``dags/_notifiers.py`` passes Airflow's).
"""

from __future__ import annotations

import fnmatch
import functools
import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from object_store import NotFound, ObjectStore, PreconditionFailed
from quality.errors import QualityError
from quality.results import CheckResult
from quality.runs import QUALITY_PREFIX

__all__ = [
    "ALERTS_FILE",
    "INCIDENTS_KEY",
    "Alert",
    "AlertConfigError",
    "AlertDeliveryError",
    "Channels",
    "Finding",
    "Routing",
    "findings_of",
    "load_routing",
    "load_routing_file",
    "parse_routing",
    "post_json",
    "send_alerts",
    "slack_payload",
    "task_result",
]

log = logging.getLogger(__name__)

INCIDENTS_KEY = f"{QUALITY_PREFIX}alerts/incidents.json"
#: The routing file of a layers project.
ALERTS_FILE = "alerts.yml"
FORMAT = 1
#: How often a run retries its compare-and-swap when other runs keep writing in between.
WRITE_ATTEMPTS = 20
#: Violations listed in one alert (the count says how many there are).
LISTED = 5
OPEN, RECOVERED = "open", "recovered"


class AlertConfigError(QualityError, ValueError):
    """``alerts.yml`` is invalid; the message names the file and the field."""


class AlertDeliveryError(QualityError):
    """A channel did not take an alert (HTTP error, no answer); the next run retries it."""


# -- routing ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Channels:
    """Where an owner is told: generic webhooks (JSON POST), Slack incoming webhooks, e-mail addresses."""

    webhooks: tuple[str, ...] = ()
    slack: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()

    def ids(self) -> list[str]:
        """One id per channel (``webhook:<url>``, ``slack:<url>``, ``email:<a,b>``), as the record keeps them."""
        out = [f"webhook:{u}" for u in self.webhooks] + [f"slack:{u}" for u in self.slack]
        return out + ([f"email:{','.join(self.emails)}"] if self.emails else [])


@dataclass(frozen=True)
class Routing:
    owners: Mapping[str, Channels] = field(default_factory=dict)
    tables: tuple[tuple[str, str], ...] = ()  # (name or pattern, owner)
    default_owner: str | None = None

    def owner_of(self, table: str) -> str | None:
        for pattern, owner in self.tables:
            if pattern == table:
                return owner
        for pattern, owner in self.tables:
            if fnmatch.fnmatchcase(table, pattern):
                return owner
        return self.default_owner

    def channels_of(self, table: str) -> tuple[str | None, Channels]:
        owner = self.owner_of(table)
        return owner, self.owners.get(owner, Channels()) if owner else Channels()


def load_routing(project_dir: str | os.PathLike[str]) -> Routing:
    """The routing of the project in ``project_dir`` (``alerts.yml``); no owners if it has none."""
    path = Path(project_dir) / ALERTS_FILE
    if not path.is_file():
        return Routing()
    return load_routing_file(path)


def load_routing_file(path: str | os.PathLike[str]) -> Routing:
    """The routing in the YAML file ``path`` (the format of ``alerts.yml``). Raises `AlertConfigError`."""
    import yaml

    path = Path(path)

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise AlertConfigError(f"{path}: cannot be read ({exc})") from None
    except yaml.YAMLError as exc:
        raise AlertConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_routing(doc, path=str(path))


def parse_routing(doc: Any, *, path: str = ALERTS_FILE) -> Routing:
    """Check a routing document (parsed YAML). Raises `AlertConfigError` naming ``path`` and the field."""
    if doc is None:
        return Routing()
    if not isinstance(doc, Mapping):
        raise AlertConfigError(f"{path}: expected a mapping with owners, tables and default_owner")
    unknown = sorted(set(doc) - {"owners", "tables", "default_owner"})
    if unknown:
        raise AlertConfigError(f"{path}: unknown keys {unknown}; it takes owners, tables, default_owner")
    owners_doc = doc.get("owners") or {}
    if not isinstance(owners_doc, Mapping):
        raise AlertConfigError(f"{path}: owners must map each owner's name to its channels")
    owners = {str(name): _channels(spec, f"{path}: owners.{name}") for name, spec in owners_doc.items()}

    def known(owner: Any, at: str) -> str:
        if not isinstance(owner, str) or owner not in owners:
            raise AlertConfigError(
                f"{path}: {at} names owner {owner!r}, which owners does not define (defined: {sorted(owners)})"
            )
        return owner

    tables_doc = doc.get("tables") or {}
    if not isinstance(tables_doc, Mapping):
        raise AlertConfigError(f"{path}: tables must map table names or patterns (dwd.*) to owners")
    tables = tuple((str(t), known(o, f"tables.{t}")) for t, o in tables_doc.items())
    default = doc.get("default_owner")
    if default is not None:
        default = known(default, "default_owner")
    return Routing(owners=owners, tables=tables, default_owner=default)


def _channels(spec: Any, at: str) -> Channels:
    if not isinstance(spec, Mapping):
        raise AlertConfigError(f"{at} must be a mapping of webhook, slack, email")
    unknown = sorted(set(spec) - {"webhook", "slack", "email"})
    if unknown:
        raise AlertConfigError(f"{at} has unknown channels {unknown}; use webhook, slack, email")

    def items(key: str) -> tuple[str, ...]:
        v = spec.get(key) or []
        values = [v] if isinstance(v, str) else v
        if not isinstance(values, list) or not all(isinstance(x, str) for x in values):
            raise AlertConfigError(f"{at}.{key} must be a string or a list of strings, got {v!r}")
        return tuple(values)

    for key in ("webhook", "slack"):
        for url in items(key):
            if not url.startswith(("http://", "https://")):
                raise AlertConfigError(f"{at}.{key}: {url!r} is not an http(s) URL")
    for address in items("email"):
        if "@" not in address.strip("@"):
            raise AlertConfigError(f"{at}.email: {address!r} is not an e-mail address")
    return Channels(webhooks=items("webhook"), slack=items("slack"), emails=items("email"))


# -- findings -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """Something wrong in one run, as an incident records it: located as far as the result knows."""

    table: str
    check: str
    column: str | None
    kind: str  # violation, anomaly, error, not evaluated
    severity: str  # fail or warn
    message: str
    snapshot_id: int | None = None
    violations: tuple[dict[str, Any], ...] = ()
    count: int = 0

    @property
    def key(self) -> str:
        return incident_key(self.table, self.check, self.column)


def incident_key(table: str, check: str, column: str | None) -> str:
    return json.dumps([table, check, column])


def _column_of(violation_expected: Any, details: Mapping[str, Any]) -> str | None:
    if isinstance(violation_expected, Mapping) and isinstance(violation_expected.get("column"), str):
        return violation_expected["column"]
    column = details.get("column")
    return column if isinstance(column, str) else None


def findings_of(results: Iterable[CheckResult]) -> list[Finding]:
    """What in ``results`` opens (or keeps open) an incident."""
    out: list[Finding] = []
    for r in results:
        if r.error is not None or r.not_evaluated is not None:
            kind = "error" if r.not_evaluated is None else "not evaluated"
            why = r.error if r.not_evaluated is None else f"not evaluated: {r.not_evaluated}"
            msg = f"{r.check} of {r.table} {'could not run' if kind == 'error' else 'was not evaluated'}: {why}"
            out.append(Finding(r.table, r.check, None, kind, "fail", msg, r.snapshot_id))
            continue
        groups: dict[str | None, list[Any]] = {}
        for v in r.violations:
            groups.setdefault(_column_of(v.expected, r.details), []).append(v)
        for column, vs in groups.items():
            first = vs[0]
            more = f" (and {len(vs) - 1} more)" if len(vs) > 1 else ""
            out.append(
                Finding(
                    r.table,
                    r.check,
                    column,
                    "anomaly" if first.check == "anomaly" else "violation",
                    "fail",
                    f"{r.check} of {r.table} failed: {first}{more}",
                    first.snapshot_id if first.snapshot_id is not None else r.snapshot_id,
                    tuple(_located(v) for v in vs[:LISTED]),
                    len(vs),
                )
            )
        warned = r.details.get("anomalies") if not r.violations else None
        if warned:
            out.append(
                Finding(
                    r.table,
                    r.check,
                    _column_of(None, r.details),
                    "anomaly",
                    "warn",
                    f"{r.check} of {r.table} (warning): {warned[-1].get('message', '')}",
                    r.snapshot_id,
                    count=len(warned),
                )
            )
    return out


def _located(v: Any) -> dict[str, Any]:
    d = v.to_dict()
    return {k: d[k] for k in ("check", "bucket", "offsets", "snapshot_id", "keys", "message")}


def task_result(dag_id: str, task_id: str, error: str | None) -> CheckResult:
    """An Airflow task's outcome as a result (table ``dag:<dag_id>``, check ``task:<task_id>``): ``error`` set
    when it failed (an incident), None when it succeeded (its incident recovers)."""
    return CheckResult(check=f"task:{task_id}", table=f"dag:{dag_id}", error=error)


# -- alerts and their channels -----------------------------------------------------------------------------------


@dataclass
class Alert:
    """One message about one incident: ``event`` is ``open`` or ``recovered``. ``delivered`` and ``failed``
    list the channel ids (`Channels.ids`) that took it or did not."""

    event: str
    incident: Mapping[str, Any]
    run_id: str
    owner: str | None
    at: str
    delivered: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def title(self) -> str:
        i = self.incident
        where = f"{i['table']}" + (f".{i['column']}" if i.get("column") else "")
        if self.event == RECOVERED:
            return f"[lakestream] RECOVERED {i['check']} on {where}"
        tag = "WARNING" if i.get("severity") == "warn" else "FAILED"
        return f"[lakestream] {tag} {i['check']} on {where}"

    def payload(self) -> dict[str, Any]:
        """The JSON a generic webhook receives (docs/guides/quality.md, "Alerts")."""
        i = self.incident
        return {
            "source": "lakestream",
            "event": self.event,
            "title": self.title,
            "incident": i["key"],
            "table": i["table"],
            "check": i["check"],
            "column": i.get("column"),
            "kind": i.get("kind"),
            "severity": i.get("severity"),
            "owner": self.owner,
            "run_id": self.run_id,
            "at": self.at,
            "opened_at": i.get("opened_at"),
            "opened_run": i.get("opened_run"),
            "recovered_at": i.get("recovered_at"),
            "message": i.get("message"),
            "snapshot_id": i.get("snapshot_id"),
            "violations": list(i.get("violations") or []),
            "violation_count": i.get("count", 0),
        }

    def lines(self) -> list[str]:
        """The alert as text lines (Slack, e-mail)."""
        p = self.payload()
        if self.event == RECOVERED:
            return [p["title"], f"passes again in run {p['run_id']} (open since {p['opened_at']})"]
        out = [p["title"], p["message"] or ""]
        for v in p["violations"]:
            where = [f"bucket {v['bucket']}" if v.get("bucket") is not None else ""]
            if v.get("offsets"):
                where.append(f"offsets [{v['offsets'][0]}, {v['offsets'][1]})")
            if v.get("keys"):
                where.append(f"keys {list(v['keys'])[:LISTED]}")
            out.append(f"- {v['check']}: {', '.join(w for w in where if w) or 'table-wide'}: {v['message']}")
        out.append(f"run {p['run_id']}, snapshot {p['snapshot_id']}, open since {p['opened_at']}")
        return out


def slack_payload(alert: Alert) -> dict[str, Any]:
    """Slack's incoming-webhook message: ``text`` (the notification) and a section block."""
    lines = alert.lines()
    body = "\n".join(lines[1:])
    return {
        "text": lines[0],
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": lines[0][:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": body[:2900] or lines[0]}},
        ],
    }


def post_json(url: str, payload: Mapping[str, Any], *, timeout: float = 10.0) -> None:
    """POST ``payload`` as JSON; raises `AlertDeliveryError` unless the answer is 2xx."""
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "lakestream-alerts"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - URLs from alerts.yml
            response.read()
    except urllib.error.HTTPError as exc:
        raise AlertDeliveryError(f"{url} answered HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise AlertDeliveryError(f"{url} did not take the alert: {exc}") from None


#: ``send_email(addresses, subject, body)``: Airflow's SMTP notifier in a DAG (dags/_notifiers.py).
SendEmail = Callable[[Sequence[str], str, str], None]
Post = Callable[[str, Mapping[str, Any]], None]


def _deliver(alert: Alert, channels: Channels, skip: Iterable[str], post: Post, send_email: SendEmail | None) -> None:
    done = set(skip)
    payload = alert.payload()
    targets: list[tuple[str, Callable[[], None]]] = []
    targets += [(f"webhook:{u}", functools.partial(post, u, payload)) for u in channels.webhooks]
    targets += [(f"slack:{u}", functools.partial(post, u, slack_payload(alert))) for u in channels.slack]
    if channels.emails:
        lines = alert.lines()

        def email() -> None:
            if send_email is None:
                raise AlertDeliveryError("no e-mail sender here (e-mail goes out from Airflow's SMTP notifier)")
            send_email(list(channels.emails), lines[0], "\n".join(lines[1:]))

        targets.append((f"email:{','.join(channels.emails)}", email))
    for cid, send in targets:
        if cid in done:
            alert.delivered.append(cid)
            continue
        try:
            send()
        except Exception as exc:  # noqa: BLE001 - a channel's failure must not stop the others; retried next run
            log.warning("alert %s to %s not delivered: %s", alert.title, cid, exc)
            alert.failed[cid] = f"{type(exc).__name__}: {exc}"
        else:
            alert.delivered.append(cid)


# -- the incident record ------------------------------------------------------------------------------------------


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds")


def _read(store: ObjectStore) -> tuple[dict[str, Any], str | None]:
    try:
        obj = store.get(INCIDENTS_KEY)
    except NotFound:
        return {}, None
    try:
        doc = json.loads(obj.data)
        incidents = doc["incidents"]
        if not isinstance(incidents, dict):
            raise TypeError("incidents is not an object")
    except (ValueError, KeyError, TypeError) as exc:
        raise QualityError(
            f"the alert record {store.url}/{INCIDENTS_KEY} cannot be read ({type(exc).__name__}: {exc}); delete it "
            "to start again (open incidents are then alerted once more)"
        ) from None
    return incidents, obj.etag


def _write(store: ObjectStore, incidents: dict[str, Any], etag: str | None) -> None:
    data = json.dumps({"format": FORMAT, "incidents": incidents}, indent=1, sort_keys=True).encode()
    if etag is None:
        store.put(INCIDENTS_KEY, data, if_none_match=True)
    else:
        store.put(INCIDENTS_KEY, data, if_match=etag)


def _cas(store: ObjectStore, change: Callable[[dict[str, Any]], Any]) -> Any:
    """Apply ``change`` (which edits the incidents in place and returns what the caller wants) to the record by
    compare-and-swap, retried while other runs write in between; nothing is written if it changed nothing."""
    for _ in range(WRITE_ATTEMPTS):
        incidents, etag = _read(store)
        before = json.dumps(incidents, sort_keys=True)
        out = change(incidents)
        if json.dumps(incidents, sort_keys=True) == before:
            return out
        try:
            _write(store, incidents, etag)
        except PreconditionFailed:
            continue  # another run wrote meanwhile: apply the change to its record
        return out
    raise QualityError(
        f"the alert record {INCIDENTS_KEY} was written by other runs {WRITE_ATTEMPTS} times while this one tried; "
        "its alerts go out with the next run"
    )


def send_alerts(
    store: ObjectStore,
    results: Iterable[CheckResult],
    routing: Routing,
    *,
    run_id: str,
    now: datetime | None = None,
    post: Post = post_json,
    send_email: SendEmail | None = None,
    claim_seconds: float = 600.0,
) -> list[Alert]:
    """Open, keep or recover the incidents of ``results`` in the record, and send each owner what it was not yet
    told (module docstring). Returns the alerts this run sent (each with the channels that took it or not).

    A check that ran (no error, evaluated) and found nothing recovers the incidents of its table and check;
    checks not in ``results`` leave theirs as they are."""
    results = list(results)
    at = now or datetime.now(UTC)
    stamp = _iso(at)
    findings = {f.key: f for f in findings_of(results)}
    ran = {(r.table, r.check) for r in results if r.error is None and r.not_evaluated is None}
    expiry = _iso(at - timedelta(seconds=claim_seconds))

    def transition(incidents: dict[str, Any]) -> list[str]:
        for key, f in findings.items():
            inc = incidents.get(key)
            if inc is None:
                inc = incidents[key] = {
                    "key": key,
                    "table": f.table,
                    "check": f.check,
                    "column": f.column,
                    "opened_at": stamp,
                    "opened_run": run_id,
                    "sent": None,
                    "claim": None,
                    "delivered": [],
                }
            if inc.get("status") != OPEN:
                inc.pop("recovered_at", None)
                inc.pop("recovered_run", None)
            inc.update(
                status=OPEN,
                kind=f.kind,
                severity=f.severity,
                message=f.message,
                snapshot_id=f.snapshot_id,
                violations=list(f.violations),
                count=f.count,
                last_seen=stamp,
                last_run=run_id,
            )
        for key, inc in list(incidents.items()):
            if key not in findings and inc["status"] == OPEN and (inc["table"], inc["check"]) in ran:
                inc.update(status=RECOVERED, recovered_at=stamp, recovered_run=run_id)
        claimed = []
        for key, inc in list(incidents.items()):
            claim = inc.get("claim")
            if claim is not None and claim["at"] > expiry:
                continue  # another run is telling the owner: it records the outcome
            if inc["status"] == inc.get("sent"):
                if claim is not None:
                    inc["claim"] = None
                if inc["status"] == RECOVERED:
                    del incidents[key]
                continue
            if inc["status"] == RECOVERED and inc.get("sent") is None:
                del incidents[key]  # recovered before anyone was told: nothing to say
                continue
            if inc.get("delivered_status") != inc["status"]:
                inc["delivered"] = []  # a new message: every channel gets it
                inc["delivered_status"] = inc["status"]
            inc["claim"] = {"run": run_id, "at": stamp, "status": inc["status"]}
            claimed.append(key)
        return claimed

    claimed = _cas(store, transition)
    if not claimed:
        return []
    incidents, _ = _read(store)
    alerts = []
    for key in claimed:
        inc = incidents.get(key)
        if inc is None or (inc.get("claim") or {}).get("run") != run_id:
            continue
        owner, channels = routing.channels_of(inc["table"])
        alert = Alert(event=inc["claim"]["status"], incident=inc, run_id=run_id, owner=owner, at=stamp)
        if not channels.ids():
            log.warning("%s: no owner with a channel for table %s (alerts.yml)", alert.title, inc["table"])
        _deliver(alert, channels, inc.get("delivered") or [], post, send_email)
        alerts.append(alert)

    def record(incidents: dict[str, Any]) -> None:
        for alert in alerts:
            inc = incidents.get(alert.incident["key"])
            if inc is None or (inc.get("claim") or {}).get("run") != run_id:
                continue
            inc["delivered"] = sorted(set(inc.get("delivered") or []) | set(alert.delivered))
            inc["claim"] = None
            if alert.failed:
                inc["last_error"] = alert.failed
                continue  # the next run sends to the channels that failed
            inc.pop("last_error", None)
            inc["sent"] = alert.event
            if inc["sent"] == RECOVERED and inc["status"] == RECOVERED:
                del incidents[alert.incident["key"]]

    _cas(store, record)
    return alerts


def open_incidents(store: ObjectStore) -> list[dict[str, Any]]:
    """The incidents of the record (open, or recovered and not yet announced), by key."""
    incidents, _ = _read(store)
    return [incidents[k] for k in sorted(incidents)]
