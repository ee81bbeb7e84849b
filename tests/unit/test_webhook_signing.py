"""Our Standard Webhooks signatures verify with the reference library (standardwebhooks), and a changed body,
id or secret does not."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from shared.webhooks.signing import SECRET_PREFIX, new_secret, signed_headers


def test_a_signature_verifies_with_the_reference_library() -> None:
    # GIVEN a tenant secret and an event body
    secret = new_secret()
    body = json.dumps({"type": "run.succeeded", "data": {"runId": "r1"}}).encode()
    # WHEN it is signed now
    headers = signed_headers(secret, "msg_1", datetime.now(UTC), body)
    # THEN the library verifies it and parses the body
    assert Webhook(secret).verify(body, headers) == {"type": "run.succeeded", "data": {"runId": "r1"}}
    assert secret.startswith(SECRET_PREFIX)
    assert headers["webhook-signature"].startswith("v1,")


@pytest.mark.parametrize("tamper", ["body", "id", "secret", "timestamp"])
def test_a_tampered_delivery_does_not_verify(tamper: str) -> None:
    secret = new_secret()
    body = b'{"type":"run.failed"}'
    headers = signed_headers(secret, "msg_1", datetime.now(UTC), body)
    if tamper == "body":
        body = b'{"type":"run.succeeded"}'
    elif tamper == "id":
        headers["webhook-id"] = "msg_2"
    elif tamper == "secret":
        secret = new_secret()
    else:
        headers["webhook-timestamp"] = str(int(headers["webhook-timestamp"]) - 1)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, headers)


def test_an_old_signature_is_refused_by_the_library() -> None:
    secret = new_secret()
    body = b"{}"
    headers = signed_headers(secret, "msg_1", datetime(2020, 1, 1, tzinfo=UTC), body)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, headers)
