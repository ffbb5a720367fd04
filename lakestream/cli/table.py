"""``lakestream table create|alter|drop|describe|list|location|register|read|changes|cost``: tables, their
definitions, their rows and what they cost."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from lakehouse.errors import InvalidArgument, SchemaError
from lakestream.cli.common import (
    ConfigOpt,
    JsonOpt,
    LimitOpt,
    WarehouseOpt,
    cells,
    command_errors,
    console,
    emit,
    finish_runs,
    open_lakehouse,
    parse_time,
    print_mapping,
    print_rows,
    report_if_failed,
    run_json,
)
from lakestream.console import json_line, new_table

if TYPE_CHECKING:
    from lakehouse.lakehouse import DropResult
    from lakehouse.table.definition import TableDefinition

table_app = typer.Typer(help="Create and inspect tables.", no_args_is_help=True)


def _definition_json(d: TableDefinition) -> dict:
    """A table's definition as --json prints it."""
    return {
        "name": str(d.name),
        "kind": "primary-key" if d.has_primary_key else "log",
        "buckets": d.buckets,
        "primary_key": list(d.primary_key),
        "bucket_key": d.bucket_key,
        "partition_by": list(d.partition_by),
        "write_mode": d.write_mode,
        "merge_engine": d.merge_engine,
        "version_column": d.version_column,
        "aggregates": dict(d.aggregates),
        "columns": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in d.schema],
        "uuid": d.table_uuid,
        "created": d.created_at,
        "schema_version": d.schema_version,
        "log_format": d.log_format,
    }


@table_app.command("create")
def table_create(
    name: Annotated[str, typer.Argument(help="namespace.table")],
    schema: Annotated[
        str, typer.Option(help="columns as 'name:type, ...' (types: int64, string, decimal(12,2), ...; '!' = not null)")
    ],
    buckets: Annotated[int, typer.Option(help="number of buckets")] = 4,
    primary_key: Annotated[str | None, typer.Option(help="comma-separated primary-key columns")] = None,
    bucket_key: Annotated[str | None, typer.Option(help="bucket-key column (default: the single key column)")] = None,
    partition_by: Annotated[
        str | None, typer.Option(help="comma-separated lake partitions: columns, year|month|day|hour(column)")
    ] = None,
    write_mode: Annotated[
        str | None,
        typer.Option(
            help="a primary-key table's tiering: merge-on-read (the default: changed rows marked deleted by "
            "position delete files) or copy-on-write (files holding a changed key rewritten)"
        ),
    ] = None,
    merge_engine: Annotated[
        str | None,
        typer.Option(
            help="how a primary-key table combines a key's new row with the stored one: last-row (the default), "
            "partial-update, versioned (with --version-column), first-row, aggregate (with --aggregate)"
        ),
    ] = None,
    version_column: Annotated[
        str | None,
        typer.Option(help="the versioned engine's version column: a row older than the stored one is ignored"),
    ] = None,
    aggregate: Annotated[
        str | None,
        typer.Option(
            help="the aggregate engine's functions, comma-separated column:function (sum, max, min, count, "
            "last_non_null; columns not named keep their last non-null value), e.g. amount:sum,orders:count"
        ),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            help="how the log lies on the store: commits (the default: an append is one data object and one commit "
            "record, whatever its buckets) or segments (an object per bucket per append, as earlier versions)"
        ),
    ] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Create a table (a log table without --primary-key; a primary-key table with it). Columns may be
    given as `table describe` prints them."""
    from lakehouse.table.definition import parse_schema, split_list

    with command_errors():
        columns = parse_schema(schema)  # before the warehouse is created: a typo in --schema makes nothing
        lh = open_lakehouse(warehouse, config, create=True)  # the command that creates a warehouse
        definition = lh.create_table(
            name,
            columns,
            buckets=buckets,
            primary_key=split_list(primary_key or ""),
            bucket_key=bucket_key,
            partition_by=split_list(partition_by or ""),
            write_mode=write_mode,
            merge_engine=merge_engine,
            version_column=version_column,
            aggregates=_aggregates(aggregate),
            log_format=log_format,
        )

    def render() -> None:
        console.print(f"[green]created[/] {definition.name} in {escape(lh.url)}")
        print_mapping(definition.describe())

    emit(json_output, {**_definition_json(definition), "warehouse": lh.url}, render)


def _aggregates(spec: str | None) -> dict[str, str] | None:
    """``--aggregate amount:sum,orders:count`` as {"amount": "sum", "orders": "count"}."""
    if not spec:
        return None
    out = {}
    from lakehouse.table.definition import split_list

    for item in split_list(spec):
        column, sep, function = item.partition(":")
        if not sep or not column.strip() or not function.strip():
            raise SchemaError(f"--aggregate takes column:function pairs (e.g. amount:sum,orders:count), got {item!r}")
        out[column.strip()] = function.strip()
    return out


@table_app.command("alter")
def table_alter(
    name: Annotated[str, typer.Argument(help="namespace.table")],
    add_column: Annotated[
        list[str] | None, typer.Option("--add-column", help="a nullable column to add, 'name:type' (repeatable)")
    ] = None,
    widen: Annotated[
        list[str] | None,
        typer.Option(help="'name:type': int8/16/32 to a wider int, float32 to float64, decimal precision up"),
    ] = None,
    rename: Annotated[list[str] | None, typer.Option(help="'old:new' (repeatable)")] = None,
    drop_column: Annotated[
        list[str] | None, typer.Option("--drop-column", help="a column to drop (repeatable)")
    ] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Evolve a table's schema by Iceberg's rules, as one new schema version of its definition, log and lake
    (nothing is rewritten: older segments and files are read through field ids). Refused, with nothing
    changed: narrowing a type, a NOT NULL column, a key, bucket-key or partition column, a taken or reserved
    name, or another alter committing first."""
    with command_errors():
        lh = open_lakehouse(warehouse, config)
        definition = lh.alter_table(name, add_columns=add_column, widen=widen, rename=rename, drop_columns=drop_column)

    def render() -> None:
        console.print(f"[green]altered[/] {definition.name} to schema version {definition.schema_version}")
        print_mapping(definition.describe())

    emit(json_output, {**_definition_json(definition), "warehouse": lh.url}, render)


