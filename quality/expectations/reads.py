"""What a suite reads from the lake besides GX: a snapshot's record counts from its summary, a bounded sample of
its rows, the positions of the tables upstream of it, and a referenced table's column (in the driver, within a
budget, or as a Spark DataFrame)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from quality.errors import QualityError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from lakehouse.lakehouse import Lakehouse


def _summary_int(snapshot: Any, key: str) -> int:
    if snapshot is None or snapshot.summary is None:
        return 0
    try:
        return int(snapshot.summary.get(key) or 0)
    except (TypeError, ValueError):
        return 0


def total_records(snapshot: Any) -> int:
    """The records of the snapshot's data files (its summary: metadata only): at least its rows, more by the
    rows position deletes remove (merge-on-read)."""
    return _summary_int(snapshot, "total-records")


def live_records(snapshot: Any) -> int:
    """The snapshot's rows per its summary: the data files' records less the position deletes'."""
    return max(0, total_records(snapshot) - _summary_int(snapshot, "total-position-deletes"))


def sample_rows(lh: Lakehouse, lake: Any, table: str, sid: int, budget: int) -> pa.Table:
    """At most ``budget`` rows of snapshot ``sid``, its data files streamed (`lakehouse.read.filescan`, a few batches
    in memory) in an order shuffled by the snapshot id, until the budget is reached: the files are a random
    choice, so the sample is not only the oldest rows; the same snapshot gives the same sample."""
    import pyarrow as pa

    from lakehouse.read.union import plan_read

    plan = plan_read(lake, lh.table(table), lake_only=True, snapshot_id=sid)
    tasks = list(plan.tasks)
    random.Random(sid).shuffle(tasks)
    plan = replace(plan, tasks=tuple(tasks))
    batches: list[pa.RecordBatch] = []
    kept = 0
    stream = plan.execute_all(None, table=lake, stream=True)
    try:
        for batch in stream:
            take = min(batch.num_rows, budget - kept)
            batches.append(batch.slice(0, take))
            kept += take
            if kept >= budget:
                break
    finally:
        stream.close()  # type: ignore[attr-defined]  # a generator (stream=True): the files not read yet stay unread
    return pa.Table.from_batches(batches, schema=plan.arrow_schema)


def upstream_positions(lh: Lakehouse, table: str, snapshot_id: int | None) -> dict[str, dict[int, int]]:
    """The log positions of every table upstream of ``table`` that its lake snapshot ``snapshot_id`` (None: no
    snapshot, the empty table) was computed from: the inputs of the model round that produced it, and so on up
    through inputs that are models. Empty for a source (a table no round writes).

    Raises:
        QualityError: the snapshot of a model is no retained round boundary.
    """
    from lakehouse.read.union import snapshot_offsets
    from lakehouse.table.aliases import read_aliases
    from layers.errors import RoundUnknown
    from layers.physical import logical_inputs
    from layers.rounds import boundary_round, latest_round

    aliases = read_aliases(lh.store)  # rounds are kept by the physical table serving a model (blue/green)

    definition = lh.table(table)
    if snapshot_id is None:
        ends = dict.fromkeys(range(definition.buckets), 0)
    else:
        ends = snapshot_offsets(lh.lake_table(table).metadata, snapshot_id, definition.buckets)
    positions: dict[str, dict[int, int]] = {}
    todo = [(table, ends)]
    while todo:
        model, at = todo.pop()
        physical = aliases.physical(model)
        latest = latest_round(lh.store, physical)
        if latest is None:
            continue  # a source: nothing upstream
        latest = logical_inputs(aliases, latest)
        try:
            record = boundary_round(lh.store, physical, at, lh.log(model).end_offsets)
        except RoundUnknown as exc:
            raise QualityError(
                f"{table}: which state of its inputs its lake snapshot {snapshot_id} reflects is unknown, so its "
                f"suite's references to them cannot be resolved: {exc}. Tier the tables again (tiering stops at "
                "round boundaries)"
            ) from None
        if record is not None:
            inputs = logical_inputs(aliases, record).end
        else:  # before its first round: computed from nothing yet
            inputs = {i: dict.fromkeys(range(lh.table(i).buckets), 0) for i in latest.end}
        for name, offsets in inputs.items():
            if name not in positions:  # the nearest path wins (a diamond reaches one table twice)
                positions[name] = dict(offsets)
                todo.append((name, dict(offsets)))
    return positions


def reference_frame(
    lh: Lakehouse, spark: Any, name: str, column: str, upstream: Mapping[str, dict[int, int]]
) -> DataFrame:
    """``column`` of table ``name`` as a Spark DataFrame: as of its position in ``upstream``, else at its current
    lake snapshot (pinned now)."""
    from lakehouse.spark import read_table

    if name in upstream:
        return read_table(spark, lh, name, columns=[column], as_of=upstream[name])
    current = lh.lake_table(name).current_snapshot()
    snapshot = current.snapshot_id if current is not None else None
    return read_table(spark, lh, name, union=False, columns=[column], snapshot_id=snapshot)


def driver_column(
    lh: Lakehouse, name: str, column: str, as_of: Mapping[int, int] | None, budget: int
) -> pa.ChunkedArray | None:
    """``column`` of table ``name`` (as of ``as_of``, else at its current lake snapshot), streamed; None once
    it passes ``budget`` rows (what was read is dropped)."""
    import pyarrow as pa

    from lakehouse.read.union import plan_read

    if as_of is not None:
        batches = lh.union_batches(name, columns=[column], as_of=as_of)
    else:
        lake = lh.lake_table(name)
        current = lake.current_snapshot()
        if current is None:  # nothing tiered yet: no rows
            return pa.chunked_array([], pa.null())
        if live_records(current) > budget:  # its summary says so: nothing need be read to know
            return None
        plan = plan_read(lake, lh.table(name), columns=[column], lake_only=True, snapshot_id=current.snapshot_id)
        batches = plan.execute_all(None, table=lake, stream=True)
    chunks: list[pa.Array] = []
    kept = 0
    try:
        for batch in batches:
            kept += batch.num_rows
            if kept > budget:
                return None
            chunks.append(batch.column(column))
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    return pa.chunked_array(chunks) if chunks else pa.chunked_array([], pa.null())
