"""The S3 attachment store: the stack's attachment bucket (template.yaml ``AttachmentsBucket``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError


class S3Attachments:
    """Objects in one bucket. ``presign``: whether :meth:`presigned_get` makes URLs (False under ``make dev``, whose
    in-process S3 no browser can reach: the API route serves the bytes there)."""

    def __init__(self, client: Callable[[], Any], bucket: str, *, presign: bool = True) -> None:
        self._client_factory = client
        self._client: Any = None
        self._bucket = bucket
        self._presign = presign

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    async def put(self, key: str, data: bytes, mime_type: str) -> None:
        await asyncio.to_thread(
            lambda: self.client.put_object(Bucket=self._bucket, Key=key, Body=data, ContentType=mime_type)
        )

    async def get(self, key: str) -> tuple[bytes, str] | None:
        def read() -> tuple[bytes, str] | None:
            try:
                resp = self.client.get_object(Bucket=self._bucket, Key=key)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    return None
                raise
            return resp["Body"].read(), str(resp.get("ContentType") or "application/octet-stream")

        return await asyncio.to_thread(read)

    async def head(self, key: str) -> tuple[int, str] | None:
        def read() -> tuple[int, str] | None:
            try:
                resp = self.client.head_object(Bucket=self._bucket, Key=key)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                    return None
                raise
            return int(resp["ContentLength"]), str(resp.get("ContentType") or "application/octet-stream")

        return await asyncio.to_thread(read)

    async def delete_prefix(self, prefix: str) -> int:
        def delete() -> int:
            deleted = 0
            token: str | None = None
            while True:
                args: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix}
                if token:
                    args["ContinuationToken"] = token
                page = self.client.list_objects_v2(**args)
                keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
                if keys:
                    # At most 1,000 keys per page, the most one DeleteObjects takes.
                    self.client.delete_objects(Bucket=self._bucket, Delete={"Objects": keys, "Quiet": True})
                    deleted += len(keys)
                token = page.get("NextContinuationToken")
                if not token:
                    return deleted

        return await asyncio.to_thread(delete)

    async def presigned_get(self, key: str, *, expires_s: int) -> str | None:
        if not self._presign:
            return None
        params = {"Bucket": self._bucket, "Key": key}
        url = await asyncio.to_thread(
            lambda: self.client.generate_presigned_url("get_object", Params=params, ExpiresIn=expires_s)
        )
        return str(url)

    async def presigned_put(self, key: str, *, mime_type: str, size: int, expires_s: int) -> str | None:
        if not self._presign:
            return None
        # Content-Type is signed (a PUT with another type is refused by S3); the size is checked when a message
        # attaches the upload (shared.attachments.uploads), as S3 does not bound a presigned PUT's length.
        params = {"Bucket": self._bucket, "Key": key, "ContentType": mime_type}
        url = await asyncio.to_thread(
            lambda: self.client.generate_presigned_url("put_object", Params=params, ExpiresIn=expires_s)
        )
        return str(url)
