"""Write-audit-publish (issue 26 item 4): the tag ``published`` moves only to a snapshot whose checks all passed,
never backwards; reads at the tag (Python, CLI, Spark) return that snapshot's rows whatever was committed since;
maintenance keeps it readable; a tag commit and a tiering commit racing each other both land."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakehouse import Lakehouse
from lakehouse.errors import InvalidArgument, RefNotFound
from lakehouse.iceberg.offsets import COMMIT_USER_PROPERTY, TIERING_USER
from quality.errors import PublishRefused
from quality.published_tag import PUBLISHED, publish, published_snapshot
from quality.results import RECONCILE, CheckResult, Violation

NAME = "ods.t"
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def batch(keys, tag: str) -> pa.Table:
    keys = list(keys)
    return pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([f"{tag}-{k}" for k in keys])})


def rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(table.column("k").to_pylist(), table.column("v").to_pylist(), strict=True))


def round_(lh: Lakehouse, keys, tag: str) -> int:
    """Upsert ``keys`` and tier them; the new current snapshot."""
    lh.log(NAME).append(batch(keys, tag), op="upsert")
    lh.tier(NAME)
    return lh.lake_table(NAME).metadata.current_snapshot_id


def passed(snapshot_id: int, table: str = NAME, check: str = RECONCILE) -> CheckResult:
    return CheckResult(check, table, snapshot_id=snapshot_id, rows=1)


def make(lh: Lakehouse) -> int:
    lh.create_table(NAME, SCHEMA, primary_key=["k"], buckets=2)
    return round_(lh, range(20), "a")


def test_publish_moves_the_tag_and_reads_at_it_stay_there(lakehouse) -> None:
    lh = lakehouse
    first = make(lh)
    assert published_snapshot(lh, NAME) is None
    expected = rows(lh.lake_read(NAME))
    other = CheckResult("gx:x", "ods.other", snapshot_id=1, violations=[Violation("gx-expectation", "ods.other", "x")])
    assert publish(lh, NAME, first, [passed(first), passed(first, check="layer"), other]) == first
    assert published_snapshot(lh, NAME) == first
    second = round_(lh, range(10, 40), "b")  # updates keys 10..19, adds 20..39
    assert second != first and published_snapshot(lh, NAME) == first
    assert rows(lh.lake_read(NAME, ref=PUBLISHED)) == expected != rows(lh.lake_read(NAME))
    assert rows(lh.union_read(NAME, ref=PUBLISHED)) == expected
    assert rows(pa.Table.from_batches(list(lh.union_batches(NAME, ref=PUBLISHED)))) == expected
    # projection and filter are pushed as in any lake read
    got = lh.lake_read(NAME, ["k"], "k >= 15", ref=PUBLISHED)
    assert got.column_names == ["k"] and sorted(got.column("k").to_pylist()) == list(range(15, 20))
    assert publish(lh, NAME, second, [passed(second)]) == second
    assert rows(lh.lake_read(NAME, ref=PUBLISHED)) == rows(lh.lake_read(NAME))
    assert publish(lh, NAME, second, [passed(second)]) == second  # again: nothing to move


def test_a_failing_check_leaves_the_tag_and_says_why(lakehouse) -> None:
    lh = lakehouse
    first = make(lh)
    publish(lh, NAME, first, [passed(first)])
    second = round_(lh, range(5), "b")
    bad = Violation("content", NAME, "bucket 1 differs from the log", bucket=1, offsets=(0, 25), snapshot_id=second)
    failing = CheckResult(RECONCILE, NAME, snapshot_id=second, violations=[bad])
    with pytest.raises(PublishRefused) as caught:
        publish(lh, NAME, second, [passed(second, check="gx:orders"), failing])
    message = str(caught.value)
    assert str(bad) in message and f"`published` stays at snapshot {first}" in message
    broken = CheckResult("gx:orders", NAME, snapshot_id=second, error="suite orders.json: no column zz")
    with pytest.raises(PublishRefused, match="could not run: suite orders.json: no column zz"):
        publish(lh, NAME, second, [broken])
    with pytest.raises(PublishRefused, match=f"no check results for {NAME}"):
        publish(lh, NAME, second, [passed(second, table="ods.other")])
    assert published_snapshot(lh, NAME) == first


def test_results_of_another_snapshot_are_refused(lakehouse) -> None:
    lh = lakehouse
    first = make(lh)
    second = round_(lh, range(5), "b")
    with pytest.raises(PublishRefused, match=f"made on snapshot {first}, not on {second}.*stays unset"):
        publish(lh, NAME, second, [passed(second), passed(first, check="layer")])
    assert published_snapshot(lh, NAME) is None


def test_published_never_moves_backwards(lakehouse) -> None:
    lh = lakehouse
    first = make(lh)
    second = round_(lh, range(5), "b")
    publish(lh, NAME, second, [passed(second)])
    with pytest.raises(PublishRefused, match=f"older than the published snapshot {second}.*stays at snapshot {second}"):
        publish(lh, NAME, first, [passed(first)])
    with pytest.raises(PublishRefused, match="not in the table"):
        publish(lh, NAME, 12345, [passed(12345)])
    assert published_snapshot(lh, NAME) == second


def test_maintenance_keeps_the_published_snapshot_readable(lakehouse) -> None:
    lh = lakehouse
    make(lh)
    for i in range(5):  # small files for compaction to rewrite
        round_(lh, range(i * 3, i * 3 + 3), f"r{i}")
    published = lh.lake_table(NAME).metadata.current_snapshot_id
    publish(lh, NAME, published, [passed(published)])
    expected = rows(lh.lake_read(NAME))
    round_(lh, range(100, 110), "later")
    report = lh.maintain(
        NAME,
        min_input_files=2,
        snapshot_age=timedelta(0),
        retain_last=1,
        orphan_age=timedelta(0),
        unsafe_orphan_age=True,
    )
    assert report.compaction.files_rewritten > 0 and report.expiry.expired, report
    assert published not in report.expiry.expired
    metadata = lh.lake_table(NAME).metadata
    assert metadata.snapshot_by_id(published) is not None and published_snapshot(lh, NAME) == published
    assert rows(Lakehouse(lh.store).lake_read(NAME, ref=PUBLISHED)) == expected
    # the files only the published snapshot holds survived expiry and orphan removal
    assert lh.remove_orphans(NAME, older_than=timedelta(0), unsafe_orphan_age=True).files == []
    assert rows(lh.lake_read(NAME, ref=PUBLISHED)) == expected


def test_unknown_ref_and_ref_with_as_of_are_clear_errors(lakehouse) -> None:
    lh = lakehouse
    make(lh)
    with pytest.raises(RefNotFound, match=r"no tag or branch 'published'; its refs: main\. .*first passing"):
        lh.lake_read(NAME, ref=PUBLISHED)
    with pytest.raises(RefNotFound, match="no tag or branch 'nope'"):
        lh.union_read(NAME, ref="nope")
    with pytest.raises(InvalidArgument, match="not both"):
        lh.lake_read(NAME, as_of={0: 0, 1: 0}, ref="main")
    with pytest.raises(InvalidArgument, match="not both"):
        lh.union_read(NAME, as_of={0: 0, 1: 0}, ref="main")
    assert rows(lh.lake_read(NAME, ref="main")) == rows(lh.lake_read(NAME))  # a branch is a ref too


@pytest.mark.backends("local", "s3")
def test_a_tiering_commit_between_load_and_tag_commit_keeps_both(lakehouse, monkeypatch) -> None:
    """publish loads the table, a tiering round commits, then the tag commit lands on the newer metadata."""
    lh = lakehouse
    first = make(lh)
    load = lh.lake_table
    raced: list[int] = []

    def stale_then_tier(name):
        table = load(name)
        if not raced:
            raced.append(0)
            lh.log(NAME).append(batch(range(50, 55), "race"), op="upsert")
            lh.tier(NAME)
            raced[0] = load(name).metadata.current_snapshot_id
        return table

    monkeypatch.setattr(lh, "lake_table", stale_then_tier)
    assert publish(lh, NAME, first, [passed(first)]) == first
    monkeypatch.undo()
    metadata = lh.lake_table(NAME).metadata
    assert metadata.refs[PUBLISHED].snapshot_id == first and metadata.current_snapshot_id == raced[0]
    assert lh.lake_offsets(NAME) == lh.log(NAME).end_offsets()
    assert sorted(lh.lake_read(NAME).column("k").to_pylist()) == [*range(20), *range(50, 55)]


@pytest.mark.backends("local", "s3")
def test_a_tag_commit_between_tiering_plan_and_commit_keeps_both(lakehouse) -> None:
    """The tag moves while a tiering round is committing: the round loses the CAS, pyiceberg rebuilds it on the
    metadata with the tag, the tiering fence lets it through (the tag added no tiering snapshot)."""
    lh = lakehouse
    first = make(lh)
    other = Lakehouse(lh.store)
    published: list[int] = []
    attempts: list[str] = []

    def publish_meanwhile(base, updates, *, name: str) -> None:
        tiering = any(
            getattr(getattr(u, "snapshot", None), "summary", None) is not None
            and u.snapshot.summary[COMMIT_USER_PROPERTY] == TIERING_USER
            for u in updates
        )
        if tiering:
            attempts.append(PUBLISHED in base.refs and "with tag" or "without tag")
        if tiering and not published:
            published.append(publish(other, NAME, first, [passed(first)]))

    lh.catalog.add_commit_check(publish_meanwhile)
    second = round_(lh, range(50, 55), "race")
    assert published == [first] and attempts == ["without tag", "with tag"]  # lost the CAS once, then rebuilt
    metadata = lh.lake_table(NAME).metadata
    assert metadata.refs[PUBLISHED].snapshot_id == first and metadata.current_snapshot_id == second != first
    assert lh.lake_offsets(NAME) == lh.log(NAME).end_offsets()
    assert sorted(lh.lake_read(NAME).column("k").to_pylist()) == [*range(20), *range(50, 55)]
    assert sorted(lh.lake_read(NAME, ref=PUBLISHED).column("k").to_pylist()) == list(range(20))


def test_cli_reads_at_a_ref(tmp_path) -> None:
    """`lakestream check` publishes; `lakestream table read --ref published` reads it."""
    from lakestream.cli import app

    lh = Lakehouse.open(tmp_path.as_uri())
    first = make(lh)
    runner = CliRunner()
    missing = runner.invoke(app, ["table", "read", NAME, "-w", lh.url, "--ref", PUBLISHED])
    assert missing.exit_code == 1 and "first passing `lakestream check`" in missing.output, missing.output
    check = runner.invoke(app, ["check", "-t", NAME, "-w", lh.url])
    assert check.exit_code == 0 and published_snapshot(lh, NAME) == first, check.output
    round_(lh, range(100, 130), "later")
    lh.log(NAME).append(batch([7], "tail"), op="upsert")
    result = runner.invoke(app, ["table", "read", NAME, "-w", lh.url, "--ref", PUBLISHED, "--limit", "0"])
    assert result.exit_code == 0 and "20 rows (lake at published)" in result.output, result.output
    union = runner.invoke(app, ["table", "read", NAME, "-w", lh.url, "--limit", "0"])
    assert "50 rows (union read)" in union.output, union.output
    both = runner.invoke(app, ["table", "read", NAME, "-w", lh.url, "--ref", PUBLISHED, "--as-of", "0:1,1:1"])
    assert both.exit_code == 1 and "do not go together" in both.output


def test_published_never_moves_past_a_snapshot_reconcile_fails(lakehouse) -> None:
    """End to end with the real checks: `lakestream check`'s run publishes a clean snapshot; after a rogue commit
    drops a row, reconcile names it and `published` stays on the clean snapshot, whose rows reads still get."""
    import pyarrow.compute as pc

    from lakehouse.iceberg.datafiles import LakeContext
    from quality.check import run_checks
    from quality.reconcile import reconcile

    lh = lakehouse
    make(lh)
    clean = round_(lh, range(10, 30), "b")
    run = run_checks(lh, tables=[NAME])
    assert run.ok and run.published == {NAME: clean} and published_snapshot(lh, NAME) == clean
    expected = rows(lh.lake_read(NAME))
    table = lh.lake_table(NAME)
    victim_file = next(iter(table.scan().plan_files())).file
    ctx = LakeContext.of(lh.store, table)
    data = ctx.read(victim_file.file_path)
    victim = data.column("k")[0].as_py()
    kept = data.filter(pc.not_equal(data.column("k"), victim))
    new = ctx.write(kept, tuple(victim_file.partition[i] for i in range(len(victim_file.partition))), "rogue")
    with table.transaction() as txn, txn.update_snapshot().overwrite() as producer:
        producer.delete_data_file(victim_file)
        producer.append_data_file(new)
    rogue = lh.lake_table(NAME).metadata.current_snapshot_id
    result = reconcile(lh, NAME)
    assert not result.ok and result.snapshot_id == rogue
    with pytest.raises(PublishRefused, match=f"content: table {NAME}.*stays at snapshot {clean}"):
        publish(lh, NAME, rogue, [result])
    run = run_checks(lh, tables=[NAME])
    assert not run.ok and run.published == {NAME: clean} and published_snapshot(lh, NAME) == clean
    assert rows(lh.lake_read(NAME, ref=PUBLISHED)) == expected
    assert victim not in lh.lake_read(NAME).column("k").to_pylist()
