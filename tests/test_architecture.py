"""The import graph of lakestream's packages (docs/architecture.md): data flows one way.

    object_store < lakehouse (the table format) < lakehouse.spark (its Spark adapter) < layers < quality
        < lakestream (the application: CLI, demo) < jobs, dags, stack

A module imports only modules of its own layer or of lower ones, and no two modules import each other through any
chain (imports inside functions count; those under ``if TYPE_CHECKING:`` do not, they never run). The graph is
read with `ast` from the source files, so the test needs none of the packages' dependencies.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Lowest first: a module may import its own layer and those before it. A module belongs to the longest prefix.
LAYERS: list[tuple[str, ...]] = [
    ("object_store",),
    ("lakehouse",),
    ("lakehouse.spark",),
    ("layers",),
    ("quality",),
    ("lakestream",),
    ("jobs", "dags", "stack"),
]
PACKAGES = [p for layer in LAYERS for p in layer if "." not in p]


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The project module ``name`` refers to (a module, or a name inside one), or None if it is not ours."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _imports(module: str) -> Iterator[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names] or [base]
            names = [n if _owner(n) != _owner(base) or n in MODULES else base for n in names]
        else:
            continue
        for name in names:
            owner = _owner(name)
            if owner is not None and owner != module:
                yield owner


GRAPH = {module: sorted(set(_imports(module))) for module in MODULES}


def _layer(module: str) -> int:
    best, index = -1, -1
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, index = len(prefix), i
    return index


def test_no_job_hides_a_package() -> None:
    """spark-submit puts jobs/ first on sys.path: a job named as one of our packages would hide it."""
    assert sorted({p.stem for p in (REPO / "jobs").glob("*.py")} & set(PACKAGES)) == []


def test_every_module_belongs_to_a_layer() -> None:
    assert [m for m in MODULES if _layer(m) < 0] == []


def test_no_module_imports_a_higher_layer() -> None:
    upward = [
        f"{m} ({LAYERS[_layer(m)][0]}) imports {d} ({LAYERS[_layer(d)][0]})"
        for m, deps in GRAPH.items()
        for d in deps
        if _layer(d) > _layer(m)
    ]
    assert upward == []


def test_no_import_cycles() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert cycles == []


@pytest.mark.parametrize(
    ("source", "imported"),
    [
        ("from pyarrow import compute\n", None),
        ("import object_store\n", "object_store"),
        ("def f():\n    from quality.results import Violation\n", "quality.results"),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from quality.results import Violation\n", None),
    ],
)
def test_the_graph_sees_function_level_imports_and_skips_type_checking_ones(tmp_path, source, imported) -> None:
    MODULES["lakehouse._probe"] = tmp_path / "probe.py"
    (tmp_path / "probe.py").write_text(source)
    try:
        found = list(_imports("lakehouse._probe"))
    finally:
        del MODULES["lakehouse._probe"]
    assert found == ([imported] if imported else [])


def test_no_module_imports_another_modules_private_name() -> None:
    """A name with a leading underscore is its module's own: another module that needs it needs it public."""
    private = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if _owner(node.module) is None and node.module.split(".")[0] not in PACKAGES:
                continue  # not ours (dags' helpers, `_lakestream_common`, are modules: their names are fine)
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if alias.name.startswith("_") and not alias.name.startswith("__") and submodule not in MODULES:
                    private.append(f"{module}: from {node.module} import {alias.name}")
    assert not private, "\n".join(private)
