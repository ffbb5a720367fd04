"""The `lakestream` command's own commands (config, store, table, log, catalog, subscription, tier, compact,
maintain, demo) and what every command shares: the error boundary, options, output. Thin: parse options, build
settings, call the library, print. `lakestream.cli` adds the layers and quality commands."""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
from datetime import timedelta
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from lakehouse.errors import InvalidArgument, LakestreamError, SchemaError
from lakehouse.settings import load_settings
from lakestream.console import OutputConsole, json_line, new_table

#: Errors from below the library that the CLI reports in one line instead of a traceback (the facade
#: translates the ones it knows; these are what gets past it: the OS's, pyiceberg's, Spark's).
FOREIGN_ERROR_MODULES = ("pyiceberg", "pyspark", "py4j", "pyarrow")


class _Boundary(TyperGroup):
    """The CLI's boundary: warnings of the library (a retry against a store that does not answer) are shown as
    they happen, and an error of ours, of the OS or of pyiceberg/Spark ends the command with one line."""

    def invoke(self, ctx):  # noqa: ANN001, ANN201 - click's signature
        _show_warnings()
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if isinstance(exc, LakestreamError | OSError) or type(exc).__module__.startswith(FOREIGN_ERROR_MODULES):
                fail(exc)
            raise


class _WarningLine(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        err.print(f"[yellow]warning:[/] {escape(record.getMessage())}", soft_wrap=True)


def _show_warnings() -> None:
    """Warnings of lakestream's loggers on stderr, one line each, unless the program configured logging."""
    if logging.getLogger().handlers:
        return
    for name in ("object_store", "lakehouse"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, _WarningLine) for h in logger.handlers):
            handler = _WarningLine(logging.WARNING)
            logger.addHandler(handler)


app = typer.Typer(help="lakestream: a stream-lake pipeline on object storage.", no_args_is_help=True, cls=_Boundary)
store_app = typer.Typer(help="Inspect and check the warehouse's object store.", no_args_is_help=True)
app.add_typer(store_app, name="store")
table_app = typer.Typer(help="Create and inspect tables.", no_args_is_help=True)
app.add_typer(table_app, name="table")
log_app = typer.Typer(help="Inspect a table's log.", no_args_is_help=True)
app.add_typer(log_app, name="log")
catalog_app = typer.Typer(help="The Iceberg catalog on the object store.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
subscription_app = typer.Typer(help="Durable consumer positions of tables (subscriptions).", no_args_is_help=True)
app.add_typer(subscription_app, name="subscription")
console = OutputConsole()
err = OutputConsole(stderr=True)

WarehouseOpt = Annotated[
    str | None, typer.Option("--warehouse", "-w", help="file:///path or s3://bucket/prefix (else settings)")
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="YAML settings file (else LAKESTREAM_CONFIG)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine output: one JSON object per line")]


def _settings(warehouse: str | None, config: Path | None):
    return load_settings(config, warehouse=warehouse)


def _open_store(settings, *, create: bool = False, **options):
    """The warehouse's store. Only the commands that create a warehouse (`table create`, `demo`) pass
    ``create=True``: for every other one a missing ``file://`` warehouse is an error naming it, not a new, empty
    warehouse made from a mistyped path."""
    from object_store import WarehouseNotFound

    try:
        return settings.open_store(create=create, **options)
    except WarehouseNotFound as exc:
        raise WarehouseNotFound(
            f"no warehouse at {settings.warehouse}: {exc.path} does not exist or is not a directory; check "
            "--warehouse (or LAKESTREAM_WAREHOUSE, the settings file), or create the warehouse with "
            "`lakestream table create` (or `lakestream demo`)",
            exc.path,
        ) from None


def _cells(*values: object) -> list[Text]:
    """Table cells shown as they are: data is never read as rich markup (``[b]`` or ``timestamp[us]``)."""
    return [Text(str(v)) for v in values]


def _data_table(names: list[str], rows: list[dict]) -> Table:
    table = new_table(*(Text(name) for name in names))
    for row in rows:
        table.add_row(*_cells(*row.values()))
    return table


def _rows_json(rows: list[dict]) -> None:
    """--json of a command that prints data: one object per row, column names as keys."""
    for row in rows:
        json_line(row)


