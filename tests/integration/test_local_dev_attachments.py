"""``make dev`` keeps a message's images in moto's in-process S3, as it keeps threads in moto's DynamoDB: the app
built as the local runner builds it (its environment defaults, moto in-process, the offline model) stores an image
in the local bucket, and history's URL for it is the API's authenticated parts route (no browser can reach the
in-process S3 a presigned URL would point at)."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import boto3
import httpx
import pytest

from devtools.local.dev_tokens import DEV_TENANT_ID
from devtools.local.embedded import EmbeddedAws
from devtools.local.runner import LOCAL_ATTACHMENTS_BUCKET, build_local_app, local_environment
from shared.auth import mint_local_token
from shared.settings import LOCAL_JWT_SECRET, Settings
from tests.support.live_app import serve_asgi

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

AUTH = {"Authorization": f"Bearer {mint_local_token(LOCAL_JWT_SECRET, user_id='dev', tenant_id=DEV_TENANT_ID)}"}
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


@pytest.fixture
def local_dev() -> Iterator[tuple[str, Settings]]:
    settings = Settings.from_env({**local_environment(), "MEMORY_IDLE_S": "900"}).model_copy(update={"embedded": True})
    aws = EmbeddedAws(settings)
    aws.start()
    try:
        app, _services = build_local_app(settings)
        with serve_asgi(app) as url:
            yield url, settings
    finally:
        aws.stop()


async def test_make_dev_stores_an_image_in_the_local_bucket_and_history_serves_it_through_the_api(
    local_dev: tuple[str, Settings],
) -> None:
    url, settings = local_dev
    image = {"type": "data", "value": base64.b64encode(PNG_1X1).decode(), "mimeType": "image/png"}
    content = [{"type": "text", "text": "what is this?"}, {"type": "image", "source": image}]
    body = {"threadId": "th-img", "runId": "run-img", "messages": [{"id": "m-img", "role": "user", "content": content}]}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        # WHEN a user sends an image on make dev
        run = await client.post("/api/v1/agent", json=body, headers=AUTH)
        assert run.status_code == 200 and '"RUN_FINISHED"' in run.text, run.text
        history = (await client.get("/api/v1/threads/th-img/history", headers=AUTH)).json()
        part = history["items"][0]["parts"][0]
        served = await client.get(part["url"], headers=AUTH)
    # THEN its bytes are an object of the local bucket in moto's S3, under the tenant, user and thread
    s3 = boto3.client("s3", region_name=settings.aws_region)
    objects = s3.list_objects_v2(Bucket=LOCAL_ATTACHMENTS_BUCKET).get("Contents", [])
    assert [o["Key"].split("/")[:3] for o in objects] == [[DEV_TENANT_ID, "dev", "th-img"]]
    assert s3.get_object(Bucket=LOCAL_ATTACHMENTS_BUCKET, Key=objects[0]["Key"])["Body"].read() == PNG_1X1
    # AND history's URL is the API's own parts route, which serves the same bytes to the caller
    assert part["url"] == "/api/v1/threads/th-img/messages/m-img/parts/0"
    assert served.status_code == 200 and served.content == PNG_1X1


async def test_make_dev_takes_an_upload_through_the_api_and_a_message_attaches_it(
    local_dev: tuple[str, Settings],
) -> None:
    url, settings = local_dev
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        # GIVEN an upload created on make dev: its PUT goes to the API (no client reaches the in-process S3)
        created = await client.post(
            "/api/v1/uploads", json={"mimeType": "image/png", "size": len(PNG_1X1)}, headers=AUTH
        )
        ticket = created.json()
        assert created.status_code == 201 and ticket["upload"]["authenticated"] is True, created.text
        put = await client.put(
            ticket["upload"]["url"], content=PNG_1X1, headers={**ticket["upload"]["headers"], **AUTH}
        )
        assert put.status_code == 204, put.text
        # WHEN a message refers to it
        part = {"type": "image", "source": {"type": "url", "value": ticket["url"], "mimeType": "image/png"}}
        content = [{"type": "text", "text": "and this?"}, part]
        message = {"id": "m-up", "role": "user", "content": content}
        run = await client.post(
            "/api/v1/agent", json={"threadId": "th-up", "runId": "run-up", "messages": [message]}, headers=AUTH
        )
        assert run.status_code == 200 and '"RUN_FINISHED"' in run.text, run.text
    # THEN the upload is in the local bucket's uploads/ and its copy under the thread
    s3 = boto3.client("s3", region_name=settings.aws_region)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=LOCAL_ATTACHMENTS_BUCKET).get("Contents", [])]
    assert f"uploads/{DEV_TENANT_ID}/dev/{ticket['uploadId']}" in keys
    assert any(k.startswith(f"{DEV_TENANT_ID}/dev/th-up/m-up/0-") for k in keys), keys
