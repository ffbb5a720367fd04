"""The record of the version of a project last deployed to a warehouse, for ``lakestream layers plan``.

A table tells its columns, key and buckets, but not the SQL that computes it: a round records only a digest of
it (`layers.rounds.sql_digest`). So after every successful deploy (`layers.deployer.Deployer.deploy`) the project
as deployed is written to ``_lakestream/layers/deployed.json``: per model its SQL text and digest, its output
columns with their types (the table's, so types Spark inferred at deploy too), key, buckets and inputs; per
source its declared columns and key. `layers.deploy_plan` compares a changed project with it.

One object holds the whole project: a deploy writes the project it deployed, complete, so two concurrent
deploys can only mean "the last one wins". Each write is a compare-and-swap on the version it read (``If-Match``
its ETag, or ``If-None-Match: *`` for the first) with a ``generation`` one higher, retried when another deploy
wrote in between, so every record is whole and the generations count the deployed versions that landed. A deploy
of the version already recorded writes nothing (each layers job deploys before its round).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from layers.errors import DeploymentRecordError
from layers.rounds import LAYERS_PREFIX, sql_digest
from object_store import NotFound, ObjectStore, PreconditionFailed

if TYPE_CHECKING:
    from lakehouse.table.definition import TableDefinition
    from layers.project import Project

__all__ = ["DEPLOYED_KEY", "DeployedTable", "Deployment", "deployment_of", "read_deployment", "write_deployment"]

DEPLOYED_KEY = f"{LAYERS_PREFIX}deployed.json"
#: How often a deploy retries its compare-and-swap when other deploys keep writing in between.
WRITE_ATTEMPTS = 20
FORMAT = 1


@dataclass(frozen=True)
class DeployedTable:
    """One table as deployed: ``kind`` is ``source`` or ``model``; ``columns`` are (name, Arrow type as text)
    pairs in the table's order; ``sql``, ``sql_digest`` and ``inputs`` are a model's (empty for a source)."""

    name: str
    kind: str
    columns: tuple[tuple[str, str], ...]
    primary_key: tuple[str, ...]
    buckets: int
    bucket_key: str | None = None
    partition_by: tuple[str, ...] = ()
    sql: str = ""
    sql_digest: str = ""
    inputs: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "columns": [{"name": n, "type": t} for n, t in self.columns],
            "primary_key": list(self.primary_key),
            "buckets": self.buckets,
            "bucket_key": self.bucket_key,
            "partition_by": list(self.partition_by),
            "sql": self.sql,
            "sql_digest": self.sql_digest,
            "inputs": list(self.inputs),
        }

    @classmethod
    def from_json(cls, name: str, doc: Mapping[str, Any]) -> DeployedTable:
        return cls(
            name=name,
            kind=doc["kind"],
            columns=tuple((c["name"], c["type"]) for c in doc["columns"]),
            primary_key=tuple(doc.get("primary_key") or ()),
            buckets=int(doc["buckets"]),
            bucket_key=doc.get("bucket_key"),
            partition_by=tuple(doc.get("partition_by") or ()),
            sql=doc.get("sql", ""),
            sql_digest=doc.get("sql_digest", ""),
            inputs=tuple(doc.get("inputs") or ()),
        )


@dataclass(frozen=True)
class Deployment:
    """A project as deployed: its tables by name (sources, then models in dependency order), the number of
    deploys recorded so far (``generation``, 1 for the first) and when this one was recorded (seconds since the
    epoch)."""

    tables: Mapping[str, DeployedTable]
    generation: int = 0
    deployed_at: float = field(default=0.0, compare=False)

    @property
    def models(self) -> dict[str, DeployedTable]:
        return {n: t for n, t in self.tables.items() if t.kind == "model"}

    @property
    def sources(self) -> dict[str, DeployedTable]:
        return {n: t for n, t in self.tables.items() if t.kind == "source"}

    def to_json(self) -> bytes:
        doc = {
            "format": FORMAT,
            "generation": self.generation,
            "deployed_at": self.deployed_at,
            "tables": {n: t.to_json() for n, t in self.tables.items()},
        }
        return json.dumps(doc, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Deployment:
        doc = json.loads(data)
        tables = {n: DeployedTable.from_json(n, t) for n, t in doc["tables"].items()}
        return cls(tables=tables, generation=int(doc["generation"]), deployed_at=float(doc["deployed_at"]))


def deployment_of(project: Project, definitions: Mapping[str, TableDefinition]) -> Deployment:
    """The record of ``project`` deployed as the tables ``definitions`` (every table of the project, as they
    are after the deploy: their columns and types are what the rounds write)."""
    tables: dict[str, DeployedTable] = {}
    for name in project.tables:
        d = definitions[name]
        columns = tuple((f.name, str(f.type)) for f in d.schema)
        common: dict[str, Any] = {
            "name": name,
            "columns": columns,
            "primary_key": tuple(d.primary_key),
            "buckets": d.buckets,
            "bucket_key": d.bucket_key,
            "partition_by": tuple(d.partition_by),
        }
        if name in project.sources:
            tables[name] = DeployedTable(kind="source", **common)
        else:
            model = project.models[name]
            tables[name] = DeployedTable(
                kind="model", sql=model.sql, sql_digest=sql_digest(model.sql), inputs=model.inputs, **common
            )
    return Deployment(tables=tables)


def read_deployment(store: ObjectStore) -> Deployment | None:
    """The record of the last deploy, or None (never deployed, or deployed by a version that kept none).

    Raises:
        DeploymentRecordError: the record is not one this version can read.
    """
    try:
        data = store.get(DEPLOYED_KEY).data
    except NotFound:
        return None
    return _parse(data)


def _parse(data: bytes) -> Deployment:
    try:
        return Deployment.from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise DeploymentRecordError(
            f"the deployment record {DEPLOYED_KEY} cannot be read ({type(exc).__name__}: {exc}): it was not "
            "written by lakestream layers deploy of this version. Run lakestream layers deploy to write it again"
        ) from None


def write_deployment(store: ObjectStore, deployment: Deployment) -> Deployment:
    """Record ``deployment`` as the deployed version (compare-and-swap on the record read, retried while other
    deploys write in between); returns it with its generation and time. The version already recorded is not
    written again (the record read is returned).

    Raises:
        DeploymentRecordError: other deploys won every attempt (the tables are deployed; run deploy again).
    """
    for _ in range(WRITE_ATTEMPTS):
        try:
            current = store.get(DEPLOYED_KEY)
        except NotFound:
            current = None
        generation = 1
        if current is not None:
            try:
                recorded = _parse(current.data)
            except DeploymentRecordError:  # unreadable (an older format): replaced, the count starts again
                recorded = None
            if recorded is not None and recorded.tables == deployment.tables:
                # the same project deployed again (every job run deploys first): nothing to write
                return recorded
            generation = 1 if recorded is None else recorded.generation + 1
        record = Deployment(tables=deployment.tables, generation=generation, deployed_at=time.time())
        try:
            if current is None:
                store.put(DEPLOYED_KEY, record.to_json(), if_none_match=True)
            else:
                store.put(DEPLOYED_KEY, record.to_json(), if_match=current.etag)
        except PreconditionFailed:
            continue  # another deploy wrote meanwhile: read its generation and try again
        return record
    raise DeploymentRecordError(
        f"the deployment record {DEPLOYED_KEY} was written by other deploys {WRITE_ATTEMPTS} times while this one "
        "tried: the tables are deployed, but lakestream layers plan may compare with another deploy's project. "
        "Run lakestream layers deploy again once the others are done"
    )
