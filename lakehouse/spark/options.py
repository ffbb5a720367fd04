"""What the ``lakestream`` format's reads, streams and writes share about their options: option names checked,
offset maps and flags parsed. Spark's options are case-insensitive: names are compared in lower case."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from lakehouse.errors import InvalidArgument

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")


def parse_offsets(text: str, option: str = "as_of") -> dict[int, int]:
    """An offset map option: "0:120,1:98" or JSON ({"0": 120, "1": 98}); checked against the table later."""
    text = text.strip()
    if text.startswith("{"):
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise InvalidArgument(f"option {option}: not valid JSON ({exc}): {text!r}") from None
        try:
            return {int(b): int(o) for b, o in raw.items()}
        except (TypeError, ValueError):
            raise InvalidArgument(f"option {option} maps bucket numbers to offsets, got {text!r}") from None
    offsets: dict[int, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        bucket, sep, offset = part.partition(":")
        if not sep or not bucket.strip().isdigit() or not offset.strip().isdigit():
            raise InvalidArgument(
                f'option {option} takes "bucket:offset,..." (e.g. "0:120,1:98") or JSON, got {part!r} in {text!r}'
            )
        if int(bucket) in offsets:
            raise InvalidArgument(f"option {option} names bucket {int(bucket)} twice ({text!r})")
        offsets[int(bucket)] = int(offset)
    if not offsets:
        raise InvalidArgument(f"option {option} is empty: give every bucket's offset, e.g. 0:120,1:98")
    return offsets


def known_options(options: Mapping[str, Any], allowed: Sequence[str], what: str) -> dict[str, Any]:
    """``options`` with lower-case names (Spark's are case-insensitive), every one of them ``allowed``."""
    opts = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(set(opts) - set(allowed))
    if unknown:
        raise InvalidArgument(
            f"unknown option(s) {unknown} for {what}; it takes {list(allowed)}. Store credentials are never "
            "options (the plan shows options): they come from lakestream's settings (environment / YAML) or "
            "lakehouse.spark.source.register(spark, lakehouse)"
        )
    return opts


def flag(options: Mapping[str, str], key: str) -> bool:
    value = str(options.get(key, "false")).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidArgument(f"option {key} is true or false, got {value!r}")
