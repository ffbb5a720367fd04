"""The metrics table: commit metrics kept in the warehouse as an Iceberg table, ``_lakestream.metrics``.

It lives in the warehouse's own catalog (`Lakehouse.catalog`) under the namespace ``_lakestream``, which no
lakestream table may use (`lakehouse.table.definition.check_namespace`), so the name never clashes with a user's table
and `Lakehouse.list_tables` never lists it; the catalog keeps its objects under ``%5Flakestream/`` (its escape of
that namespace). Created on first use, appended with pyiceberg, one commit per `collect_metrics` call; any
Iceberg reader reads it (DuckDB's ``iceberg_scan`` of its metadata file, pyiceberg, and Spark through
`metrics_dataframe`). The long format::

    table: string, snapshot_id: long, committed_at: timestamptz (us), kind: string ("tiering" | "round" |
    "other"), metric: string, column: string (null for table-level metrics), value: double

**What was recorded** is in the metrics table's own snapshots: each append's summary carries
``lakestream.metrics.recorded``, a JSON map of every table to the last lake snapshot whose metrics are in the
table (its id and commit time), carried forward by every append. So finding where to go on costs one metadata
load, not a scan; and a commit that loses the catalog's compare-and-swap is not retried by pyiceberg (the table
is created with ``commit.retry.num-retries`` 0): `append_metrics` reloads the table, drops the rows of snapshots
another collector recorded meanwhile, and commits again, so a metric is never recorded twice.

**Maintenance** (`maintain_metrics`): every collect adds a snapshot and a small data file, so the table's
metadata and file count grow with how often quality runs. Maintenance rewrites the small files into few sorted
ones in one overwrite commit whose summary carries the recorded map forward (a commit without it would make the
next collect record everything again), optionally drops rows older than a retention, expires old snapshots and
deletes the files no retained snapshot references (`lakehouse.maintenance`'s expiry and orphan removal).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, IsNull
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DoubleType, LongType, NestedField, PrimitiveType, StringType, TimestamptzType

from lakehouse.settings import budget_rows
from lakehouse.table.definition import RESERVED_NAMESPACE
from quality.errors import QualityError

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile

    from lakehouse.lakehouse import Lakehouse

log = logging.getLogger(__name__)

METRICS_TABLE = (RESERVED_NAMESPACE, "metrics")
RECORDED_PROPERTY = "lakestream.metrics.recorded"
#: Appends tried when other collectors commit at the same time.
COMMIT_ATTEMPTS = 8

SCHEMA = Schema(
    NestedField(1, "table", StringType(), required=True),
    NestedField(2, "snapshot_id", LongType(), required=True),
    NestedField(3, "committed_at", TimestamptzType(), required=True),
    NestedField(4, "kind", StringType(), required=True),
    NestedField(5, "metric", StringType(), required=True),
    NestedField(6, "column", StringType(), required=False),
    NestedField(7, "value", DoubleType(), required=False),
)
ARROW_SCHEMA = pa.schema(
    [
        pa.field("table", pa.string(), False),
        pa.field("snapshot_id", pa.int64(), False),
        pa.field("committed_at", pa.timestamp("us", tz="UTC"), False),
        pa.field("kind", pa.string(), False),
        pa.field("metric", pa.string(), False),
        pa.field("column", pa.string(), True),
        pa.field("value", pa.float64(), True),
    ]
)
SPARK_SCHEMA = (
    "`table` string, snapshot_id long, committed_at timestamp, kind string, metric string, `column` string, "
    "value double"
)

#: Per table, the last lake snapshot recorded: (snapshot id, its commit time in ms since the epoch).
Recorded = dict[str, tuple[int, int]]


def metrics_table(lh: Lakehouse, *, create: bool = False) -> Table | None:
    """The metrics table of ``lh``'s warehouse (None if it does not exist and not ``create``)."""
    catalog = lh.catalog
    try:
        return catalog.load_table(METRICS_TABLE)
    except NoSuchTableError:
        if not create:
            return None
    try:
        catalog.create_namespace(METRICS_TABLE[0])
    except NamespaceAlreadyExistsError:
        pass
    try:
        return catalog.create_table(
            METRICS_TABLE, SCHEMA, properties={"commit.retry.num-retries": "0", "format-version": "2"}
        )
    except TableAlreadyExistsError:  # another collector created it meanwhile
        return catalog.load_table(METRICS_TABLE)


