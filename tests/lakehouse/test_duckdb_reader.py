"""`lakehouse.duckdb_reader`: DuckDB loads its Iceberg reader offline, and says what to install when it cannot."""

from __future__ import annotations

import sys

import pytest

from lakehouse.duckdb_reader import duckdb_connection
from lakehouse.errors import ConfigError


def test_duckdb_loads_its_iceberg_reader_offline() -> None:
    con = duckdb_connection()
    loaded = {name for (name,) in con.execute("SELECT extension_name FROM duckdb_extensions() WHERE loaded").fetchall()}
    assert {"iceberg", "avro"} <= loaded


def test_a_missing_extension_wheel_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "duckdb_extension_iceberg", None)  # as if the wheel were not installed
    with pytest.raises(ConfigError, match=r"duckdb_extension_iceberg is missing.*pip install 'lakestream\[test\]'"):
        duckdb_connection()
