"""Contract of the attachment port: the same cases against the in-memory fake and S3 (moto)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from shared.adapters.aws.attachments import S3Attachments
from shared.adapters.aws.clients import client_factory
from shared.adapters.in_memory.attachments import InMemoryAttachments

Store = InMemoryAttachments | S3Attachments
BUCKET = "attachments-test"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40


@pytest.fixture(params=["memory", "s3"])
def attachments(request: pytest.FixtureRequest) -> Store:
    if request.param == "memory":
        return InMemoryAttachments()
    request.getfixturevalue("aws")
    make = client_factory("s3", region="us-east-1")
    make().create_bucket(Bucket=BUCKET)
    return S3Attachments(make, BUCKET)


async def test_an_object_reads_back_with_its_type_and_a_missing_one_is_none(attachments: Store) -> None:
    await attachments.put("t/u/th/m1/0", PNG, "image/png")
    assert await attachments.get("t/u/th/m1/0") == (PNG, "image/png")
    assert await attachments.get("t/u/th/m1/1") is None
    await attachments.put("t/u/th/m1/0", b"%PDF-1.4", "application/pdf")
    assert await attachments.get("t/u/th/m1/0") == (b"%PDF-1.4", "application/pdf")


async def test_deleting_a_prefix_removes_only_the_objects_under_it(attachments: Store) -> None:
    for key in ("t/alice/th1/m/0", "t/alice/th1/m/1", "t/alice/th10/m/0", "t/bob/th1/m/0"):
        await attachments.put(key, PNG, "image/png")
    assert await attachments.delete_prefix("t/alice/th1/") == 2
    assert await attachments.get("t/alice/th1/m/0") is None
    assert await attachments.get("t/alice/th10/m/0") == (PNG, "image/png")
    assert await attachments.get("t/bob/th1/m/0") == (PNG, "image/png")
    assert await attachments.delete_prefix("t/alice/th1/") == 0


async def test_deleting_a_prefix_goes_past_one_page_of_keys(attachments: Store) -> None:
    for n in range(1_005):
        await attachments.put(f"t/alice/th/m/{n}", b"x", "text/plain")
    assert await attachments.delete_prefix("t/alice/") == 1_005
    assert await attachments.get("t/alice/th/m/1004") is None


async def test_a_presigned_url_reads_the_object_when_the_store_makes_one(attachments: Store, aws: Any) -> None:
    await attachments.put("t/u/th/m1/0", PNG, "image/png")
    url = await attachments.presigned_get("t/u/th/m1/0", expires_s=900)
    if isinstance(attachments, InMemoryAttachments):
        assert url is None  # the API route serves the bytes
        return
    assert url is not None
    assert url.startswith("https://") and "X-Amz-Expires=900" in url
    # moto intercepts the URL's request in-process, as S3 would answer it
    import requests

    resp = await asyncio.to_thread(requests.get, url, timeout=5)
    assert resp.status_code == 200 and resp.content == PNG
    assert httpx.URL(url).host.startswith(BUCKET)


async def test_head_gives_the_size_and_type_without_the_bytes_and_none_when_absent(attachments: Store) -> None:
    await attachments.put("uploads/t/u/abc-48", PNG, "image/png")
    assert await attachments.head("uploads/t/u/abc-48") == (len(PNG), "image/png")
    assert await attachments.head("uploads/t/u/missing") is None


async def test_a_presigned_put_stores_the_object_when_the_store_makes_one(attachments: Store, aws: Any) -> None:
    url = await attachments.presigned_put("uploads/t/u/abc-48", mime_type="image/png", size=len(PNG), expires_s=900)
    if isinstance(attachments, InMemoryAttachments):
        assert url is None  # the API's PUT route takes the bytes
        return
    assert url is not None and "X-Amz-Expires=900" in url
    import requests

    resp = await asyncio.to_thread(requests.put, url, data=PNG, headers={"Content-Type": "image/png"}, timeout=5)
    assert resp.status_code == 200
    assert await attachments.head("uploads/t/u/abc-48") == (len(PNG), "image/png")
