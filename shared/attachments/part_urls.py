"""Where a reader opens a stored part of a message: one rule for every reader (the history page, the messages
snapshot of a thread's follower), so each gives the same URL for the same part.

A client's URL source is its own URL; a part stored in the attachment bucket is its presigned GET when the reader
was given one (on AWS, ``shared.attachments.read_urls``), else this API's parts route, which answers only the
caller's token (``GET /api/v1/threads/{threadId}/messages/{messageId}/parts/{n}``, served by ``make dev``).
"""

from __future__ import annotations

from collections.abc import Mapping

from shared.models import Message


def part_route(thread_id: str, message_id: str, n: int) -> str:
    """The API route that serves the ``n``-th part of a stored message."""
    return f"/api/v1/threads/{thread_id}/messages/{message_id}/parts/{n}"


def part_url(msg: Message, n: int, presigned: Mapping[str, str] | None = None) -> str:
    """The URL a reader opens the ``n``-th part of ``msg`` at; ``presigned``: stored parts' presigned GETs by key."""
    part = msg.parts[n]
    signed = presigned.get(part.key) if presigned is not None and part.key is not None else None
    return part.url or signed or part_route(msg.thread_id, msg.id, n)
