"""The catalog's commit check is a hook (issue 24): the catalog imports no lake code; `lakehouse.lakehouse`
registers the tiering fence for every `ObjectStoreCatalog`, those pyiceberg's ``load_catalog`` builds included;
a check added to one catalog refuses that catalog's commits only, before anything is written."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

import lakehouse.catalog
from lakehouse.lake_layout import check_tiering_fence

SCHEMA = pa.schema([("id", pa.int64())])


def test_the_catalog_imports_no_lake_code() -> None:
    tree = ast.parse(Path(lakehouse.catalog.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    lake_code = {
        "lakehouse.lake_layout",
        "lakehouse.tiering",
        "lakehouse.lakehouse",
        "lakehouse.union",
        "lakehouse.keyed_rows",
    }
    assert not imported & lake_code, imported & lake_code


@pytest.mark.subprocess
def test_the_tiering_fence_is_registered_for_catalogs_load_catalog_builds(tmp_path) -> None:
    """In a fresh process that imports nothing of lakestream itself: pyiceberg imports the catalog's module."""
    script = (
        "from pyiceberg.catalog import load_catalog\n"
        f"c = load_catalog('x', **{{'py-catalog-impl': 'lakehouse.catalog.ObjectStoreCatalog', "
        f"'warehouse': {tmp_path.as_uri()!r}}})\n"
        "from lakehouse.lake_layout import check_tiering_fence\n"
        "print(check_tiering_fence in c.commit_checks)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=os.environ)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_a_check_added_to_one_catalog_refuses_its_commits_and_nothing_is_written(catalog_props) -> None:
    ours, theirs = load_catalog("a", **catalog_props), load_catalog("b", **catalog_props)
    assert check_tiering_fence in ours.commit_checks  # registered by lakehouse.lakehouse
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
    assert ours.commit_checks == (*lakehouse.catalog.default_commit_checks(), refuse)
    assert refuse not in theirs.commit_checks
    before = ours.load_table("ods.t").metadata_location
    with pytest.raises(Refused, match="ods.t: refused"):
        table.append(pa.table({"id": pa.array([1], pa.int64())}))
    assert seen == [("ods.t", True, seen[0][2])] and seen[0][2] > 0
    assert ours.load_table("ods.t").metadata_location == before  # the pointer did not move
    assert not ours.load_table("ods.t").scan().to_arrow().num_rows
    theirs.load_table("ods.t").append(pa.table({"id": pa.array([1], pa.int64())}))  # another catalog commits
    assert ours.load_table("ods.t").scan().to_arrow().num_rows == 1