def recorded(table: Table | None) -> Recorded:
    """What the metrics table holds: per lake table, its last recorded snapshot (see the module)."""
    if table is None:
        return {}
    snapshot = table.current_snapshot()
    while snapshot is not None:  # an append by another writer (without the property) hides nothing behind it
        text = snapshot.summary[RECORDED_PROPERTY] if snapshot.summary is not None else None
        if text is not None:
            try:
                return {str(k): (int(v[0]), int(v[1])) for k, v in json.loads(text).items()}
            except (TypeError, ValueError, IndexError, AttributeError) as exc:
                raise QualityError(
                    f"the metrics table's snapshot {snapshot.snapshot_id} has a malformed {RECORDED_PROPERTY} "
                    f"({exc}): drop the table {'.'.join(METRICS_TABLE)} to collect every retained commit again"
                ) from None
        parent = snapshot.parent_snapshot_id
        snapshot = table.metadata.snapshot_by_id(parent) if parent is not None else None
    return {}


def append_metrics(
    lh: Lakehouse, rows: list[dict[str, Any]], progress: Recorded, is_new: Callable[[str, int, Recorded], bool]
) -> int:
    """Append ``rows`` (dicts of the schema's columns) and record ``progress`` (per table, the last snapshot
    they cover), in one commit. If another collector committed meanwhile, the rows of snapshots it recorded
    (``is_new(table, snapshot_id, recorded)`` False) are dropped first. Returns the rows written."""
    for attempt in range(COMMIT_ATTEMPTS):
        table = metrics_table(lh, create=True)
        assert table is not None
        done = recorded(table)
        fresh = [r for r in rows if is_new(r["table"], r["snapshot_id"], done)]
        merged = dict(done)
        for name, last in progress.items():
            if name not in done or is_new(name, last[0], done):
                merged[name] = last
        if merged == done:
            return 0
        properties = {RECORDED_PROPERTY: json.dumps(merged, sort_keys=True, separators=(",", ":"))}
        data = pa.Table.from_pylist(fresh, schema=ARROW_SCHEMA)
        try:
            table.append(data, snapshot_properties=properties)
        except CommitFailedException:
            log.info("metrics append lost a concurrent commit (attempt %d): reloading", attempt + 1)
            continue
        return len(fresh)
    raise QualityError(
        f"the metrics table {'.'.join(METRICS_TABLE)} kept changing: {COMMIT_ATTEMPTS} appends lost to other "
        "commits; run `lakestream metrics collect` again (nothing was recorded twice)"
    )


#: Snapshots of the metrics table younger than this are kept (an age; a reader's snapshot stays readable).
DEFAULT_METRICS_SNAPSHOT_AGE = timedelta(days=1)
#: The newest snapshots of the metrics table always kept.
DEFAULT_KEEP_SNAPSHOTS = 5
#: Rows per data file the compaction writes (and below which a file counts as small).
DEFAULT_TARGET_FILE_ROWS = 1_000_000
MAINTENANCE_PROPERTY = "lakestream.metrics.maintenance"
#: Sort order of the rewritten files: a table's series lie together, oldest commit first.
SORT_ORDER = [
    ("table", "ascending"),
    ("committed_at", "ascending"),
    ("snapshot_id", "ascending"),
    ("metric", "ascending"),
    ("column", "ascending"),
]


@dataclass
class MetricsMaintenance:
    """What `maintain_metrics` did."""

    files_before: int = 0
    files_after: int = 0
    files_rewritten: int = 0
    rows_rewritten: int = 0
    #: rows older than the retention dropped
    rows_dropped: int = 0
    #: the compaction's snapshot (None: nothing to rewrite)
    snapshot_id: int | None = None
    #: compactions lost to a concurrent collect and planned again
    retries: int = 0
    expiry: dict[str, Any] = field(default_factory=dict)
    orphans: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"table": ".".join(METRICS_TABLE), **asdict(self)}


def _committed_at_bounds(data_file: Any) -> tuple[int, int] | None:
    """The file's committed_at lower and upper bound (microseconds since the epoch), from its manifest entry."""
    field_id = SCHEMA.find_field("committed_at").field_id
    low = (data_file.lower_bounds or {}).get(field_id)
    high = (data_file.upper_bounds or {}).get(field_id)
    if low is None or high is None:
        return None
    kind = cast(PrimitiveType, SCHEMA.find_field("committed_at").field_type)
    return int(from_bytes(kind, low)), int(from_bytes(kind, high))


