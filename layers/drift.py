"""How a table in the warehouse differs from what a project declares for it, in words a user can act on.

`lakestream layers deploy` and every round compare each table with its declaration (a source in sources.yml, a
model's SQL and header): a model's table that no longer matches its SQL must not be written by it (its rows
would be cut to the old columns), and a source declared otherwise than its table is a project out of date.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

__all__ = ["table_differences"]


def _columns(names: Sequence[str], schema: pa.Schema) -> str:
    return ", ".join(n if pa.types.is_null(schema.field(n).type) else f"{n} ({schema.field(n).type})" for n in names)


def table_differences(existing: Any, schema: pa.Schema, settings: Mapping[str, Any]) -> list[str]:
    """What differs between ``existing`` (a `TableDefinition`) and the declared ``schema`` and ``settings``
    (``primary_key``, ``buckets``, ``bucket_key``); empty when they agree. A declared column of type ``null``
    has a type only Spark knows: its type is not compared (the round's rows are cast to the table's)."""
    have, want = existing.schema, schema
    out: list[str] = []
    added = [n for n in want.names if n not in have.names]
    removed = [n for n in have.names if n not in want.names]
    if added:
        out.append(f"added column{'s' if len(added) > 1 else ''} {_columns(added, want)}")
    if removed:
        out.append(f"removed column{'s' if len(removed) > 1 else ''} {_columns(removed, have)}")
    common = [n for n in want.names if n in have.names]
    for n in common:
        declared = want.field(n).type
        if not pa.types.is_null(declared) and str(have.field(n).type) != str(declared):
            out.append(f"column {n} is {have.field(n).type} in the table, {declared} declared")
    if not added and not removed and list(have.names) != list(want.names):
        out.append(f"columns in another order: the table has {', '.join(have.names)}")
    key = list(settings.get("primary_key") or ())
    if list(existing.primary_key) != key:
        out.append(f"primary key {list(existing.primary_key)} in the table, {key} declared")
    buckets = settings.get("buckets")
    if buckets is not None and existing.buckets != buckets:
        out.append(f"{existing.buckets} buckets in the table, {buckets} declared")
    bucket_key = settings.get("bucket_key") or (key[0] if len(key) == 1 else None)
    if bucket_key is not None and existing.bucket_key != bucket_key:
        out.append(f"bucket key {existing.bucket_key} in the table, {bucket_key} declared")
    if "merge_engine" in settings:
        have_engine = (existing.merge_engine, existing.version_column, dict(existing.aggregates))
        want_engine = (settings["merge_engine"], settings.get("version_column"), dict(settings.get("aggregates") or {}))
        if have_engine != want_engine:
            out.append(f"merge engine {_engine(*have_engine)} in the table, {_engine(*want_engine)} declared")
    return out


def _engine(name: str, version_column: str | None, aggregates: dict) -> str:
    options = [f"version_column {version_column}"] if version_column else []
    options += [f"{c} {f}" for c, f in aggregates.items()]
    return f"{name} ({', '.join(options)})" if options else name