#: Rows the table view shows unless --limit says otherwise; --json has no such default (a script reading the
#: rows must not get a table cut short without a word).
TABLE_VIEW_ROWS = 20
LimitOpt = Annotated[
    int | None,
    typer.Option(
        min=0,
        help=f"rows to print (0: only count them); default: {TABLE_VIEW_ROWS} in the table view, every row with --json",
        show_default=False,
    ),
]


def _print_rows(data, limit: int | None, json_output: bool, summary: str) -> None:
    """The rows of ``data`` (a pyarrow table) as JSON lines (all of them unless ``limit``), or as a table view of
    at most ``limit`` (default `TABLE_VIEW_ROWS`) rows, then ``summary``, saying so if the view was cut."""
    if json_output:
        _rows_json((data if limit is None else data.slice(0, limit)).to_pylist())
        return
    shown = min(TABLE_VIEW_ROWS if limit is None else limit, data.num_rows)
    if limit != 0:  # 0: only count them
        console.print(_data_table(data.column_names, data.slice(0, shown).to_pylist()))
    if 0 < shown < data.num_rows:
        summary += f"; showing the first {shown:,} (--limit N shows more)"
    console.print(summary, markup=False)


def _run_json(run) -> None:
    """--json of a command over tables: the table's result, or what went wrong (as the jobs print it)."""
    if run.ok:
        json_line(run.result.to_dict())
    else:
        json_line({"table": run.table, "error": run.message, "type": type(run.error).__name__})


def _definition_json(d) -> dict:
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
    }


def fail(exc: Exception) -> NoReturn:
    if isinstance(exc, LakestreamError):
        message = str(exc)
    else:  # not ours: one line, with what it is
        message = " ".join(f"{type(exc).__name__}: {exc}".split())
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(1)


def _finish(runs: list) -> None:
    """After an all-tables command: the summary and exit code 1 if any table failed (each was reported)."""
    from lakehouse.table_runs import summarize

    if any(not r.ok for r in runs):
        err.print(f"[bold red]{escape(summarize(runs))}[/]")
        raise typer.Exit(1)


def _failed(run) -> bool:
    """Report a table's error as it happens; True if it failed."""
    if not run.ok:
        err.print(f"[bold red]error:[/] {escape(run.message)}")
    return not run.ok


@app.command()
def config(warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False) -> None:
    """Show the resolved settings (secrets masked)."""
    try:
        settings = _settings(warehouse, config)
    except LakestreamError as exc:
        fail(exc)
    if json_output:
        json_line(settings.describe(missing=None))
        return
    described = settings.describe()
    width = max(map(len, described))
    for k, v in described.items():
        console.print(f"{k:{width}} {v}", markup=False)


@store_app.command("probe")
def store_probe(warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False) -> None:
    """Check that the store enforces If-None-Match and If-Match (lakestream refuses stores that do not)."""
    try:
        store = _open_store(_settings(warehouse, config), create_bucket=None)
        store.ensure_conditional_writes()
    except LakestreamError as exc:
        fail(exc)
    if json_output:
        json_line({"store": store.url, "conditional_writes": True})
        return
    console.print(f"[green]ok[/] {escape(store.url)}: conditional writes are enforced")


@store_app.command("ls")
def store_ls(
    prefix: Annotated[str, typer.Argument(help="key prefix")] = "",
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    limit: Annotated[int, typer.Option(help="stop after this many keys")] = 1000,
    json_output: JsonOpt = False,
) -> None:
    """List objects under a prefix, in key order."""
    try:
        store = _open_store(_settings(warehouse, config))
        table = new_table("key", "size", "etag", "last modified")
        for n, info in enumerate(store.list(prefix)):
            if n >= limit:
                break
            modified = info.last_modified.isoformat(timespec="seconds")
            if json_output:
                json_line({"key": info.key, "size": info.size, "etag": info.etag, "last_modified": modified})
                continue
            table.add_row(*_cells(info.key, info.size, info.etag, modified))
    except LakestreamError as exc:
        fail(exc)
    if not json_output:
        console.print(table)


