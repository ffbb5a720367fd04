"""The spark-submit entry points: what they do before Spark starts."""

from __future__ import annotations

import pyarrow as pa
import pytest

from jobs import compaction, maintenance, tiering
from lakehouse.errors import ConfigError


@pytest.mark.parametrize("job", [tiering, compaction, maintenance])
def test_a_bad_configuration_fails_before_spark_starts(job, monkeypatch, tmp_path) -> None:
    """The session was built first: a missing config file failed only after Spark's start (~15 s)."""

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark was started before the settings were read")

    monkeypatch.setattr("lakehouse.spark.spark_session", no_spark)
    with pytest.raises(ConfigError, match="does not exist"):
        job.main(["--config", str(tmp_path / "missing.yaml")])


@pytest.mark.parametrize(
    ("job", "args"),
    [(tiering, []), (compaction, ["--min-input-files", "2"]), (maintenance, ["--min-input-files", "2"])],
    ids=["tiering", "compaction", "maintenance"],
)
def test_every_table_is_worked_on_past_broken_ones_and_the_job_fails_at_the_end(
    job, args, spark, tmp_path, capsys
) -> None:
    """What the DAGs' all-tables tasks run. A stray object among the definitions stopped the job before any
    table; broken tables are reported per table, and a last line sums up."""
    import json

    from lakehouse import Lakehouse
    from tests.lakehouse._broken import BROKEN, GOOD, warehouse_with_broken_tables

    wh = tmp_path.as_uri()
    warehouse_with_broken_tables(wh)
    if job is not tiering:
        with Lakehouse.open(wh) as lh:
            for name in GOOD:
                for i in range(3):  # three small files per bucket, for compaction
                    lh.log(name).append(pa.table({"k": [i, i + 10], "v": ["x", "y"]}), "upsert")
                    lh.tier(name)
    assert job.main(["--warehouse", wh, *args]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    by_table = {line["table"]: line for line in lines if "table" in line}
    assert sorted(by_table) == sorted(GOOD + BROKEN)
    assert all("error" not in by_table[name] for name in GOOD), lines
    assert by_table["ods.b"]["type"] == "LakeStateError" and "cannot be loaded" in by_table["ods.b"]["error"]
    assert by_table["ods.bad"]["error"].startswith("ods.bad: table definition")
    assert lines[-1] == {"summary": "2 of 4 tables failed: ods.b, ods.bad", "tables": 4, "failed": BROKEN}
    if job is tiering:
        with Lakehouse.open(wh) as lh:
            assert all(lh.lake_offsets(name) == lh.log(name).end_offsets() for name in GOOD)