def _write_rewritten(ctx: Any, rows: pa.Table, target_file_rows: int) -> list[Any]:
    """Write ``rows`` (sorted) as data files of up to ``target_file_rows`` rows each."""
    stem = f"metrics-compact-{uuid.uuid4().hex[:12]}"
    return [
        ctx.write(rows.slice(start, target_file_rows), (), f"{stem}-{i}")
        for i, start in enumerate(range(0, rows.num_rows, target_file_rows))
    ]


def _compact(
    lh: Lakehouse, result: MetricsMaintenance, target_file_rows: int, cutoff_us: int | None, budget: int
) -> None:
    """One compaction commit (see `maintain_metrics`), planned again after a concurrent commit."""
    from lakehouse.iceberg.commits import rewrite_files
    from lakehouse.iceberg.datafiles import LakeContext

    for attempt in range(COMMIT_ATTEMPTS):
        table = metrics_table(lh)
        if table is None or table.current_snapshot() is None:
            return
        tasks = list(table.scan().plan_files())
        if any(t.delete_files for t in tasks):
            raise QualityError(
                f"the metrics table {'.'.join(METRICS_TABLE)} has delete files (another writer deleted rows): "
                "maintenance rewrites data files only; rewrite the table with an engine that applies them"
            )
        files = [t.file for t in tasks]
        result.files_before = result.files_after = len(files)
        bounds = {f.file_path: _committed_at_bounds(f) for f in files}
        # Whole files older than the retention go without being read; files across it are rewritten, filtered.
        dropped = [
            f for f in files if cutoff_us is not None and (span := bounds[f.file_path]) and span[1] < cutoff_us
        ]
        crossing = [
            f
            for f in files
            if cutoff_us is not None
            and f not in dropped
            and ((span := bounds[f.file_path]) is None or span[0] < cutoff_us)
        ]
        small = sorted(
            (f for f in files if f not in dropped and f not in crossing and f.record_count < target_file_rows),
            key=lambda f: f.record_count,
        )
        # The driver reads what it rewrites: at most the budget's rows per call (the next call goes on).
        chosen: list[DataFile] = []
        rows_read = 0
        for f in [*crossing, *small]:
            if chosen and rows_read + f.record_count > budget:
                break
            chosen.append(f)
            rows_read += f.record_count
        if not dropped and not crossing and len(chosen) < 2:
            return
        ctx = LakeContext.of(lh.store, table)
        parts = [ctx.read(f.file_path).select(ARROW_SCHEMA.names).cast(ARROW_SCHEMA) for f in chosen]
        rows = pa.concat_tables(parts) if parts else ARROW_SCHEMA.empty_table()
        kept = rows
        if cutoff_us is not None:
            cutoff = pa.scalar(cutoff_us, pa.timestamp("us", tz="UTC"))
            kept = rows.filter(pc.greater_equal(rows.column("committed_at"), cutoff))
        kept = kept.sort_by(SORT_ORDER)
        added = _write_rewritten(ctx, kept, target_file_rows) if kept.num_rows else []
        # The recorded map as of the snapshot planned on: the commit fails if another one landed since.
        properties = {
            RECORDED_PROPERTY: json.dumps(recorded(table), sort_keys=True, separators=(",", ":")),
            MAINTENANCE_PROPERTY: "compaction",
        }
        try:
            with table.transaction() as txn:
                rewrite_files(txn, [*dropped, *chosen], added, properties)
        except CommitFailedException:
            ctx.delete([f.file_path for f in added])
            result.retries += 1
            log.info("metrics compaction lost to a concurrent commit (attempt %d): planning again", attempt + 1)
            continue
        committed = table.current_snapshot()
        assert committed is not None  # the commit above made one
        result.snapshot_id = committed.snapshot_id
        result.files_rewritten = len(dropped) + len(chosen)
        result.rows_rewritten = kept.num_rows
        result.rows_dropped = sum(f.record_count for f in dropped) + rows.num_rows - kept.num_rows
        result.files_after = len(files) - len(dropped) - len(chosen) + len(added)
        return
    raise QualityError(
        f"the metrics table {'.'.join(METRICS_TABLE)} kept changing: {COMMIT_ATTEMPTS} compactions lost to "
        "concurrent collects (the table is unchanged); run `lakestream metrics maintain` again"
    )