def open_lakehouse(warehouse: str | None, config: Path | None, *, create: bool = False):
    """The warehouse of the settings; a missing one is an error unless ``create`` (see `_open_store`)."""
    from lakehouse.lakehouse import Lakehouse

    settings = _settings(warehouse, config)
    return Lakehouse(_open_store(settings, create=create), settings=settings)


def _spark(spark_master: str | None):
    """A Spark session for a command's tasks (the facade never starts one), or None without a master."""
    if spark_master is None:
        return None
    from lakehouse.spark import spark_session

    return spark_session(master=spark_master, scheduler_only=True)


def _executor(spark_master: str | None, workers: int | None):
    from lakehouse.executor import task_executor

    return task_executor(spark=_spark(spark_master), workers=workers)


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
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Create a table (a log table without --primary-key; a primary-key table with it). Columns may be
    given as `table describe` prints them."""
    from lakehouse.table.definition import parse_schema, split_list

    try:
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
        )
    except LakestreamError as exc:
        fail(exc)
    if json_output:
        json_line({**_definition_json(definition), "warehouse": lh.url})
        return
    console.print(f"[green]created[/] {definition.name} in {escape(lh.url)}")
    _print_mapping(definition.describe())


def _aggregates(spec: str | None) -> dict[str, str] | None:
    """``--aggregate amount:sum,orders:count`` as {"amount": "sum", "orders": "count"}."""
    if not spec:
        return None
    out = {}
    from lakehouse.table.definition import split_list

    for item in split_list(spec):
        column, sep, function = item.partition(":")
        if not sep or not column.strip() or not function.strip():
            fail(SchemaError(f"--aggregate takes column:function pairs (e.g. amount:sum,orders:count), got {item!r}"))
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
    try:
        lh = open_lakehouse(warehouse, config)
        definition = lh.alter_table(name, add_columns=add_column, widen=widen, rename=rename, drop_columns=drop_column)
    except LakestreamError as exc:
        fail(exc)
    if json_output:
        json_line({**_definition_json(definition), "warehouse": lh.url})
        return
    console.print(f"[green]altered[/] {definition.name} to schema version {definition.schema_version}")
    _print_mapping(definition.describe())


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
    try:
        lh = open_lakehouse(warehouse, config)
        if not yes:
            typer.confirm(
                f"drop {name} in {lh.url}: its log, its lake table and every file of both? This cannot be undone",
                abort=True,
                err=json_output,  # stdout holds only JSON
            )
        r = lh.drop_table(name)
    except LakestreamError as exc:
        fail(exc)
    if json_output:
        json_line(dataclasses.asdict(r))
        return
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
    try:
        lh = open_lakehouse(warehouse, config)
        definition = lh.table(name)
        ends = lh.log(name).end_offsets()
    except LakestreamError as exc:
        fail(exc)
    if json_output:
        json_line({**_definition_json(definition), "log_records": sum(ends.values()), "end_offsets": ends})
        return
    _print_mapping(definition.describe())
    console.print(f"{'log records':14} {sum(ends.values())} in {len(ends)} buckets")


@table_app.command("list")
def table_list(
    namespace: Annotated[str | None, typer.Argument(help="only this namespace")] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """List tables."""
    try:
        lh = open_lakehouse(warehouse, config)
        names = lh.list_tables(namespace)
    except LakestreamError as exc:
        fail(exc)
    table = new_table("table", "kind", "buckets", "primary key")
    runs = []
    for run in lh.for_each_table(lh.table, names):  # a broken definition is listed, not the end of the listing
        runs.append(run)
        d = run.result
        if _failed(run):
            if json_output:
                _run_json(run)
            table.add_row(*_cells(run.table, "unreadable (see the error)", "", ""))
            continue
        if json_output:
            json_line(_definition_json(d))
        table.add_row(
            *_cells(run.table, "primary-key" if d.has_primary_key else "log", d.buckets, ", ".join(d.primary_key))
        )
    if json_output:
        pass  # each table was printed as it was read
    elif table.row_count:
        console.print(table)
    else:
        console.print(f"no tables{f' in namespace {namespace}' if namespace else ''} in {lh.url}", markup=False)
    _finish(runs)


@table_app.command("location")
def table_location(
    name: str, warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False
) -> None:
    """Print the current Iceberg metadata file of a table (open it with DuckDB, pyiceberg, Spark, ...): after a
    blue/green cutover, the file of the table serving the name (its physical name in --json)."""
    from pyiceberg.exceptions import NoSuchTableError

    from lakehouse.iceberg.catalog import ObjectStoreCatalog

    try:
        lh = open_lakehouse(warehouse, config)
        # the catalog as other engines load it (aliases resolved), not lakestream's own, which names physical tables
        catalog = ObjectStoreCatalog("lakestream", store=lh.store, **lh.catalog_properties())
        physical = ".".join(catalog.physical_identifier(name))
        location = catalog.table_location(physical)
    except (LakestreamError, NoSuchTableError, ValueError) as exc:
        fail(exc)
    if json_output:
        json_line({"table": name, "physical": physical, "metadata_location": location})
        return
    print(location)


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
    try:
        table = open_lakehouse(warehouse, config).register_table(name, metadata_location, overwrite=overwrite)
    except (LakestreamError, ValueError) as exc:
        fail(exc)
    if json_output:
        json_line({"table": name, "metadata_location": table.metadata_location})
        return
    console.print(f"[green]registered[/] {escape(name)} -> {escape(table.metadata_location)}")


@catalog_app.command("repair")
def catalog_repair(warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False) -> None:
    """Finish or roll back renames interrupted by a crash."""
    try:
        done = open_lakehouse(warehouse, config).catalog.repair()
    except LakestreamError as exc:
        fail(exc)
    if json_output:
        json_line({"resolved": list(done)})
        return
    for line in done:
        console.print(line, markup=False)
    console.print(f"{len(done)} interrupted rename(s) resolved")


@catalog_app.command("list")
def catalog_list(
    namespace: Annotated[
        str | None, typer.Argument(help="a namespace, its parts joined by '.' (default: the top level)")
    ] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """The namespaces and Iceberg tables one level below NAMESPACE, at any depth ("com.organization")."""
    catalog = open_lakehouse(warehouse, config).catalog
    parent = tuple(namespace.split(".")) if namespace else ()
    for kind, ident in [
        *(("namespace", child) for child in catalog.list_namespaces(parent)),
        *(("table", ident) for ident in (catalog.list_tables(parent) if parent else [])),
    ]:
        if json_output:  # the parts too: a part may hold a "."
            json_line({"kind": kind, "name": ".".join(ident), "identifier": list(ident)})
        else:
            console.print(Text(f"{kind:10} {'.'.join(ident)}"))


@catalog_app.command("properties")
def catalog_properties(
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    show_secrets: Annotated[bool, typer.Option(help="print credentials too")] = False,
    json_output: JsonOpt = False,
) -> None:
    """Print the pyiceberg properties (for load_catalog or .pyiceberg.yaml) of this warehouse's catalog."""
    try:
        props = open_lakehouse(warehouse, config).catalog_properties()
    except LakestreamError as exc:
        fail(exc)
    shown = {
        k: "****" if k.endswith(("secret-access-key", "session-token")) and not show_secrets else v
        for k, v in props.items()
    }
    if json_output:
        json_line(shown)
        return
    for k, v in shown.items():
        print(f"{k}: {v}")


