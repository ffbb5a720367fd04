"""A warehouse-layers project: a folder of sources and models (the format is documented in docs/guides/layers.md).

::

    PROJECT/
      sources.yml                       the ODS tables producers feed: columns, primary key, buckets, partitions
      models/<namespace>.<table>.sql    one model each: a header of ``--`` YAML lines, then one Spark SQL SELECT

`load_project` reads and checks all of it before anything is written anywhere: names, declarations, the SQL
(parsed with sqlglot), each model's inputs (the tables its SQL reads, CTEs excluded), unknown tables, cycles,
output columns and keys. Tables are matched by name as Spark SQL matches them, without regard to case.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import yaml
from sqlglot import exp

from lakehouse.errors import InvalidTableName, SchemaError
from lakehouse.table.definition import TableDefinition, TableName, parse_schema
from layers.errors import DependencyCycleError, ModelKeyError, ModelSqlError, ProjectFormatError, UnknownTableError
from layers.sql import (
    OutputColumn,
    check_output_names,
    distinct_as_group,
    output_columns,
    parse_query,
    qualify_query,
    table_references,
    written_name,
)

__all__ = ["DEFAULT_BUCKETS", "MODEL_SETTINGS", "SOURCE_SETTINGS", "Model", "Project", "Source", "load_project"]

SOURCES_FILE = "sources.yml"
MODELS_DIR = "models"
#: Buckets of a table that does not say (the same as ``lakestream table create``).
DEFAULT_BUCKETS = 4
#: A source's merge engine settings (`lakehouse.merge`): how producers' rows of a key combine.
ENGINE_SETTINGS = ("merge_engine", "version_column", "aggregates")
SOURCE_SETTINGS = ("columns", "primary_key", "bucket_key", "buckets", "partition_by", "description", *ENGINE_SETTINGS)
MODEL_SETTINGS = ("primary_key", "bucket_key", "buckets", "partition_by", "description")


@dataclass(frozen=True)
class Source:
    """An ODS table fed by producers: its full definition (schema, keys, buckets, partitions)."""

    name: str
    definition: TableDefinition
    path: str
    description: str = ""

    @property
    def schema(self) -> pa.Schema:
        return self.definition.schema

    @property
    def primary_key(self) -> tuple[str, ...]:
        return self.definition.primary_key


@dataclass(frozen=True)
class Model:
    """A table computed by one Spark SQL SELECT over other tables of the project."""

    name: str
    path: str
    sql: str
    primary_key: tuple[str, ...]
    buckets: int
    bucket_key: str
    partition_by: tuple[str, ...]
    #: The tables the SQL reads, canonical names, sorted (a table read twice is listed once).
    inputs: tuple[str, ...]
    columns: tuple[OutputColumn, ...]
    #: The query as parsed (input references canonical) and qualified against the inputs' schemas.
    query: exp.Query = field(repr=False, compare=False)
    qualified: exp.Query = field(repr=False, compare=False)
    description: str = ""

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def schema(self) -> pa.Schema | None:
        """The output schema, if every column's type could be inferred (else None: Spark's at deploy)."""
        if any(c.type is None for c in self.columns):
            return None
        return pa.schema([pa.field(c.name, c.type, nullable=c.name not in self.primary_key) for c in self.columns])

    @property
    def untyped_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.type is None)


@dataclass(frozen=True)
class Project:
    path: Path
    sources: Mapping[str, Source]
    models: Mapping[str, Model]
    #: Model names in dependency order: every model after the models it reads (ties by name).
    order: tuple[str, ...]

    @property
    def tables(self) -> tuple[str, ...]:
        """Every table of the project: the sources as declared, then the models in dependency order."""
        return (*self.sources, *self.order)

    def levels(self) -> list[list[str]]:
        """The models in rounds: each level reads only sources and models of earlier levels."""
        depth: dict[str, int] = {}
        for name in self.order:
            depth[name] = 1 + max((depth.get(i, -1) for i in self.models[name].inputs), default=-1)
        levels: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for name in self.order:
            levels[depth[name]].append(name)
        return levels

    def schema_of(self, name: str) -> pa.Schema | None:
        if name in self.sources:
            return self.sources[name].schema
        return self.models[name].schema

    def primary_key_of(self, name: str) -> tuple[str, ...]:
        return self.sources[name].primary_key if name in self.sources else self.models[name].primary_key

    def readers_of(self, name: str) -> list[str]:
        """The models that read ``name``, in dependency order."""
        return [m for m in self.order if name in self.models[m].inputs]


def load_project(path: str | Path) -> Project:
    """Read and check the project in folder ``path``.

    Raises:
        ProjectFormatError, ModelSqlError, UnknownTableError, DependencyCycleError, ModelKeyError (all
        `ProjectError`): the first problem found, naming the file and the model and saying what to do.
    """
    root = Path(path)
    if not root.is_dir():
        raise ProjectFormatError(f"project folder {root} does not exist or is not a folder", path=str(root))
    sources = _load_sources(root)
    parsed = _parse_models(root, sources)
    order = _dependency_order(parsed)
    schemas: dict[str, pa.Schema] = {name: s.schema for name, s in sources.items()}
    models: dict[str, Model] = {}
    for name in order:
        model = _analyse_model(parsed[name], schemas)
        models[name] = model
        schemas[name] = _known_schema(model)
    return Project(path=root, sources=sources, models=models, order=tuple(order))


# -- sources -------------------------------------------------------------------------------------------------


def _load_sources(root: Path) -> dict[str, Source]:
    file = root / SOURCES_FILE
    where = str(file)
    if not file.is_file():
        raise ProjectFormatError(
            f"{where} is missing: a project declares its sources (the ODS tables producers feed) there, with "
            "their columns and keys (see docs/guides/layers.md)",
            path=where,
        )
    doc = _yaml(file.read_text(), where)
    if doc is None:
        doc = {"sources": {}}
    if not isinstance(doc, dict) or set(doc) != {"sources"} or not isinstance(doc["sources"], dict | None):
        raise ProjectFormatError(
            f"{where}: expected one mapping 'sources:' of table names (namespace.table) to their declarations",
            path=where,
        )
    sources: dict[str, Source] = {}
    seen: dict[str, str] = {}
    for name, decl in (doc["sources"] or {}).items():
        at = f"{where}: source {name}"
        table = _table_name(name, at, where)
        if table.lower() in seen:
            raise ProjectFormatError(
                f"{at}: declared twice (as {seen[table.lower()]} too; Spark SQL does not tell names apart by case)",
                path=where,
                model=table,
            )
        seen[table.lower()] = table
        if not isinstance(decl, dict):
            raise ProjectFormatError(f"{at}: expected a mapping with columns, primary_key, buckets", path=where)
        _check_settings(decl, SOURCE_SETTINGS, at, where, table)
        columns = decl.get("columns")
        if not isinstance(columns, dict) or not columns:
            raise ProjectFormatError(
                f"{at}: 'columns' must map each column name to its type, e.g. 'o_orderkey: int64' (types as "
                "'lakestream table create --schema' takes them)",
                path=where,
                model=table,
            )
        odd = [c for c in columns if not isinstance(c, str) or any(ch in c for ch in ",:")]
        if odd:
            raise ProjectFormatError(f"{at}: column names {odd} must be text without ',' or ':'", path=where)
        try:
            spec = ", ".join(f"{column}:{kind}" for column, kind in columns.items())
            schema = parse_schema(spec)
        except SchemaError as exc:
            raise ProjectFormatError(f"{at}: {exc}", path=where, model=table) from None
        definition = _definition(table, schema, decl, at, where)
        sources[table] = Source(table, definition, where, str(decl.get("description") or ""))
    return sources


# -- models: files, headers, SQL, inputs ---------------------------------------------------------------------


@dataclass
class _Parsed:
    name: str
    path: str
    sql: str
    header: dict
    query: exp.Query
    inputs: tuple[str, ...]


def _parse_models(root: Path, sources: Mapping[str, Source]) -> dict[str, _Parsed]:
    folder = root / MODELS_DIR
    if not folder.is_dir():
        raise ProjectFormatError(
            f"{folder} is missing: a project keeps its models there, one file <namespace>.<table>.sql each "
            "(an empty folder is a project of sources only)",
            path=str(folder),
        )
    hidden = lambda p: any(part.startswith(".") for part in p.relative_to(folder).parts)  # noqa: E731
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not hidden(p))
    parsed: dict[str, _Parsed] = {}
    by_lower = {name.lower(): (name, source.path) for name, source in sources.items()}
    for file in files:
        where = str(file)
        if file.suffix != ".sql":
            raise ProjectFormatError(
                f"{where}: not a model file; models are <namespace>.<table>.sql (move other files out of "
                f"{MODELS_DIR}/)",
                path=where,
            )
        name = _table_name(file.name[: -len(".sql")], f"{where}: the file name", where)
        if name.lower() in by_lower:
            other, other_path = by_lower[name.lower()]
            kind = "a source" if other in sources else "a model"
            raise ProjectFormatError(
                f"{where}: model {name} is declared twice: {other} is {kind} in {other_path} too (Spark SQL does "
                "not tell names apart by case); rename or remove one",
                path=where,
                model=name,
            )
        by_lower[name.lower()] = (name, where)
        parsed[name] = _parse_model_file(file, name)
    known = {n.lower(): n for n in (*sources, *parsed)}
    for model in parsed.values():
        model.inputs = _resolve_inputs(model, known, sources)
    return parsed


def _parse_model_file(file: Path, name: str) -> _Parsed:
    where = f"{file} (model {name})"
    text = file.read_text()
    header_lines, sql_lines, in_header, skipped = [], [], True, 0
    for line in text.splitlines():
        stripped = line.strip()
        if in_header and stripped.startswith("--"):
            content = stripped[2:]
            header_lines.append(content[1:] if content.startswith(" ") else content)
            skipped += 1
            continue
        if in_header and not stripped and not header_lines:
            skipped += 1
            continue  # blank lines before the header
        in_header = False
        sql_lines.append(line)
    header = _yaml("\n".join(_quoted_description(line) for line in header_lines), where) if header_lines else None
    if not isinstance(header, dict):
        raise ProjectFormatError(
            f"{where}: the file must start with a header of '--' lines in YAML, at least '-- primary_key: [col]' "
            "(see docs/guides/layers.md)",
            path=str(file),
            model=name,
        )
    _check_settings(header, MODEL_SETTINGS, where, str(file), name)
    sql = "\n".join(sql_lines).strip()
    if not sql:
        raise ModelSqlError(f"{where}: no SQL after the header; write the model's SELECT", path=str(file), model=name)
    # parsed with the header's lines blank, so that sqlglot's line numbers are the file's
    query = parse_query("\n" * skipped + "\n".join(sql_lines), where=where, model=name, path=str(file))
    check_output_names(query, where=where, model=name, path=str(file))
    return _Parsed(name=name, path=str(file), sql=sql, header=header, query=query, inputs=())


def _resolve_inputs(model: _Parsed, known: Mapping[str, str], sources: Mapping[str, Source]) -> tuple[str, ...]:
    """Point every table reference of the query at its canonical name; the set of them."""
    where = f"{model.path} (model {model.name})"
    inputs = set()
    for ref in table_references(model.query):
        written = written_name(ref)
        canonical = known.get(written.lower()) if ref.db and not ref.catalog else None
        if canonical is None:
            hint = (
                "name tables as namespace.table"
                if not ref.db or ref.catalog
                else f"declare it in {SOURCES_FILE} (a source) or add models/{written}.sql (a model)"
            )
            raise UnknownTableError(
                f"{where}: table {written} is neither a source nor a model of this project; {hint} (known: "
                f"{', '.join(sorted(known.values())) or 'none'})",
                path=model.path,
                model=model.name,
            )
        namespace, table = canonical.split(".")
        ref.set("db", exp.to_identifier(namespace, quoted=True))
        ref.set("this", exp.to_identifier(table, quoted=True))
        ref.set("catalog", None)
        inputs.add(canonical)
    return tuple(sorted(inputs))


def _dependency_order(parsed: Mapping[str, _Parsed]) -> list[str]:
    """Kahn's algorithm, ties by name; a cycle is named and raised."""
    waiting = {name: {i for i in p.inputs if i in parsed} for name, p in parsed.items()}
    readers: dict[str, list[str]] = {name: [] for name in parsed}
    for name, deps in waiting.items():
        for dep in deps:
            readers[dep].append(name)
    ready = [name for name, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    order = []
    while ready:
        name = heapq.heappop(ready)
        order.append(name)
        for reader in readers[name]:
            waiting[reader].discard(name)
            if not waiting[reader]:
                heapq.heappush(ready, reader)
    if len(order) < len(parsed):
        cycle = _find_cycle({n: sorted(d) for n, d in waiting.items() if d})
        first = parsed[cycle[0]]
        files = ", ".join(parsed[n].path for n in cycle[:-1])
        raise DependencyCycleError(
            f"{first.path} (model {first.name}): models read each other in a cycle: {' -> '.join(cycle)} ({files}); "
            "a model may read only sources and models that do not read it back: break the cycle",
            cycle=cycle,
            path=first.path,
        )
    return order


def _find_cycle(edges: Mapping[str, list[str]]) -> list[str]:
    """A cycle among ``edges`` (every node here has an edge to another node here), the first node repeated."""
    start = min(edges)
    path, seen = [start], {start: 0}
    while True:
        nxt = edges[path[-1]][0]
        if nxt in seen:
            cycle = path[seen[nxt] :]
            turn = cycle.index(min(cycle))  # start at its smallest name: the same cycle, the same message
            cycle = cycle[turn:] + cycle[:turn]
            return [*cycle, cycle[0]]
        seen[nxt] = len(path)
        path.append(nxt)


# -- models: output columns, keys ----------------------------------------------------------------------------


def _analyse_model(parsed: _Parsed, schemas: Mapping[str, pa.Schema]) -> Model:
    where = f"{parsed.path} (model {parsed.name})"
    inputs = {name: schemas[name] for name in parsed.inputs}
    qualified = qualify_query(parsed.query, inputs, where=where, model=parsed.name, path=parsed.path)
    qualified = distinct_as_group(qualified)  # SELECT DISTINCT: a GROUP BY of its columns, kept incrementally
    columns = output_columns(qualified, inputs)
    names = [c.name for c in columns]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ModelSqlError(
            f"{where}: output column names {twice} appear more than once; give each output column its own name with AS",
            path=parsed.path,
            model=parsed.name,
        )
    header = parsed.header
    primary_key = _string_list(header.get("primary_key"), "primary_key", where, parsed.path, parsed.name)
    if not primary_key:
        raise ProjectFormatError(
            f"{where}: the header needs '-- primary_key: [column, ...]': every model's table has a primary key "
            "(the key its changes are keyed by)",
            path=parsed.path,
            model=parsed.name,
        )
    missing = [c for c in primary_key if c not in names]
    if missing:
        raise ModelKeyError(
            f"{where}: primary-key column(s) {missing} are not in the SELECT's output {names}; select them (or "
            "change primary_key)",
            path=parsed.path,
            model=parsed.name,
        )
    _check_group_key(qualified, primary_key, where, parsed)
    definition = _definition(parsed.name, _validation_schema(columns, header), header, where, parsed.path)
    assert definition.bucket_key is not None  # a table with a primary key has a bucket key
    return Model(
        name=parsed.name,
        path=parsed.path,
        sql=parsed.sql,
        primary_key=definition.primary_key,
        buckets=definition.buckets,
        bucket_key=definition.bucket_key,
        partition_by=definition.partition_by,
        inputs=parsed.inputs,
        columns=tuple(columns),
        description=str(header.get("description") or ""),
        query=parsed.query,
        qualified=qualified,
    )


def _check_group_key(qualified: exp.Query, primary_key: Sequence[str], where: str, parsed: _Parsed) -> None:
    """A GROUP BY model's key columns must be GROUP BY expressions (else two groups can share a key)."""
    group = qualified.args.get("group") if isinstance(qualified, exp.Select) else None
    if not group or group.find(exp.Rollup, exp.Cube, exp.GroupingSets):
        return  # no GROUP BY, or groups of several levels (recomputed in full)
    groups = {g.sql() for g in qualified.args["group"].expressions}
    for projection in qualified.expressions:
        if projection.alias_or_name in primary_key and projection.unalias().sql() not in groups:
            raise ModelKeyError(
                f"{where}: primary-key column {projection.alias_or_name!r} is not a GROUP BY expression, so two "
                "groups could share a key; key a GROUP BY model by (some of) its GROUP BY expressions",
                path=parsed.path,
                model=parsed.name,
            )


def _known_schema(model: Model) -> pa.Schema:
    """The model's output as its readers are checked against: unknown types as nulls (names still count)."""
    return pa.schema([pa.field(c.name, c.type if c.type is not None else pa.null()) for c in model.columns])


def _validation_schema(columns: Sequence[OutputColumn], header: Mapping) -> pa.Schema:
    """The output schema with a stand-in where a type is unknown, chosen so the key, bucket-key and partition
    checks judge the declaration (names, counts, transforms) and not the stand-in; types are checked at deploy."""
    bucket_key = header.get("bucket_key")
    partitions = [str(p) for p in (header.get("partition_by") or [])] if isinstance(header, dict) else []
    fields = []
    for c in columns:
        t = c.type
        if t is None:
            t = pa.string()
            if c.name == bucket_key or (bucket_key is None and header.get("primary_key") in ([c.name], c.name)):
                t = pa.int64()
            for p in partitions:
                if p.replace(" ", "") == f"hour({c.name})":
                    t = pa.timestamp("us")
                elif p.replace(" ", "") in (f"{f}({c.name})" for f in ("year", "month", "day")):
                    t = pa.date32()
        fields.append(pa.field(c.name, t))
    return pa.schema(fields)


# -- shared ---------------------------------------------------------------------------------------------------


def _definition(name: str, schema: pa.Schema, decl: Mapping, at: str, path: str) -> TableDefinition:
    """The table definition the declaration makes (checked as `Lakehouse.create_table` checks it)."""
    from lakehouse.iceberg.layout import check_lake_types, parse_partition_by

    primary_key = _string_list(decl.get("primary_key"), "primary_key", at, path, name)
    partition_by = _string_list(decl.get("partition_by"), "partition_by", at, path, name)
    buckets = decl.get("buckets", DEFAULT_BUCKETS)
    bucket_key = decl.get("bucket_key")
    if bucket_key is not None and not isinstance(bucket_key, str):
        raise ProjectFormatError(f"{at}: bucket_key must be one column name", path=path, model=name)
    try:
        definition = TableDefinition.build(
            name,
            schema,
            buckets=buckets,
            primary_key=primary_key,
            bucket_key=bucket_key,
            partition_by=partition_by,
            **{k: decl[k] for k in ENGINE_SETTINGS if k in decl},  # sources only (models refuse the settings)
        )
        parse_partition_by(definition, definition.schema)
        check_lake_types(definition)
    except (SchemaError, InvalidTableName) as exc:
        raise ProjectFormatError(f"{at}: {exc}", path=path, model=name) from None
    return definition


def _string_list(value: object, setting: str, at: str, path: str, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProjectFormatError(f"{at}: {setting} must be a column name or a list of them", path=path, model=name)
    return list(value)


def _check_settings(decl: Mapping, allowed: Sequence[str], at: str, path: str, name: str) -> None:
    unknown = sorted(str(k) for k in decl if k not in allowed)
    if unknown:
        raise ProjectFormatError(
            f"{at}: unknown setting(s) {unknown}; the settings are {list(allowed)}", path=path, model=name
        )


def _table_name(name: object, at: str, path: str) -> str:
    try:
        return str(TableName.parse(str(name)))
    except InvalidTableName as exc:
        raise ProjectFormatError(f"{at}: {exc}", path=path) from None


def _quoted_description(line: str) -> str:
    """A header's ``description: free text`` line with its text quoted when it holds a colon.

    A description is prose, and prose has colons ("revenue: per nation"); YAML reads an unquoted ``a: b: c`` as
    a mapping inside a value and refuses it. Quoting it here keeps the header the one-line note users write. A
    value already quoted or a block scalar (``|``, ``>``) is left to YAML, and so is a trailing ``# comment``.
    """
    key, sep, rest = line.partition(":")
    if key != "description" or not sep:
        return line
    text = rest.partition(" #")[0].strip()
    if not text or text[0] in "\"'|>" or not (": " in text or text.endswith(":")):
        return line
    return f"description: {json.dumps(text)}"  # a JSON string is a YAML double-quoted scalar


def _yaml(text: str, where: str) -> object:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        hint = ""
        if "mapping values are not allowed here" in detail:
            hint = (
                "; a value holding ': ' (a colon and a space) must be quoted: quote the value, "
                'as in description: "revenue: per nation"'
            )
        raise ProjectFormatError(f"{where}: the YAML does not parse: {detail}{hint}", path=where) from None
