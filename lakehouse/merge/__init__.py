"""Merge engines: how a primary-key table combines a key's new rows with its stored one.

The log keeps every row as it was written; the engine is applied wherever a key's row is computed (tiering,
union and as-of reads, `lookup`, `changes`, the Spark source, quality reconciliation), always by
`MergeEngine.resolve`: a key's stored row (the lake's, or the state as of a start offset) and its changes in
offset order become one net change per key that the last-row rule applies (an upsert of the merged row, or a
delete). So every reader agrees with a fold of the log in offset order, whatever the tiering rounds in between.

=================  ====================================================================  =================
engine             a key's row                                                           deletes
=================  ====================================================================  =================
``last-row``       the last row written (the default)                                    remove the row
``partial-update`` each column's last non-null value since the key's last delete         remove the row
``versioned``      the row with the greatest ``version_column`` (ties: the later one);   remove the row if
                   an older row is ignored                                               not older (or no
                                                                                         version given)
``first-row``      the first row written; later ones are ignored                         refused
``aggregate``      per column: ``sum``, ``max``, ``min``, ``count`` (non-null values     refused
                   written), ``last_non_null`` (the default for columns not named)
=================  ====================================================================  =================

Refused appends (`check_append`) fail before anything is written.
"""

from __future__ import annotations

from lakehouse.merge.aggregate import Aggregate
from lakehouse.merge.base import MergeEngine
from lakehouse.merge.first_row import FirstRow
from lakehouse.merge.last_row import LastRow
from lakehouse.merge.partial_update import PartialUpdate
from lakehouse.merge.versioned import Versioned
from lakehouse.table.definition import TableDefinition

ENGINES: dict[str, type[MergeEngine]] = {e.name: e for e in (LastRow, PartialUpdate, Versioned, FirstRow, Aggregate)}


def engine_of(definition: TableDefinition) -> MergeEngine:
    """The merge engine of a primary-key table (last-row for log tables and definitions of older versions)."""
    return ENGINES[definition.merge_engine](definition)


__all__ = ["ENGINES", "MergeEngine", "engine_of"]
