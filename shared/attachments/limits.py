"""The bounds of a user message's images and files (settings ``ATTACHMENT_*``, docs/protocols/agent/errors.md).

Inline bytes travel base64-encoded inside the request body, which grows them by a third, so the per-message bound
stays within the body limit (``MAX_BODY_BYTES``, 1 MiB by default): 720 KiB of bytes is 960 KiB of base64.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AttachmentLimits:
    max_part_bytes: int = 512 * 1024
    """Decoded bytes of one inline part (``attachment_too_large``)."""
    max_message_bytes: int = 720 * 1024
    """Decoded bytes of every inline part of one message together (``attachment_too_large``)."""
    max_upload_bytes: int = 10 * 1024 * 1024
    """Bytes of one upload (``POST /api/v1/uploads``, ``attachment_too_large``): it goes to S3 directly, outside the
    request body; the function that attaches it reads it whole, so it stays well within the functions' memory."""
    max_parts: int = 8
    """Non-text parts in one message (``too_many_parts``)."""
    max_image_pixels: int = 16_384 * 28 * 28
    """Width x height of one image, read from its header (``image_too_large``): Qwen's largest input, 12.8 MP."""
    max_pdf_pages: int = 50
    """Pages of a PDF whose text is read; later pages are left out, and the text says so."""
    max_document_chars: int = 20_000
    """Characters of one document's text given to the model; the rest is cut, and the text says so."""
