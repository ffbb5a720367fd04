"""The one composition point: environment variables and an optional YAML file become `Settings`.

Precedence, lowest first: built-in defaults < YAML file < environment < explicit arguments.

Environment variables:
    LAKESTREAM_WAREHOUSE    file:///abs/path or s3://bucket/prefix (default: ./lakestream-warehouse)
    LAKESTREAM_S3_ENDPOINT  S3 endpoint URL for MinIO, SeaweedFS, ... (unset for AWS S3)
    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (or AWS_DEFAULT_REGION)
    LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS
                            the rows a Great Expectations suite may validate in the driver (default
                            1000000): a larger snapshot runs on Spark's executors, or without Spark is
                            validated on a sample of that many rows (`quality.expectations`)
    LAKESTREAM_CONFIG       path of an optional YAML file

YAML file (every key optional)::

    warehouse: s3://lake/warehouse
    s3:
      endpoint: http://127.0.0.1:8333
      region: us-east-1
      access_key_id: ...
      secret_access_key: ...
    quality:
      driver_budget_rows: 1000000

Everything else in lakestream receives its store (and later its catalog and Spark session) as
arguments; nothing below this module reads the environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from lakehouse.errors import ConfigError
from object_store import ObjectStore, open_store

DEFAULT_WAREHOUSE_DIR = "lakestream-warehouse"
#: The rows a quality check may hold in the driver (see `Settings.quality_driver_budget_rows`).
DEFAULT_QUALITY_DRIVER_BUDGET_ROWS = 1_000_000
QUALITY_DRIVER_BUDGET_ENV = "LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS"

_ENV = {
    "warehouse": "LAKESTREAM_WAREHOUSE",
    "s3_endpoint": "LAKESTREAM_S3_ENDPOINT",
    "access_key_id": "AWS_ACCESS_KEY_ID",
    "secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "session_token": "AWS_SESSION_TOKEN",
    "region": "AWS_REGION",
    "quality_driver_budget_rows": QUALITY_DRIVER_BUDGET_ENV,
}
_YAML_S3 = {
    "endpoint": "s3_endpoint",
    "region": "region",
    "access_key_id": "access_key_id",
    "secret_access_key": "secret_access_key",
    "session_token": "session_token",
}
_YAML_QUALITY = {"driver_budget_rows": "quality_driver_budget_rows"}


@dataclass(frozen=True)
class Settings:
    """Resolved configuration. Secrets are excluded from ``repr``."""

    warehouse: str
    s3_endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    #: A Great Expectations suite validates a lake snapshot of up to this many rows in the driver (pandas);
    #: above it the rows are read and validated by Spark's executors, or, with no Spark session, a sample of
    #: this many rows is (`quality.expectations`). Work whose size follows the data runs on the executors: the
    #: driver's shortcut is bounded by this setting, never the path for a large table.
    quality_driver_budget_rows: int = DEFAULT_QUALITY_DRIVER_BUDGET_ROWS

    def store_options(self) -> dict[str, Any]:
        """Options for `object_store.open_store` (empty for a ``file://`` warehouse)."""
        if not self.warehouse.startswith(("s3://", "s3a://")):
            return {}
        options = {
            "endpoint_url": self.s3_endpoint,
            "region": self.region,
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "session_token": self.session_token,
        }
        return {k: v for k, v in options.items() if v}

    def open_store(self, **options: Any) -> ObjectStore:
        """Open the warehouse's object store."""
        return open_store(self.warehouse, **{**self.store_options(), **options})

    def describe(self, missing: str | None = "-") -> dict[str, str | None]:
        """A printable view: secrets masked, a setting that is not set shown as ``missing``."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value and f.name in ("secret_access_key", "session_token"):
                value = "****"
            out[f.name] = value if value is not None else missing
        return out


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Resolve settings from defaults, the YAML file, the environment and ``overrides``.

    Raises:
        ConfigError: the YAML file is missing or malformed, has unknown keys, or a value is invalid.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    path = config_file or env.get("LAKESTREAM_CONFIG")
    if path:
        values.update(_read_yaml(Path(path)))
    for name, var in _ENV.items():
        if env.get(var):
            values[name] = _rows(env[var], var) if name == "quality_driver_budget_rows" else env[var]
    if "region" not in values and env.get("AWS_DEFAULT_REGION"):
        values["region"] = env["AWS_DEFAULT_REGION"]
    unknown = set(overrides) - {f.name for f in fields(Settings)}
    if unknown:
        raise ConfigError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(_ENV)}")
    if overrides.get("quality_driver_budget_rows") is not None:
        overrides["quality_driver_budget_rows"] = _rows(
            overrides["quality_driver_budget_rows"], "the setting quality_driver_budget_rows"
        )
    values.update({k: v for k, v in overrides.items() if v is not None})
    values["warehouse"] = normalize_warehouse(values.get("warehouse"))
    return Settings(**values)


def _rows(value: Any, origin: str) -> int:
    """A number of rows >= 0 (an int, or a string of digits: ``1_000_000`` too, as Python writes it); else a
    `ConfigError` naming ``origin``, where the value came from."""
    text = str(value).strip()
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole and isinstance(value, str) and re.fullmatch(r"[0-9]+(_[0-9]+)*", text):
        whole = True
    if not whole or int(text) < 0:
        raise ConfigError(
            f"{origin} is a whole number of rows >= 0 (the rows a quality suite may validate in the driver, "
            f"default {DEFAULT_QUALITY_DRIVER_BUDGET_ROWS}), got {value!r}"
        )
    return int(text)


def normalize_warehouse(url: str | None) -> str:
    """Turn a path or URL into ``file:///abs`` or ``s3://bucket/prefix`` (default ./lakestream-warehouse)."""
    if not url:
        return (Path.cwd() / DEFAULT_WAREHOUSE_DIR).resolve().as_uri()
    if "://" not in url:
        return Path(url).expanduser().resolve().as_uri()
    if url.startswith(("file://", "s3://", "s3a://")):
        return url.rstrip("/")
    raise ConfigError(f"unsupported warehouse URL {url!r}: use file:///absolute/path or s3://bucket/prefix")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist (set by LAKESTREAM_CONFIG or --config)") from None
    except (OSError, UnicodeDecodeError) as exc:  # a directory, no permission, not text
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "warehouse":
            out["warehouse"] = _scalar(path, "warehouse", value)
        elif key == "quality":
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(
                    f"config file {path}: quality must be a mapping of {sorted(_YAML_QUALITY)}, got {value!r}"
                )
            for k, v in value.items():
                if k not in _YAML_QUALITY:
                    raise ConfigError(f"config file {path}: unknown key quality.{k}; known: {sorted(_YAML_QUALITY)}")
                if v is not None:
                    out[_YAML_QUALITY[k]] = _rows(v, f"config file {path}: quality.{k}")
        elif key == "s3":
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"config file {path}: s3 must be a mapping of {sorted(_YAML_S3)}, got {value!r}")
            for k, v in value.items():
                if k not in _YAML_S3:
                    raise ConfigError(f"config file {path}: unknown key s3.{k}; known: {sorted(_YAML_S3)}")
                out[_YAML_S3[k]] = _scalar(path, f"s3.{k}", v)
        else:
            raise ConfigError(f"config file {path}: unknown key {key!r}; known: 'warehouse', 's3', 'quality'")
    return {k: v for k, v in out.items() if v is not None}


def _scalar(path: Path, key: str, value: Any) -> str | None:
    """A YAML value as a string; an empty value (``key:``) is unset, as an empty environment variable is
    (it became the string 'None': a warehouse in ./None, an endpoint 'None')."""
    if value is None:
        return None
    if isinstance(value, dict | list):
        raise ConfigError(f"config file {path}: {key} must be a single value, got {value!r}")
    return str(value)


__all__ = [
    "DEFAULT_QUALITY_DRIVER_BUDGET_ROWS",
    "QUALITY_DRIVER_BUDGET_ENV",
    "Settings",
    "load_settings",
    "normalize_warehouse",
]
