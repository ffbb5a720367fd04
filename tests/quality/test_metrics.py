"""Metrics per commit (issue 44): each commit's metrics equal a full recomputation from the log (the rows before
and after it, read as of its parent's and its own offsets), over random histories of inserts, updates, deletes
and repeated keys tiered in several rounds; collecting again writes nothing, a stale collector records nothing
twice, DuckDB reads the table, and Spark's executors compute what the driver does. Local backend: the reads
are `lakehouse`'s, tested on both backends elsewhere."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from pyiceberg.table.snapshots import ancestors_of

from lakehouse import Lakehouse
from lakehouse.iceberg.commit_usage import snapshot_usage
from lakehouse.iceberg.offsets import tiering_snapshots
from object_store import open_store
from quality.metrics import MetricsError, collect_metrics, load_series, metrics_dataframe
from quality.metrics import collect as metrics_module
from quality.metrics.partials import USAGE_METRICS, usage_rows
from quality.metrics.sketch import RELATIVE_ERROR
from quality.metrics.table import METRICS_TABLE, append_metrics, metrics_table, recorded
from tests.conftest import duckdb_connection

NAME = "ods.m"
BUCKETS = 3
SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string()), ("x", pa.float64()), ("n", pa.int32())])


@pytest.fixture
def lh(tmp_path):
    lake = Lakehouse(open_store(tmp_path.as_uri()))
    yield lake
    for log in lake._logs.values():
        log.close()


def batch(rng: random.Random, keys: list[int]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "s": pa.array([None if rng.random() < 0.2 else f"s{rng.randrange(12)}" for _ in keys]),
            "x": pa.array([None if rng.random() < 0.3 else rng.uniform(-5, 5) for _ in keys], pa.float64()),
            "n": pa.array([rng.randrange(-3, 40) for _ in keys], pa.int32()),
        },
        schema=SCHEMA,
    )


def history(lh: Lakehouse, kind: str, seed: int, rounds: int = 5) -> None:
    """Random rounds of upserts (keys repeated within and across rounds), deletes and inserts, tiered after
    most rounds (some in splits: several commits per tiering), and a compaction (a commit that changes no
    offset)."""
    pk = kind in ("pk", "pk-cow")
    if pk:
        # merge-on-read (the default): metrics read each commit's added files; copy-on-write: its changes
        mode = "copy-on-write" if kind == "pk-cow" else None
        lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=BUCKETS, write_mode=mode)
    else:
        lh.create_table(NAME, SCHEMA, bucket_key="k", buckets=BUCKETS)
    log = lh.log(NAME)
    rng = random.Random(seed)
    for r in range(rounds):
        for _ in range(rng.randrange(1, 4)):
            keys = [rng.randrange(40) for _ in range(rng.randrange(1, 25))]
            log.append(batch(rng, keys), op="upsert" if pk else "insert")
        if pk and r and rng.random() < 0.8:
            log.append(batch(rng, rng.sample(range(45), rng.randrange(1, 10))), op="delete")
        if r == 2:
            lh.compact(NAME, min_input_files=2)
        if r != 3:
            lh.tier(NAME, max_split_rows=rng.choice([None, 11]))


def recorded_metrics(lh: Lakehouse) -> dict[tuple[int, str, str | None], tuple[str, float, datetime]]:
    rows = metrics_table(lh).scan().to_arrow().to_pylist()
    out = {}
    for r in rows:
        key = (r["snapshot_id"], r["metric"], r["column"])
        assert key not in out, f"recorded twice: {key}"
        out[key] = (r["kind"], r["value"], r["committed_at"])
    return out


def expected_metrics(lh: Lakehouse, kind: str) -> dict[int, dict[tuple[str, str | None], float]]:
    """Per tiering snapshot, its metrics recomputed in full: the table read as of the parent's offsets and as of
    its own, the log's records in between."""
    lake = lh.lake_table(NAME)
    offsets = {s.snapshot_id: o for s, o in tiering_snapshots(lake.metadata, BUCKETS, lake.io)}
    log = lh.log(NAME)
    records = {b: log.read(b, 0) for b in range(BUCKETS)}
    previous = dict.fromkeys(range(BUCKETS), 0)
    out = {}
    for snap in list(ancestors_of(lake.current_snapshot(), lake.metadata))[::-1]:
        end = offsets.get(snap.snapshot_id)
        if end is None:
            continue
        before = lh.union_read(NAME, as_of=previous).to_pylist()
        after = lh.union_read(NAME, as_of=end).to_pylist()
        written = [r for b in range(BUCKETS) for r in records[b].slice(previous[b], end[b] - previous[b]).to_pylist()]
        if kind != "log":
            old, new = {r["k"]: r for r in before}, {r["k"]: r for r in after}
            touched = {r["k"] for r in written}
            inserts = [new[k] for k in touched if k in new and k not in old]
            updates = [new[k] for k in touched if k in new and k in old]
            deletes = [k for k in old if k not in new]
            images = inserts + updates
        else:
            inserts, updates, deletes = written, [], []
            images = written
        m = {
            ("rows", None): len(after),
            ("inserts", None): len(inserts),
            ("updates", None): len(updates),
            ("deletes", None): len(deletes),
            ("changes", None): len(inserts) + len(updates) + len(deletes),
        }
        if written:
            stamps = [r["_timestamp"].timestamp() for r in written]
            m[("freshness_seconds_max", None)] = max(0.0, snap.timestamp_ms / 1e3 - min(stamps))
            m[("freshness_seconds_min", None)] = max(0.0, snap.timestamp_ms / 1e3 - max(stamps))
        for column in SCHEMA.names:
            values = [r[column] for r in images]
            if not values:
                continue
            present = [v for v in values if v is not None]
            m[("null_fraction", column)] = 1 - len(present) / len(values)
            m[("distinct_estimate", column)] = len(set(present))
            if column != "s" and present:
                m[("min", column)], m[("max", column)] = min(present), max(present)
                m[("mean", column)] = sum(present) / len(present)
        out[snap.snapshot_id] = m
        previous = end
    return out


