"""``lakestream tier|compact|maintain``: the pipeline's rounds over tables, one table at a time, every failure
reported (`lakehouse.table_runs`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from lakehouse.errors import LakestreamError
from lakestream.cli.common import (
    ConfigOpt,
    JsonOpt,
    TablesOpt,
    WarehouseOpt,
    command_errors,
    console,
    emit_runs,
    fail,
    finish_runs,
    open_executor,
    open_lakehouse,
    open_spark,
    parse_duration,
)
from lakestream.console import new_table
from object_store.pricing import PriceList

if TYPE_CHECKING:
    from lakehouse.table_runs import TableRun


def tier(
    table: Annotated[
        list[str] | None, typer.Option("--table", "-t", help="namespace.table (repeatable; default: all)")
    ] = None,
    spark_master: Annotated[
        str | None, typer.Option(help="run the tasks on Spark, e.g. local[2] or spark://host:7077")
    ] = None,
    local: Annotated[
        bool, typer.Option("--local", help="run the tasks on the local in-process executor (default)")
    ] = False,
    workers: Annotated[int | None, typer.Option(help="local executor threads (default: one per core)")] = None,
    max_split_rows: Annotated[int | None, typer.Option(help="log records per task at most")] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Tier tables' logs into their Iceberg tables, exactly once (one round per table)."""
    if local and spark_master:
        fail(LakestreamError("give either --spark-master or --local, not both"))
    with command_errors():
        lh = open_lakehouse(warehouse, config)
        names = table or [str(t) for t in lh.list_tables()]
        executor = open_executor(spark_master, workers)
    out = new_table("table", "records", "files +/-", "MB", "seconds", "requests w/r", "$", "snapshot", "offsets")
    spark = getattr(executor, "spark", None)
    prices = lh.settings.prices if lh.settings is not None else PriceList()

    def row(run: TableRun) -> None:
        r = run.result
        out.add_row(
            run.table,
            f"{r.rows:,}",
            f"+{r.files_added}/-{r.files_removed}",
            f"{r.bytes_written / 1e6:.1f}",
            f"{r.seconds:.2f}",
            f"{r.usage.write_requests:,}/{r.usage.read_requests:,}",
            f"{prices.price(r.usage).total:.6f}",
            str(r.snapshot_id or "- (nothing to tier)"),
            " ".join(f"{b}:{o}" for b, o in r.offsets.items()),
        )

    work = lambda name: lh.tier(name, spark=spark, workers=workers, max_split_rows=max_split_rows)  # noqa: E731
    runs = emit_runs(lh.for_each_table(work, names), json_output, row, prices)
    if not json_output:
        console.print(out)
    finish_runs(runs)


def _size(text: str) -> int:
    """'128MiB', '64M', '1G' or a number of bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*", text)
    if not m:
        raise LakestreamError(f"bad size {text!r}: use e.g. 128MiB, 512M or 1G")
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]


def compact(
    table: TablesOpt = None,
    target_file_size: Annotated[str, typer.Option(help="target data file size")] = "128MiB",
    min_input_files: Annotated[int, typer.Option(help="rewrite a group only if it has this many files")] = 5,
    spark_master: Annotated[str | None, typer.Option(help="run the tasks on Spark")] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Rewrite small data files into target-sized ones (one replace snapshot per table)."""
    with command_errors():
        lh = open_lakehouse(warehouse, config)
        size = _size(target_file_size)
        spark = open_spark(spark_master)
        names = table or [str(t) for t in lh.list_tables()]
    out = new_table("table", "files before", "files after", "rewritten", "MB read", "MB written", "seconds")

    def row(run: TableRun) -> None:
        r = run.result
        out.add_row(
            run.table,
            str(r.files_before),
            str(r.files_after),
            str(r.files_rewritten),
            f"{r.bytes_read / 1e6:.1f}",
            f"{r.bytes_written / 1e6:.1f}",
            f"{r.seconds:.2f}",
        )

    work = lambda name: lh.compact(name, target_file_size=size, min_input_files=min_input_files, spark=spark)  # noqa: E731
    runs = emit_runs(lh.for_each_table(work, names), json_output, row)
    if not json_output:
        console.print(out)
    finish_runs(runs)


