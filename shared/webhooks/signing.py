"""Standard Webhooks signatures (https://www.standardwebhooks.com): the headers ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature``, the last ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``
with a secret written ``whsec_<base64 key>``.

The algorithm is a few lines; the reference library (``standardwebhooks``) verifies what these produce in the
tests, so the runtime carries no extra dependency.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from datetime import datetime

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh signing secret, ``whsec_`` and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def _key(secret: str) -> bytes:
    raw = secret.removeprefix(SECRET_PREFIX)
    key = base64.b64decode(raw + "=" * (-len(raw) % 4))
    if not key:
        raise ValueError("empty webhook secret")
    return key


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of ``body`` sent as ``message_id`` at ``timestamp`` (epoch seconds)."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signed_headers(secret: str, message_id: str, sent_at: datetime, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers, and the JSON content type."""
    timestamp = int(sent_at.timestamp())
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, message_id, timestamp, body),
    }
