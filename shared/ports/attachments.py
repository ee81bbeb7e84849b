"""The attachment port: the bytes of the images and files of user messages, as objects under a key.

Keys are built by ``shared.attachments.storage`` (``{tenant}/{user}/{thread}/...``), so a thread's or a user's
objects are one prefix, which deletion removes.
"""

from __future__ import annotations

from typing import Protocol


class AttachmentStore(Protocol):
    """Objects by key. Fake: ``InMemoryAttachments`` (shared/adapters/in_memory/attachments.py); adapter:
    ``S3Attachments`` (shared/adapters/aws/attachments.py); contract: tests/contract/test_attachment_store_contract.py.
    """

    async def put(self, key: str, data: bytes, mime_type: str) -> None:
        """Store ``data`` under ``key`` (replacing what was there)."""
        ...

    async def get(self, key: str) -> tuple[bytes, str] | None:
        """The bytes under ``key`` and their MIME type; None when there is no such object."""
        ...

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object whose key starts with ``prefix``; returns how many were deleted."""
        ...

    async def presigned_get(self, key: str, *, expires_s: int) -> str | None:
        """A URL that reads the object for ``expires_s`` seconds without credentials; None when this store cannot
        make one (then the API serves the bytes itself, behind the caller's token)."""
        ...

    async def head(self, key: str) -> tuple[int, str] | None:
        """The size in bytes and the MIME type of the object under ``key``, without its bytes; None when absent."""
        ...

    async def presigned_put(self, key: str, *, mime_type: str, size: int, expires_s: int) -> str | None:
        """A URL a client PUTs ``size`` bytes of ``mime_type`` to, under ``key``, for ``expires_s`` seconds without
        credentials (the request's ``Content-Type`` is signed); None when this store cannot make one (then the API
        takes the bytes itself, behind the caller's token)."""
        ...
