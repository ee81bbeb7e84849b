"""The in-memory attachment store: the fake of ``shared.ports.attachments.AttachmentStore``."""

from __future__ import annotations


class InMemoryAttachments:
    """Objects in a dict; it makes no presigned URLs (the API's routes serve and take the bytes)."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, str]] = {}

    async def put(self, key: str, data: bytes, mime_type: str) -> None:
        self.objects[key] = (bytes(data), mime_type)

    async def get(self, key: str) -> tuple[bytes, str] | None:
        return self.objects.get(key)

    async def delete_prefix(self, prefix: str) -> int:
        doomed = [key for key in self.objects if key.startswith(prefix)]
        for key in doomed:
            del self.objects[key]
        return len(doomed)

    async def presigned_get(self, key: str, *, expires_s: int) -> str | None:
        return None

    async def head(self, key: str) -> tuple[int, str] | None:
        found = self.objects.get(key)
        return None if found is None else (len(found[0]), found[1])

    async def presigned_put(self, key: str, *, mime_type: str, size: int, expires_s: int) -> str | None:
        return None
