"""A project's models under physical table names (blue/green rebuilds, `layers.bluegreen`).

A model's *logical* name (``dwd.m``, its file's name) is what readers use; the *physical* table that serves it
may be another (``dwd__g2.m``, a green generation): `lakehouse.table.aliases` maps one to the other. `physical_project`
gives the project with every model renamed to its physical table and every reference to a model in its SQL
rewritten to match, so a `layers.runner.Runner` on it reads, writes and keeps its bookkeeping (round records,
subscriptions, producer ids) by physical table: a green model's rounds are separate from its live version's. The
SQL text (``Model.sql``, whose digest rounds and the deployment record keep) stays the logical one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from lakehouse.table.aliases import Aliases, read_aliases

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse
    from layers.project import Project
    from layers.rounds import RoundRecord

__all__ = ["generation_of", "green_name", "live_mapping", "logical_inputs", "physical_project"]

_GENERATION = re.compile(r"__g(\d+)$")


def green_name(logical: str, generation: int) -> str:
    """The physical table of ``logical`` in green generation ``generation``: ``<ns>__g<N>.<table>``."""
    namespace, table = logical.split(".")
    return f"{namespace}__g{generation}.{table}"


def generation_of(physical: str) -> int:
    """The green generation of a physical table name (0: the logical name itself)."""
    found = _GENERATION.search(physical.split(".")[0])
    return int(found.group(1)) if found else 0


def live_mapping(lh: Lakehouse, project: Project, *, cached: bool = False) -> dict[str, str]:
    """Each model's physical table as the aliases say now (itself without an alias); ``cached``: as ``lh`` read
    them at most ``alias_cache_seconds`` ago (a runner's passes), else read now."""
    aliases = lh.aliases.aliases() if cached else read_aliases(lh.store)
    return {name: aliases.physical(name) for name in project.models}


def _rename(query: exp.Query, mapping: Mapping[str, str]) -> exp.Query:
    out = query.copy()
    for table in out.find_all(exp.Table):
        full = f"{table.db}.{table.name}".lower()
        if table.db and full in mapping:
            namespace, name = mapping[full].split(".")
            table.set("db", exp.to_identifier(namespace))
            table.set("this", exp.to_identifier(name))
    return out


def physical_project(project: Project, mapping: Mapping[str, str]) -> Project:
    """``project`` with each model named by its physical table (``mapping``: logical -> physical, models only;
    a model not in it keeps its name) and every reference to it in the models' SQL renamed. The project itself
    when nothing is renamed."""
    names = {m: mapping.get(m, m) for m in project.models}
    if all(k == v for k, v in names.items()):
        return project
    models = {}
    for name in project.order:
        model = project.models[name]
        models[names[name]] = replace(
            model,
            name=names[name],
            inputs=tuple(sorted(names.get(t, t) for t in model.inputs)),
            query=_rename(model.query, names),
            qualified=_rename(model.qualified, names),
        )
    return replace(project, models=models, order=tuple(names[n] for n in project.order))


def logical_inputs(aliases: Aliases, record: RoundRecord) -> RoundRecord:
    """``record`` with its inputs named as readers name them: an input that is the physical table a logical
    name aliases to (a model of a green set, after its cutover) renamed to that name. Quality checks and the
    publication look rounds up by physical table and compare their inputs with tables named logically."""
    logical = {physical: name for name, physical in aliases.current.items()}
    if not any(n in logical for n in record.end):
        return record

    def named(positions: Mapping[str, Any]) -> dict[str, Any]:
        return {logical.get(n, n): v for n, v in positions.items()}

    return replace(
        record,
        start=None if record.start is None else named(record.start),
        end=named(record.end),
        input_uuids=named(record.input_uuids),
    )
