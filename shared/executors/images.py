"""The URL the model reads each stored image of a window from: a ``data:`` URL of the stored bytes (every local
server takes one), or, when the deployment says so, a short-lived presigned HTTPS URL (the provider fetches it)."""

from __future__ import annotations

import base64
from collections.abc import Sequence

from shared.models import Message
from shared.ports.attachments import AttachmentStore

PRESIGNED_TTL_S = 900


def has_images(messages: Sequence[Message]) -> bool:
    """Whether any of ``messages`` has a stored image."""
    return any(part.kind == "image" and part.key is not None for msg in messages for part in msg.parts)


async def image_urls(store: AttachmentStore | None, messages: Sequence[Message], *, presigned: bool) -> dict[str, str]:
    """Each stored image of ``messages`` by key; an image whose object is gone is left out (the model is told)."""
    if store is None:
        return {}
    out: dict[str, str] = {}
    for msg in messages:
        for part in msg.parts:
            if part.kind != "image" or part.key is None or part.key in out:
                continue
            if presigned:
                url = await store.presigned_get(part.key, expires_s=PRESIGNED_TTL_S)
                if url is not None:
                    out[part.key] = url
                    continue
            found = await store.get(part.key)
            if found is not None:
                data, mime = found
                out[part.key] = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    return out
