"""Errors raised by `layers`: every one a `LayersError`, under the project-wide root `LakestreamError`."""

from __future__ import annotations

from object_store.errors import LakestreamError

__all__ = [
    "DependencyCycleError",
    "DeployMismatch",
    "DeploymentRecordError",
    "LayerConflict",
    "LayersError",
    "ModelChanged",
    "ModelKeyError",
    "ModelSchemaChanged",
    "ModelSqlError",
    "ModelTestFormatError",
    "ProjectError",
    "ProjectFormatError",
    "RoundUnknown",
    "UnknownTableError",
]


class LayersError(LakestreamError):
    """Something about a warehouse-layers project or its rounds (the subclasses say what)."""


class ProjectError(LayersError, ValueError):
    """A warehouse-layers project (``sources.yml`` and ``models/*.sql``) is invalid.
    Raised by ``load_project`` before anything is written; the message names the file and the model and says
    what to do. ``path`` is the file, ``model`` the model's (or source's) name, if the error has one; the
    subclasses say which kind of error it is."""

    def __init__(self, message: str, *, path: str | None = None, model: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.model = model


class ProjectFormatError(ProjectError):
    """A project file is not in the documented format (docs/guides/layers.md): a missing ``sources.yml`` or
    ``models/``, YAML that does not parse, an unknown setting, an invalid primary key, bucket count, bucket
    key, partition or column type, two models or sources with one name."""


class ModelSqlError(ProjectError):
    """A model's SQL does not parse, is not a single query, has an output column without a name (or two with
    one name), or names a column its inputs do not have. For SQL that does not parse, ``line`` and ``column``
    (1-based, in the model's file) are where the problem is."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        model: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(message, path=path, model=model)
        self.line = line
        self.column = column


class UnknownTableError(ProjectError):
    """A model reads a table that is neither a source nor a model of the project."""


class DependencyCycleError(ProjectError):
    """Models read each other in a cycle; ``cycle`` lists the models in it, the first again at the end."""

    def __init__(self, message: str, *, cycle: list[str], path: str | None = None) -> None:
        super().__init__(message, path=path, model=cycle[0])
        self.cycle = list(cycle)


class ModelKeyError(ProjectError):
    """A model's output lacks a column of its declared primary key, a GROUP BY model's key column is not one of
    its GROUP BY expressions, or a round's rows hold a key twice or a null key (nothing is written then)."""


class LayerConflict(LayersError):
    """Another runner of the same warehouse-layers model started the same round first:
    only one runner of a model may run at a time. Nothing was written by this one; let the other finish (or,
    if it died, run again: the round it left is resumed exactly once)."""


class RoundUnknown(LayersError):
    """Log offsets of a model's table match no round boundary (`layers.rounds.boundary_round`)."""


class DeploymentRecordError(LayersError):
    """The record of the deployed project (``_lakestream/layers/deployed.json``, `layers.deploy_record`) could not be
    read, or other deploys kept replacing it while a deploy tried to write it."""


class ModelChanged(ProjectError):
    """A model's SQL changed while one of its rounds was unfinished: that round must finish with the SQL it
    started with (its intent records the SQL's digest); restore it, run, then change it again."""


class DeployMismatch(ProjectError):
    """A table the project declares exists with other columns, types, key or buckets (``lakestream layers
    deploy``, and every round before it writes)."""


class ModelSchemaChanged(DeployMismatch):
    """A model's SQL (or header) no longer matches its table: a round would write rows of another shape. The
    message says what differs; the table is built again from its inputs once dropped and deployed."""


class ModelTestFormatError(ProjectFormatError):
    """A model test (``tests/<name>.yml`` of a project, `layers.model_tests`) is not in the documented format:
    YAML that does not parse, an unknown setting, table or column, a row without its table's key, an update of
    a row the test never inserted. ``path`` is the file, ``test`` its name, ``step`` the step's number (1-based)
    if the problem is in a step."""

    def __init__(self, message: str, *, path: str | None = None, test: str | None = None, step: int | None = None):
        super().__init__(message, path=path)
        self.test = test
        self.step = step


class GreenBuildError(LayersError):
    """A blue/green rebuild (`layers.bluegreen`) cannot go on as asked: nothing to build, no green build to cut
    over, a project changed since the build, nothing to roll back to (the message says what to do)."""


class GreenBehind(GreenBuildError):
    """A cutover refused: the green tables have not caught up with the live ones (``behind`` says where).
    Nothing was switched; run ``lakestream layers green`` again (it brings them up), then cut over."""

    def __init__(self, message: str, behind: list[str]) -> None:
        super().__init__(message)
        self.behind = behind
