"""Errors raised by `lakehouse`. All derive from `LakestreamError` (defined in `object_store.errors`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.exceptions import ValidationException

from object_store.errors import InvalidArgument, LakestreamError

if TYPE_CHECKING:
    from lakehouse.log.log import AppendResult

__all__ = [
    "AlterConflict",
    "AppendIncomplete",
    "AsOfUnavailable",
    "BatchError",
    "ConfigError",
    "CorruptCatalogError",
    "CorruptDataFileError",
    "CorruptSegmentError",
    "InvalidArgument",
    "InvalidSubscriptionName",
    "InvalidTableName",
    "LakeStateError",
    "LakestreamError",
    "LogClosed",
    "MaintenanceError",
    "OffsetOutOfRange",
    "ProducerError",
    "RefNotFound",
    "SchemaError",
    "SchemaEvolutionError",
    "SequenceConflict",
    "SnapshotNotFound",
    "SubscriptionBackwards",
    "SubscriptionConflict",
    "SubscriptionNotFound",
    "TableAlreadyExists",
    "TableNotFound",
    "TieringConflict",
]


class ConfigError(LakestreamError, ValueError):
    """The configuration (environment, YAML file or arguments) is invalid or incomplete."""


class SchemaError(LakestreamError, ValueError):
    """A schema, column or value does not fit the table (missing/extra column, unsafe cast, bad type)."""


class SchemaEvolutionError(SchemaError):
    """An alter the table's schema cannot take (narrowing a type, a non-null new column, changing a key,
    bucket-key or partition column, a name taken or reserved). Nothing was changed."""


class AlterConflict(LakestreamError):
    """Another alter of the table's definition committed first (the definition's ETag changed between read and
    write): this one changed nothing. Read the table again and retry it if it still applies."""


class InvalidTableName(LakestreamError, ValueError):
    """A table name is not ``namespace.table`` made of letters, digits and underscores."""


class TableAlreadyExists(LakestreamError):
    """A table with this name already exists (another creator won, or it was created earlier)."""


class TableNotFound(LakestreamError, KeyError):
    """No table with this name exists in the warehouse."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class BatchError(LakestreamError, ValueError):
    """An append was refused before anything was written: empty, too large, null key, wrong operation."""


class AppendIncomplete(LakestreamError):
    """Some buckets of an append were written, others failed. Retry the same append with the same
    ``producer_id`` and ``sequence``: written buckets are recognised, the rest are written once.
    ``result`` (an `AppendResult`) says which buckets got which offsets; ``failed`` maps the others to
    their errors."""

    def __init__(self, message: str, *, result: AppendResult, failed: dict[int, BaseException]) -> None:
        super().__init__(message)
        self.result = result
        self.failed = failed


class SequenceConflict(LakestreamError, ValueError):
    """An append's producer id and sequence are already in the log with other rows (a producer id reused, or
    a crashed producer resumed with rows batched differently). Nothing was written; ``producer_id``,
    ``sequence`` and ``bucket`` say where."""

    def __init__(self, message: str, *, producer_id: str, sequence: int, bucket: int) -> None:
        super().__init__(message)
        self.producer_id = producer_id
        self.sequence = sequence
        self.bucket = bucket


class CorruptSegmentError(LakestreamError):
    """A log segment failed its checksum or could not be decoded (truncated, overwritten by a foreign
    tool). It is never skipped silently: restore it from a backup or re-tier from the lake."""


class ProducerError(LakestreamError):
    """A `Producer` could not deliver buffered rows; the cause is attached. Rows sent after the failure
    are refused until the producer is closed."""


class LogClosed(LakestreamError, RuntimeError):
    """A `Log` was used after `close` (its own, or its `Lakehouse`'s); open the table's log again."""


class OffsetOutOfRange(LakestreamError, IndexError):
    """A log read asked for offsets that are no longer in the log (removed by retention); the message
    names the earliest available offset. Older records are in the lake."""


class CorruptCatalogError(LakestreamError):
    """A catalog object (a table pointer, a namespace) is not what the catalog wrote; the message names it
    and says how to repair it."""


class CorruptDataFileError(LakestreamError):
    """A data file the lake table references cannot be read as Parquet (truncated, overwritten by another
    tool). The message names the file: restore it from a backup, or roll the table back to a snapshot that
    does not reference it."""


class LakeStateError(LakestreamError):
    """The lake table and the log disagree in a way tiering cannot repair by itself: offsets missing from
    the newest tiering snapshot, offsets ahead of the log, a log table whose lake table is missing, a lake
    schema or partition spec another engine changed. The message says which and what to do; nothing was written."""


class TieringConflict(LakestreamError, ValidationException):
    """Another tiering run committed first: this run's offsets were overtaken. Its files were deleted and
    nothing of it was committed; rerun tiering to tier what is left. (A pyiceberg `ValidationException`
    too, so pyiceberg's commit retry stops and cleans its manifests instead of re-applying the files.)"""


class MaintenanceError(LakestreamError):
    """A maintenance run (compaction) could not commit: a task failed or another writer replaced its input
    files first. The table is unchanged and the run's own files were deleted; run it again."""


class AsOfUnavailable(LakestreamError):
    """A read as of log offsets (``as_of=``) that neither the lake's retained snapshots nor the retained log
    can serve: snapshot expiry removed the snapshots and log retention the records it would need. Nothing
    is returned (never an approximate state). ``unavailable`` maps each such bucket to the oldest offset it
    can still be read as of; ``bucket`` and ``oldest`` name the first of them."""

    def __init__(self, message: str, *, unavailable: dict[int, int]) -> None:
        super().__init__(message)
        self.unavailable = dict(unavailable)
        self.bucket, self.oldest = min(self.unavailable.items())


class InvalidSubscriptionName(LakestreamError, ValueError):
    """A subscription's consumer name is not an identifier: a letter or ``_``, then letters, digits, ``_``,
    ``.`` or ``-`` (at most 128 characters). Nothing was read or written."""


class SubscriptionNotFound(LakestreamError, KeyError):
    """No subscription of this consumer to this table (never created, or dropped; or it belonged to an
    earlier table of the same name, dropped and created again)."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class SubscriptionConflict(LakestreamError):
    """A subscription changed since it was read: another runner of the same consumer advanced it (or dropped
    it). Nothing was written; ``current`` is the position now stored (None if it was dropped). Two runners of one
    consumer never both advance it."""

    def __init__(self, message: str, *, current: dict[int, int] | None = None) -> None:
        super().__init__(message)
        self.current = current


class SubscriptionBackwards(InvalidArgument):
    """A subscription was asked to move back (a bucket's new offset below its position). Nothing was written.
    Positions only move forward, which is what lets maintenance free what lies behind them."""


class RefNotFound(LakestreamError, KeyError):
    """A read named an Iceberg tag or branch (``ref=``) the table's lake table does not have. The message lists
    the refs it has; ``published`` appears after the first passing ``lakestream check`` (`quality.published_tag`)."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class SnapshotNotFound(LakestreamError, KeyError):
    """A read named a snapshot id (``snapshot_id=``) the table's lake table does not have: expired by
    maintenance, or a snapshot of another table. The message names the table's current snapshot."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""
