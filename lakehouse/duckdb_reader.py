"""Other engines on our tables: DuckDB reads them with its own Iceberg reader (C++), offline.

DuckDB's ``iceberg`` and ``avro`` extensions come from their PyPI wheels (``duckdb-extension-iceberg`` and
``duckdb-extension-avro``, in the ``test`` extra), so nothing is downloaded at run time::

    con = duckdb_connection()
    con.sql(f"SELECT count(*) FROM iceberg_scan('{metadata_json}')")
"""

from __future__ import annotations

import glob
import os
from typing import Any

from lakehouse.errors import ConfigError


def duckdb_connection() -> Any:
    """A DuckDB connection with the iceberg and avro extensions loaded from their wheels' files."""
    try:
        import duckdb
        import duckdb_extension_avro
        import duckdb_extension_iceberg
    except ImportError as exc:
        raise ConfigError(
            f"reading tables with DuckDB needs duckdb and its extension wheels ({exc.name} is missing): "
            "pip install 'lakestream[test]', or duckdb==1.5.5 duckdb-extension-iceberg==1.5.5 "
            "duckdb-extension-avro==1.5.5"
        ) from None
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for module in (duckdb_extension_avro, duckdb_extension_iceberg):
        folder = os.path.dirname(module.__file__)
        for ext in glob.glob(os.path.join(folder, "**", "*.duckdb_extension"), recursive=True):
            con.execute(f"LOAD '{ext}'")
    return con
