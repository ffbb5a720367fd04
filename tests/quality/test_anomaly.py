"""Anomaly detection on metric series (quality.anomaly): planted anomalies are flagged, clean seasonal histories
with noise are not, short histories are not judged, bad configuration is refused naming the file and field."""

from __future__ import annotations

import json
import math
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quality.anomaly import AnomalySpec, anomaly_results, parse_anomalies
from quality.errors import QualityError, SuiteError

T0 = datetime(2026, 11, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=30)
PATH = "expectations/ods.orders.json"


def hourly(values, first_snapshot=1000):
    return [(T0 + timedelta(hours=i), first_snapshot + i, float(v)) for i, v in enumerate(values)]


def seasonal_rows(rng: random.Random, n: int, *, level=1000.0, amplitude=400.0, noise=25.0) -> list[float]:
    """Rows added per hourly commit: a daily rhythm (period 24) with noise."""
    return [level + amplitude * math.sin(2 * math.pi * i / 24) + rng.gauss(0, noise) for i in range(n)]


def specs(meta_entries: list[dict], table="ods.orders"):
    return parse_anomalies({"lakestream": "a note", "anomalies": meta_entries}, table=table, path=PATH)


def series_from(mapping):
    def series_of(table, metric, column):
        return mapping[(table, metric, column)]

    return series_of


def test_a_volume_drop_is_a_violation_and_the_seasonal_band_catches_a_drop_the_window_cannot() -> None:
    rng = random.Random(7)
    values = seasonal_rows(rng, 24 * 6)
    # the last commit is at the daily peak (phase 6: ~1400 rows) but brings the trough's level: normal for the
    # day as a whole, abnormal for its hour
    assert len(values) % 24 == 0
    values.extend(seasonal_rows(rng, 7)[:6])
    values.append(650.0)
    series = {("ods.orders", "rows_added", None): hourly(values)}
    seasonal = specs([{"metric": "rows_added", "season": 24, "severity": "fail"}])
    [result] = anomaly_results(seasonal, series_from(series), now=NOW)
    assert result.check == "anomaly:rows_added" and result.status == "failed" and not result.ok
    [v] = result.violations
    assert v.check == "anomaly" and v.table == "ods.orders" and v.snapshot_id == 1000 + len(values) - 1
    assert v.actual == 650.0 and v.expected["low"] > 1100  # the band of its hour, not of the day
    assert "rows_added of ods.orders at snapshot" in v.message and "season of 24" in v.message
    assert result.details["judged"][-1]["method"] == "seasonal"
    # without the season the same point is inside the day's range: not flagged
    [plain] = anomaly_results(specs([{"metric": "rows_added", "severity": "fail"}]), series_from(series), now=NOW)
    assert plain.ok and plain.details["judged"][-1]["method"] == "window"
    # a drop of 300 rows at the peak (~10 sigma of the noise) is flagged too; 60 (~2 sigma) is not
    for drop, flagged in ((300, True), (60, False)):
        series[("ods.orders", "rows_added", None)][-1] = (NOW, 1, 1400.0 - drop)
        [r] = anomaly_results(seasonal, series_from(series), now=NOW)
        assert r.ok is not flagged, (drop, r.details["judged"])


def test_a_null_fraction_spike_is_a_warning_that_passes() -> None:
    rng = random.Random(3)
    fractions = [abs(0.01 + rng.gauss(0, 0.002)) for _ in range(60)] + [0.2]
    series = {("ods.orders", "null_fraction", "o_custkey"): hourly(fractions)}
    conf = specs([{"metric": "null_fraction", "column": "o_custkey", "k": 5}])
    [result] = anomaly_results(conf, series_from(series), now=NOW)
    assert result.check == "anomaly:null_fraction:o_custkey"
    assert result.ok and result.status == "passed" and not result.violations  # warn: publish is not held back
    [anomaly] = result.details["anomalies"]
    assert anomaly["value"] == 0.2 and anomaly["high"] < 0.03
    assert result.details["warnings"] == [anomaly["message"]] and "o_custkey" in anomaly["message"]
    assert result.details["column"] == "o_custkey" and result.details["severity"] == "warn"
    series[("ods.orders", "null_fraction", "o_custkey")] = hourly([*fractions[:-1], 0.011])  # an ordinary value
    [quiet] = anomaly_results(conf, series_from(series), now=NOW)
    assert quiet.ok and quiet.details["anomalies"] == []
    series[("ods.orders", "null_fraction", "o_custkey")] = hourly([*fractions[:-1], 0.04])  # ~15 sigma
    [smaller] = anomaly_results(conf, series_from(series), now=NOW)
    assert smaller.details["anomalies"]
    series[("ods.orders", "null_fraction", "o_custkey")] = hourly([*fractions[:-1], 0.015])  # ~2.5 sigma
    [quiet] = anomaly_results(conf, series_from(series), now=NOW)
    assert quiet.ok and quiet.details["anomalies"] == []


def test_no_false_alarm_over_50_clean_seasonal_histories() -> None:
    conf = specs(
        [
            {"metric": "rows_added", "season": 24, "judge_last": 3, "severity": "fail"},
            {"metric": "rows_added_plain", "judge_last": 3, "severity": "fail"},
        ]
    )
    flagged = []
    for seed in range(50):
        rng = random.Random(seed)
        values = seasonal_rows(rng, rng.randrange(30, 24 * 7))  # short and long histories: the fallback too
        series = {
            ("ods.orders", "rows_added", None): hourly(values),
            ("ods.orders", "rows_added_plain", None): hourly(
                [v - 400 * math.sin(2 * math.pi * i / 24) for i, v in enumerate(values)]
            ),
        }
        for result in anomaly_results(conf, series_from(series), now=NOW):
            assert len(result.details["judged"]) == 3
            if not result.ok:
                flagged.append((seed, result.check, [str(v) for v in result.violations]))
    assert flagged == []


