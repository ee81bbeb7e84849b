"""A request's input tokens counted locally, for a provider that reports no usage.

The messages are counted as their JSON with the shared estimate, except their images: an image's base64 says
nothing about what the model spends on it, so each counts by Qwen's rule (one token per 28x28 patch within its pixel
bounds, ``shared.media.image_tokens``), the rule the window's estimate uses too. A ``data:`` URL's width and
height are read from its header; a URL the provider fetches has no known size and counts as 1024x768, as in the
window.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json

from shared.llm.types import ChatMessage, ChatRequest
from shared.media.image_tokens import image_tokens
from shared.media.kinds import image_size
from shared.tokens import estimate_tokens

UNKNOWN_IMAGE_SIZE = (1024, 768)
"""The size assumed for an image whose bytes are not in the request (the window's guess, ``shared.tokens``)."""

_HEADER_BASE64_CHARS = 64 * 1024
"""How much of a data URL is decoded to find the image's size: headers sit at the start (a JPEG's frame marker may
follow its metadata segments, hence more than a few bytes)."""


def estimate_request_tokens(request: ChatRequest) -> int:
    """The estimated input tokens of ``request``: its messages' text and tools as JSON, its images by Qwen's rule."""
    text_only = [dataclasses.replace(m, images=()).to_openai() for m in request.messages]
    messages = json.dumps(text_only, ensure_ascii=False)
    tools = json.dumps([dataclasses.asdict(t) for t in request.tools], ensure_ascii=False) if request.tools else ""
    return estimate_tokens(messages) + estimate_tokens(tools) + sum(_images_tokens(m) for m in request.messages)


def _images_tokens(message: ChatMessage) -> int:
    return sum(image_tokens(*image_url_size(url)) for url in message.images)


def image_url_size(url: str) -> tuple[int, int]:
    """The width and height of the image at ``url`` when it is a ``data:`` URL with a readable header, else the
    assumed 1024x768."""
    if not url.startswith("data:"):
        return UNKNOWN_IMAGE_SIZE
    _, sep, encoded = url.partition(";base64,")
    if not sep:
        return UNKNOWN_IMAGE_SIZE
    head = encoded[:_HEADER_BASE64_CHARS]
    head = head[: len(head) - len(head) % 4]
    try:
        data = base64.b64decode(head, validate=False)
    except (binascii.Error, ValueError):
        return UNKNOWN_IMAGE_SIZE
    return image_size(data) or UNKNOWN_IMAGE_SIZE
