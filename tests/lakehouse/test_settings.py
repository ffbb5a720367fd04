from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.errors import ConfigError, LakestreamError
from lakehouse.settings import load_settings
from object_store.local import LocalStore


def test_defaults_to_a_file_warehouse_in_the_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_settings(env={})
    assert s.warehouse == (tmp_path / "lakestream-warehouse").as_uri()
    assert s.store_options() == {}
    assert isinstance(s.open_store(), LocalStore)


def test_precedence_yaml_then_environment_then_arguments(tmp_path: Path) -> None:
    cfg = tmp_path / "lake.yaml"
    cfg.write_text(
        "warehouse: s3://from-yaml/wh\n"
        "s3:\n  endpoint: http://yaml:1\n  region: eu-west-1\n  access_key_id: yaml-id\n"
        "  secret_access_key: yaml-secret\n"
    )
    s = load_settings(cfg, env={})
    assert (s.warehouse, s.s3_endpoint, s.region, s.access_key_id) == (
        "s3://from-yaml/wh",
        "http://yaml:1",
        "eu-west-1",
        "yaml-id",
    )
    env = {
        "LAKESTREAM_CONFIG": str(cfg),
        "LAKESTREAM_S3_ENDPOINT": "http://env:2",
        "AWS_ACCESS_KEY_ID": "env-id",
    }
    s = load_settings(env=env)
    assert (s.s3_endpoint, s.access_key_id, s.secret_access_key) == ("http://env:2", "env-id", "yaml-secret")
    s = load_settings(env=env, s3_endpoint="http://arg:3", warehouse="s3://arg/wh")
    assert (s.warehouse, s.s3_endpoint) == ("s3://arg/wh", "http://arg:3")
    assert s.store_options() == {
        "endpoint_url": "http://arg:3",
        "region": "eu-west-1",
        "access_key_id": "env-id",
        "secret_access_key": "yaml-secret",
    }


def test_aws_default_region_is_a_fallback() -> None:
    assert load_settings(env={"AWS_DEFAULT_REGION": "ap-east-1"}).region == "ap-east-1"
    assert load_settings(env={"AWS_DEFAULT_REGION": "x", "AWS_REGION": "y"}).region == "y"


def test_secrets_never_in_repr_or_description() -> None:
    s = load_settings(env={"AWS_SECRET_ACCESS_KEY": "s3cr3t-value", "AWS_SESSION_TOKEN": "tok3n-value"})
    assert "s3cr3t-value" not in repr(s) and "tok3n-value" not in repr(s)
    assert "s3cr3t-value" not in str(s.describe()) and s.describe()["secret_access_key"] == "****"


def test_relative_paths_become_file_urls(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_settings(env={}, warehouse="wh").warehouse == (tmp_path / "wh").as_uri()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("warehouse: [1, 2", "not valid YAML"),
        ("- a\n- b\n", "mapping"),
        ("warehous: x\n", "unknown key 'warehous'"),
        ("s3:\n  endpoitn: x\n", "unknown key s3.endpoitn"),
        ("warehouse: ftp://x/y\n", "unsupported warehouse URL"),
        # these became a warehouse named '[1, 2]' and "unknown key 's3'"
        ("warehouse: [1, 2]\n", "warehouse must be a single value, got \\[1, 2\\]"),
        ("s3: 5\n", "s3 must be a mapping of .*, got 5"),
        ("s3:\n  endpoint: [x]\n", "s3.endpoint must be a single value"),
    ],
)
def test_bad_yaml_gets_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_settings(cfg, env={})


def test_empty_yaml_values_are_unset(tmp_path: Path, monkeypatch) -> None:
    """``warehouse:`` and ``endpoint:`` with no value were the string 'None' (a warehouse in ./None)."""
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "lake.yaml"
    cfg.write_text("warehouse:\ns3:\n  endpoint:\n  region: eu-west-1\n")
    settings = load_settings(cfg, env={})
    assert settings.warehouse == (tmp_path / "lakestream-warehouse").as_uri()
    assert settings.s3_endpoint is None and settings.region == "eu-west-1"
    cfg.write_text("s3:\n")
    assert load_settings(cfg, env={}).s3_endpoint is None


def test_a_config_path_that_is_not_a_readable_file_gets_a_clear_error(tmp_path: Path) -> None:
    """A directory raised IsADirectoryError, a binary file UnicodeDecodeError."""
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(tmp_path, env={})
    binary = tmp_path / "lake.yaml"
    binary.write_bytes(b"\xff\xfe\x00warehouse")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(binary, env={})


def test_missing_config_file_and_unknown_override() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings("/nonexistent/lake.yaml", env={})
    with pytest.raises(ConfigError, match="unknown setting"):
        load_settings(env={}, endpoint="x")
    assert issubclass(ConfigError, LakestreamError)


