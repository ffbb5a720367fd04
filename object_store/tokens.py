"""The token a conditional write carries in its object's user metadata (hidden from callers): a retry that meets
its own first attempt, applied, finds its token there and reports success, not a conflict (`object_store.base`).
Both the store and its multipart writer stamp it."""

from __future__ import annotations

import uuid

#: User-metadata key that carries the unique token of a conditional write.
WRITE_TOKEN_KEY = "lakestream-write-token"


def new_token() -> str:
    """A fresh write token."""
    return uuid.uuid4().hex
