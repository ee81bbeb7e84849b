"""The parts of a ``RunAgentInput`` user message, read and checked (no I/O: a URL is checked later, at storage).

AG-UI 1.0 parts are ``text``, ``image``, ``audio``, ``video`` and ``document``, each media part with a ``data``
source (base64 bytes and their ``mimeType``), a ``url`` source or a provider's ``file`` handle. The pre-1.0
``binary`` part (``mimeType`` with ``data``, ``url`` or ``id``, and ``filename``) is upgraded to the media part its
type names before the body is validated, as the TypeScript SDK's compatibility boundary does.

A part's bytes are checked against its declared type (:mod:`shared.media.kinds`); an image's pixels and
every part's bytes are bounded (:class:`~shared.attachments.limits.AttachmentLimits`); a PDF's text is extracted
here, so the model reads the text of a document, labelled with its name.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from shared.attachments.limits import AttachmentLimits
from shared.attachments.pdf_text import pdf_text
from shared.errors import InvalidRequest
from shared.media import kinds as media
from shared.models import MessagePart

Loc = list[str | int]


@dataclass(frozen=True, slots=True)
class PendingPart:
    """A part read from the request: what will be stored (``part``, its ``key`` not yet set) and its bytes (None
    for a URL source)."""

    part: MessagePart
    data: bytes | None
    loc: tuple[str | int, ...]


def upgrade_legacy_parts(body: bytes) -> bytes:
    """``body`` with each pre-1.0 ``binary`` part of a user message rewritten as an ``image`` or ``document`` part
    (audio and video likewise); unchanged when it has none (the common case costs a substring search)."""
    if b'"binary"' not in body:
        return body
    try:
        parsed = json.loads(body)
    except ValueError:
        return body  # the validation that follows says what is wrong
    changed = False
    for message in parsed.get("messages") or [] if isinstance(parsed, dict) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for i, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "binary":
                content[i] = _upgraded(part)
                changed = True
    return json.dumps(parsed).encode() if changed else body


def _upgraded(part: dict[str, Any]) -> dict[str, Any]:
    mime = str(part.get("mimeType") or "")
    family = mime.split("/", 1)[0]
    kind = family if family in ("image", "audio", "video") else "document"
    if part.get("data") is not None:
        source: dict[str, Any] = {"type": "data", "value": part["data"], "mimeType": mime}
    elif part.get("url") is not None:
        source = {"type": "url", "value": part["url"], "mimeType": mime}
    else:
        source = {"type": "file", "value": part.get("id") or "", "mimeType": mime}
    upgraded: dict[str, Any] = {"type": kind, "source": source}
    if part.get("filename"):
        upgraded["metadata"] = {"filename": part["filename"]}
    return upgraded


def _invalid(message: str, loc: Loc, msg: str, *, code: str) -> InvalidRequest:
    return InvalidRequest(message, code=code, details=[{"loc": loc, "msg": msg, "type": "value_error"}])


def _filename(part: Any) -> str | None:
    metadata = getattr(part, "metadata", None)
    if isinstance(metadata, dict):
        for field in ("filename", "name"):
            value = metadata.get(field)
            if isinstance(value, str) and value.strip():
                return value.strip()[:255]
    return None


def read_parts(content: list[Any], index: int, limits: AttachmentLimits) -> tuple[str, list[PendingPart]]:
    """The text of a message's parts (joined) and its media parts, each checked."""
    texts: list[str] = []
    pending: list[PendingPart] = []
    total = 0
    for position, part in enumerate(content):
        loc: Loc = ["body", "messages", index, "content", position]
        kind = getattr(part, "type", None)
        if kind == "text":
            texts.append(str(getattr(part, "text", "")))
            continue
        if len(pending) >= limits.max_parts:
            raise _invalid(
                f"a message may carry at most {limits.max_parts} images or files",
                ["body", "messages", index, "content"],
                "too many parts",
                code="too_many_parts",
            )
        item = _read_part(part, str(kind), loc, limits)
        total += len(item.data or b"")
        if total > limits.max_message_bytes:
            raise _invalid(
                f"the inline images and files of a message are larger than {limits.max_message_bytes} bytes",
                loc,
                "message too large",
                code="attachment_too_large",
            )
        pending.append(item)
    return "\n".join(texts), pending