@table_app.command("drop")
def table_drop(
    name: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Drop a table: its log (every segment), its Iceberg lake table and files, and its definition. Works on
    a half-created or half-dropped table too. Stop its producers, tiering and maintenance first."""
    with command_errors():
        lh = open_lakehouse(warehouse, config)
        if not yes:
            typer.confirm(
                f"drop {name} in {lh.url}: its log, its lake table and every file of both? This cannot be undone",
                abort=True,
                err=json_output,  # stdout holds only JSON
            )
        r = lh.drop_table(name)
    emit(json_output, dataclasses.asdict(r), lambda: _print_dropped(r))


def _print_dropped(r: DropResult) -> None:
    """What `table drop` removed, in words."""
    parts = [
        "lake table" if r.lake_table else "no lake table",
        f"{r.objects_deleted} objects (log segments, data and metadata files)",
        "definition" if r.definition else "no definition (it was gone already)",
    ]
    if r.subscriptions:
        parts.insert(2, f"{r.subscriptions} subscription{'s' if r.subscriptions != 1 else ''}")
    console.print(f"[green]dropped[/] {escape(r.table)}: {escape(', '.join(parts))}")
    if r.lake_location:
        console.print(
            f"[bold yellow]note:[/] the lake table's files under {escape(r.lake_location)} (outside the table's "
            "folder) were left as they were"
        )


@table_app.command("describe")
def table_describe(
    name: str, warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False
) -> None:
    """Show a table's definition and its log's offsets."""
    with command_errors():
        lh = open_lakehouse(warehouse, config)
        definition = lh.table(name)
        ends = lh.log(name).end_offsets()

    def render() -> None:
        print_mapping(definition.describe())
        console.print(f"{'log records':14} {sum(ends.values())} in {len(ends)} buckets")

    emit(json_output, {**_definition_json(definition), "log_records": sum(ends.values()), "end_offsets": ends}, render)


@table_app.command("list")
def table_list(
    namespace: Annotated[str | None, typer.Argument(help="only this namespace")] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """List tables."""
    with command_errors():
        lh = open_lakehouse(warehouse, config)
        names = lh.list_tables(namespace)
    table = new_table("table", "kind", "buckets", "primary key")
    runs = []
    for run in lh.for_each_table(lh.table, names):  # a broken definition is listed, not the end of the listing
        runs.append(run)
        d = run.result
        if report_if_failed(run):
            if json_output:
                run_json(run)
            table.add_row(*cells(run.table, "unreadable (see the error)", "", ""))
            continue
        if json_output:
            json_line(_definition_json(d))
        table.add_row(
            *cells(run.table, "primary-key" if d.has_primary_key else "log", d.buckets, ", ".join(d.primary_key))
        )
    if json_output:
        pass  # each table was printed as it was read
    elif table.row_count:
        console.print(table)
    else:
        console.print(f"no tables{f' in namespace {namespace}' if namespace else ''} in {lh.url}", markup=False)
    finish_runs(runs)


@table_app.command("location")
def table_location(
    name: str, warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False
) -> None:
    """Print the current Iceberg metadata file of a table (open it with DuckDB, pyiceberg, Spark, ...): after a
    blue/green cutover, the file of the table serving the name (its physical name in --json)."""
    from pyiceberg.exceptions import NoSuchTableError

    from lakehouse.iceberg.catalog import ObjectStoreCatalog

    with command_errors(NoSuchTableError, ValueError):
        lh = open_lakehouse(warehouse, config)
        # the catalog as other engines load it (aliases resolved), not lakestream's own, which names physical tables
        properties: dict[str, Any] = lh.catalog_properties()  # the catalog's properties: strings
        catalog = ObjectStoreCatalog("lakestream", store=lh.store, **properties)
        physical = ".".join(catalog.physical_identifier(name))
        location = catalog.table_location(physical)
    emit(json_output, {"table": name, "physical": physical, "metadata_location": location}, lambda: print(location))


@table_app.command("register")
def table_register(
    name: str,
    metadata_location: Annotated[str, typer.Argument(help="an Iceberg metadata.json file")],
    overwrite: Annotated[bool, typer.Option(help="replace the pointer of an existing table")] = False,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Point an Iceberg table name at an existing metadata file (also repairs a damaged pointer)."""
    with command_errors(ValueError):
        table = open_lakehouse(warehouse, config).register_table(name, metadata_location, overwrite=overwrite)
    emit(
        json_output,
        {"table": name, "metadata_location": table.metadata_location},
        lambda: console.print(f"[green]registered[/] {escape(name)} -> {escape(table.metadata_location)}"),
    )


@table_app.command("read")
def table_read(
    name: str,
    lake_only: Annotated[bool, typer.Option("--lake", help="the lake only (what other engines see)")] = False,
    columns: Annotated[str | None, typer.Option(help="comma-separated columns")] = None,
    where: Annotated[str | None, typer.Option(help='row filter, e.g. "o_orderkey < 10"')] = None,
    as_of: Annotated[
        str | None,
        typer.Option("--as-of", help='the table as of log offsets, every bucket: "0:120,1:98,..." (bucket:offset)'),
    ] = None,
    ref: Annotated[
        str | None,
        typer.Option(
            "--ref",
            help="the lake at an Iceberg tag or branch: 'published' is the newest snapshot whose checks all passed",
        ),
    ] = None,
    limit: LimitOpt = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="machine output: one JSON object per row (every row, or --limit)")
    ] = False,
) -> None:
    """Read a table: union read (lake + log tail, fresh) or, with --lake, the lake only; --as-of reads either as
    of log offsets; --ref published reads the table as published (the lake at that tag, no log tail)."""
    cols = [c.strip() for c in columns.split(",")] if columns else None
    with command_errors(ValueError):
        from lakehouse.read.union import parse_offsets

        if as_of is not None and ref is not None:
            raise InvalidArgument("--as-of and --ref do not go together: read as of offsets or at a ref")
        offsets = parse_offsets(as_of, "--as-of") if as_of is not None else None
        lh = open_lakehouse(warehouse, config)
        if lake_only or ref is not None:
            data = lh.lake_read(name, cols, where, as_of=offsets, ref=ref)
        else:
            data = lh.union_read(name, cols, where, as_of=offsets)
    what = f"lake at {ref}" if ref is not None else "lake" if lake_only else "union read"
    print_rows(data, limit, json_output, f"{data.num_rows:,} rows ({what}{f' as of {as_of}' if as_of else ''})")


