"""The catalog's commit checks (issue 24, issue 58): every `ObjectStoreCatalog` runs the tiering fence by
construction, nothing registers it at import, so a catalog built without `lakehouse.lakehouse` (directly, or by
pyiceberg's ``load_catalog``) refuses a tiering commit planned on a stale base; the catalog imports no lake code
but the fence's own small module; a check added to one catalog refuses that catalog's commits only, before
anything is written."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

import lakehouse
import lakehouse.iceberg.catalog
from lakehouse.errors import TieringConflict
from lakehouse.iceberg.offsets import COMMIT_USER_PROPERTY, TIERING_BASE_PROPERTY, TIERING_USER, check_tiering_fence

SCHEMA = pa.schema([("id", pa.int64())])
ROWS = pa.table({"id": pa.array([1], pa.int64())})
REPO = Path(lakehouse.__file__).resolve().parents[1]
#: The summary of a tiering commit planned on the table before its first tiering.
FIRST_ROUND = {COMMIT_USER_PROPERTY: TIERING_USER, TIERING_BASE_PROPERTY: "-1"}


def test_the_catalog_imports_no_lake_code() -> None:
    tree = ast.parse(Path(lakehouse.iceberg.catalog.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    lake_code = {
        "lakehouse.iceberg.layout",
        "lakehouse.tiering.round",
        "lakehouse.lakehouse",
        "lakehouse.read.union",
        "lakehouse.merge.keyed_rows",
    }
    assert not imported & lake_code, imported & lake_code
    assert "lakehouse.iceberg.offsets" in imported  # the fence's own module: pyiceberg and lakehouse.errors only


def test_no_module_registers_a_commit_check() -> None:
    """Nothing registers at import (docs/architecture.md): no project module calls `register_commit_check`."""
    callers = []
    for package in ("object_store", "lakehouse", "layers", "quality", "lakestream", "jobs", "dags", "stack"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and "register_commit_check" in ast.unparse(node.func):
                    callers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert callers == []


def test_every_catalog_runs_the_tiering_fence_by_construction(tmp_path) -> None:
    catalog = lakehouse.iceberg.catalog.ObjectStoreCatalog("x", warehouse=tmp_path.as_uri())
    assert catalog.commit_checks == lakehouse.iceberg.catalog.DEFAULT_COMMIT_CHECKS == (check_tiering_fence,)
    assert not hasattr(lakehouse.iceberg.catalog, "default_commit_checks")  # no process-wide registry to consult


@contextmanager
def _lakehouse_imported_afresh() -> Iterator[None]:
    """Inside: the ``lakehouse`` package is a bare namespace (its ``__init__``, which imports `lakehouse.lakehouse`,
    not run) and none of its modules are imported yet, so what the block imports is all it gets. Afterwards the
    process's own modules are back, as they were."""
    ours = {name: module for name, module in sys.modules.items() if name.partition(".")[0] == "lakehouse"}
    bare = types.ModuleType("lakehouse")
    bare.__path__ = list(lakehouse.__path__)
    for name in ours:
        del sys.modules[name]
    sys.modules["lakehouse"] = bare
    try:
        yield
    finally:
        for name in [n for n in sys.modules if n.partition(".")[0] == "lakehouse"]:
            del sys.modules[name]
        sys.modules.update(ours)


def test_a_catalog_built_without_lakehouse_lakehouse_refuses_a_commit_across_the_fence(tmp_path) -> None:
    """Subprocess-free: the catalog is imported afresh with nothing of lakestream's facade imported."""
    with _lakehouse_imported_afresh():
        catalog_module = importlib.import_module("lakehouse.iceberg.catalog")
        conflict = sys.modules["lakehouse.errors"].TieringConflict
        fence = sys.modules["lakehouse.iceberg.offsets"].check_tiering_fence
        for name in ("lakehouse.lakehouse", "lakehouse.iceberg.layout", "lakehouse.tiering.round"):
            assert name not in sys.modules, f"importing lakehouse.iceberg.catalog imported {name}"
        catalog = catalog_module.ObjectStoreCatalog("fresh", warehouse=tmp_path.as_uri())
        assert fence in catalog.commit_checks
        catalog.create_namespace("ods")
        table = catalog.create_table("ods.t", SCHEMA)
        # planned on the table before its first tiering, as it is: the fence lets it commit
        table.append(ROWS, snapshot_properties=FIRST_ROUND)
        first = catalog.load_table("ods.t").metadata_location
        # a second round planned on the table before its first tiering too, as if it raced the first one: the
        # table's newest tiering snapshot is the first round's now, so it is refused before anything is written
        with pytest.raises(conflict, match="ods.t: another tiering run committed snapshot .* before its first"):
            catalog.load_table("ods.t").append(ROWS, snapshot_properties=FIRST_ROUND)
        assert catalog.load_table("ods.t").metadata_location == first  # the pointer did not move
        assert catalog.load_table("ods.t").scan().to_arrow().num_rows == 1
        assert "lakehouse.lakehouse" not in sys.modules
    assert conflict is not TieringConflict  # the afresh import was one indeed; the process's modules are back
    assert sys.modules["lakehouse.iceberg.catalog"] is lakehouse.iceberg.catalog


