"""lakestream's core: settings, tables, the log, the catalog, tiering (built up issue by issue).

Configuration enters only through `lakehouse.settings.load_settings`; everything else receives its
store as an argument.
"""

from __future__ import annotations

from lakehouse.errors import ConfigError, LakestreamError
from lakehouse.settings import Settings, load_settings

__all__ = ["ConfigError", "LakestreamError", "Settings", "load_settings"]