def test_quality_driver_budget_from_yaml_environment_and_arguments(tmp_path: Path) -> None:
    """The rows a quality suite may validate in the driver (quality.expectations): default, YAML, environment,
    argument, in that precedence; anything but a whole number >= 0 is refused naming where it came from."""
    from lakehouse.settings import DEFAULT_QUALITY_DRIVER_BUDGET_ROWS

    assert load_settings(env={}).quality_driver_budget_rows == DEFAULT_QUALITY_DRIVER_BUDGET_ROWS == 1_000_000
    cfg = tmp_path / "lake.yaml"
    cfg.write_text("quality:\n  driver_budget_rows: 5000\n")
    assert load_settings(cfg, env={}).quality_driver_budget_rows == 5000
    env = {"LAKESTREAM_CONFIG": str(cfg), "LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS": "2_000"}
    assert load_settings(env=env).quality_driver_budget_rows == 2000
    assert load_settings(env=env, quality_driver_budget_rows=0).quality_driver_budget_rows == 0
    for bad in ("-1", "1.5", "1e6", "lots", "_1"):
        with pytest.raises(ConfigError, match=rf"^LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS is a whole number .*'{bad}'"):
            load_settings(env={"LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS": bad})
    for text, message in [
        ("quality:\n  driver_budget_rows: -3\n", "quality.driver_budget_rows is a whole number of rows >= 0"),
        ("quality:\n  driver_budget_rows: 2.5\n", "quality.driver_budget_rows is a whole number of rows >= 0"),
        ("quality:\n  driver_budget: 3\n", "unknown key quality.driver_budget"),
        ("quality: 3\n", "quality must be a mapping"),
    ]:
        cfg.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_settings(cfg, env={})
    with pytest.raises(ConfigError, match="the setting quality_driver_budget_rows is a whole number"):
        load_settings(env={}, quality_driver_budget_rows=True)


def test_layers_driver_budget_from_yaml_environment_and_arguments(tmp_path: Path) -> None:
    """The changed input rows up to which a layers round runs in the driver (layers.executor_rounds): default, YAML,
    environment, argument, in that precedence; anything but a whole number >= 0 is refused naming where it came
    from and what it bounds."""
    from lakehouse.settings import DEFAULT_LAYERS_DRIVER_BUDGET_ROWS

    assert load_settings(env={}).layers_driver_budget_rows == DEFAULT_LAYERS_DRIVER_BUDGET_ROWS == 100_000
    cfg = tmp_path / "lake.yaml"
    cfg.write_text("layers:\n  driver_budget_rows: 5000\nquality:\n  driver_budget_rows: 7\n")
    settings = load_settings(cfg, env={})
    assert (settings.layers_driver_budget_rows, settings.quality_driver_budget_rows) == (5000, 7)
    env = {"LAKESTREAM_CONFIG": str(cfg), "LAKESTREAM_LAYERS_DRIVER_BUDGET_ROWS": "0"}
    assert load_settings(env=env).layers_driver_budget_rows == 0
    assert load_settings(env=env, layers_driver_budget_rows="1_000").layers_driver_budget_rows == 1000
    with pytest.raises(ConfigError, match=r"^LAKESTREAM_LAYERS_DRIVER_BUDGET_ROWS is a whole number .*layers round"):
        load_settings(env={"LAKESTREAM_LAYERS_DRIVER_BUDGET_ROWS": "-5"})
    for text, message in [
        ("layers:\n  driver_budget_rows: x\n", "layers.driver_budget_rows is a whole number of rows >= 0"),
        ("layers:\n  budget: 3\n", "unknown key layers.budget"),
        ("layers: [1]\n", "layers must be a mapping"),
    ]:
        cfg.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_settings(cfg, env={})


def test_prices_default_to_aws_list_prices_and_are_set_by_yaml_then_environment(tmp_path: Path) -> None:
    from object_store.pricing import PriceList

    assert load_settings(env={}).prices == PriceList()
    assert PriceList().write_per_1000 == 0.005 and PriceList().read_per_1000 == 0.0004
    config = tmp_path / "lakestream.yaml"
    config.write_text("prices:\n  write_per_1000: 0.0054\n  storage_per_gb_month: 0.0125\n")
    s = load_settings(config, env={"LAKESTREAM_PRICE_WRITE_PER_1000": "0.006"})
    assert (s.prices.write_per_1000, s.prices.storage_per_gb_month, s.prices.read_per_1000) == (0.006, 0.0125, 0.0004)
    assert s.describe()["prices.write_per_1000"] == "0.006"
    assert load_settings(env={}, prices={"read_per_1000": 0.001}).prices.read_per_1000 == 0.001
    with pytest.raises(ConfigError, match="LAKESTREAM_PRICE_READ_PER_1000"):
        load_settings(env={"LAKESTREAM_PRICE_READ_PER_1000": "cheap"})
    config.write_text("prices:\n  puts: 1\n")
    with pytest.raises(ConfigError, match="prices.puts"):
        load_settings(config, env={})
