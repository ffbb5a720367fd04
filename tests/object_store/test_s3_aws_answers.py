"""How S3Store reads answers AWS S3 gives and the S3 servers of the tests (SeaweedFS) do not: stubbed with
botocore's Stubber, no network."""

from __future__ import annotations

import pytest
from botocore.stub import Stubber

from object_store.errors import NotFound, PreconditionFailed
from object_store.s3 import S3Store


@pytest.fixture
def store() -> S3Store:
    return S3Store("bucket", "wh", region="us-east-1", access_key_id="k", secret_access_key="s", probe=False)


def test_if_match_on_a_missing_key_is_a_lost_compare_and_swap_on_aws(store: S3Store) -> None:
    """AWS: 404 NoSuchKey for PutObject If-Match on a key that does not exist (SeaweedFS, MinIO: 412)."""
    with Stubber(store.client) as stub:
        stub.add_client_error("put_object", "NoSuchKey", http_status_code=404)
        # then the HEAD that asks whether an earlier attempt of ours landed: the key is still missing
        stub.add_client_error("head_object", "404", http_status_code=404)
        with pytest.raises(PreconditionFailed):
            store.put("pointer", b"x", if_match="0123")
        stub.add_client_error("delete_object", "NoSuchKey", http_status_code=404)
        with pytest.raises(PreconditionFailed):
            store.delete("pointer", if_match="0123")
        stub.assert_no_pending_responses()


def test_a_409_conditional_conflict_is_retried(store: S3Store) -> None:
    with Stubber(store.client) as stub:
        stub.add_client_error("put_object", "ConditionalRequestConflict", http_status_code=409)
        stub.add_response("put_object", {"ETag": '"abc"'})
        assert store._put("k", b"x", if_match=None, if_none_match=True, metadata={}) == "abc"
        stub.assert_no_pending_responses()


def test_a_missing_key_without_if_match_stays_not_found(store: S3Store) -> None:
    with Stubber(store.client) as stub:
        stub.add_client_error("get_object", "NoSuchKey", http_status_code=404)
        with pytest.raises(NotFound):
            store.get("k")