def maintain(
    table: TablesOpt = None,
    snapshot_age: Annotated[str, typer.Option(help="expire snapshots older than this")] = "5d",
    retain_last: Annotated[int, typer.Option(help="always keep this many newest snapshots")] = 1,
    orphan_age: Annotated[str, typer.Option(help="grace period before an unreferenced file is deleted")] = "3d",
    retention: Annotated[str, typer.Option(help="delete tiered log segments older than this")] = "7d",
    subscription_idle: Annotated[
        str, typer.Option(help="report subscriptions not advanced for longer than this")
    ] = "7d",
    unsafe_orphan_age: Annotated[
        bool,
        typer.Option(
            "--unsafe-orphan-age",
            help="allow --orphan-age below 1h: deletes the files of tiering or compaction rounds still running, "
            "whose commits then reference missing files; only when none can run",
        ),
    ] = False,
    target_file_size: Annotated[str, typer.Option(help="compaction target file size")] = "128MiB",
    spark_master: Annotated[str | None, typer.Option(help="run compaction tasks on Spark")] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Compaction, snapshot expiry, orphan removal and log retention, in that order, per table."""
    from lakehouse.maintenance.orphans import check_orphan_age

    with command_errors():
        lh = open_lakehouse(warehouse, config)
        args: dict[str, Any] = {
            "snapshot_age": parse_duration(snapshot_age),
            "retain_last": retain_last,
            "orphan_age": parse_duration(orphan_age),
            "retention": parse_duration(retention),
            "subscription_idle": parse_duration(subscription_idle),
            "target_file_size": _size(target_file_size),
            "unsafe_orphan_age": unsafe_orphan_age,
        }
        check_orphan_age(args["orphan_age"], unsafe_orphan_age=unsafe_orphan_age)
        spark = open_spark(spark_master)
        names = table or [str(t) for t in lh.list_tables()]
    runs = lh.for_each_table(lambda name: lh.maintain(name, spark=spark, **args), names)
    finish_runs(emit_runs(runs, json_output, _print_maintained))


def _print_maintained(run: TableRun) -> None:
    """What `maintain` did to one table, for people."""
    c, e, o, t = run.result.compaction, run.result.expiry, run.result.orphans, run.result.retention
    console.print(f"[bold]{escape(run.table)}[/]")
    console.print(f"  compaction  files {c.files_before} -> {c.files_after} ({c.files_rewritten} rewritten)")
    console.print(
        f"  expiry      {len(e.expired)} snapshots expired, {e.files_deleted} files, "
        f"{e.bytes_freed / 1e6:.1f} MB freed; {e.snapshots_left} left"
    )
    console.print(f"  orphans     {o.count} files, {o.bytes / 1e6:.1f} MB deleted")
    style = "bold yellow" if t.overdue else ""
    console.print(
        f"  retention   {t.segments_deleted} segments, {t.records_deleted:,} records, "
        f"{t.bytes_freed / 1e6:.1f} MB deleted",
        style=style or None,
    )
    if t.overdue:
        console.print(f"  [bold yellow]warning:[/] {escape(t.message)}")
    for snapshot_id, who in sorted(e.pinned.items()):
        console.print(f"  pinned      snapshot {snapshot_id} kept for {who}", markup=False)
    for bucket, (offset, who) in sorted(t.pinned.items()):
        console.print(f"  pinned      bucket {bucket} log kept from offset {offset} for {who}", markup=False)
    for message in run.result.idle_subscriptions:
        console.print(f"  [bold yellow]idle:[/] {escape(message)}")
