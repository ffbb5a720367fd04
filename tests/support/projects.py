"""Warehouse-layers project folders: `make_project` writes one (``sources.yml`` and a file per model) over the
small star of `SOURCES` (facts ods.f -> dimension ods.d -> ods.r), `model` writes a model's text with its key
comment; `EXAMPLE` is the example project (examples/tpch)."""

from __future__ import annotations

import textwrap
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tpch"

# A small star: facts ods.f (key f_id) -> dimension ods.d (key d_id) -> ods.r (key r_id).
SOURCES = """
sources:
  ods.f:
    columns: {f_id: int64, f_dim: int64, f_qty: int64, f_amount: "decimal(12,2)", f_ratio: float64, f_day: date}
    primary_key: [f_id]
  ods.d:
    columns: {d_id: int64, d_name: string, d_region: int64}
    primary_key: d_id
    buckets: 2
  ods.r:
    columns: {r_id: int64, r_name: string}
    primary_key: [r_id]
    buckets: 1
"""


def make_project(root: Path, models: dict[str, str], sources: str = SOURCES) -> Path:
    """A project folder: ``sources.yml`` and one file per model (its text dedented)."""
    (root / "models").mkdir(parents=True)
    (root / "sources.yml").write_text(textwrap.dedent(sources))
    for name, text in models.items():
        (root / "models" / f"{name}.sql").write_text(textwrap.dedent(text).lstrip())
    return root


def model(sql: str, key: str = "[f_id]", extra: str = "") -> str:
    return f"-- primary_key: {key}\n{extra}{textwrap.dedent(sql).strip()}\n"