@table_app.command("changes")
def table_changes(
    name: str,
    start: Annotated[str, typer.Option(help='offsets to start at, every bucket: "0:120,1:98,..." (bucket:offset)')],
    end: Annotated[str | None, typer.Option(help="offsets to end at (default: the log's end, printed)")] = None,
    before_images: Annotated[
        bool, typer.Option("--before-images", help="also the old row of every update (update_before)")
    ] = False,
    columns: Annotated[str | None, typer.Option(help="comma-separated columns (the key is always included)")] = None,
    limit: LimitOpt = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="machine output: one JSON object per change (every change, or --limit)")
    ] = False,
) -> None:
    """What changed between two offset maps: a log table's records; a primary-key table's net change per key
    (_op: insert, update_before, update_after, delete)."""
    cols = [c.strip() for c in columns.split(",")] if columns else None
    with command_errors(ValueError):
        from lakehouse.read.union import parse_offsets

        starts = parse_offsets(start, "--start")
        lh = open_lakehouse(warehouse, config)
        ends = parse_offsets(end, "--end") if end is not None else lh.log(name).end_offsets()
        data = lh.changes(name, starts, ends, before_images=before_images, columns=cols)
    upto = ",".join(f"{b}:{o}" for b, o in sorted(ends.items()))
    print_rows(data, limit, json_output, f"{data.num_rows:,} changes from {start} up to {upto}")


