"""Uploads (issue 43, point 2): a file too large to travel inline goes to the attachment bucket first, and a message
refers to it by the stack's own URL, ``agent-upload://{uploadId}``.

``POST /api/v1/uploads`` declares the type and size; the answer is a presigned S3 PUT (15 minutes, ``Content-Type``
signed) or, where the store makes none (``make dev``, the in-memory store), the API's own authenticated
``PUT /api/v1/uploads/{uploadId}``. The object is ``uploads/{tenant}/{user}/{uploadId}``: one prefix the bucket's
lifecycle rule expires after a day (a lifecycle filter matches a key's beginning only), and the caller's own
prefix under it. The upload id ends with the declared size, so the server needs no record of the declaration: a
forged id names no object.

When a message refers to an upload, the server never fetches a URL: it looks the object up under the caller's
prefix (another user's upload is not found: ``404``), checks its size and type against the declaration (``HEAD``),
reads it and checks the bytes as an inline part's; the message's step that stores parts then copies it under the
thread (``shared.attachments.storage``), out of reach of the lifecycle rule.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.attachments.limits import AttachmentLimits
from shared.attachments.parts import PendingPart, checked_part
from shared.attachments.storage import user_prefix
from shared.errors import InvalidRequest, NotFound
from shared.media import kinds as media
from shared.models import Identity, utc_now
from shared.ports.attachments import AttachmentStore

UPLOAD_SCHEME = "agent-upload://"
UPLOADS_PREFIX = "uploads/"
UPLOAD_URL_TTL_S = 900
_UPLOAD_ID = re.compile(r"^[0-9a-f]{32}-([1-9][0-9]{0,9})$")
ACCEPTED_TYPES = media.IMAGE_TYPES | media.DOCUMENT_TYPES


def user_uploads_prefix(tenant_id: str, user_id: str) -> str:
    """Every upload of a user not yet expired (a user's erasure deletes it)."""
    return f"{UPLOADS_PREFIX}{user_prefix(tenant_id, user_id)}"


def upload_key(caller: Identity, upload_id: str) -> str:
    return f"{user_uploads_prefix(caller.tenant_id, caller.user_id)}{upload_id}"


def declared_size(upload_id: str) -> int | None:
    """The size an upload id was created for; None for a string that is no upload id."""
    match = _UPLOAD_ID.match(upload_id)
    return int(match.group(1)) if match else None


def is_upload_url(url: str | None) -> bool:
    return url is not None and url.startswith(UPLOAD_SCHEME)


@dataclass(frozen=True, slots=True)
class UploadTicket:
    upload_id: str
    url: str
    """What a message part's ``source.value`` carries (``agent-upload://{uploadId}``)."""
    put_url: str
    """Where the client PUTs the bytes: a presigned S3 URL, or the API's route (then with the caller's token)."""
    headers: Mapping[str, str]
    """The headers the PUT must send."""
    expires_at: datetime
    via_api: bool


def _refuse(message: str, loc: list[str | int], code: str) -> InvalidRequest:
    return InvalidRequest(message, code=code, details=[{"loc": loc, "msg": message, "type": "value_error"}])


class Uploads:
    """Creating an upload, taking its bytes where S3 cannot (``make dev``), and attaching it to a message."""

    def __init__(self, store: AttachmentStore, limits: AttachmentLimits) -> None:
        self._store = store
        self._limits = limits

    async def create(self, caller: Identity, mime_type: str, size: int) -> UploadTicket:
        """A new upload of ``size`` bytes of ``mime_type`` (an image or document type; at most
        ``ATTACHMENT_MAX_UPLOAD_BYTES``)."""
        mime = mime_type.lower().split(";", 1)[0].strip()
        if mime not in ACCEPTED_TYPES:
            raise _refuse(
                f"type {mime!r} is not accepted for an upload", ["body", "mimeType"], "unsupported_media_type"
            )
        if not 1 <= size <= self._limits.max_upload_bytes:
            raise _refuse(
                f"an upload has 1 to {self._limits.max_upload_bytes} bytes", ["body", "size"], "attachment_too_large"
            )
        upload_id = f"{uuid.uuid4().hex}-{size}"
        key = upload_key(caller, upload_id)
        presigned = await self._store.presigned_put(key, mime_type=mime, size=size, expires_s=UPLOAD_URL_TTL_S)
        return UploadTicket(
            upload_id=upload_id,
            url=f"{UPLOAD_SCHEME}{upload_id}",
            put_url=presigned or f"/api/v1/uploads/{upload_id}",
            headers={"Content-Type": mime},
            expires_at=utc_now() + timedelta(seconds=UPLOAD_URL_TTL_S),
            via_api=presigned is None,
        )

    async def receive(self, caller: Identity, upload_id: str, data: bytes, content_type: str) -> None:
        """The bytes of an upload, PUT to the API (where the store makes no presigned PUT): the declared size and an
        accepted type, under the caller's prefix."""
        size = declared_size(upload_id)
        if size is None:
            raise NotFound("upload not found", code="upload_not_found")
        mime = content_type.lower().split(";", 1)[0].strip()
        if mime not in ACCEPTED_TYPES:
            raise _refuse(f"type {mime!r} is not accepted for an upload", ["header", "content-type"], "upload_mismatch")
        if len(data) != size:
            raise _refuse(f"the upload was declared as {size} bytes; {len(data)} came", ["body"], "upload_mismatch")
        await self._store.put(upload_key(caller, upload_id), data, mime)

    async def attach(self, caller: Identity, item: PendingPart) -> PendingPart:
        """The part an ``agent-upload://`` source refers to, read from the caller's uploads and checked as an inline
        part (``404 upload_not_found``: none of the caller's; ``422 upload_mismatch``: not its declared size or
        type)."""
        loc = [*item.loc, "source", "value"]
        upload_id = (item.part.url or "").removeprefix(UPLOAD_SCHEME)
        size = declared_size(upload_id)
        key = upload_key(caller, upload_id)
        head = await self._store.head(key) if size is not None else None
        if size is None or head is None:
            raise NotFound("upload not found", code="upload_not_found")
        stored_size, stored_type = head
        declared = item.part.mime_type
        if stored_size != size:
            raise _refuse(f"the upload was declared as {size} bytes; it has {stored_size}", loc, "upload_mismatch")
        if declared not in ("", "application/octet-stream") and declared != stored_type:
            raise _refuse(
                f"the upload is {stored_type}, not {declared}", [*item.loc, "source", "mimeType"], "upload_mismatch"
            )
        found = await self._store.get(key)
        if found is None:
            raise NotFound("upload not found", code="upload_not_found")
        return checked_part(item.part.kind, stored_type, found[0], list(item.loc), self._limits, item.part.filename)

    async def attach_all(
        self, caller: Identity, parts: Mapping[str, tuple[PendingPart, ...]]
    ) -> dict[str, tuple[PendingPart, ...]]:
        """``parts`` with each upload reference replaced by the upload's checked bytes (stored under the thread
        next, as an inline part is)."""
        out: dict[str, tuple[PendingPart, ...]] = {}
        for message_id, items in parts.items():
            out[message_id] = tuple(
                [await self.attach(caller, item) if is_upload_url(item.part.url) else item for item in items]
            )
        return out