@log_app.command("offsets")
def log_offsets(
    name: str, warehouse: WarehouseOpt = None, config: ConfigOpt = None, json_output: JsonOpt = False
) -> None:
    """Start and end offsets of every bucket of a table's log."""
    try:
        log = open_lakehouse(warehouse, config).log(name)
        starts, ends = log.start_offsets(), log.end_offsets()
    except LakestreamError as exc:
        fail(exc)
    if json_output:
        for b, end in ends.items():
            json_line({"bucket": b, "start_offset": starts[b], "end_offset": end, "records": end - starts[b]})
        return
    table = new_table("bucket", "start offset", "end offset", "records")
    for b, end in ends.items():
        table.add_row(str(b), str(starts[b]), str(end), str(end - starts[b]))
    table.add_row("all", "", "", str(sum(ends.values()) - sum(starts.values())))
    console.print(table)


@log_app.command("tail")
def log_tail(
    name: str,
    bucket: Annotated[int, typer.Option(help="bucket to read")],
    from_offset: Annotated[int | None, typer.Option("--from", help="first offset (default: the last --limit)")] = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many records")] = 20,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Print records of one bucket with their offsets, operations and append times (--json: one object per
    record, its columns with _offset, _op and _timestamp)."""
    try:
        log = open_lakehouse(warehouse, config).log(name)
        known = bucket in range(log.definition.buckets)  # else the read below says which buckets exist
        first = log.start_offsets()[bucket] if known else 0  # retention may have removed the oldest records
        end = log.end_offsets()[bucket] if known else 0
        start = max(first, end - limit) if from_offset is None else from_offset
        rows = log.read(bucket, start, start + limit)
    except (LakestreamError, ValueError) as exc:
        fail(exc)
    if json_output:
        _rows_json(rows.to_pylist())
        return
    table = _data_table(rows.column_names, rows.to_pylist())
    console.print(table)
    if rows.num_rows:
        console.print(f"bucket {bucket}: records {start}..{start + rows.num_rows - 1} of end offset {end}")
    else:
        console.print(f"bucket {bucket}: no records from offset {start} (end offset {end})")


def _print_mapping(mapping: dict) -> None:
    for k, v in mapping.items():
        console.print(f"{k:14} {v}", markup=False)


@app.command()
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
    try:
        lh = open_lakehouse(warehouse, config)
        names = table or [str(t) for t in lh.list_tables()]
        executor = _executor(spark_master, workers)
    except LakestreamError as exc:
        fail(exc)
    out = new_table("table", "records", "files +/-", "MB", "seconds", "snapshot", "offsets")
    spark = getattr(executor, "spark", None)
    runs = []
    work = lambda name: lh.tier(name, spark=spark, workers=workers, max_split_rows=max_split_rows)  # noqa: E731
    for run in lh.for_each_table(work, names):
        runs.append(run)
        if json_output:
            _run_json(run)
        if _failed(run) or json_output:
            continue
        r = run.result
        out.add_row(
            run.table,
            f"{r.rows:,}",
            f"+{r.files_added}/-{r.files_removed}",
            f"{r.bytes_written / 1e6:.1f}",
            f"{r.seconds:.2f}",
            str(r.snapshot_id or "- (nothing to tier)"),
            " ".join(f"{b}:{o}" for b, o in r.offsets.items()),
        )
    if not json_output:
        console.print(out)
    _finish(runs)


def _duration(text: str) -> timedelta:
    """'90s', '15m', '12h', '7d' or a number of seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise LakestreamError(f"bad duration {text!r}: use e.g. 90s, 15m, 12h or 7d")
    return timedelta(seconds=float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)])