@table_app.command("cost")
def table_cost(
    name: str,
    since: Annotated[
        str, typer.Option(help="the period's start: a duration ago (15m, 12h, 7d) or an ISO time (UTC unless given)")
    ] = "24h",
    until: Annotated[str | None, typer.Option(help="the period's end, as --since (default: now)")] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """What a table cost the object store in a period: its producers' writes (read from the log), its tiering
    and compaction commits (the requests each recorded in its snapshot), its storage; in requests, bytes and
    dollars at the settings' price list (AWS S3 list prices unless LAKESTREAM_PRICE_... say otherwise)."""
    from datetime import UTC, datetime

    from object_store.usage import measure_usage

    with command_errors(ValueError):
        now = datetime.now(UTC)
        start, end = parse_time(since, now), parse_time(until, now) if until else now
        lh = open_lakehouse(warehouse, config)
        with measure_usage() as asked:
            cost = lh.cost(name, since=start, until=end)
    own = cost.prices.price(asked.usage()).total
    doc = {**cost.to_dict(), "this_command": {"usage": asked.usage().to_dict(), "dollars": own}}

    def show() -> None:
        out = new_table("part", "operations", "write requests", "read requests", "bytes", "$", "note")
        for line in cost.lines:
            moved = line.usage.bytes_sent + line.usage.bytes_received
            out.add_row(
                line.part,
                f"{line.operations:,}",
                f"{line.usage.write_requests:,}",
                f"{line.usage.read_requests:,}",
                f"{moved:,}",
                f"{line.dollars:.6f}",
                line.note,
            )
        out.add_row("storage", "", "", "", f"{cost.stored_bytes:,}", f"{cost.storage_dollars:.6f}", "held now")
        out.add_row("total", "", "", "", "", f"{cost.total:.6f}", f"${cost.per_day():.4f} a day at this rate")
        console.print(f"{name}: {cost.since:%Y-%m-%d %H:%M:%S} .. {cost.until:%Y-%m-%d %H:%M:%S} UTC", markup=False)
        console.print(out)
        console.print(
            f"(this command: {asked.usage().total_requests:,} requests, ${own:.6f})", markup=False, style="dim"
        )

    emit(json_output, doc, show)
