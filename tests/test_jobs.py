"""The spark-submit entry points: what they do before Spark starts."""

from __future__ import annotations

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
