"""Uploads (issue 43, point 2): ``POST /api/v1/uploads``, the bytes PUT to the presigned S3 URL with a real HTTP
client (S3 is a moto server), then a run whose part refers to ``agent-upload://{id}`` reaches the model (the real
``openai`` client over HTTP against the scripted model server) with the same bytes. Another user's upload is
``404``; a size or type other than the declared one is refused; the API's own PUT route stands in for S3 where the
store makes no presigned PUT (``make dev``)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared.adapters.aws.attachments import S3Attachments
from shared.adapters.aws.clients import client_factory
from shared.llm.openai_chat import OpenAIChatModel
from shared.wiring import ServiceOverrides, Services
from tests.integration.test_message_parts import png
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.moto_server import moto_server
from tests.support.settings import REGION, make_settings
from tests.support.tokens import bearer

BUCKET = "attachments-uploads"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with pytest.MonkeyPatch.context() as env, moto_server() as url:
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        client_factory("s3", region=REGION, endpoint_url=url)().create_bucket(Bucket=BUCKET)
        yield url


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture
async def model(model_server: ModelServer) -> Any:
    chat = OpenAIChatModel(model_server.base_url, "test-key", provider="openai-compatible", max_retries=0)
    yield chat
    await chat.aclose()


def s3_store(endpoint: str, *, presign: bool = True) -> S3Attachments:
    return S3Attachments(client_factory("s3", region=REGION, endpoint_url=endpoint), BUCKET, presign=presign)


def build(store: Any, redis_stream: Any, model: Any, attachments: S3Attachments) -> Services:
    overrides = ServiceOverrides(store=store, stream=redis_stream, model=model, attachments=attachments)
    return Services(make_settings(), overrides=overrides)


def upload_part(url: str, mime: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "url", "value": url, "mimeType": mime}}


def body(run: str, part: dict[str, Any], thread: str = "th-up") -> dict[str, Any]:
    content = [{"type": "text", "text": "What is in the upload?"}, part]
    return {"threadId": thread, "runId": run, "messages": [{"id": f"{run}-u", "role": "user", "content": content}]}


async def create(client: httpx.AsyncClient, mime: str, size: int, user: str = "user-1") -> httpx.Response:
    return await client.post("/api/v1/uploads", json={"mimeType": mime, "size": size}, headers=bearer(user=user))


async def put_to_s3(ticket: dict[str, Any], data: bytes) -> None:
    async with httpx.AsyncClient(timeout=10) as s3:
        resp = await s3.put(ticket["upload"]["url"], content=data, headers=ticket["upload"]["headers"])
    assert resp.status_code == 200, resp.text


async def test_an_upload_round_trip_reaches_the_model_with_the_same_bytes(
    store: Any, redis_stream: Any, model: Any, model_server: ModelServer, s3_endpoint: str, asgi_client: Any
) -> None:
    attachments = s3_store(s3_endpoint)
    services = build(store, redis_stream, model, attachments)
    image = png(64, 48)
    model_server.enqueue(ScriptedTurn(text=["A grey rectangle."]))
    async with asgi_client(services) as client:
        # GIVEN an upload created for the image's type and size, its bytes PUT to the presigned S3 URL over HTTP
        created = await create(client, "image/png", len(image))
        assert created.status_code == 201, created.text
        ticket = created.json()
        assert ticket["url"] == f"agent-upload://{ticket['uploadId']}"
        assert ticket["upload"]["url"].startswith(f"{s3_endpoint}/{BUCKET}/uploads/tenant-1/user-1/")
        assert ticket["upload"]["authenticated"] is False
        await put_to_s3(ticket, image)
        # WHEN a message's part refers to it
        resp = await client.post("/api/v1/agent", json=body("run-up", upload_part(ticket["url"])), headers=bearer())
        await services.runs.wait_idle()
        assert resp.status_code == 200 and '"RUN_FINISHED"' in resp.text, resp.text
        history = (await client.get("/api/v1/threads/th-up/history", headers=bearer())).json()
    # THEN the model's request carries the same bytes as an image_url part
    content = model_server.requests[-1]["messages"][-1]["content"]
    urls = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert len(urls) == 1 and base64.b64decode(urls[0].split(",", 1)[1]) == image
    # AND the part was copied under the thread (out of uploads/, which the lifecycle rule expires)
    keys = [o["Key"] for o in attachments.client.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert any(k.startswith("tenant-1/user-1/th-up/run-up-u/0-") for k in keys), keys
    part = history["items"][0]["parts"][0]
    assert (part["type"], part["mimeType"], part["size"], part["width"], part["height"]) == (
        "image",
        "image/png",
        len(image),
        64,
        48,
    )


async def test_another_users_upload_is_not_found(
    store: Any, redis_stream: Any, model: Any, s3_endpoint: str, asgi_client: Any
) -> None:
    services = build(store, redis_stream, model, s3_store(s3_endpoint))
    image = png(4, 4)
    async with asgi_client(services) as client:
        ticket = (await create(client, "image/png", len(image), user="user-2")).json()
        await put_to_s3(ticket, image)
        # WHEN user-1 refers to user-2's upload
        resp = await client.post("/api/v1/agent", json=body("run-theirs", upload_part(ticket["url"])), headers=bearer())
        # AND to an id that was never issued
        forged = await client.post(
            "/api/v1/agent", json=body("run-forged", upload_part("agent-upload://not-an-upload")), headers=bearer()
        )
    # THEN both are 404, and nothing of theirs was copied into user-1's thread
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "upload_not_found", resp.text
    assert forged.status_code == 404
    assert await services.attachments.head(f"uploads/tenant-1/user-2/{ticket['uploadId']}") is not None


@pytest.mark.parametrize(
    ("declared", "sent", "part_mime", "code"),
    [
        # more bytes than declared (a presigned PUT does not bound the length; the HEAD does)
        ("image/png", png(8, 8) + b"\x00" * 16, "image/png", "upload_mismatch"),
        # the part says JPEG, the upload is PNG
        ("image/png", png(8, 8), "image/jpeg", "upload_mismatch"),
        # declared and signed as PNG, but the bytes are not an image
        ("image/png", b"GIF89a-but-not-really-an-image-at-all", "image/png", "media_type_mismatch"),
    ],
    ids=["size", "type", "bytes"],
)
async def test_an_upload_other_than_declared_is_refused(
    store: Any,
    redis_stream: Any,
    model: Any,
    s3_endpoint: str,
    asgi_client: Any,
    declared: str,
    sent: bytes,
    part_mime: str,
    code: str,
) -> None:
    services = build(store, redis_stream, model, s3_store(s3_endpoint))
    size = len(png(8, 8)) if code == "upload_mismatch" else len(sent)
    async with asgi_client(services) as client:
        ticket = (await create(client, declared, size)).json()
        await put_to_s3(ticket, sent)
        resp = await client.post(
            "/api/v1/agent", json=body(f"run-{code}", upload_part(ticket["url"], part_mime)), headers=bearer()
        )
    assert resp.status_code == 422 and resp.json()["error"]["code"] == code, resp.text
    # the field named is the part's source, in the message's content
    loc = resp.json()["error"]["details"][0]["loc"]
    assert loc[:5] == ["body", "messages", 0, "content", 1] and loc[5:6] == ["source"] and loc.count("source") == 1


async def test_an_upload_of_a_type_not_taken_or_too_large_is_refused_at_creation(
    store: Any, redis_stream: Any, model: Any, s3_endpoint: str, asgi_client: Any
) -> None:
    services = build(store, redis_stream, model, s3_store(s3_endpoint))
    limit = services.attachment_limits.max_upload_bytes
    async with asgi_client(services) as client:
        zipped = await create(client, "application/zip", 100)
        huge = await create(client, "image/png", limit + 1)
    assert zipped.status_code == 422 and zipped.json()["error"]["code"] == "unsupported_media_type"
    assert huge.status_code == 422 and huge.json()["error"]["code"] == "attachment_too_large"


async def test_where_the_store_makes_no_presigned_put_the_api_takes_the_bytes(
    store: Any, redis_stream: Any, model: Any, model_server: ModelServer, s3_endpoint: str, asgi_client: Any
) -> None:
    # GIVEN make dev's kind of store: it makes no presigned URLs
    services = build(store, redis_stream, model, s3_store(s3_endpoint, presign=False))
    image = png(5, 5)
    model_server.enqueue(ScriptedTurn(text=["ok"]))
    async with asgi_client(services) as client:
        ticket = (await create(client, "image/png", len(image))).json()
        # THEN the upload goes to the API's route, with the caller's token
        assert ticket["upload"]["url"] == f"/api/v1/uploads/{ticket['uploadId']}"
        assert ticket["upload"]["authenticated"] is True
        headers = {**ticket["upload"]["headers"], **bearer()}
        too_big = await client.put(ticket["upload"]["url"], content=image + b"x", headers=headers)
        put = await client.put(ticket["upload"]["url"], content=image, headers=headers)
        assert too_big.status_code == 422 and put.status_code == 204, (too_big.text, put.text)
        resp = await client.post("/api/v1/agent", json=body("run-dev", upload_part(ticket["url"])), headers=bearer())
        await services.runs.wait_idle()
    assert resp.status_code == 200 and '"RUN_FINISHED"' in resp.text, resp.text
    content = model_server.requests[-1]["messages"][-1]["content"]
    urls = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert base64.b64decode(urls[0].split(",", 1)[1]) == image


async def test_erasing_the_user_removes_their_uploads_not_yet_attached(
    store: Any, redis_stream: Any, model: Any, s3_endpoint: str, asgi_client: Any
) -> None:
    services = build(store, redis_stream, model, s3_store(s3_endpoint))
    image = png(3, 3)
    async with asgi_client(services) as client:
        mine = (await create(client, "image/png", len(image), user="user-e")).json()
        theirs = (await create(client, "image/png", len(image), user="user-f")).json()
        await put_to_s3(mine, image)
        await put_to_s3(theirs, image)
        erased = await client.delete("/api/v1/me", headers=bearer(user="user-e", scopes=("agent:erase",)))
    assert erased.status_code in (200, 204), erased.text
    assert await services.attachments.head(f"uploads/tenant-1/user-e/{mine['uploadId']}") is None
    assert await services.attachments.head(f"uploads/tenant-1/user-f/{theirs['uploadId']}") is not None
