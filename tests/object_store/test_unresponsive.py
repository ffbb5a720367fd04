"""An S3 endpoint that accepts connections and never answers: retries are announced and bounded."""

from __future__ import annotations

import logging
import time

import pytest

from object_store import StoreUnavailable, open_store


def _store(endpoint: str, **options):
    return open_store(
        "s3://bucket/wh", endpoint_url=endpoint, access_key_id="k", secret_access_key="s", connect_timeout=1, **options
    )


def test_each_retry_against_a_silent_endpoint_logs_a_warning(silent_endpoint: str, caplog) -> None:
    """It retried for 8 x 30 s (read timeout) plus backoff, about 4.5 minutes, without a word."""
    store = _store(silent_endpoint, read_timeout=0.3, max_attempts=3)
    with caplog.at_level(logging.WARNING, logger="object_store"), pytest.raises(StoreUnavailable) as info:
        store.get("tables/t.json")
    assert "GetObject s3://bucket/wh/tables/t.json failed after 3 attempts" in str(info.value)
    assert f"Check that the store at {silent_endpoint} is reachable and answers" in str(info.value)
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) == 2, caplog.text  # one per retry
    assert "GetObject /bucket/wh/tables/t.json" in retries[0] and "ReadTimeoutError (attempt 1 of 3" in retries[0]


def test_retries_stop_at_the_deadline(silent_endpoint: str) -> None:
    store = _store(silent_endpoint, read_timeout=0.3, max_attempts=100, retry_deadline=2)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match=r"no retry after 2 s\): ReadTimeoutError"):
        store.head("x")
    assert time.monotonic() - started < 2 + 0.3 + 1.5  # the deadline, one timeout, slack for a busy machine


def test_only_a_failed_write_says_it_may_have_been_applied(silent_endpoint: str) -> None:
    """A failed LIST said "A write may or may not have been applied": nothing was written, so it must not."""
    store = _store(silent_endpoint, read_timeout=0.3, max_attempts=1)
    with pytest.raises(StoreUnavailable) as listing:
        list(store.list("tables/"))
    assert "ListObjectsV2" in str(listing.value)
    assert "may or may not" not in str(listing.value)
    with pytest.raises(StoreUnavailable) as writing:
        store.put("tables/t.json", b"{}")
    assert "PutObject" in str(writing.value)
    assert "may or may not have been applied" in str(writing.value)