def maintain_metrics(
    lh: Lakehouse,
    *,
    older_than: timedelta | datetime = DEFAULT_METRICS_SNAPSHOT_AGE,
    target_file_rows: int = DEFAULT_TARGET_FILE_ROWS,
    keep_snapshots: int = DEFAULT_KEEP_SNAPSHOTS,
    retention: timedelta | datetime | None = None,
    orphan_age: timedelta | None = None,
    unsafe_orphan_age: bool = False,
) -> MetricsMaintenance:
    """Maintain the metrics table: compact its small data files, drop rows committed more than ``retention``
    ago (an age, or a point in time; None: keep all), expire snapshots older than ``older_than`` but the newest
    ``keep_snapshots``, and delete unreferenced files older than ``orphan_age`` (default
    `lakehouse.maintenance.orphans`'s, 3 days; old metadata files leave the metadata log after pyiceberg's
    ``write.metadata.previous-versions-max``, 100, and are then orphans).

    The compaction is one overwrite commit planned on the current snapshot, its summary carrying that
    snapshot's recorded map; a collect that commits meanwhile makes it fail (the table's commits do not retry),
    and it is planned again from the reloaded table (at most `COMMIT_ATTEMPTS` times, then `QualityError`).
    The driver rewrites at most ``quality_driver_budget_rows`` rows per call (the next call goes on)."""
    from lakehouse.errors import InvalidArgument
    from lakehouse.maintenance.expiry import cutoff_of, expire_snapshots
    from lakehouse.maintenance.orphans import DEFAULT_ORPHAN_AGE, remove_orphans

    if isinstance(target_file_rows, bool) or not isinstance(target_file_rows, int) or target_file_rows < 1:
        raise InvalidArgument(f"target_file_rows must be an integer >= 1, got {target_file_rows!r}")
    if isinstance(keep_snapshots, bool) or not isinstance(keep_snapshots, int) or keep_snapshots < 1:
        raise InvalidArgument(f"keep_snapshots must be an integer >= 1, got {keep_snapshots!r}")
    started = time.perf_counter()
    result = MetricsMaintenance()
    if metrics_table(lh) is None:
        return result
    cutoff_us = None
    if retention is not None:
        cutoff_us = int(cutoff_of(retention, "retention").timestamp() * 1_000_000)
    budget = max(1, budget_rows(getattr(lh, "settings", None), "quality_driver_budget_rows"))
    _compact(lh, result, target_file_rows, cutoff_us, budget)
    table = metrics_table(lh)
    assert table is not None  # it existed above, and nothing here drops it
    result.expiry = expire_snapshots(lh.store, table, older_than=older_than, retain_last=keep_snapshots).to_dict()
    result.orphans = remove_orphans(
        lh.store, table, older_than=orphan_age or DEFAULT_ORPHAN_AGE, unsafe_orphan_age=unsafe_orphan_age
    ).to_dict()
    result.seconds = time.perf_counter() - started
    return result


def load_series(
    lh: Lakehouse,
    table: str,
    metric: str,
    column: str | None = None,
    *,
    last: int | None = None,
    until: datetime | None = None,
) -> list[tuple[datetime, int, float]]:
    """``(committed_at, snapshot_id, value)`` of ``metric`` (of ``column``; None: a table-level metric) of lake
    table ``table``, oldest commit first. Empty if nothing was recorded.

    With ``last``, at least the newest ``last`` points up to ``until`` (default: now) when the history holds
    them, and not the whole history: the scan is bounded below by a commit time (pushed into the metrics table's
    file statistics), starting from the table's commit rate and widened 4x at a time until enough points are in
    or the bound passes the oldest commit time the files hold. Later points come too (the caller cuts)."""
    metrics = metrics_table(lh)
    if metrics is None or metrics.current_snapshot() is None:
        return []
    # mypy reads pyiceberg's pydantic fields as __init__ (the real __init__ takes these arguments)
    where = And(EqualTo("table", str(table)), EqualTo("metric", metric))  # type: ignore[arg-type,call-arg]
    where = And(where, IsNull("column") if column is None else EqualTo("column", column))  # type: ignore[arg-type,call-arg]
    if last is None:
        return _series(metrics, where)
    end = _aware(until or datetime.now(UTC))
    oldest = _oldest(metrics, where)
    if oldest is None:  # a file without statistics: no bound to push
        return _series(metrics, where)
    span = _commit_interval(lh, table) * (last + 1)
    while True:
        since = end - span
        if since <= oldest:  # the bound would keep everything: read it all
            return _series(metrics, where)
        points = _series(metrics, And(where, GreaterThanOrEqual("committed_at", since.isoformat())))  # type: ignore[arg-type,call-arg]
        if sum(1 for at, _, _ in points if at <= end) >= last:
            return points
        span *= 4


