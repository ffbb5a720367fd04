"""Deploying a project's tables, and checking that they still match it.

`Deployer.deploy` creates every table the project declares that does not exist (sources, then models in
dependency order); a table that exists otherwise than declared is a `DeployMismatch` (a model's,
`ModelSchemaChanged`) saying what differs (`layers.drift`) and what to do, except a model's table whose SQL
gained columns after its own (its SQL edited to select more, or ``SELECT *`` over an altered source): they are
added to it (`Lakehouse.alter_table`) and the model's next rounds fill them. `Deployer.verify` makes the same check
before a model's first round in a runner, without Spark: a round never writes rows of another shape than its
table's, and a source's declaration that no longer matches its table is never "fixed" by dropping it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakehouse.errors import TableAlreadyExists, TableNotFound
from lakehouse.table.definition import TableDefinition
from layers.deploy_record import deployment_of, write_deployment
from layers.drift import table_differences
from layers.errors import DeployMismatch, ModelSchemaChanged
from layers.spark_sql import SparkSql

if TYPE_CHECKING:
    from lakehouse.lakehouse import Lakehouse
    from layers.project import Model, Project

__all__ = ["Deployer"]


class Deployer:
    """A project's tables in one warehouse; ``sql`` gives the Spark SQL engine, needed only to infer the types
    of model columns the project cannot (`layers.project`)."""

    def __init__(
        self,
        lh: Lakehouse,
        project: Project,
        sql: Callable[[], SparkSql],
        *,
        logical: Project | None = None,
        names: Mapping[str, str] | None = None,
        record: bool = True,
    ) -> None:
        self.lh = lh
        self.project = project
        self._sql = sql
        #: ``project`` under physical table names (`layers.physical`): the record names ``logical``'s tables, each
        #: read as its physical table (``names``: logical -> physical); ``record`` False writes none (a green build)
        self._logical = logical or project
        self._names = dict(names or {})
        self._record = record
        #: Models (and tables) found as the project declares them (`verify`): checked once per deployer.
        self._verified: set[str] = set()
        self._verified_tables: set[str] = set()

    def deploy(self) -> list[str]:
        """Create every table the project declares that does not exist yet (sources, then models in dependency
        order); returns the names created. Idempotent; a concurrent deploy that created a table first is fine.
        Then records the project as deployed (`layers.deploy_record`: each model's SQL, the tables' columns and keys),
        which ``lakestream layers plan`` compares a changed project with.

        Raises:
            DeployMismatch: a table exists with other columns, types or key than the project declares (nothing
                is recorded).
            DeploymentRecordError: other deploys kept replacing the record (the tables are deployed).
        """
        created = []
        for name in self.project.tables:
            schema, settings = self._declared(name)
            try:
                existing = self.lh.table(name)
            except TableNotFound:
                existing = None
            if existing is None:
                try:
                    self.lh.create_table(name, schema, **settings)
                    created.append(name)
                    continue
                except TableAlreadyExists:
                    existing = self.lh.table(name)
            self._check_existing(name, existing, schema, settings)
        # recorded only once every table matches: `layers plan` compares the next project with this one
        if self._record:
            definitions = {name: self.lh.table(self._names.get(name, name)) for name in self._logical.tables}
            write_deployment(self.lh.store, deployment_of(self._logical, definitions))
        return created

    def _declared(self, name: str, *, schema: pa.Schema | None = None) -> tuple[pa.Schema, dict[str, Any]]:
        d: TableDefinition | Model
        if name in self.project.sources:
            d = self.project.sources[name].definition
            schema = schema or d.schema
        else:
            model = self.project.models[name]
            schema = schema or model.schema or self._inferred_schema(name)
            d = model
        settings: dict[str, Any] = {
            "buckets": d.buckets,
            "primary_key": list(d.primary_key) or None,
            "bucket_key": d.bucket_key,
            "partition_by": list(d.partition_by) or None,
        }
        if isinstance(d, TableDefinition) and d.primary_key:  # a source's merge engine (a model's rows are its SQL's)
            settings.update(
                merge_engine=d.merge_engine, version_column=d.version_column, aggregates=dict(d.aggregates) or None
            )
        return schema, settings

    def _inferred_schema(self, name: str) -> pa.Schema:
        """A model's output schema as Spark computes it (over empty inputs), key columns not null."""
        model = self.project.models[name]
        views = {t: self.lh.table(t).schema.empty_table() for t in model.inputs}
        result = self._sql().run(model.qualified, views).schema
        return pa.schema([pa.field(f.name, f.type, f.name not in model.primary_key) for f in result])

    def _check_existing(self, name: str, existing: Any, schema: pa.Schema, settings: Mapping[str, Any]) -> None:
        differences = table_differences(existing, schema, settings)
        if differences and self._added_columns(name, existing, schema, settings):
            return
        if differences:
            raise self._mismatch(name, differences)

    def _added_columns(self, name: str, existing: Any, schema: pa.Schema, settings: Mapping[str, Any]) -> bool:
        """A model's table whose SQL now has more columns after its own: the columns are added to the table
        (`Lakehouse.alter_table`, nullable) and its rows so far keep theirs. They get the new columns from the
        model's next rounds: its SQL edited to select more changed its digest, so its next round is a full one
        that recomputes and diffs every row (a backfill in place); a ``SELECT *`` over a source that gained a
        column has the same SQL, and the source's rows so far have none either (nulls). Anything else that
        differs stays a `ModelSchemaChanged`."""
        have = list(existing.schema.names)
        if name not in self.project.models or list(schema.names[: len(have)]) != have or len(schema) == len(have):
            return False
        added = [schema.field(n).with_nullable(True) for n in schema.names[len(have) :]]
        if any(pa.types.is_null(f.type) for f in added):
            return False
        widened = SimpleNamespace(
            schema=pa.schema([*existing.schema, *added]),
            primary_key=existing.primary_key,
            buckets=existing.buckets,
            bucket_key=existing.bucket_key,
        )
        if table_differences(widened, schema, settings):
            return False
        self.lh.alter_table(name, add_columns=pa.schema(added))
        return True

    def _appended(self, name: str, existing: Any, schema: pa.Schema) -> list[str]:
        """The columns a model's SQL now has after all of its table's, the rest the same by name ([] if other
        differences exist or ``name`` is a source): what `deploy` adds."""
        have = list(existing.schema.names)
        if name not in self.project.models or list(schema.names[: len(have)]) != have:
            return []
        return list(schema.names[len(have) :])

    def _mismatch(self, name: str, differences: Sequence[str], *, appended: Sequence[str] = ()) -> DeployMismatch:
        """The error for table ``name`` differing from the project: a model's table can be built again from its
        inputs, a source's holds ingested data and is never to be dropped."""
        what = "; ".join(differences)
        if name in self.project.models and appended:
            model = self.project.models[name]
            return ModelSchemaChanged(
                f"model {name}: its SQL ({model.path}) now selects {', '.join(appended)} after its table's columns "
                f"in {self.lh.url}. Run lakestream layers deploy: it adds them to the table (nullable), and the "
                "model's next round fills them for every row (lakestream layers plan shows it as carry on). Nothing "
                "was written",
                path=model.path,
                model=name,
            )
        if name in self.project.models:
            model = self.project.models[name]
            return ModelSchemaChanged(
                f"model {name}: its table in {self.lh.url} differs from what its SQL ({model.path}) declares: "
                f"{what}. A model's table holds only what its SQL derives from its inputs, so it can be built "
                f"again: drop it (lakestream table drop {name} --yes) and run lakestream layers deploy; its next "
                "round builds it in full from its inputs, and the models reading it follow. Or restore the SQL. "
                "Nothing was written",
                path=model.path,
                model=name,
            )
        source = self.project.sources[name]
        return DeployMismatch(
            f"source {name}: sources.yml ({source.path}) declares it otherwise than its table in {self.lh.url}: "
            f"{what}. The table and the data ingested into it are unchanged: a source's schema changes only with "
            f"lakestream table alter {name} (it adds, widens, renames and removes columns). Make the declaration in "
            f"sources.yml match the table again (lakestream table describe {name} shows it), or alter the table to "
            "match it",
            path=source.path,
            model=name,
        )

    def verify(self, name: str) -> None:
        """Before a round of ``name``: its table and its sources' tables are as the project declares them (column
        names, and types where the project knows them without Spark; key; buckets), once per runner. An input
        that is a model is checked before its own rounds (its problem is its own, not its readers').

        Raises:
            ModelSchemaChanged: the model's SQL (or header) no longer matches its table.
            DeployMismatch: a source's declaration no longer matches its table.
        """
        if name in self._verified:
            return
        sources = [t for t in self.project.models[name].inputs if t in self.project.sources]
        for table in (*sources, name):
            if table in self._verified_tables:
                continue
            if table in self.project.sources:
                schema = self.project.sources[table].definition.schema
            else:  # a type only Spark knows is null here: it is checked as the round's rows are cast
                schema = pa.schema([pa.field(c.name, c.type or pa.null()) for c in self.project.models[table].columns])
            _, settings = self._declared(table, schema=schema)
            existing = self.lh.table(table)
            differences = table_differences(existing, schema, settings)
            if differences:
                raise self._mismatch(table, differences, appended=self._appended(table, existing, schema))
            self._verified_tables.add(table)
        self._verified.add(name)

    def problem(self, name: str) -> str | None:
        """What keeps ``name``'s next round from running (a table that no longer matches its declaration), or
        None."""
        try:
            self.verify(name)
        except (DeployMismatch, TableNotFound) as exc:
            return str(exc)
        return None
