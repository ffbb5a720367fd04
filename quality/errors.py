"""Errors raised by `quality`. All derive from `LakestreamError` (defined in `object_store.errors`)."""

from __future__ import annotations

from object_store.errors import InvalidArgument, LakestreamError

__all__ = ["InvalidArgument", "LakestreamError", "PublicationError", "PublishRefused", "QualityError", "SuiteError"]


class QualityError(LakestreamError):
    """A quality check could not run (not: a check found a violation; violations are results, see
    `quality.results.Violation`)."""


class SuiteError(QualityError, ValueError):
    """A Great Expectations suite file is invalid (bad JSON/YAML, unknown expectation, a column the table lacks).
    The message names the file and says what to fix."""


class PublishRefused(QualityError):
    """`published` was not moved: a check on the snapshot failed (the message names it), or the snapshot is not
    newer than the one already published."""


class PublicationError(QualityError):
    """The warehouse publication (`quality.warehouse_publication`) was not written: other publishers won every
    compare-and-swap, or its record cannot be read. The previous publication stays as it was."""
