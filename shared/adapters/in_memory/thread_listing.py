"""The in-memory thread list's order and its cursors: the same order and the same refusals as DynamoDB's (an
opaque cursor that must point into the caller's own listing)."""

from __future__ import annotations

import base64
import binascii
import json

from shared.errors import InvalidRequest
from shared.models import Identity, Thread


def listing_key(thread: Thread) -> str:
    """The order of ``list_threads``: most recently updated first, thread id breaking ties (as the GSI sort key)."""
    return f"{thread.updated_at.isoformat()}#{thread.thread_id}"


def partition_of(identity: Identity) -> str:
    return f"{identity.tenant_id}/{identity.user_id}"


def encode_cursor(partition: str, after: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"p": partition, "k": after}).encode()).decode()


def decode_cursor(cursor: str, partition: str) -> str:
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise InvalidRequest("malformed cursor", code="invalid_cursor") from exc
    if not isinstance(value, dict) or not isinstance(value.get("k"), str):
        raise InvalidRequest("malformed cursor", code="invalid_cursor")
    # A cursor is opaque but client-held: it must point into the caller's own listing.
    if value.get("p") != partition:
        raise InvalidRequest("malformed cursor", code="invalid_cursor")
    return str(value["k"])
