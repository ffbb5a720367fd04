"""Tiering: a round that moves a table's log into its lake table exactly once (`round`), and the boundaries a
writer holds while it appends one change in several appends (`boundaries`).

``lakehouse.tiering`` was a module until the lakehouse package was split by concept; its names are still found
here for a release, with a DeprecationWarning (import them from `lakehouse.tiering.round`).
"""

from __future__ import annotations

import importlib
import warnings


def __getattr__(name: str) -> object:
    # Only names the old module had; anything else is an AttributeError as usual.
    for new in ("lakehouse.iceberg.load", "lakehouse.tiering.round"):
        module = importlib.import_module(new)
        if not name.startswith("__") and hasattr(module, name):
            warnings.warn(
                f"lakehouse.tiering.{name} moved to {new}.{name}; import it from there (the old path goes in the "
                "next release)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(module, name)
    raise AttributeError(f"module 'lakehouse.tiering' has no attribute {name!r}")
