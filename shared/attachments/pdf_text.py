"""A PDF's text, bounded in pages and characters, with pypdf (pure Python: nothing native ships)."""

from __future__ import annotations

import io
import logging

from shared.errors import InvalidRequest

logger = logging.getLogger(__name__)


def pdf_text(data: bytes, *, max_pages: int, max_chars: int) -> str:
    """The text of the first ``max_pages`` pages, cut at ``max_chars``; a note says what was left out.

    Raises:
        InvalidRequest: ``unreadable_document``, the bytes start like a PDF but pypdf cannot read them.
    """
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = reader.pages
        total = len(pages)
        chunks: list[str] = []
        length = 0
        for page in pages[:max_pages]:
            text = page.extract_text() or ""
            chunks.append(text)
            length += len(text)
            if length >= max_chars:
                break
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        raise InvalidRequest("the PDF cannot be read", code="unreadable_document") from exc
    text = "\n".join(chunks).strip()
    notes = []
    if len(text) > max_chars:
        text = text[:max_chars]
        notes.append(f"[text cut at {max_chars} characters]")
    if total > max_pages:
        notes.append(f"[only the first {max_pages} of {total} pages read]")
    return "\n".join([text, *notes]) if notes else text
