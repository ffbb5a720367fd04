"""Errors raised by `lakehouse`. All derive from `LakestreamError` (defined in `object_store.errors`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.exceptions import ValidationException

from object_store.errors import InvalidArgument, LakestreamError

if TYPE_CHECKING:
    from lakehouse.log.log import AppendResult

__all__ = [
    "AppendIncomplete",
    "AsOfUnavailable",
    "BatchError",
    "ConfigError",
    "CorruptCatalogError",
    "CorruptDataFileError",
    "CorruptSegmentError",
    "DependencyCycleError",
    "InvalidArgument",
    "InvalidSubscriptionName",
    "InvalidTableName",
    "LakeStateError",
    "LakestreamError",
    "LogClosed",
    "MaintenanceError",
    "ModelKeyError",
    "ModelSchemaChanged",
    "ModelSqlError",
    "OffsetOutOfRange",
    "ProducerError",
    "ProjectError",
    "ProjectFormatError",
    "RefNotFound",
    "SchemaError",
    "SequenceConflict",
    "SubscriptionBackwards",
    "SubscriptionConflict",
    "SubscriptionNotFound",
    "TableAlreadyExists",
    "TableNotFound",
    "TieringConflict",
    "UnknownTableError",
]


class ConfigError(LakestreamError, ValueError):
    """The configuration (environment, YAML file or arguments) is invalid or incomplete."""


class SchemaError(LakestreamError, ValueError):
    """A schema, column or value does not fit the table (missing/extra column, unsafe cast, bad type)."""


class ProjectError(LakestreamError, ValueError):
    """A warehouse-layers project (``lakehouse.layers``: ``sources.yml`` and ``models/*.sql``) is invalid.
    Raised by ``load_project`` before anything is written; the message names the file and the model and says
    what to do. ``path`` is the file, ``model`` the model's (or source's) name, if the error has one; the
    subclasses say which kind of error it is."""

    def __init__(self, message: str, *, path: str | None = None, model: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.model = model


class ProjectFormatError(ProjectError):
    """A project file is not in the documented format (docs/layers.md): a missing ``sources.yml`` or
    ``models/``, YAML that does not parse, an unknown setting, an invalid primary key, bucket count, bucket
    key, partition or column type, two models or sources with one name."""


class ModelSqlError(ProjectError):
    """A model's SQL does not parse, is not a single query, has an output column without a name (or two with
    one name), or names a column its inputs do not have. For SQL that does not parse, ``line`` and ``column``
    (1-based, in the model's file) are where the problem is."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        model: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(message, path=path, model=model)
        self.line = line
        self.column = column


class UnknownTableError(ProjectError):
    """A model reads a table that is neither a source nor a model of the project."""


class DependencyCycleError(ProjectError):
    """Models read each other in a cycle; ``cycle`` lists the models in it, the first again at the end."""

    def __init__(self, message: str, *, cycle: list[str], path: str | None = None) -> None:
        super().__init__(message, path=path, model=cycle[0])
        self.cycle = list(cycle)


class ModelKeyError(ProjectError):
    """A model's output lacks a column of its declared primary key, a GROUP BY model's key column is not one of
    its GROUP BY expressions, or a round's rows hold a key twice or a null key (nothing is written then)."""


class LayerConflict(LakestreamError):
    """Another runner of the same warehouse-layers model started the same round first (``lakehouse.layers``):
    only one runner of a model may run at a time. Nothing was written by this one; let the other finish (or,
    if it died, run again: the round it left is resumed exactly once)."""


class RoundUnknown(LakestreamError):
    """Log offsets of a model's table match no round boundary (`lakehouse.layers.rounds.boundary_round`)."""


class ModelChanged(ProjectError):
    """A model's SQL changed while one of its rounds was unfinished: that round must finish with the SQL it
    started with (its intent records the SQL's digest); restore it, run, then change it again."""


class DeployMismatch(ProjectError):
    """A table the project declares exists with other columns, types, key or buckets (``lakestream layers
    deploy``, and every round before it writes)."""


class ModelSchemaChanged(DeployMismatch):
    """A model's SQL (or header) no longer matches its table: a round would write rows of another shape. The
    message says what differs; the table is built again from its inputs once dropped and deployed."""


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
    the refs it has; ``published`` appears after the first passing ``lakestream check`` (`quality.publish`)."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""