def _read_part(part: Any, kind: str, loc: Loc, limits: AttachmentLimits) -> PendingPart:
    source = part.source
    filename = _filename(part)
    declared = (getattr(source, "mime_type", None) or "").lower().split(";", 1)[0].strip()
    if source.type == "file":
        raise _invalid(
            "a provider file handle cannot be used here; send the bytes or an https URL",
            [*loc, "source"],
            "file sources are not supported",
            code="unsupported_source",
        )
    if source.type == "url":
        # Checked (and refused or kept) when the message is stored: see shared.attachments.storage.
        stored = MessagePart(
            kind=kind, mime_type=declared or "application/octet-stream", url=source.value, filename=filename
        )
        return PendingPart(stored, None, tuple(loc))
    return checked_part(kind, declared, _decoded(source.value, loc, limits), loc, limits, filename)


def checked_part(
    kind: str, declared: str, data: bytes, loc: Loc, limits: AttachmentLimits, filename: str | None = None
) -> PendingPart:
    """A part from its bytes, checked as an inline part is: its type from the bytes, an image's pixels, a
    document's text (an upload attached to a message comes here too: ``shared.attachments.uploads``)."""
    _check_type(kind, declared, data, loc)
    width = height = None
    text = None
    if kind == "image":
        width, height = _image_size(data, loc, limits)
    elif kind == "document":
        text = _document_text(declared, data, limits)
    stored = MessagePart(
        kind=kind, mime_type=declared, filename=filename, size=len(data), width=width, height=height, text=text
    )
    return PendingPart(stored, data, tuple(loc))


def _check_type(kind: str, declared: str, data: bytes, loc: Loc) -> None:
    """An image or document of a type accepted here, whose bytes are what it declares."""
    accepted = {"image": media.IMAGE_TYPES, "document": media.DOCUMENT_TYPES}.get(kind)
    if accepted is None:
        return  # audio and video: the profile decides (shared.attachments.storage.check_parts)
    if declared not in accepted:
        hint = "PNG, JPEG, WebP or GIF" if kind == "image" else "PDF or text"
        raise _invalid(
            f"{kind} type {declared!r} is not accepted; send {hint}",
            [*loc, "source", "mimeType"],
            f"unsupported {kind} type",
            code="unsupported_media_type",
        )
    if not media.matches(declared, data):
        raise _invalid(
            f"the part's bytes are not {declared}",
            [*loc, "source", "value"],
            "bytes do not match mimeType",
            code="media_type_mismatch",
        )


def _image_size(data: bytes, loc: Loc, limits: AttachmentLimits) -> tuple[int, int]:
    size = media.image_size(data)
    if size is None:
        raise _invalid(
            "the image's header cannot be read",
            [*loc, "source", "value"],
            "unreadable header",
            code="media_type_mismatch",
        )
    width, height = size
    if width * height > limits.max_image_pixels:
        raise _invalid(
            f"an image may have at most {limits.max_image_pixels} pixels; this one is {width}x{height}",
            [*loc, "source", "value"],
            "too many pixels",
            code="image_too_large",
        )
    return width, height


def _document_text(declared: str, data: bytes, limits: AttachmentLimits) -> str:
    if declared == media.PDF:
        return pdf_text(data, max_pages=limits.max_pdf_pages, max_chars=limits.max_document_chars)
    text = data.decode("utf-8")
    if len(text) > limits.max_document_chars:
        text = text[: limits.max_document_chars] + f"\n[text cut at {limits.max_document_chars} characters]"
    return text


def _decoded(value: str, loc: Loc, limits: AttachmentLimits) -> bytes:
    # Bound the encoded length first: decoding a huge string only to refuse it would be wasted memory.
    if len(value) > (limits.max_part_bytes + 2) // 3 * 4 + 4:
        raise _invalid(
            f"an inline part may carry at most {limits.max_part_bytes} bytes",
            [*loc, "source", "value"],
            "part too large",
            code="attachment_too_large",
        )
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _invalid(
            "the part's data is not base64", [*loc, "source", "value"], "invalid base64", code="invalid_request"
        ) from exc
    if len(data) > limits.max_part_bytes:
        raise _invalid(
            f"an inline part may carry at most {limits.max_part_bytes} bytes",
            [*loc, "source", "value"],
            "part too large",
            code="attachment_too_large",
        )
    if not data:
        raise _invalid("the part's data is empty", [*loc, "source", "value"], "empty data", code="invalid_request")
    return data