@pytest.mark.parametrize(("kind", "seed"), [("pk", 1), ("pk", 2), ("pk-cow", 4), ("log", 3)])
def test_each_commits_metrics_equal_a_full_recomputation(lh: Lakehouse, kind: str, seed: int) -> None:
    history(lh, kind, seed)
    written = collect_metrics(lh)
    got = recorded_metrics(lh)
    assert written == len(got)
    expected = expected_metrics(lh, kind)
    assert len(expected) >= 4
    lake = lh.lake_table(NAME)
    for sid, metrics in expected.items():
        snap = lake.metadata.snapshot_by_id(sid)
        for (metric, column), value in metrics.items():
            recorded_kind, actual, at = got.pop((sid, metric, column))
            assert recorded_kind == "tiering"
            assert at == datetime.fromtimestamp(snap.timestamp_ms / 1000, UTC)
            if metric == "distinct_estimate":  # the sketch's bound: 4 standard errors, and 1 for rounding
                assert abs(actual - value) <= 4 * RELATIVE_ERROR * value + 1, (sid, column, actual, value)
            else:
                assert actual == pytest.approx(value, rel=1e-9, abs=1e-3), (sid, metric, column, actual, value)
    # every commit's usage, as its snapshot recorded it (tiering and compaction record theirs)
    for (sid, metric, column), (_, value, _) in list(got.items()):
        if metric in USAGE_METRICS:
            recorded_usage = snapshot_usage(lake.metadata.snapshot_by_id(sid))
            assert column is None and recorded_usage is not None
            assert value == {m: v for m, _, v in usage_rows(recorded_usage)}[metric]
            assert value > 0 or metric not in ("write_requests", "bytes_sent")  # each wrote files
            del got[(sid, metric, column)]
    # what is left: the compaction, which changes no offset: its rows only
    others = {(sid, metric): k for (sid, metric, _), (k, _, _) in got.items()}
    assert others and set(others.values()) == {"other"} and {m for _, m in others} == {"rows"}, got
    along = _offsets_along(lh)
    for (sid, metric), _ in others.items():
        value = got[(sid, metric, None)][1]
        assert value == lh.union_read(NAME, as_of=along[sid]).num_rows
    series = load_series(lh, NAME, "rows")
    assert [sid for _, sid, _ in series] == [s for s in along if s in {k[0] for k in got} | set(expected)]
    assert [at for at, _, _ in series] == sorted(at for at, _, _ in series)


def _offsets_along(lh: Lakehouse) -> dict[int, dict[int, int]]:
    """The offsets each snapshot of the current ancestry holds, oldest first (a compaction: its parent's)."""
    lake = lh.lake_table(NAME)
    offsets = {s.snapshot_id: o for s, o in tiering_snapshots(lake.metadata, BUCKETS, lake.io)}
    out, last = {}, None
    for snap in list(ancestors_of(lake.current_snapshot(), lake.metadata))[::-1]:
        last = offsets.get(snap.snapshot_id, last)
        if last is not None:
            out[snap.snapshot_id] = last
    return out


