"""The metrics table: commit metrics kept in the warehouse as an Iceberg table, ``_lakestream.metrics``.

It lives in the warehouse's own catalog (`Lakehouse.catalog`) under the namespace ``_lakestream``, which no
lakestream table may use (`lakehouse.tables.check_namespace`), so the name never clashes with a user's table and
`Lakehouse.list_tables` never lists it; the catalog keeps its objects under ``%5Flakestream/`` (its escape of
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
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.expressions import And, EqualTo, IsNull
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

from lakehouse.tables import RESERVED_NAMESPACE
from quality.errors import QualityError

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


def metrics_table(lh: Any, *, create: bool = False) -> Table | None:
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
    lh: Any, rows: list[dict[str, Any]], progress: Recorded, is_new: Callable[[str, int, Recorded], bool]
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


def load_series(lh: Any, table: str, metric: str, column: str | None = None) -> list[tuple[datetime, int, float]]:
    """``(committed_at, snapshot_id, value)`` of ``metric`` (of ``column``; None: a table-level metric) of lake
    table ``table``, oldest commit first. Empty if nothing was recorded."""
    metrics = metrics_table(lh)
    if metrics is None or metrics.current_snapshot() is None:
        return []
    where = And(EqualTo("table", str(table)), EqualTo("metric", metric))
    where = And(where, IsNull("column") if column is None else EqualTo("column", column))
    rows = metrics.scan(row_filter=where, selected_fields=("committed_at", "snapshot_id", "value")).to_arrow()
    rows = rows.filter(pc.is_valid(rows.column("value"))).sort_by(
        [("committed_at", "ascending"), ("snapshot_id", "ascending")]
    )
    return [
        (at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC), sid, value)
        for at, sid, value in zip(
            rows.column("committed_at").to_pylist(),
            rows.column("snapshot_id").to_pylist(),
            rows.column("value").to_pylist(),
            strict=True,
        )
    ]


def load_commits(lh: Any, table: str, *, column: str | None = None, last: int = 20) -> list[dict[str, Any]]:
    """The newest ``last`` recorded commits of lake table ``table``, oldest first, each as
    ``{"committed_at", "snapshot_id", "kind", <metric>: value, ...}``: its table-level metrics, or those of
    ``column``."""
    metrics = metrics_table(lh)
    if metrics is None or metrics.current_snapshot() is None:
        return []
    where = And(EqualTo("table", str(table)), IsNull("column") if column is None else EqualTo("column", column))
    rows = metrics.scan(row_filter=where).to_arrow().to_pylist()
    commits: dict[int, dict[str, Any]] = {}
    for r in rows:
        commit = commits.setdefault(
            r["snapshot_id"], {"committed_at": r["committed_at"], "snapshot_id": r["snapshot_id"], "kind": r["kind"]}
        )
        commit[r["metric"]] = r["value"]
    ordered = sorted(commits.values(), key=lambda c: (c["committed_at"], c["snapshot_id"]))
    return ordered[-last:] if last > 0 else ordered


def metrics_dataframe(spark: Any, lh: Any) -> Any:
    """The metrics table as a Spark DataFrame (lakestream's Spark has no Iceberg jars): the driver plans the
    current snapshot's data files with pyiceberg, one task per file reads it with pyarrow
    (``mapInArrow``). ``spark.createDataFrame([], SPARK_SCHEMA)`` shaped when nothing was recorded yet."""
    from lakehouse.datafiles import LakeContext

    table = metrics_table(lh)
    files = [t.file.file_path for t in table.scan().plan_files()] if table is not None else []
    if not files:
        return spark.createDataFrame([], SPARK_SCHEMA)
    ctx = LakeContext.of(lh.store, table)

    def read(batches):  # runs on the Spark Python workers
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield from ctx.read(files[i]).select(ARROW_SCHEMA.names).to_batches()

    return spark.range(0, len(files), 1, numPartitions=len(files)).mapInArrow(read, SPARK_SCHEMA)


__all__ = [
    "ARROW_SCHEMA",
    "METRICS_TABLE",
    "RECORDED_PROPERTY",
    "SCHEMA",
    "append_metrics",
    "load_commits",
    "load_series",
    "metrics_dataframe",
    "metrics_table",
    "recorded",
]
