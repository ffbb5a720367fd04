"""The models of a warehouse-layers project and the project tables each one reads, found without sqlglot.

For the ``warehouse_layers`` DAG, which must wire its tasks at parse time without heavy imports (this module
uses the standard library and PyYAML, which Airflow itself depends on; it does not import Airflow or
lakestream). It is a *scan*, not the project's check: every qualified name ``namespace.table`` (backticks
allowed) in a model's SQL, outside comments and string literals, that names a table of the project (a key
of ``sources.yml`` or a model's file name, case ignored) counts as an input. So a column written as
``alias.column`` where alias and column happen to spell a project table would add an edge too (an extra
edge only orders two tasks). The full check, with the SQL parsed, is ``lakestream layers validate``;
``tests/dags/test_layers_graph.py`` holds the scan to ``load_project``'s inputs.
"""

from __future__ import annotations

import heapq
import os
import re
from pathlib import Path

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the parent of dags/
PROJECT_ENV = "LAKESTREAM_LAYERS_PROJECT"

_COMMENTS_AND_STRINGS = re.compile(
    r"--[^\n]*"  # a line comment (the model's header too)
    r"|/\*.*?\*/"  # a bracketed comment
    r"|'(?:[^'\\]|\\.|'')*'"  # a string literal
    r'|"(?:[^"\\]|\\.|"")*"',  # Spark SQL reads "..." as a string literal as well
    re.DOTALL,
)
_IDENT = r"(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)"
# namespace.table, not part of a longer dotted name (catalog.namespace.table, table.column)
_QUALIFIED = re.compile(rf"(?<![\w.`]){_IDENT}\s*\.\s*{_IDENT}(?![\w`]|\s*\.)")


def project_folder() -> str:
    """LAKESTREAM_LAYERS_PROJECT, or examples/tpch next to this dags/ folder (absolute)."""
    return os.path.abspath(os.environ.get(PROJECT_ENV) or os.path.join(REPO, "examples", "tpch"))


def _unquote(ident: str) -> str:
    return ident[1:-1].replace("``", "`") if ident.startswith("`") else ident


def tables_named(sql: str, known: dict[str, str]) -> set[str]:
    """The names in ``known`` (lower-case name -> as declared) that ``sql`` mentions as ``namespace.table``."""
    text = _COMMENTS_AND_STRINGS.sub(" ", sql)
    found = set()
    for namespace, table in _QUALIFIED.findall(text):
        name = known.get(f"{_unquote(namespace)}.{_unquote(table)}".lower())
        if name:
            found.add(name)
    return found


def layers_graph(folder: str | os.PathLike) -> dict[str, list[str]]:
    """Each model of the project in ``folder`` -> the other project tables (sources and models) it reads, sorted.

    Raises ValueError naming the folder when ``sources.yml`` or ``models/`` is missing or unreadable.
    """
    root = Path(folder)
    sources_file, models_dir = root / "sources.yml", root / "models"
    if not sources_file.is_file() or not models_dir.is_dir():
        raise ValueError(
            f"{root} is not a warehouse-layers project (no sources.yml or models/); set {PROJECT_ENV} to the "
            "project folder (see docs/guides/layers.md)"
        )
    try:
        declared = yaml.safe_load(sources_file.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{sources_file}: not YAML ({exc}); `lakestream layers validate` says more") from None
    sources = declared.get("sources") if isinstance(declared, dict) else None
    files = {
        p.name[: -len(".sql")]: p
        for p in sorted(models_dir.rglob("*.sql"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(models_dir).parts)
    }
    known = {str(name).lower(): str(name) for name in (sources or {})}
    known.update({name.lower(): name for name in files})
    return {model: sorted(tables_named(file.read_text(), known) - {model}) for model, file in sorted(files.items())}


def model_order(graph: dict[str, list[str]]) -> list[str]:
    """The models of ``graph`` so that each comes after the models it reads (ties by name), as the project
    orders them. Raises ValueError if models read each other in a cycle."""
    waiting = {m: {i for i in inputs if i in graph} for m, inputs in graph.items()}
    ready = [m for m, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    order = []
    while ready:
        model = heapq.heappop(ready)
        order.append(model)
        for reader, deps in waiting.items():
            if model in deps:
                deps.discard(model)
                if not deps:
                    heapq.heappush(ready, reader)
    if len(order) < len(graph):
        stuck = sorted(m for m in graph if m not in order)
        raise ValueError(
            f"models read each other in a cycle among {', '.join(stuck)}; `lakestream layers validate` names it"
        )
    return order