def test_collecting_again_writes_nothing_and_nothing_twice(lh: Lakehouse, monkeypatch) -> None:
    history(lh, "pk", 4)
    # a collector that crashes between computing and appending records nothing...
    computed = []
    monkeypatch.setattr(metrics_module, "append_metrics", lambda *args: computed.append(args) or 1)
    collect_metrics(lh)
    monkeypatch.undo()
    assert metrics_table(lh) is None
    _, stale_rows, stale_progress, _ = computed[0]
    # ...another collects part of it (bounded: the next call goes on)...
    first = collect_metrics(lh, max_commits=2)
    assert 0 < first < len(stale_rows) and len(recorded_metrics(lh)) == first
    # ...and the first one, late, appends only the rows of commits not recorded meanwhile
    late = append_metrics(lh, stale_rows, stale_progress, metrics_module.is_new_for(lh))
    assert late == len(stale_rows) - first
    assert len(recorded_metrics(lh)) == len(stale_rows)  # each metric once (`recorded_metrics` checks)
    assert collect_metrics(lh) == 0
    snapshots = len(metrics_table(lh).metadata.snapshots)
    assert append_metrics(lh, stale_rows, stale_progress, metrics_module.is_new_for(lh)) == 0
    assert len(metrics_table(lh).metadata.snapshots) == snapshots  # nothing new: no commit
    first, rest = len(stale_rows), 0
    # new commits: only they are collected
    lh.log(NAME).append(batch(random.Random(5), [1, 2, 3, 99]), op="upsert")
    lh.tier(NAME)
    new = collect_metrics(lh)
    assert new and len(recorded_metrics(lh)) == first + rest + new
    assert load_series(lh, NAME, "inserts")[-1][2] >= 1.0
    # what the tiering commit asked of the store, from its snapshot's summary (`lakehouse.iceberg.commit_usage`)
    tiering = lh.lake_table(NAME).current_snapshot()
    assert load_series(lh, NAME, "write_requests")[-1][1:] == (
        tiering.snapshot_id,
        float(snapshot_usage(tiering).write_requests),
    )
    assert load_series(lh, NAME, "write_requests")[-1][2] > 0
    assert load_series(lh, NAME, "min", "n") and load_series(lh, NAME, "mean", "s") == []
    # DuckDB, the independent reader, reads what pyiceberg does
    con = duckdb_connection()
    metadata = metrics_table(lh).metadata_location
    count, tables = con.sql(f"SELECT count(*), count(DISTINCT \"table\") FROM iceberg_scan('{metadata}')").fetchone()
    assert (count, tables) == (first + rest + new, 1)
    nulls = con.sql(
        f"SELECT value FROM iceberg_scan('{metadata}') WHERE metric = 'null_fraction' AND \"column\" = 's' "
        "ORDER BY committed_at, snapshot_id"
    ).fetchall()
    assert [v for (v,) in nulls] == [v for _, _, v in load_series(lh, NAME, "null_fraction", "s")]


def test_above_the_budget_without_spark_is_refused_after_the_rest(lh: Lakehouse) -> None:
    history(lh, "pk", 6)
    with pytest.raises(MetricsError, match="quality_driver_budget_rows"):
        collect_metrics(lh, driver_budget_rows=0)
    # nothing was refused before the first tiering commit, so nothing of the table is recorded
    assert metrics_table(lh) is None or NAME not in recorded(metrics_table(lh))


def test_executors_compute_what_the_driver_does(lh: Lakehouse, spark, monkeypatch) -> None:
    history(lh, "pk", 7, rounds=2)
    collect_metrics(lh)
    driver = recorded_metrics(lh)
    lh.catalog.drop_table(METRICS_TABLE)

    class NoLocal:
        def __init__(self, *args, **kwargs):
            raise AssertionError("the driver read changes above its budget")

    monkeypatch.setattr(metrics_module, "LocalExecutor", NoLocal)
    assert collect_metrics(lh, spark=spark, driver_budget_rows=0) == len(driver)
    executors = recorded_metrics(lh)
    assert executors.keys() == driver.keys()
    for key, (k, value, at) in driver.items():
        assert executors[key][0] == k and executors[key][2] == at
        assert executors[key][1] == pytest.approx(value, rel=1e-12), key
    # Spark reads the table (one task per data file)
    rows = metrics_dataframe(spark, lh).collect()
    assert sorted((r["snapshot_id"], r["metric"], r["column"] or "", r["value"]) for r in rows) == sorted(
        (sid, m, c or "", v) for (sid, m, c), (_, v, _) in executors.items()
    )


