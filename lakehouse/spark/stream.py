"""``spark.readStream.format("lakestream")``: a lakestream table as a Structured Streaming source (no jars).

    q = (spark.readStream.format("lakestream")
         .option("warehouse", "s3://lake/warehouse")
         .option("startingOffsets", "earliest")       # or "latest", or every bucket's offset ("0:120,1:98" / JSON)
         .option("maxRecordsPerTrigger", 100_000)     # optional admission control (log records per micro-batch)
         .load("ods.orders")
         .writeStream...)

Every row is a change, in `lakehouse.read.changes`' vocabulary: the table's columns, ``__bucket``, ``__offset``,
``__timestamp`` and ``_op`` (``insert``, ``update_before``, ``update_after``, ``delete``; ``update_before`` rows
with ``.option("beforeImages", "true")``). Spark's offsets are the per-bucket log offsets, so a micro-batch is an
offset range of every bucket and holds that range's net changes (`lakehouse.read.changes`: one row per changed key of a
primary-key table, every record of a log table): applied batch after batch they give the table's state at each
batch's end, and a restart from the checkpoint reads the same ranges again.

``startingOffsets``:
    earliest    the lake's current snapshot first, as ``insert`` rows, in one micro-batch (split by file, so it
                is read in parallel whatever the table's size), then the log after the snapshot's offsets: Fluss's
                "history from the lake, then the live stream" with no manual step. Where log retention removed
                records the lake still holds them, so a log table streams every record once.
    latest      the log's end when the query starts: only what is appended from then on.
    a map       every bucket's offset ("0:120,1:98" or JSON {"0": 120, "1": 98}): the changes after it.
``subscription`` NAME (with or without ``startingOffsets``, which then says where a new subscription starts,
default latest): start at a durable subscription's position and advance it as Spark commits each micro-batch,
so retention and expiry keep what the stream still needs (`lakehouse.subscriptions`). A restarted query resumes
from its checkpoint, which never lags the subscription.

One of ``startingOffsets`` and ``subscription`` is required: it is what tells the source's schema (the change
columns) from a batch read's. A start that log retention removed fails the micro-batch with `AsOfUnavailable`
naming the buckets and where their log begins; it never skips records.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from lakehouse.errors import AsOfUnavailable, InvalidArgument

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from lakehouse.lakehouse import Lakehouse

#: Log records one task of a micro-batch reads at most, buckets packed together up to it (a bucket with more is
#: a task of its own): a small micro-batch is one task, whatever the bucket count (each task costs a Python
#: worker's round trip, the bulk of a small micro-batch's time), a large one a task per bucket or more.
TASK_RECORDS = 250_000
#: The options that make a read a stream (lower case, as `ReadOptions` keeps them).
STREAM_OPTIONS = ("startingoffsets", "subscription", "beforeimages", "maxrecordspertrigger")
#: An offset is {PHASE: ..., OFFSETS: {"0": 120, ...}}; the phase is LAKE for "earliest" before anything is read
#: (the next micro-batch reads the lake's snapshot), SNAPSHOT at the end of that micro-batch (the offsets are the
#: snapshot's), LOG otherwise (the offsets are where the log has been read to).
PHASE, OFFSETS = "phase", "offsets"
LAKE, SNAPSHOT, LOG = "lake", "snapshot", "log"


def is_stream(options: Mapping[str, Any]) -> bool:
    return any(str(k).lower() in STREAM_OPTIONS for k in options)


@dataclass(frozen=True)
class StreamOptions:
    """A stream read's own options, checked."""

    starting: str | dict[int, int]  # "earliest", "latest" or an offset map
    subscription: str | None
    before_images: bool
    max_records: int | None

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> StreamOptions:
        from lakehouse.spark.options import flag, parse_offsets

        opts = {str(k).lower(): v for k, v in options.items()}
        if "startingoffsets" not in opts and "subscription" not in opts:
            raise InvalidArgument(
                'spark.readStream.format("lakestream") needs option startingOffsets ("earliest", "latest" or '
                'every bucket\'s offset, e.g. "0:120,1:98") or subscription (a durable position to start at)'
            )
        for key in ("as_of", "lake_only", "ref", "snapshot_id", "changes", "start", "end", "filter"):
            if key in opts:
                raise InvalidArgument(
                    f"option {key} is a batch read's: a stream reads the changes from startingOffsets or its "
                    "subscription on (filter the streaming DataFrame instead)"
                )
        raw = str(opts.get("startingoffsets", "latest")).strip()
        starting: str | dict[int, int] = raw.lower() if raw.lower() in ("earliest", "latest") else {}
        if not starting:
            starting = parse_offsets(raw, "startingOffsets")
        subscription = str(opts["subscription"]).strip() if "subscription" in opts else None
        if subscription is not None:
            from lakehouse.subscriptions import check_consumer

            check_consumer(subscription)
        max_records = None
        if "maxrecordspertrigger" in opts:
            text = str(opts["maxrecordspertrigger"]).strip()
            if not text.isdigit() or int(text) < 1:
                raise InvalidArgument(f"option maxRecordsPerTrigger is a number of log records >= 1, got {text!r}")
            max_records = int(text)
        return cls(starting, subscription, flag(opts, "beforeimages"), max_records)


