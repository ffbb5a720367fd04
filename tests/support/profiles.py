"""Hypothesis profiles: one knob for how hard every property test searches.

Each property test states its example count as written for CI (``@settings(max_examples=examples(60))``: what a
test's case costs decides its count); the profile scales every count at once:

- ``ci`` (``make test``, and the default): the counts as written.
- ``dev`` (``make test-fast``; ``HYPOTHESIS_PROFILE=dev``): a fifth of them, at least two: a quick look.
- ``thorough`` (``make test-thorough``): five times them, for a night's run after changing a planner, a merge engine
  or the log's format.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE_ENV = "HYPOTHESIS_PROFILE"
# max_examples per profile; 100 (hypothesis' own default) means "as written".
AS_WRITTEN = 100
PROFILES = {"ci": AS_WRITTEN, "dev": AS_WRITTEN // 5, "thorough": AS_WRITTEN * 5}


def load_profile() -> str:
    """Registers the profiles and loads the one ``HYPOTHESIS_PROFILE`` names (``ci`` when unset); returns its name."""
    for name, count in PROFILES.items():
        settings.register_profile(name, max_examples=count, deadline=None, print_blob=True)
    name = os.environ.get(PROFILE_ENV, "ci")
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={name!r} is not a profile: use one of {', '.join(PROFILES)}")
    settings.load_profile(name)
    return name


def examples(as_written: int) -> int:
    """``as_written`` scaled by the loaded profile (at least 2: a property is never checked on one example)."""
    return max(2, round(as_written * settings.default.max_examples / AS_WRITTEN))
