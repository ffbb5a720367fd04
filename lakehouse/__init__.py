"""lakestream's core: settings, tables, the log, the catalog, tiering, union read and maintenance.

Configuration enters only through `lakehouse.settings.load_settings` (or `Lakehouse.from_env`);
everything else receives its store as an argument.
"""

from __future__ import annotations

from lakehouse.errors import ConfigError, LakestreamError
from lakehouse.lakehouse import Lakehouse
from lakehouse.log import AppendResult, Log, Producer
from lakehouse.settings import Settings, load_settings
from lakehouse.table.definition import TableDefinition, TableName
from object_store.moved import keep_old_paths

#: Modules moved when the package was split by concept; the old paths import the new modules for a release.
#: (``lakehouse.tiering``, now a package, forwards its old names itself; ``lakehouse.lake_layout``'s offsets
#: names are in ``lakehouse.iceberg.offsets`` and ``load_lake_table`` in ``lakehouse.iceberg.load``.)
MOVED_MODULES = {
    "lakehouse.tables": "lakehouse.table.definition",
    "lakehouse.evolution": "lakehouse.table.evolution",
    "lakehouse.bucketing": "lakehouse.table.bucketing",
    "lakehouse.aliases": "lakehouse.table.aliases",
    "lakehouse.catalog": "lakehouse.iceberg.catalog",
    "lakehouse.fileio": "lakehouse.iceberg.fileio",
    "lakehouse.iceberg_table": "lakehouse.iceberg.lake_table",
    "lakehouse.contention": "lakehouse.iceberg.contention",
    "lakehouse.commits": "lakehouse.iceberg.commits",
    "lakehouse.lake_layout": "lakehouse.iceberg.layout",
    "lakehouse.tiering_fence": "lakehouse.iceberg.offsets",
    "lakehouse.datafiles": "lakehouse.iceberg.datafiles",
    "lakehouse.position_deletes": "lakehouse.iceberg.position_deletes",
    "lakehouse.pinned": "lakehouse.iceberg.pinned",
    "lakehouse.union": "lakehouse.read.union",
    "lakehouse.filescan": "lakehouse.read.filescan",
    "lakehouse.changes": "lakehouse.read.changes",
    "lakehouse.reads": "lakehouse.read.replanning",
    "lakehouse.keyed_rows": "lakehouse.merge.keyed_rows",
    "lakehouse.boundaries": "lakehouse.tiering.boundaries",
}
keep_old_paths(MOVED_MODULES)

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
