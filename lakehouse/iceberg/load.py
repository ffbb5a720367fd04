"""A lakestream table's lake table, loaded from the catalog and checked to be that table's own.

Every read, tiering round, maintenance job and quality check starts here: a missing lake table, one whose
metadata cannot be loaded, or an Iceberg table of the same name that belongs to another lakestream table
(another ``lakestream.table-uuid``) is a `LakeStateError` saying how to get it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError as PydanticValidationError
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.table import Table

from lakehouse.errors import LakeStateError
from lakehouse.iceberg.layout import TABLE_UUID_PROPERTY
from lakehouse.table.definition import TableDefinition

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog


def load_lake_table(catalog: Catalog, definition: TableDefinition) -> Table:
    """The lake table of ``definition``; `LakeStateError` if it is missing or belongs to another table."""
    ident = (definition.name.namespace, definition.name.table)
    try:
        table = catalog.load_table(ident)
    except NoSuchTableError:
        newest = catalog.newest_metadata_file(ident) if hasattr(catalog, "newest_metadata_file") else None
        if newest is None:
            raise LakeStateError(
                f"log table {definition.name} has no lake table in the catalog (dropped, or a crash during create?). "
                f"Recreate it with lh.ensure_lake_table(lh.table({str(definition.name)!r})), then tier again"
            ) from None
        raise LakeStateError(
            f"log table {definition.name} has no lake table in the catalog, but its metadata files remain (its "
            "catalog pointer was deleted or the table dropped). To get it back with its tiered data and offsets, "
            f"re-register the newest one: lakestream table register {definition.name} {newest}. Only to start the "
            f"lake over: lh.ensure_lake_table(lh.table({str(definition.name)!r})) creates an empty one, and "
            "tiering then starts again from the log's first offsets (records already removed by log retention "
            "would be missing from the new lake)"
        ) from None
    except (IcebergValidationError, PydanticValidationError) as exc:
        raise LakeStateError(
            f"{definition.name}: the lake table's metadata cannot be loaded ({type(exc).__name__}: {exc}). A create "
            "that failed halfway (before lakestream refused such types) leaves one: drop it (lakestream table drop "
            f"{definition.name}) and create it again; otherwise restore a loadable metadata file (lakestream table "
            "register NAME METADATA --overwrite)"
        ) from None
    if table.properties.get(TABLE_UUID_PROPERTY) != definition.table_uuid:
        raise LakeStateError(
            f"the Iceberg table {definition.name} does not belong to this lakestream table (its "
            f"{TABLE_UUID_PROPERTY} is {table.properties.get(TABLE_UUID_PROPERTY)!r}, the log's is "
            f"{definition.table_uuid!r}); drop or rename it, then recreate the lake table"
        )
    return table


__all__ = ["load_lake_table"]
