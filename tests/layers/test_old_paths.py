"""The layers modules renamed so that a name says what is inside (issue 58): their old paths still import the same
module for a release, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

import layers  # noqa: F401 - its import keeps the old paths


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("layers.executors", "layers.executor_rounds"),
        ("layers.plan", "layers.deploy_plan"),
        ("layers.planner", "layers.strategy"),
        ("layers.deploy", "layers.deployer"),
        ("layers.deployed", "layers.deploy_record"),
    ],
)
def test_an_old_path_imports_the_renamed_module(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported afresh, so it warns whatever ran before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__.name == new
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        f"{old} moved to {new}; import it from there (the old path goes in the next release)"
    ]
