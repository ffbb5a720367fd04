"""lakestream's core: settings, tables, the log, the catalog, tiering, union read and maintenance.

Configuration enters only through `lakehouse.settings.load_settings` (or `Lakehouse.from_env`);
everything else receives its store as an argument.
"""

from __future__ import annotations

from lakehouse.errors import ConfigError, LakestreamError
from lakehouse.lakehouse import Lakehouse
from lakehouse.log import AppendResult, Log, Producer
from lakehouse.settings import Settings, load_settings
from lakehouse.tables import TableDefinition, TableName

__all__ = [
    "AppendResult",
    "ConfigError",
    "Lakehouse",
    "LakestreamError",
    "Log",
    "Producer",
    "Settings",
    "TableDefinition",
    "TableName",
    "load_settings",
]
