"""Blue/green rebuilds: a changed model and every model downstream of it built beside the live tables, then
switched to in one step.

``build_green`` takes the models ``lakestream layers plan`` says must change (``rebuild`` or ``carry on``) and
every model reading them, directly or through others (the *green set*), and builds them as new physical tables
``<ns>__g<N>.<table>`` (`layers.physical`; ``N`` a generation one above any in use), with the new SQL's schema.
Their rounds run with the project under physical names: they read the live tables of the models outside the set
(and the sources) and the green tables of the models inside it, and keep their own round records and
subscriptions (consumer ``layers.<physical table>``), so the live rounds and readers are untouched. The build is
recorded first (``_lakestream/layers/green.json``: generation, tables, the SQL digests it builds): a build
stopped at any point (kill -9 included) leaves the live version serving, and ``build_green`` again resumes it
(the same tables; an unfinished round is resumed exactly once, `layers.runner`).

``cutover`` checks the green set has caught up (every green model's last round finished; in every input outside
the set at or past the live model's position; every green input read to its end), tiers the green tables (so the
lake of each holds its log: readers of the lake see a complete table from the switch on) and then switches the
aliases (`lakehouse.table.aliases`) of all its models in ONE compare-and-swap: readers by name see the old set or the
new one.
Then the deployment record (`layers.deploy_record`) is written for the new project (the one it replaced kept for
rollback) and the build record removed; a cutover stopped after the switch is finished by running it again.
``rollback`` switches the aliases back to the previous tables (one compare-and-swap), ``cleanup`` drops the
physical tables of the project's models that neither the aliases, their previous mapping (the rollback target)
nor a build in progress name, with their round records and subscriptions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakehouse.errors import SubscriptionNotFound, TableNotFound, TieringConflict
from lakehouse.table.aliases import read_aliases, write_aliases
from lakehouse.table.definition import TableName
from layers.deploy_plan import CARRY_ON, REBUILD, SOURCE_CHANGED, plan_deploy
from layers.deploy_record import Deployment, deployment_of, read_deployment, write_deployment
from layers.errors import GreenBehind, GreenBuildError
from layers.physical import generation_of, green_name, live_mapping
from layers.rounds import LAYERS_PREFIX, RoundReport, consumer_of, latest_round, report_exists, sql_digest
from object_store import NotFound, ObjectStore, PreconditionFailed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.lakehouse import Lakehouse
    from layers.project import Project

__all__ = ["GREEN_KEY", "GreenBuild", "GreenResult", "build_green", "cleanup", "cutover", "green_lag", "rollback"]

GREEN_KEY = f"{LAYERS_PREFIX}green.json"
#: The deployment record a cutover replaced (what `rollback` restores).
PREVIOUS_DEPLOYED_KEY = f"{LAYERS_PREFIX}deployed.previous.json"
#: Round passes of the green set per `build_green` while the live inputs keep moving ahead of it.
BUILD_PASSES = 3


@dataclass(frozen=True)
class GreenBuild:
    """A green build in progress: its generation, each model's green table (logical -> physical) and the SQL
    digests it builds."""

    generation: int
    tables: Mapping[str, str]
    digests: Mapping[str, str]

    def to_json(self) -> bytes:
        doc = {"generation": self.generation, "tables": dict(self.tables), "digests": dict(self.digests)}
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> GreenBuild:
        doc = json.loads(data)
        return cls(int(doc["generation"]), dict(doc["tables"]), dict(doc["digests"]))


@dataclass(frozen=True)
class GreenResult:
    """What a blue/green step did: the generation, the tables (logical -> physical) it built or switched to,
    the rounds it ran, and where the green set is still behind (empty: caught up)."""

    generation: int
    tables: Mapping[str, str]
    reports: list[RoundReport] = field(default_factory=list)
    behind: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "tables": dict(self.tables),
            "rounds": len(self.reports),
            "behind": list(self.behind),
        }


def read_green(store: ObjectStore) -> tuple[GreenBuild, str] | None:
    """The green build in progress and its record's ETag, or None."""
    try:
        obj = store.get(GREEN_KEY)
    except NotFound:
        return None
    return GreenBuild.from_json(obj.data), obj.etag


def green_models(lh: Lakehouse, project: Project) -> list[str]:
    """The green set (see the module), in dependency order.

    Raises:
        GreenBuildError: a source's declaration differs from its table (alter it first).
    """
    plan = plan_deploy(lh, project)
    altered = [t.table for t in plan.tables if t.action == SOURCE_CHANGED]
    if altered:
        raise GreenBuildError(
            f"source(s) {', '.join(altered)} are declared otherwise than their tables: a blue/green build rebuilds "
            "models, not sources. Make sources.yml match (or lakestream table alter) first; nothing was built"
        )
    changed = {t.table for t in plan.tables if t.kind == "model" and t.action in (REBUILD, CARRY_ON)}
    chosen: set[str] = set()
    for name in project.order:
        if name in changed or any(i in chosen for i in project.models[name].inputs):
            chosen.add(name)
    return [m for m in project.order if m in chosen]