@pytest.mark.subprocess
def test_the_tiering_fence_is_run_by_catalogs_load_catalog_builds(tmp_path) -> None:
    """In a fresh process that imports nothing of lakestream itself: pyiceberg imports the catalog's module."""
    script = (
        "from pyiceberg.catalog import load_catalog\n"
        f"c = load_catalog('x', **{{'py-catalog-impl': 'lakehouse.iceberg.catalog.ObjectStoreCatalog', "
        f"'warehouse': {tmp_path.as_uri()!r}}})\n"
        "from lakehouse.iceberg.offsets import check_tiering_fence\n"
        "print(check_tiering_fence in c.commit_checks)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=os.environ)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_a_catalog_load_catalog_builds_refuses_a_commit_across_the_fence(catalog_props) -> None:
    catalog = load_catalog("a", **catalog_props)
    assert check_tiering_fence in catalog.commit_checks
    catalog.create_namespace("ods")
    table = catalog.create_table("ods.t", SCHEMA)
    with pytest.raises(TieringConflict, match="after this run planned on tiering snapshot 42"):
        table.append(ROWS, snapshot_properties={**FIRST_ROUND, TIERING_BASE_PROPERTY: "42"})
    assert catalog.load_table("ods.t").current_snapshot() is None


def test_register_commit_check_is_deprecated_and_still_runs_its_check(catalog_props, monkeypatch) -> None:
    monkeypatch.setattr(lakehouse.iceberg.catalog, "_REGISTERED_COMMIT_CHECKS", [])
    catalog = load_catalog("a", **catalog_props)

    def refuse(base, updates, *, name: str) -> None:
        raise RuntimeError(f"{name}: refused")

    with pytest.warns(DeprecationWarning, match="add_commit_check"):
        lakehouse.iceberg.catalog.register_commit_check(refuse)
    assert catalog.commit_checks == (check_tiering_fence, refuse)
    catalog.create_namespace("ods")
    table = catalog.create_table("ods.t", SCHEMA)
    with pytest.raises(RuntimeError, match="ods.t: refused"):
        table.append(ROWS)


def test_a_check_added_to_one_catalog_refuses_its_commits_and_nothing_is_written(catalog_props) -> None:
    ours, theirs = load_catalog("a", **catalog_props), load_catalog("b", **catalog_props)
    assert check_tiering_fence in ours.commit_checks  # every catalog's, by construction
    ours.create_namespace("ods")
    table = ours.create_table("ods.t", SCHEMA)
    seen = []

    class Refused(Exception):
        pass

    def refuse(base, updates, *, name: str) -> None:
        seen.append((name, base is not None, len(updates)))
        raise Refused(f"{name}: refused")

    ours.add_commit_check(refuse)
    ours.add_commit_check(refuse)  # once, however often it is added
    assert ours.commit_checks == (*lakehouse.iceberg.catalog.DEFAULT_COMMIT_CHECKS, refuse)
    assert refuse not in theirs.commit_checks
    before = ours.load_table("ods.t").metadata_location
    with pytest.raises(Refused, match="ods.t: refused"):
        table.append(pa.table({"id": pa.array([1], pa.int64())}))
    assert seen == [("ods.t", True, seen[0][2])] and seen[0][2] > 0
    assert ours.load_table("ods.t").metadata_location == before  # the pointer did not move
    assert not ours.load_table("ods.t").scan().to_arrow().num_rows
    theirs.load_table("ods.t").append(pa.table({"id": pa.array([1], pa.int64())}))  # another catalog commits
    assert ours.load_table("ods.t").scan().to_arrow().num_rows == 1
