"""Old import paths of moved modules keep working for a release, with a warning, as the same module."""

from __future__ import annotations

import importlib
import pickle
import sys
import textwrap
import warnings

import pytest

from object_store.moved import keep_old_paths


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "movedpkg"
    (root / "new").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "new" / "__init__.py").write_text("")
    (root / "new" / "place.py").write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass

            @dataclass
            class Thing:
                n: int
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "movedpkg"
    for name in [n for n in sys.modules if n.startswith("movedpkg")]:
        del sys.modules[name]


def test_an_old_path_warns_and_is_the_new_module(package):
    keep_old_paths({"movedpkg.place": "movedpkg.new.place"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module("movedpkg.place")
    new = importlib.import_module("movedpkg.new.place")
    assert old is new
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        "movedpkg.place moved to movedpkg.new.place; import it from there (the old path goes in the next release)"
    ]
    # The module keeps its own identity: its spec, and the path its classes pickle under.
    assert new.__spec__.name == "movedpkg.new.place"
    assert new.Thing.__module__ == "movedpkg.new.place"
    assert pickle.loads(pickle.dumps(old.Thing(3))) == new.Thing(3)
    from movedpkg.place import Thing  # noqa: PLC0415 - the form a user's code has

    assert Thing is new.Thing


def test_paths_not_listed_are_not_found(package):
    keep_old_paths({"movedpkg.place": "movedpkg.new.place"})
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("movedpkg.elsewhere")


def test_an_old_path_is_the_new_module_even_where_its_old_file_is_left(package, tmp_path):
    (tmp_path / "movedpkg" / "place.py").write_text("STALE = True\n")
    keep_old_paths({"movedpkg.place": "movedpkg.new.place"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("movedpkg.place")
    assert old is importlib.import_module("movedpkg.new.place") and not hasattr(old, "STALE")