def _digests(project: Project, models: list[str] | Mapping[str, str]) -> dict[str, str]:
    return {m: sql_digest(project.models[m].sql) for m in models if m in project.models}


def _start(lh: Lakehouse, project: Project) -> GreenBuild:
    """The build to run: the one recorded if it builds this project's SQL, else a new one (recorded first)."""
    store = lh.store
    found = read_green(store)
    aliases = read_aliases(store)
    if found is not None:
        build = found[0]
        if all(aliases.current.get(m) == t for m, t in build.tables.items()):
            _finish_cutover(lh, project, build)  # switched already: a cutover stopped before its last steps
            found = read_green(store)
    models = green_models(lh, project)
    if found is not None:
        build = found[0]
        if set(models) == set(build.tables) and _digests(project, build.tables) == dict(build.digests):
            return build  # resumed: the same tables, rounds resumed where they stopped
    if not models:
        raise GreenBuildError(
            "nothing to build: no model differs from the deployed version (lakestream layers plan shows the same); "
            "change a model's SQL first"
        )
    used = [*aliases.current.values(), *aliases.previous.values()]
    used += [str(t) for t in lh.list_tables()]
    generation = 1 + max([generation_of(t) for t in used] + [found[0].generation if found else 0])
    build = GreenBuild(generation, {m: green_name(m, generation) for m in models}, _digests(project, models))
    try:
        if found is None:
            store.put(GREEN_KEY, build.to_json(), if_none_match=True)
        else:  # a build of another version of the project: replaced (its tables go at the next cleanup)
            store.put(GREEN_KEY, build.to_json(), if_match=found[1])
    except PreconditionFailed:
        raise GreenBuildError(
            "another green build started at the same time; only one may run. Nothing was built by this one"
        ) from None
    return build


def build_green(lh: Lakehouse, project: Project, spark: SparkSession | None = None) -> GreenResult:
    """Build (or resume) the green set beside the live tables until it has caught up (see the module); the
    live tables keep serving. Rounds run up to `BUILD_PASSES` times while the live inputs move ahead.

    Raises:
        GreenBuildError: nothing differs from the deployed version; a source declared otherwise than its table;
            another build started at the same time.
    """
    from layers.runner import Runner

    build = _start(lh, project)
    mapping = {**live_mapping(lh, project), **build.tables}
    reports: list[RoundReport] = []
    with Runner(lh, project, spark, physical=mapping, record_deploy=False) as runner:
        runner.deploy()  # the green tables, with the new SQL's schema
        for _ in range(BUILD_PASSES):
            reports += runner.run_once(list(build.tables))
            behind = green_lag(lh, project, build)
            if not behind:
                break
    _tier_green(lh, build, spark)
    return GreenResult(build.generation, build.tables, reports, behind)


def _tier_green(lh: Lakehouse, build: GreenBuild, spark: SparkSession | None) -> None:
    """Tier the green tables' logs into their lake tables, on Spark's executors when a session is given: their
    first tiering holds all their rows, work that follows the data (the cutover then tiers only what came since).
    A tiering run elsewhere that committed first has tiered them as well."""
    for physical in build.tables.values():
        try:
            lh.tier(TableName.parse(physical), spark=spark)
        except TieringConflict:
            continue


def _position(lh: Lakehouse, table: str, consumer: str) -> dict[int, int] | None:
    try:
        return dict(lh.subscription(table, consumer, create=False).position)
    except (SubscriptionNotFound, TableNotFound):
        return None


def green_lag(lh: Lakehouse, project: Project, build: GreenBuild) -> list[str]:
    """Where the green set is behind the live one (empty: caught up): a green model without a finished round,
    an input outside the set where its position is behind the live model's, a green input not read to its end."""
    physical = lh.without_aliases()
    live = live_mapping(lh, project)
    behind = []
    for name, green in build.tables.items():
        latest = latest_round(lh.store, green)
        if latest is None or not report_exists(lh.store, green, latest.number):
            behind.append(f"{name}: its green table {green} has no finished round yet")
            continue
        for table in project.models[name].inputs:
            position = _position(physical, build.tables.get(table, live.get(table, table)), consumer_of(green))
            if table in build.tables:
                end = physical.log(build.tables[table]).end_offsets()
                if position != end:
                    behind.append(
                        f"{name}: has not read all of {build.tables[table]} (green {table}): {position} < {end}"
                    )
                continue
            source = live.get(table, table)
            live_position = _position(physical, source, consumer_of(live[name]))
            if live_position and (position is None or any(position.get(b, 0) < o for b, o in live_position.items())):
                behind.append(f"{name}: in {table} at {position}, the live {live[name]} at {live_position}")
    return behind