def test_cli_collects_and_shows(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from lakestream.cli import app

    wh = (tmp_path / "wh").as_uri()
    lake = Lakehouse(open_store(wh))
    history(lake, "pk", 8, rounds=2)
    runner = CliRunner()
    collected = runner.invoke(app, ["metrics", "collect", "-w", wh, "--json"])
    assert collected.exit_code == 0, collected.output
    written = json.loads(collected.output)["rows_written"]
    assert written == len(recorded_metrics(lake))
    again = runner.invoke(app, ["metrics", "collect", "-w", wh])
    assert again.exit_code == 0 and "0 metric rows written" in again.output
    shown = runner.invoke(app, ["metrics", "show", NAME, "-w", wh], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "inserts" in shown.output and "tiering" in shown.output, shown.output
    series = runner.invoke(app, ["metrics", "show", NAME, "-w", wh, "--metric", "max", "--column", "n", "--json"])
    lines = [json.loads(line) for line in series.output.splitlines()]
    assert [line["max"] for line in lines] == [v for _, _, v in load_series(lake, NAME, "max", "n")] and lines
    missing = runner.invoke(app, ["metrics", "show", "ods.nope", "-w", wh])
    assert missing.exit_code != 0


def test_the_commits_of_a_layers_models_table_are_rounds(lh: Lakehouse) -> None:
    from layers.rounds import LAYERS_PREFIX

    history(lh, "log", 9, rounds=2)
    lh.store.put(f"{LAYERS_PREFIX}{NAME}/round-0000000000.json", b"{}")  # a model writes the table
    assert collect_metrics(lh)
    assert {kind for kind, _, _ in recorded_metrics(lh).values()} == {"round"}


def test_string_hashes_tell_values_apart_whatever_their_length() -> None:
    from quality.metrics.sketch import PADDED_BYTES, string_hashes

    # padding never makes two values equal (a trailing space, the empty string), multi-byte characters count
    # by bytes, and values longer than the padded width (hashed one by one) too
    short = ["", " ", "ab", "ab ", "ab  ", "é", "e", "xyz€", "€", "a" * 7, "a" * 8, "a" * 9]
    long = ["x" * (PADDED_BYTES + 1), "x" * (PADDED_BYTES + 2)]
    for values in (short, short + long):
        hashes = string_hashes(pa.array(values))
        assert len(set(hashes.tolist())) == len(values)
        again = string_hashes(pa.array(list(reversed(values)), pa.large_string()).slice(0))
        assert sorted(again.tolist()) == sorted(hashes.tolist())  # by value, not position or type
    sliced = pa.array(["skip", *short]).slice(1)
    assert string_hashes(sliced).tolist() == string_hashes(pa.array(short)).tolist()


def test_a_series_read_for_its_newest_points_reads_back_only_as_far_as_they_go(lh: Lakehouse) -> None:
    """``load_series(last=N, until=T)``: at least the newest N points up to T, bounded below by a commit time
    (the rest of a long history stays unread), and the whole series when N reaches back past its start."""
    from datetime import timedelta

    now = datetime.now(UTC).replace(microsecond=0)
    hours = 400  # one commit an hour, in 8 appends: files whose commit times are ranges the bound can skip
    for chunk in range(8):
        rows = [
            {
                "table": "ods.t",
                "snapshot_id": i,
                "committed_at": now - timedelta(hours=hours - i),
                "kind": "tiering",
                "metric": "inserts",
                "column": None,
                "value": float(i),
            }
            for i in range(chunk * 50, (chunk + 1) * 50)
        ]
        append_metrics(lh, rows, {"ods.t": (rows[-1]["snapshot_id"], 0)}, lambda *_: True)
    whole = load_series(lh, "ods.t", "inserts")
    assert [sid for _, sid, _ in whole] == list(range(hours))
    newest = load_series(lh, "ods.t", "inserts", last=10)
    assert 10 <= len(newest) < hours / 4 and newest == whole[-len(newest) :]
    until = now - timedelta(hours=200, minutes=30)  # the checked commit: 199; later points may come too
    at = load_series(lh, "ods.t", "inserts", last=30, until=until)
    assert [p for p in at if p[0] <= until][-30:] == [p for p in whole if p[0] <= until][-30:]
    assert len(at) < hours and at == whole[-len(at) :]
    assert load_series(lh, "ods.t", "inserts", last=hours + 50) == whole