def _size(text: str) -> int:
    """'128MiB', '64M', '1G' or a number of bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*", text)
    if not m:
        raise LakestreamError(f"bad size {text!r}: use e.g. 128MiB, 512M or 1G")
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]


TablesOpt = Annotated[
    list[str] | None, typer.Option("--table", "-t", help="namespace.table (repeatable; default: all)")
]


@app.command()
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
    try:
        lh = open_lakehouse(warehouse, config)
        size = _size(target_file_size)
        spark = _spark(spark_master)
        names = table or [str(t) for t in lh.list_tables()]
    except LakestreamError as exc:
        fail(exc)
    out = new_table("table", "files before", "files after", "rewritten", "MB read", "MB written", "seconds")
    runs = []
    work = lambda name: lh.compact(name, target_file_size=size, min_input_files=min_input_files, spark=spark)  # noqa: E731
    for run in lh.for_each_table(work, names):
        runs.append(run)
        if json_output:
            _run_json(run)
        if _failed(run) or json_output:
            continue
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
    if not json_output:
        console.print(out)
    _finish(runs)


@app.command()
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

    try:
        lh = open_lakehouse(warehouse, config)
        args = {
            "snapshot_age": _duration(snapshot_age),
            "retain_last": retain_last,
            "orphan_age": _duration(orphan_age),
            "retention": _duration(retention),
            "subscription_idle": _duration(subscription_idle),
            "target_file_size": _size(target_file_size),
            "unsafe_orphan_age": unsafe_orphan_age,
        }
        check_orphan_age(args["orphan_age"], unsafe_orphan_age=unsafe_orphan_age)
        spark = _spark(spark_master)
        names = table or [str(t) for t in lh.list_tables()]
    except LakestreamError as exc:
        fail(exc)
    runs = []
    for run in lh.for_each_table(lambda name: lh.maintain(name, spark=spark, **args), names):
        runs.append(run)
        if json_output:
            _run_json(run)
        if _failed(run) or json_output:
            continue
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
    _finish(runs)


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
    try:
        from lakehouse.read.union import parse_offsets

        if as_of is not None and ref is not None:
            raise InvalidArgument("--as-of and --ref do not go together: read as of offsets or at a ref")
        offsets = parse_offsets(as_of, "--as-of") if as_of is not None else None
        lh = open_lakehouse(warehouse, config)
        if lake_only or ref is not None:
            data = lh.lake_read(name, cols, where, as_of=offsets, ref=ref)
        else:
            data = lh.union_read(name, cols, where, as_of=offsets)
    except (LakestreamError, ValueError) as exc:
        fail(exc)
    what = f"lake at {ref}" if ref is not None else "lake" if lake_only else "union read"
    _print_rows(data, limit, json_output, f"{data.num_rows:,} rows ({what}{f' as of {as_of}' if as_of else ''})")


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
    try:
        from lakehouse.read.union import parse_offsets

        starts = parse_offsets(start, "--start")
        lh = open_lakehouse(warehouse, config)
        ends = parse_offsets(end, "--end") if end is not None else lh.log(name).end_offsets()
        data = lh.changes(name, starts, ends, before_images=before_images, columns=cols)
    except (LakestreamError, ValueError) as exc:
        fail(exc)
    upto = ",".join(f"{b}:{o}" for b, o in sorted(ends.items()))
    _print_rows(data, limit, json_output, f"{data.num_rows:,} changes from {start} up to {upto}")


@subscription_app.command("list")
def subscription_list(
    table: Annotated[str | None, typer.Argument(help="only this table's (namespace.table)")] = None,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """List subscriptions: table, consumer, position, records behind, last advanced."""
    try:
        lh = open_lakehouse(warehouse, config)
        subs = lh.subscriptions(table)
        rows = []
        for sub in subs:
            records = None if sub.stale else sum(lag.records for lag in sub.lag().values())
            if json_output:
                json_line(
                    {
                        "table": sub.table,
                        "consumer": sub.consumer,
                        "position": sub.position,
                        "records_behind": records,
                        "advanced_at": sub.advanced_at,
                        "idle_seconds": round(sub.idle_for().total_seconds(), 3),
                        "stale": sub.stale,
                    }
                )
                continue
            behind = "-" if records is None else str(records)
            rows.append(
                {
                    "table": sub.table,
                    "consumer": sub.consumer,
                    "position": _offsets(sub.position),
                    "records behind": behind,
                    "advanced": f"{sub.advanced_at:%Y-%m-%d %H:%M:%S} ({_ago(sub.idle_for())} ago)"
                    + (" stale: its table was dropped" if sub.stale else ""),
                }
            )
    except LakestreamError as exc:
        fail(exc)
    if json_output:
        return
    if rows:
        console.print(_data_table(list(rows[0]), rows))
    else:
        console.print(f"no subscriptions{f' of {table}' if table else ''} in {lh.url}", markup=False)


@subscription_app.command("show")
def subscription_show(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    consumer: Annotated[str, typer.Argument(help="the consumer's name")],
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """A subscription's position, lag per bucket, last advance and what it pins (snapshots, log)."""
    try:
        lh = open_lakehouse(warehouse, config)
        sub = lh.subscription(table, consumer, create=False)
        lag = sub.lag()
        pins = lh.subscription_pins(table)
    except LakestreamError as exc:
        fail(exc)
    who = f"subscription {sub.consumer}"
    kept = {}  # bucket -> the offset from which the log is kept for this subscription
    for b, (offset, names) in pins.log.items():
        if who in names.split(", "):
            kept[b] = offset
    snapshots = sorted(s for s, names in pins.snapshots.items() if who in names.split(", "))
    if json_output:
        buckets = [
            {
                "bucket": b,
                "position": sub.position[b],
                "records_behind": lg.records,
                "seconds_behind": lg.seconds,
                "log_kept_from": kept.get(b),
            }
            for b, lg in lag.items()
        ]
        json_line(
            {
                "table": sub.table,
                "consumer": sub.consumer,
                "created_at": sub.created_at,
                "advanced_at": sub.advanced_at,
                "advances": sub.record.advances,
                "idle_seconds": round(sub.idle_for().total_seconds(), 3),
                "buckets": buckets,
                "pinned_snapshots": snapshots,
            }
        )
        return
    _print_mapping(
        {
            "table": sub.table,
            "consumer": sub.consumer,
            "created": f"{sub.created_at:%Y-%m-%d %H:%M:%S}",
            "advanced": f"{sub.advanced_at:%Y-%m-%d %H:%M:%S} ({_ago(sub.idle_for())} ago, "
            f"{sub.record.advances} advances)",
        }
    )
    out = new_table("bucket", "position", "records behind", "seconds behind", "log kept from")
    for b, lg in lag.items():
        seconds = "?" if lg.seconds is None else f"{lg.seconds:.1f}"
        out.add_row(*_cells(b, sub.position[b], lg.records, seconds, kept.get(b, "-")))
    console.print(out)
    console.print(f"{'pins snapshots':14} {', '.join(map(str, snapshots)) or '- (none: its state is the log alone)'}")


