"""Old import paths of moved modules: they keep working for one release, with a DeprecationWarning.

A package that moves a module lists ``{old path: new path}`` and calls `keep_old_paths` from its ``__init__``;
``import old.path`` (and ``from old.path import name``, and pyiceberg's ``py-catalog-impl`` strings) then
returns the module at its new path, the same module object, so classes, ``isinstance`` and pickles agree.
It lives in the lowest package so that every package can use it; it is the one thing a package's import
installs, and only for names that no longer exist as files.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping
from types import ModuleType


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and loads it as the module at its new path."""

    def __init__(self, moves: Mapping[str, str]) -> None:
        self.moves = dict(moves)
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.moves:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = self.moves[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there (the old path goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system has just set the module's __spec__ to the old path's: give it back its own.
        module.__spec__ = self._specs[module.__spec__.name if module.__spec__ else module.__name__]


def keep_old_paths(moves: Mapping[str, str]) -> None:
    """Make each old module path in ``moves`` import the module at its new path (once per process)."""
    for finder in sys.meta_path:
        if isinstance(finder, _OldPaths):
            finder.moves.update(moves)
            return
    # First on the path: an old path is the new module even where a copy of the old file is still found (an
    # editable install of another checkout, a stale file of an older version left in place).
    sys.meta_path.insert(0, _OldPaths(moves))
