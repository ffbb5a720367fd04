"""Errors raised by `lakehouse`. All derive from `LakestreamError` (defined in `object_store.errors`)."""

from __future__ import annotations

from object_store.errors import LakestreamError

__all__ = ["ConfigError", "LakestreamError"]


class ConfigError(LakestreamError, ValueError):
    """The configuration (environment, YAML file or arguments) is invalid or incomplete."""
