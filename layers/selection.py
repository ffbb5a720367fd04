"""Which models a command or job acts on: ``--model`` names checked against the project (case ignored, as
Spark ignores it), in dependency order."""

from __future__ import annotations

from collections.abc import Sequence

from lakehouse.errors import InvalidArgument
from layers.project import Project


def select_models(project: Project, names: Sequence[str] | None) -> list[str]:
    """The project's models ``names`` names (as the project spells them, in dependency order, once each);
    every model when ``names`` is empty or None.

    Raises:
        InvalidArgument: a name that is no model of the project (a source is not a model); the message lists
            the models.
    """
    if not names:
        return list(project.order)
    by_lower = {name.lower(): name for name in project.models}
    unknown = [name for name in names if name.lower() not in by_lower]
    if unknown:
        sources = {name.lower() for name in project.sources}
        what = "a source, not a model" if all(u.lower() in sources for u in unknown) else "no model of this project"
        raise InvalidArgument(
            f"--model {', '.join(unknown)}: {what} (project {project.path}); its models are "
            f"{', '.join(project.order) or 'none'}"
        )
    chosen = {by_lower[name.lower()] for name in names}
    return [name for name in project.order if name in chosen]
