"""``POST /api/v1/uploads`` (a file too large to send inline: where to PUT it, and the ``agent-upload://`` URL a
message part refers to it by) and ``PUT /api/v1/uploads/{uploadId}`` (its bytes, taken by the API where the store
makes no presigned PUT: ``make dev``). Everything is in ``shared.attachments.uploads``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from functions.agent_api.deps import Caller, services_of
from shared.attachments.uploads import Uploads, declared_size
from shared.errors import InvalidRequest, NotFound

router = APIRouter(prefix="/api/v1/uploads", tags=["uploads"])


async def uploads_service(request: Request) -> Uploads:
    return services_of(request).uploads


UploadsService = Annotated[Uploads, Depends(uploads_service)]


class UploadRequest(BaseModel):
    """The body of ``POST /api/v1/uploads``."""

    model_config = ConfigDict(extra="forbid")

    mime_type: str = Field(alias="mimeType", min_length=1, max_length=100)
    size: int = Field(ge=1)
    filename: str | None = Field(default=None, max_length=255)


@router.post("", status_code=201)
async def create_upload(caller: Caller, uploads: UploadsService, body: UploadRequest) -> dict[str, Any]:
    ticket = await uploads.create(caller, body.mime_type, body.size)
    view: dict[str, Any] = {
        "uploadId": ticket.upload_id,
        "url": ticket.url,
        "upload": {
            "method": "PUT",
            "url": ticket.put_url,
            "headers": dict(ticket.headers),
            "authenticated": ticket.via_api,
        },
        "expiresAt": ticket.expires_at.isoformat(),
    }
    if body.filename:
        view["filename"] = body.filename
    return view


@router.put("/{uploadId}", status_code=204)
async def put_upload(caller: Caller, uploads: UploadsService, uploadId: str, request: Request) -> Response:
    size = declared_size(uploadId)
    if size is None:
        raise NotFound("upload not found", code="upload_not_found")
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > size:  # never hold more than was declared
            raise InvalidRequest(f"the upload was declared as {size} bytes", code="upload_mismatch")
        chunks.append(chunk)
    await uploads.receive(caller, uploadId, b"".join(chunks), request.headers.get("content-type", ""))
    return Response(status_code=204)
