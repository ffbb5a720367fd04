"""A small client of Airflow 3's public REST API (``/api/v2``), for the stack's end-to-end test and benchmark.

Standard library only. It logs in through the simple auth manager (``POST /auth/token`` with the user and the
password the api-server generated into ``$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated``) and keeps
the token; every call raises `AirflowApiError` with the status and Airflow's answer when it fails.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stack.errors import StackError

FINISHED = frozenset({"success", "failed"})


class AirflowApiError(StackError):
    """An Airflow REST call failed, or a run did not finish as expected."""


class AirflowApi:
    def __init__(self, base_url: str, username: str, password: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.username, self.password, self.timeout = username, password, timeout
        self._token: str | None = None

    @classmethod
    def for_home(cls, base_url: str, airflow_home: Path | str, username: str = "admin") -> AirflowApi:
        """The client of the stack whose ``AIRFLOW_HOME`` is ``airflow_home`` (its generated password file)."""
        path = Path(airflow_home) / "simple_auth_manager_passwords.json.generated"
        try:
            password = json.loads(path.read_text())[username]
        except (OSError, ValueError, KeyError) as exc:
            raise AirflowApiError(
                f"no password for Airflow user {username!r} in {path} ({exc}): is the api-server up?"
            ) from None
        return cls(base_url, username, password)

    # ------------------------------------------------------------ HTTP

    def _request(self, method: str, path: str, body: Any = None, *, auth: bool = True, raw: bool = False) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        request = urllib.request.Request(f"{self.base_url}{path}", data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:  # noqa: S310 (our stack's URL)
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:1000]
            if exc.code == 401 and auth and self._token is not None:  # expired: log in again, once
                self._token = None
                return self._request(method, path, body, auth=auth, raw=raw)
            raise AirflowApiError(f"{method} {path}: HTTP {exc.code}: {detail}") from None
        except OSError as exc:
            raise AirflowApiError(f"{method} {path}: {exc}") from None
        if raw:
            return payload.decode(errors="replace")
        return json.loads(payload) if payload else None

    def token(self) -> str:
        if self._token is None:
            answer = self._request(
                "POST", "/auth/token", {"username": self.username, "password": self.password}, auth=False
            )
            self._token = answer["access_token"]
        return self._token

    # ------------------------------------------------------------ DAGs and runs

    def dags(self) -> dict[str, dict]:
        return {d["dag_id"]: d for d in self._request("GET", "/api/v2/dags?limit=1000")["dags"]}

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self._request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        """Start a manual run now; returns its run id."""
        run = self._request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return run["dag_run_id"]

    def runs(self, dag_id: str, limit: int = 100) -> list[dict]:
        """The DAG's runs, newest first."""
        query = urllib.parse.urlencode({"order_by": "-run_after", "limit": limit})
        return self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns?{query}")["dag_runs"]

    def run(self, dag_id: str, run_id: str) -> dict:
        return self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        run = urllib.parse.quote(run_id, safe="")
        return self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run}/taskInstances?limit=1000")["task_instances"]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The text of one try's log."""
        run = urllib.parse.quote(run_id, safe="")
        answer = self._request(
            "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run}/taskInstances/{task_id}/logs/{try_number}?full_content=true"
        )
        content = answer.get("content", "")
        if isinstance(content, list):  # structured log lines
            return "\n".join(line.get("event", "") if isinstance(line, dict) else str(line) for line in content)
        return str(content)

    def wait_run(
        self,
        dag_id: str,
        run_id: str,
        timeout: float,
        *,
        poll: float = 1.0,
        on_poll: Callable[[dict], None] | None = None,
    ) -> dict:
        """Poll one run until it finished (success or failed); raises on ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.run(dag_id, run_id)
            if on_poll is not None:
                on_poll(run)
            if run["state"] in FINISHED:
                return run
            if time.monotonic() > deadline:
                raise AirflowApiError(f"{dag_id} run {run_id} still {run['state']} after {timeout:.0f}s")
            time.sleep(poll)

    def failure_report(self, dag_id: str, run_id: str) -> str:
        """Each task that did not succeed, with the tail of its last try's log: what a failed wait shows."""
        lines = []
        for ti in self.task_instances(dag_id, run_id):
            if ti["state"] == "success":
                continue
            lines.append(f"{ti['task_id']}: {ti['state']} (try {ti['try_number']})")
            if ti["try_number"]:
                try:
                    log = self.task_log(dag_id, run_id, ti["task_id"], ti["try_number"])
                except AirflowApiError as exc:
                    log = str(exc)
                lines.extend("    " + line for line in log.splitlines()[-40:])
        return "\n".join(lines)