def cutover(lh: Lakehouse, project: Project, spark: SparkSession | None = None) -> GreenResult:
    """Switch readers and rounds to the green set, all its tables in one compare-and-swap (see the module). The
    green tables' logs are tiered first (on Spark's executors given ``spark``): what they logged since
    `build_green` tiered them.

    Raises:
        GreenBuildError: no green build; the project's SQL differs from what the build built.
        GreenBehind: the green set has not caught up (nothing switched).
        AliasConflict: the aliases were switched by someone else meanwhile (nothing switched).
    """
    store = lh.store
    found = read_green(store)
    if found is None:
        raise GreenBuildError("no green build to cut over to: run lakestream layers green --project DIR first")
    build = found[0]
    aliases = read_aliases(store)
    if not all(aliases.current.get(m) == t for m, t in build.tables.items()):
        if _digests(project, build.tables) != dict(build.digests):
            raise GreenBuildError(
                "the project's SQL changed since the green build was made: nothing was switched. Run lakestream "
                "layers green --project DIR again (it builds the SQL as it is now), then cut over"
            )
        behind = green_lag(lh, project, build)
        if behind:
            raise GreenBehind(
                f"green generation {build.generation} is behind the live tables, nothing was switched: "
                f"{'; '.join(behind)}. Run lakestream layers green --project DIR again (it catches up), then cut over",
                behind,
            )
        # the green lake tables hold their logs first: readers of the lake by name (DuckDB, Spark, lake_read)
        # would otherwise see a table whose rows are still in its log after the switch
        _tier_green(lh, build, spark)
        write_aliases(store, aliases, {**aliases.current, **build.tables})  # the switch: one compare-and-swap
        lh.aliases.invalidate()
    _finish_cutover(lh, project, build)
    return GreenResult(build.generation, build.tables)


def _finish_cutover(lh: Lakehouse, project: Project, build: GreenBuild) -> None:
    """After the switch: the deployment record of the new project (the one it replaces kept for rollback), then
    the build record removed. Idempotent (a cutover stopped here is finished by running it again)."""
    store = lh.store
    deployment = _deployment(lh, project)
    recorded = read_deployment(store)
    if recorded is not None and recorded.tables != deployment.tables:
        store.put(PREVIOUS_DEPLOYED_KEY, recorded.to_json())
    write_deployment(store, deployment)
    try:
        store.delete(GREEN_KEY)
    except NotFound:
        pass


def _deployment(lh: Lakehouse, project: Project) -> Deployment:
    physical = lh.without_aliases()
    live = live_mapping(lh, project)
    definitions = {name: physical.table(live.get(name, name)) for name in project.tables}
    return deployment_of(project, definitions)


def rollback(lh: Lakehouse, project: Project) -> GreenResult:
    """Switch the aliases back to the tables the last switch replaced (one compare-and-swap), and the deployment
    record back to the one it replaced; rolling back again rolls forward.

    Raises:
        GreenBuildError: nothing was switched yet (nothing to roll back to).
    """
    store = lh.store
    aliases = read_aliases(store)
    if aliases.generation == 0:
        raise GreenBuildError("nothing to roll back: the aliases were never switched (no cutover ran)")
    write_aliases(store, aliases, aliases.previous)
    lh.aliases.invalidate()
    try:
        previous = Deployment.from_json(store.get(PREVIOUS_DEPLOYED_KEY).data)
    except NotFound:
        previous = None
    current = read_deployment(store)
    if previous is not None:
        write_deployment(store, previous)
        if current is not None:
            store.put(PREVIOUS_DEPLOYED_KEY, current.to_json())
    tables = {m: aliases.previous.get(m, m) for m in set(aliases.current) | set(aliases.previous)}
    return GreenResult(aliases.generation + 1, tables)


def cleanup(lh: Lakehouse, project: Project) -> list[str]:
    """Drop the physical tables of the project's models that no alias, no previous alias (the rollback target)
    and no green build in progress names, with their round records and their subscriptions in other tables;
    the names dropped."""
    store = lh.store
    aliases = read_aliases(store)
    found = read_green(store)
    keep = set(found[0].tables.values()) if found else set()
    for name in project.models:
        keep |= {aliases.current.get(name, name), aliases.previous.get(name, name)}
    models = {m.lower() for m in project.models}
    dropped = []
    physical = lh.without_aliases()
    for table in physical.list_tables():
        name = str(table)
        namespace, short = name.split(".")
        logical = f"{namespace.split('__g')[0]}.{short}" if generation_of(name) else name
        if logical.lower() not in models or name in keep:
            continue
        physical.drop_table(table)
        for info in list(store.list(f"{LAYERS_PREFIX}{name}/")):
            store.delete(info.key)
        for sub in physical.subscriptions():
            if sub.record.consumer in (consumer_of(name), f"{consumer_of(name)}.self"):
                physical.drop_subscription(sub.record.table, sub.record.consumer)
        dropped.append(name)
    return dropped