@subscription_app.command("drop")
def subscription_drop(
    table: Annotated[str, typer.Argument(help="namespace.table")],
    consumer: Annotated[str, typer.Argument(help="the consumer's name")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    warehouse: WarehouseOpt = None,
    config: ConfigOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Drop a subscription: maintenance may then delete the log and snapshots its position needed."""
    try:
        lh = open_lakehouse(warehouse, config)
        if not yes:
            typer.confirm(
                f"drop subscription {consumer} of {table} in {lh.url}? Its position is lost, and maintenance may "
                "delete what it needed",
                abort=True,
                err=json_output,  # stdout holds only JSON
            )
        lh.drop_subscription(table, consumer)
    except LakestreamError as exc:
        fail(exc)
    if json_output:
        json_line({"table": table, "consumer": consumer, "dropped": True})
        return
    console.print(f"[green]dropped[/] subscription {escape(consumer)} of {escape(table)}")


def _offsets(position: dict[int, int]) -> str:
    return ",".join(f"{b}:{o}" for b, o in sorted(position.items()))


def _ago(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    days, rest = divmod(seconds, 86400)
    if days:
        return f"{days}d {rest // 3600}h"
    return f"{rest // 3600}h {rest % 3600 // 60}m" if rest >= 3600 else f"{rest // 60}m {rest % 60}s"


@app.command()
def demo(
    warehouse: Annotated[
        str | None, typer.Option("--warehouse", "-w", help="default: ./lakestream-demo (a file:// warehouse)")
    ] = None,
    changes: Annotated[
        int, typer.Option(min=100, help="order changes to produce (half before, half after round 1)")
    ] = 4_000_000,
    spark_master: Annotated[str, typer.Option(help="Spark master for tiering")] = "local[2]",
    local: Annotated[bool, typer.Option("--local", help="tier on the local executor instead of Spark")] = False,
    big_mib: Annotated[int, typer.Option(min=1, help="size of the multipart write")] = 16,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="machine output: one JSON object per step as it passes, then one for the run"),
    ] = False,
) -> None:
    """Run the demo on embedded defaults; exits non-zero if any of its checks fails."""
    from lakestream.demo import Step, run_demo

    def step_json(step: Step) -> None:
        json_line({"step": step.name, "result": step.result, "seconds": round(step.seconds, 3)})

    try:
        settings = load_settings(None, warehouse=warehouse or str(Path("lakestream-demo").resolve()))
        store = _open_store(settings, create=True)
        done = run_demo(
            store,
            OutputConsole(quiet=True) if json_output else console,
            big_mib=big_mib,
            changes=changes,
            spark_master=None if local else spark_master,
            on_step=step_json if json_output else None,
        )
    except LakestreamError as exc:
        fail(exc)
    if json_output:
        json_line(
            {
                "ok": True,
                "warehouse": store.url,
                "namespace": done.namespace,
                "seconds": round(done.seconds, 3),
                "log_end": done.log_end,
                "lake_offsets": done.lake_offsets,
                "metadata_location": done.metadata_location,
            }
        )


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover
    app()
