"""A round's report records its requests to the store; reports of older versions read as no usage."""

from __future__ import annotations

from layers.rounds import RoundReport
from object_store import Usage


def test_a_reports_usage_round_trips_and_an_old_report_has_none() -> None:
    report = RoundReport(
        "dwd.x", 3, "keyed", "why", {"ods.a": {0: 5}}, upserts=2, usage=Usage({"PUT": 4, "GET": 9}, bytes_sent=100)
    )
    doc = report.to_json()
    assert doc["usage"] == {"requests": {"PUT": 4, "GET": 9}, "bytes_sent": 100, "bytes_received": 0}
    assert RoundReport.from_json(doc).usage == report.usage
    old = {k: v for k, v in doc.items() if k != "usage"}
    assert RoundReport.from_json(old).usage == Usage() and RoundReport.from_json(old) == report  # usage not compared