def test_short_history_is_not_judged_and_points_after_now_are_not_the_run_s() -> None:
    series = {("ods.orders", "rows_added", None): hourly([1000, 1001, 999, 1000, 5])}
    [result] = anomaly_results(specs([{"metric": "rows_added", "min_history": 5}]), series_from(series), now=NOW)
    assert result.ok and result.details["skipped"] == "4 earlier points, 5 needed" and not result.details["anomalies"]
    values = [1000.0 + (i % 3) for i in range(20)]
    series = {("ods.orders", "rows_added", None): hourly([*values, 3.0])}
    conf = specs([{"metric": "rows_added", "severity": "fail"}])
    later = T0 + timedelta(hours=20)  # the planted point is after the run's time
    [before] = anomaly_results(conf, series_from(series), now=later - timedelta(seconds=1))
    assert before.ok and before.snapshot_id == 1019
    [at] = anomaly_results(conf, series_from(series), now=later)
    assert not at.ok and at.snapshot_id == 1020
    [empty] = anomaly_results(conf, series_from({("ods.orders", "rows_added", None): []}), now=NOW)
    assert empty.ok and empty.details["skipped"] == "no metric points yet"
    # a run judges the snapshot it reconciled (publish wants every result on it), not a later one
    [pinned] = anomaly_results(conf, series_from(series), now=NOW, snapshots={"ods.orders": 1019})
    assert pinned.ok and pinned.snapshot_id == 1019 and pinned.details["judged"][-1]["snapshot_id"] == 1019
    [planted] = anomaly_results(conf, series_from(series), now=NOW, snapshots={"ods.orders": 1020})
    assert not planted.ok and planted.snapshot_id == 1020
    [unknown] = anomaly_results(conf, series_from(series), now=NOW, snapshots={"ods.orders": 5})
    assert (
        unknown.ok and unknown.snapshot_id == 5 and unknown.details["skipped"] == "no metric point for snapshot 5 yet"
    )


def test_relative_change_bound_and_a_series_that_cannot_be_read() -> None:
    values = [1000.0 + 50 * (i % 2) for i in range(20)]
    series = {("ods.orders", "rows_added", None): hourly([*values, 600.0])}
    conf = specs([{"metric": "rows_added", "k": None, "max_relative_change": {"decrease": 0.3}, "severity": "fail"}])
    [result] = anomaly_results(conf, series_from(series), now=NOW)
    assert not result.ok and "change of -" in result.violations[0].message
    series[("ods.orders", "rows_added", None)][-1] = (NOW, 9, 800.0)  # -22%: inside the bound
    [ok] = anomaly_results(conf, series_from(series), now=NOW)
    assert ok.ok

    def broken(table, metric, column):
        raise QualityError("the metrics table is not there")

    [err] = anomaly_results(conf, broken, now=NOW)
    assert err.status == "error" and "metrics table" in err.error


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"k": 3}, "anomalies[0].metric is required"),
        ({"metric": "rows_added", "k": -1}, "anomalies[0].k must be a number > 0"),
        ({"metric": "rows_added", "k": "4"}, "anomalies[0].k must be"),
        ({"metric": "rows_added", "severity": "error"}, "anomalies[0].severity must be"),
        ({"metric": "rows_added", "season": 1}, "anomalies[0].season must be a whole number >= 2"),
        ({"metric": "rows_added", "min_history": 2}, "anomalies[0].min_history must be"),
        ({"metric": "rows_added", "window": 5}, "anomalies[0].window (5) must be at least min_history"),
        ({"metric": "rows_added", "max_relative_change": 0}, "anomalies[0].max_relative_change must be"),
        ({"metric": "rows_added", "k": None}, "anomalies[0].k is null and there is no max_relative_change"),
        ({"metric": "rows_added", "treshold": 3}, "anomalies[0] has unknown fields ['treshold']"),
    ],
)
def test_bad_configuration_names_the_file_and_the_field(entry, field) -> None:
    with pytest.raises(SuiteError) as info:
        specs([entry])
    assert str(info.value).startswith(f"{PATH}: meta.anomalies") and field in str(info.value)


def test_a_suite_file_carries_its_anomalies_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    from quality.expectations import load_suite

    path = tmp_path / "ods.orders.json"
    meta = {
        "lakestream": "see docs/guides/quality.md",
        "anomalies": [{"metric": "rows_added", "season": 24, "severity": "fail"}],
    }
    path.write_text(json.dumps({"name": "ods.orders", "expectations": [], "meta": meta}))
    suite = load_suite(path)
    assert suite.anomalies == (
        AnomalySpec(table="ods.orders", metric="rows_added", season=24, severity="fail", path=str(path)),
    )
    meta["anomalies"].append({"metric": "rows_added", "k": 2})
    path.write_text(json.dumps({"name": "ods.orders", "expectations": [], "meta": meta}))
    with pytest.raises(SuiteError, match=r"ods\.orders\.json: meta\.anomalies\[1\]: metric 'rows_added' is"):
        load_suite(path)