def _oldest(metrics: Table, where: Any) -> datetime | None:
    """The oldest commit time the metrics table's files matching ``where`` may hold, from their statistics (None:
    a file has none)."""
    lows = []
    for task in metrics.scan(row_filter=where).plan_files():
        bounds = _committed_at_bounds(task.file)
        if bounds is None:
            return None
        lows.append(bounds[0])
    return datetime.fromtimestamp(min(lows) / 1e6, UTC) if lows else datetime.now(UTC)


def _series(metrics: Table, where: Any) -> list[tuple[datetime, int, float]]:
    rows = metrics.scan(row_filter=where, selected_fields=("committed_at", "snapshot_id", "value")).to_arrow()
    rows = rows.filter(pc.is_valid(rows.column("value"))).sort_by(
        [("committed_at", "ascending"), ("snapshot_id", "ascending")]
    )
    return [
        (_aware(at), sid, value)
        for at, sid, value in zip(
            rows.column("committed_at").to_pylist(),
            rows.column("snapshot_id").to_pylist(),
            rows.column("value").to_pylist(),
            strict=True,
        )
    ]


def _aware(at: datetime) -> datetime:
    return at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)


def _commit_interval(lh: Lakehouse, table: str) -> timedelta:
    """The mean time between the retained commits of lake table ``table`` (metadata only; 1 minute if it has
    fewer than two, or cannot be read)."""
    try:
        stamps = sorted(s.timestamp_ms for s in lh.lake_table(table).metadata.snapshots)
    except Exception:  # noqa: BLE001 - only a starting guess: the search widens anyway
        stamps = []
    if len(stamps) < 2:
        return timedelta(minutes=1)
    return timedelta(milliseconds=max(1000.0, (stamps[-1] - stamps[0]) / (len(stamps) - 1)))


def load_commits(lh: Lakehouse, table: str, *, column: str | None = None, last: int = 20) -> list[dict[str, Any]]:
    """The newest ``last`` recorded commits of lake table ``table``, oldest first, each as
    ``{"committed_at", "snapshot_id", "kind", <metric>: value, ...}``: its table-level metrics, or those of
    ``column``."""
    metrics = metrics_table(lh)
    if metrics is None or metrics.current_snapshot() is None:
        return []
    where = And(EqualTo("table", str(table)), IsNull("column") if column is None else EqualTo("column", column))  # type: ignore[arg-type,call-arg]
    rows = metrics.scan(row_filter=where).to_arrow().to_pylist()
    commits: dict[int, dict[str, Any]] = {}
    for r in rows:
        commit = commits.setdefault(
            r["snapshot_id"], {"committed_at": r["committed_at"], "snapshot_id": r["snapshot_id"], "kind": r["kind"]}
        )
        commit[r["metric"]] = r["value"]
    ordered = sorted(commits.values(), key=lambda c: (c["committed_at"], c["snapshot_id"]))
    return ordered[-last:] if last > 0 else ordered


def metrics_dataframe(spark: Any, lh: Lakehouse) -> Any:
    """The metrics table as a Spark DataFrame (lakestream's Spark has no Iceberg jars): the driver plans the
    current snapshot's data files with pyiceberg, one task per file reads it with pyarrow
    (``mapInArrow``). ``spark.createDataFrame([], SPARK_SCHEMA)`` shaped when nothing was recorded yet."""
    from lakehouse.iceberg.datafiles import LakeContext

    table = metrics_table(lh)
    files = [t.file.file_path for t in table.scan().plan_files()] if table is not None else []
    if not files:
        return spark.createDataFrame([], SPARK_SCHEMA)
    assert table is not None  # it has files
    ctx = LakeContext.of(lh.store, table)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:  # runs on the Spark Python workers
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield from ctx.read(files[i]).select(ARROW_SCHEMA.names).to_batches()

    return spark.range(0, len(files), 1, numPartitions=len(files)).mapInArrow(read, SPARK_SCHEMA)


__all__ = [
    "ARROW_SCHEMA",
    "MetricsMaintenance",
    "METRICS_TABLE",
    "RECORDED_PROPERTY",
    "SCHEMA",
    "append_metrics",
    "load_commits",
    "load_series",
    "maintain_metrics",
    "metrics_dataframe",
    "metrics_table",
    "recorded",
]