@dataclass(frozen=True)
class StreamPartition(InputPartition):
    """One task of a micro-batch: ``mode`` "snapshot" (a part of the lake snapshot, as inserts) or "changes"
    (the net changes of one bucket or a few, `TASK_RECORDS`), with what it needs to run on a worker."""

    mode: str
    bucket: int
    payload: Any

    def __repr__(self) -> str:
        return f"StreamPartition({self.mode}, bucket {self.bucket})"


def _offsets(offset: Mapping[str, Any]) -> dict[int, int]:
    return {int(b): int(o) for b, o in offset[OFFSETS].items()}


def _offset(offsets: Mapping[int, int], phase: str = LOG) -> dict[str, Any]:
    return {PHASE: phase, OFFSETS: {str(b): int(o) for b, o in sorted(offsets.items())}}


def limited(start: Mapping[int, int], ends: Mapping[int, int], max_records: int) -> dict[int, int]:
    """``ends``, or where ``max_records`` log records after ``start`` end: shared among the buckets that have
    records in proportion to what each has (every such bucket moves, so none starves), the rounding's remainder
    to the buckets with the most left, so a micro-batch holds ``max_records`` exactly while there are more."""
    available = {b: ends[b] - start[b] for b in ends if ends[b] > start[b]}
    total = sum(available.values())
    if total <= max_records:
        return dict(ends)
    take = {b: min(n, max(1, max_records * n // total)) for b, n in available.items()}
    over = sum(take.values()) - max_records  # more buckets than records: the smallest give theirs back
    for b in sorted(take, key=lambda b: (available[b], b)):
        if over <= 0:
            break
        back = min(over, take[b])
        take[b] -= back
        over -= back
    left = max_records - sum(take.values())
    for b in sorted(available, key=lambda b: (take[b] - available[b], b)):
        if left <= 0:
            break
        more = min(left, available[b] - take[b])
        take[b] += more
        left -= more
    return {b: start[b] + take.get(b, 0) for b in start}


class FailedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """What ``streamReader()`` returns when the reader cannot be built (a schema given to readStream that is not
    the changes', a table dropped since ``load()``): it raises the error at Spark's first call. Raised by
    ``streamReader()`` itself, PySpark 4.2's stream runner hides it behind its own ``UnboundLocalError`` (it stops
    a reader it never got); this way the query fails with our error as the trace's last line."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def _fail(self, *_: Any) -> Any:
        raise self.error

    # every method raises the error, whatever the base class' signature of it
    initialOffset = latestOffset = partitions = read = commit = prepareForTriggerAvailableNow = _fail  # type: ignore[assignment]  # noqa: N815, E501

    def stop(self) -> None:
        """Nothing was opened."""


class LakestreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver (offsets, partitions), reads them on the workers. Holds the table's
    definition and the store's options (never shown); the lake table, log and subscription are the driver's."""

    def __init__(self, source: Any, options: StreamOptions, spark_schema: StructType) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.options = options
        self.table_name = source.read_options.table
        self.store_url = source._warehouse()
        self._store_options = source._store_options(self.store_url)
        self.target = to_arrow_schema(spark_schema, timezone="UTC")
        self._source = source
        self._lh: Lakehouse | None = None
        self._available_now: dict[int, int] | None = None  # trigger(availableNow=True): the log's end when it began
        self._ends: dict[int, int] | None = None  # the log's ends at the last latestOffset
        lh = self._lakehouse()
        # resolved through the table aliases once: the stream's offsets belong to one physical table, which it
        # keeps reading after a blue/green cutover (restart the stream to follow the switch)
        self.table_name = lh.resolve(self.table_name)
        self.definition_json = lh.table(self.table_name).to_json()
        if "_op" not in self.target.names:
            raise InvalidArgument(
                "a stream's schema is the changes' (the table's columns, __bucket, __offset, __timestamp, _op): "
                "give no schema to readStream, or that one"
            )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_lh"] = state["_source"] = None
        return state

    def __repr__(self) -> str:
        return f"LakestreamStreamReader({self.table_name} in {self.store_url}, {self.options})"

    # ---- the driver --------------------------------------------------------------------------------------

    def _lakehouse(self) -> Lakehouse:
        if self._lh is None:
            from lakehouse.lakehouse import Lakehouse

            self._lh = Lakehouse.open(self.store_url, **self._store_options)
        return self._lh

    def _log(self) -> Any:
        return self._lakehouse().log(self.table_name)

    def initialOffset(self) -> dict:
        lh, options = self._lakehouse(), self.options
        if options.subscription is not None:
            sub = lh.subscription(self.table_name, options.subscription, start=options.starting)
            return _offset(sub.position)
        if options.starting == "latest":
            return _offset(self._log().end_offsets())
        if options.starting == "earliest":
            return _offset(dict.fromkeys(range(self._buckets()), 0), LAKE)
        from lakehouse.read.union import check_as_of

        log_ = self._log()
        assert not isinstance(options.starting, str)  # "earliest" and "latest" are the only words
        return _offset(check_as_of(options.starting, log_.definition, log_, what="startingOffsets"))

    def _buckets(self) -> int:
        return self._lakehouse().table(self.table_name).buckets

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        return ReadMaxRows(self.options.max_records) if self.options.max_records else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: Any) -> dict:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        if start[PHASE] == LAKE:
            snapshot = self._lakehouse().lake_offsets(self.table_name)
            if any(snapshot.values()):
                return _offset(snapshot, SNAPSHOT)  # one micro-batch: the lake as of its snapshot's offsets
            # no lake yet: the log from offset 0 on
        ends = self._ends = self._log().end_offsets()
        if self._available_now is not None:
            ends = {b: min(o, self._available_now.get(b, o)) for b, o in ends.items()}
        begin = _offsets(start)
        if isinstance(limit, ReadMaxRows):
            ends = limited(begin, ends, limit.max_rows)
        return _offset({b: max(begin[b], ends[b]) for b in begin})

    def prepareForTriggerAvailableNow(self) -> None:
        """trigger(availableNow=True): read up to the log's end now (in as many micro-batches as the read limit
        makes), nothing appended after."""
        self._available_now = self._log().end_offsets()

    def reportLatestOffset(self) -> dict | None:
        """The log's ends as the last `latestOffset` listed them (Spark asks every trigger, right after it: a
        second listing of every bucket would double the trigger's requests)."""
        return None if self._ends is None else _offset(self._ends)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if start[PHASE] == LAKE and end[PHASE] == SNAPSHOT:
            return self._snapshot_partitions(_offsets(end))
        begin, until = _offsets(start), _offsets(end)
        if begin == until:
            return []
        return self._changes_partitions(begin, until)

    def _snapshot_partitions(self, at: dict[int, int]) -> list[InputPartition]:
        from dataclasses import replace

        from lakehouse.read.union import plan_columns

        lh = self._lakehouse()
        definition = lh.table(self.table_name)
        table = lh.lake_table(self.table_name)
        plan = plan_columns(table, definition, lake_only=True)
        located = replace(plan, io_properties=lh.catalog_properties()).located(
            table, definition, as_of=at, log_=self._log(), fix_ends=False
        )
        bare = replace(located, buckets={})
        return [
            StreamPartition("snapshot", b, (bare, part))
            for b, read in located.buckets.items()
            for part in read.split(128 * 1024 * 1024)
        ]

    def _changes_partitions(self, start: dict[int, int], end: dict[int, int]) -> list[InputPartition]:
        from dataclasses import replace

        from lakehouse.iceberg.datafiles import LakeContext, shared_store
        from lakehouse.read.changes import plan_changes

        lh, log_ = self._lakehouse(), self._log()
        first = log_.start_offsets()
        gone = {b: first[b] for b in start if end[b] > start[b] and start[b] < first[b]}
        if gone:
            raise AsOfUnavailable(
                f"{self.table_name}: the stream starts in records log retention removed: "
                + ", ".join(f"bucket {b} from offset {start[b]} (its log begins at {o})" for b, o in gone.items())
                + '. Start from "earliest" (the lake serves what retention removed), or from the log\'s start; '
                "a subscription keeps the log a stream still needs",
                unavailable=gone,
            )
        table = lh.lake_table(self.table_name)
        plan = plan_changes(table, log_, start, end, before_images=self.options.before_images)
        ctx = LakeContext.of(shared_store(self.store_url, self._store_options), table)
        bare = replace(plan, buckets=())
        parts: list[list[Any]] = []
        size = 0
        for item in sorted(plan.buckets, key=lambda i: i.end - i.start):
            records = item.end - item.start
            if not parts or size + records > TASK_RECORDS:
                parts.append([])
                size = 0
            parts[-1].append(item)
            size += records
        return [StreamPartition("changes", items[0].bucket, (bare, tuple(items), ctx)) for items in parts]

    def commit(self, end: dict) -> None:
        if self.options.subscription is None or end[PHASE] == LAKE:
            return
        from lakehouse.errors import SubscriptionConflict

        sub = self._lakehouse().subscription(self.table_name, self.options.subscription)
        position = _offsets(end)
        if all(position[b] <= o for b, o in sub.position.items() if b in position):
            return  # already there (a replayed commit) or ahead (another runner): never move it back
        try:
            sub.advance({b: max(o, sub.position.get(b, 0)) for b, o in position.items()})
        except SubscriptionConflict:
            sub.refresh()
            sub.advance({b: max(o, sub.position.get(b, 0)) for b, o in position.items()})

    def stop(self) -> None:
        if self._lh is not None:
            self._lh.close()
            self._lh = None

    # ---- the workers -------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamPartition)
        target = self.target
        batches = self._snapshot(partition) if partition.mode == "snapshot" else self._changes(partition)
        for batch in batches:
            if batch.num_rows:
                yield batch if batch.schema.equals(target) else batch.cast(target)

    def _snapshot(self, partition: StreamPartition) -> Iterator[pa.RecordBatch]:
        plan, read = partition.payload
        names = [f.name for f in self.target]
        for batch in plan.execute_bucket(read, None):
            inserts = pa.array(["insert"] * batch.num_rows, pa.string())
            columns = {**{n: batch.column(n) for n in batch.schema.names}, "_op": inserts}
            yield pa.RecordBatch.from_arrays([columns[n] for n in names], names=names)

    def _changes(self, partition: StreamPartition) -> Iterator[pa.RecordBatch]:
        from lakehouse.iceberg.datafiles import shared_store
        from lakehouse.log import Log
        from lakehouse.read.changes import read_bucket_changes
        from lakehouse.table.definition import TableDefinition

        plan, items, ctx = partition.payload
        log_ = Log(shared_store(self.store_url, self._store_options), TableDefinition.from_json(self.definition_json))
        try:
            for item in items:
                yield from read_bucket_changes(plan, item, log_, ctx).to_batches()
        finally:
            log_.close()
