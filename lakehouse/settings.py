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
    LAKESTREAM_LAYERS_DRIVER_BUDGET_ROWS
                            the changed input rows up to which a layers round runs in the driver (default
                            100000; 0: always on Spark's executors); a larger round runs in executor tasks
                            (`layers.executor_rounds`)
    LAKESTREAM_PRICE_WRITE_PER_1000, LAKESTREAM_PRICE_READ_PER_1000, LAKESTREAM_PRICE_STORAGE_PER_GB_MONTH,
    LAKESTREAM_PRICE_TRANSFER_IN_PER_GB, LAKESTREAM_PRICE_TRANSFER_OUT_PER_GB
                            the price list usage is priced at (`object_store.pricing.PriceList`; default AWS S3
                            Standard's list prices): dollars per 1,000 write-class (PUT, COPY, POST, LIST) and
                            read-class (GET, HEAD) requests, per GB-month stored, per GB in and out
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
    layers:
      driver_budget_rows: 100000
    prices:                 # AWS S3 Standard list prices unless set
      write_per_1000: 0.005
      read_per_1000: 0.0004
      storage_per_gb_month: 0.023
      transfer_in_per_gb: 0
      transfer_out_per_gb: 0

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

from lakehouse.errors import ConfigError, InvalidArgument
from object_store import ObjectStore, open_store
from object_store.pricing import PriceList

DEFAULT_WAREHOUSE_DIR = "lakestream-warehouse"
#: The rows a quality check may hold in the driver (see `Settings.quality_driver_budget_rows`).
DEFAULT_QUALITY_DRIVER_BUDGET_ROWS = 1_000_000
QUALITY_DRIVER_BUDGET_ENV = "LAKESTREAM_QUALITY_DRIVER_BUDGET_ROWS"
#: The changed input rows up to which a layers round runs in the driver (see `Settings.layers_driver_budget_rows`).
DEFAULT_LAYERS_DRIVER_BUDGET_ROWS = 100_000
LAYERS_DRIVER_BUDGET_ENV = "LAKESTREAM_LAYERS_DRIVER_BUDGET_ROWS"
#: The settings that are numbers of rows: what each bounds (for errors) and its default.
_ROWS = {
    "quality_driver_budget_rows": (
        "the rows a quality suite may validate in the driver",
        DEFAULT_QUALITY_DRIVER_BUDGET_ROWS,
    ),
    "layers_driver_budget_rows": (
        "the changed input rows up to which a layers round runs in the driver",
        DEFAULT_LAYERS_DRIVER_BUDGET_ROWS,
    ),
}

_ENV = {
    "warehouse": "LAKESTREAM_WAREHOUSE",
    "s3_endpoint": "LAKESTREAM_S3_ENDPOINT",
    "access_key_id": "AWS_ACCESS_KEY_ID",
    "secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "session_token": "AWS_SESSION_TOKEN",
    "region": "AWS_REGION",
    "quality_driver_budget_rows": QUALITY_DRIVER_BUDGET_ENV,
    "layers_driver_budget_rows": LAYERS_DRIVER_BUDGET_ENV,
}
#: The price list's settings (`PriceList`'s fields): environment variable of each.
PRICE_ENV = {name: f"LAKESTREAM_PRICE_{name.upper()}" for name in PriceList.__dataclass_fields__}
_YAML_S3 = {
    "endpoint": "s3_endpoint",
    "region": "region",
    "access_key_id": "access_key_id",
    "secret_access_key": "secret_access_key",
    "session_token": "session_token",
}
#: YAML sections of rows settings: section -> {key: setting}
_YAML_ROWS = {
    "quality": {"driver_budget_rows": "quality_driver_budget_rows"},
    "layers": {"driver_budget_rows": "layers_driver_budget_rows"},
}


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
    #: A layers round whose inputs changed by up to this many rows (records in the round's log ranges) may run in
    #: the driver (seconds-fresh rounds of ``layers run --follow``); above it the round's changed keys, hops, old
    #: rows, diff and appends run in Spark's executor tasks (`layers.executor_rounds`), whatever starting them costs.
    #: ``0``: every round on the executors.
    layers_driver_budget_rows: int = DEFAULT_LAYERS_DRIVER_BUDGET_ROWS
    #: What the store's requests, transfer and storage cost (`object_store.pricing`): AWS S3 Standard's list prices
    #: unless ``LAKESTREAM_PRICE_...`` or the YAML file's ``prices:`` say otherwise.
    prices: PriceList = field(default_factory=PriceList)

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
        out: dict[str, str | None] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "prices":
                out.update({f"prices.{k}": str(v) for k, v in self.prices.to_dict().items()})
                continue
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
            values[name] = _rows(env[var], var, name) if name in _ROWS else env[var]
    prices = dict(values.pop("prices", {}))
    prices.update({k: _price(env[var], var, k) for k, var in PRICE_ENV.items() if env.get(var)})
    if "region" not in values and env.get("AWS_DEFAULT_REGION"):
        values["region"] = env["AWS_DEFAULT_REGION"]
    unknown = set(overrides) - {f.name for f in fields(Settings)}
    if unknown:
        raise ConfigError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(_ENV)}")
    for name in _ROWS:
        if overrides.get(name) is not None:
            overrides[name] = _rows(overrides[name], f"the setting {name}", name)
    given = overrides.pop("prices", None)  # a PriceList, or a mapping of some of its fields
    if given is not None:
        given = given.to_dict() if isinstance(given, PriceList) else dict(given)
        prices.update({k: _price(v, f"the setting prices.{k}", k) for k, v in given.items()})
    values.update({k: v for k, v in overrides.items() if v is not None})
    values["warehouse"] = normalize_warehouse(values.get("warehouse"))
    return Settings(**values, prices=PriceList(**prices))


def _price(value: Any, origin: str, name: str) -> float:
    """A price in dollars >= 0; else a `ConfigError` naming ``origin``."""
    try:
        price = float(value)
    except (TypeError, ValueError):
        price = -1.0
    if isinstance(value, bool) or not price >= 0 or price == float("inf"):
        default = PriceList.__dataclass_fields__[name].default
        raise ConfigError(f"{origin} is a price in dollars >= 0 ({name}, default {default}), got {value!r}")
    return price


def _rows(value: Any, origin: str, setting: str) -> int:
    """A number of rows >= 0 (an int, or a string of digits: ``1_000_000`` too, as Python writes it); else a
    `ConfigError` naming ``origin``, where the value came from."""
    text = str(value).strip()
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole and isinstance(value, str) and re.fullmatch(r"[0-9]+(_[0-9]+)*", text):
        whole = True
    if not whole or int(text) < 0:
        what, default = _ROWS[setting]
        raise ConfigError(f"{origin} is a whole number of rows >= 0 ({what}, default {default}), got {value!r}")
    return int(text)


def budget_rows(settings: Settings | None, name: str, rows: int | None = None) -> int:
    """A driver budget (``name``, a rows setting): ``rows`` if given, else ``settings``' value, else the
    environment / YAML's (`load_settings`).

    Raises:
        ConfigError: the setting is not a whole number >= 0 (the message names it).
        InvalidArgument: ``rows`` is not a whole number >= 0.
    """
    if rows is not None:
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise InvalidArgument(f"driver_budget_rows is a whole number of rows >= 0, got {rows!r}")
        return rows
    return int(getattr(settings if settings is not None else load_settings(), name))


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
        elif key in _YAML_ROWS:
            if value is None:
                continue
            known = _YAML_ROWS[key]
            if not isinstance(value, dict):
                raise ConfigError(f"config file {path}: {key} must be a mapping of {sorted(known)}, got {value!r}")
            for k, v in value.items():
                if k not in known:
                    raise ConfigError(f"config file {path}: unknown key {key}.{k}; known: {sorted(known)}")
                if v is not None:
                    out[known[k]] = _rows(v, f"config file {path}: {key}.{k}", known[k])
        elif key == "prices":
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"config file {path}: prices must be a mapping of {sorted(PRICE_ENV)}, got {value!r}")
            for k, v in value.items():
                if k not in PRICE_ENV:
                    raise ConfigError(f"config file {path}: unknown key prices.{k}; known: {sorted(PRICE_ENV)}")
                if v is not None:
                    out.setdefault("prices", {})[k] = _price(v, f"config file {path}: prices.{k}", k)
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
            sections = "'warehouse', 's3', 'quality', 'layers', 'prices'"
            raise ConfigError(f"config file {path}: unknown key {key!r}; known: {sections}")
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
    "DEFAULT_LAYERS_DRIVER_BUDGET_ROWS",
    "DEFAULT_QUALITY_DRIVER_BUDGET_ROWS",
    "LAYERS_DRIVER_BUDGET_ENV",
    "PRICE_ENV",
    "QUALITY_DRIVER_BUDGET_ENV",
    "Settings",
    "budget_rows",
    "load_settings",
    "normalize_warehouse",
]
