"""Stores for tests that choose their backend: `new_store_spec` gives (url, options) of a fresh, empty store on
"local" or "s3" (the session's SeaweedFS server), what a fixture or a subprocess needs; `catalog_properties` turns
one into the pyiceberg properties of an ObjectStoreCatalog on it. tests/conftest.py's fixtures are built on them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from object_store.seaweedfs import SeaweedFS


def new_store_spec(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """(url, options) of a fresh, empty store on ``backend`` ("local" or "s3"), for fixtures that choose it."""
    if backend == "local":
        root = tmp_path / "store"
        root.mkdir()
        return root.as_uri(), {}
    server: SeaweedFS = request.getfixturevalue("seaweedfs")
    return f"s3://{server.bucket}/t-{uuid.uuid4().hex[:12]}", server.store_options()


def catalog_properties(url: str, options: dict[str, str]) -> dict[str, str]:
    """pyiceberg properties for an ObjectStoreCatalog on (url, store options): what a user configures."""
    from lakehouse.iceberg.catalog import STORE_OPTION_PROPERTIES

    props = {"py-catalog-impl": "lakehouse.iceberg.catalog.ObjectStoreCatalog", "warehouse": url}
    props.update({theirs: options[ours] for ours, theirs in STORE_OPTION_PROPERTIES.items() if options.get(ours)})
    return props
