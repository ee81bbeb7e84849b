"""The URLs a client reads a page's stored parts from: presigned GETs of the bucket when the store makes them (on
AWS: ``ATTACHMENT_PRESIGNED_URLS``, at most 15 minutes), so the bytes go from S3 to the client without passing through
a function; otherwise none, and the API's authenticated parts route serves the bytes (``make dev``, whose
in-process S3 no client can reach, and the in-memory store)."""

from __future__ import annotations

from collections.abc import Sequence

from shared.models import Message
from shared.ports.attachments import AttachmentStore

MAX_READ_URL_TTL_S = 900
"""A part's read URL works at most 15 minutes (issue 43, point 6)."""


async def presigned_read_urls(
    store: AttachmentStore | None, messages: Sequence[Message], *, expires_s: int
) -> dict[str, str]:
    """Each stored part of ``messages`` by key, as a presigned GET; empty when the store makes none."""
    if store is None:
        return {}
    ttl = min(expires_s, MAX_READ_URL_TTL_S)
    urls: dict[str, str] = {}
    for msg in messages:
        for part in msg.parts:
            if part.key is None or part.key in urls:
                continue
            url = await store.presigned_get(part.key, expires_s=ttl)
            if url is None:
                return {}  # the store makes none: every part goes through the API's route
            urls[part.key] = url
    return urls
