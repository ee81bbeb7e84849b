"""History's URL of a stored image (issue 43, point 6): on AWS a presigned GET of the bucket, at most 15 minutes,
which a client opens without a token; where the store makes none (``ATTACHMENT_PRESIGNED_URLS=false``, ``make dev``)
the API's authenticated parts route. S3 is a moto server here, so the presigned URL is fetched over real HTTP."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from shared.adapters.aws.attachments import S3Attachments
from shared.adapters.aws.clients import client_factory
from shared.wiring import ServiceOverrides, Services
from tests.support.moto_server import moto_server
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import REGION, make_settings
from tests.support.tokens import bearer

BUCKET = "attachments-urls"
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with pytest.MonkeyPatch.context() as env, moto_server() as url:
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        client_factory("s3", region=REGION, endpoint_url=url)().create_bucket(Bucket=BUCKET)
        yield url


def services_with(store: Any, redis_stream: Any, s3_endpoint: str, *, presign: bool, ttl_s: int = 900) -> Services:
    attachments = S3Attachments(client_factory("s3", region=REGION, endpoint_url=s3_endpoint), BUCKET, presign=presign)
    overrides = ServiceOverrides(
        store=store, stream=redis_stream, model=ScriptedModel(Turn(text=["a dot"])), attachments=attachments
    )
    return Services(make_settings(attachment_url_ttl_s=ttl_s), overrides=overrides)


async def history_part(client: httpx.AsyncClient, services: Services, thread: str) -> dict[str, Any]:
    image = {"type": "data", "value": base64.b64encode(PNG_1X1).decode(), "mimeType": "image/png"}
    content = [{"type": "text", "text": "what is it?"}, {"type": "image", "source": image}]
    body = {
        "threadId": thread,
        "runId": f"run-{thread}",
        "messages": [{"id": f"m-{thread}", "role": "user", "content": content}],
    }
    run = await client.post("/api/v1/agent", json=body, headers=bearer())
    assert run.status_code == 200, run.text
    await services.runs.wait_idle()
    history = await client.get(f"/api/v1/threads/{thread}/history", headers=bearer())
    part: dict[str, Any] = history.json()["items"][0]["parts"][0]
    return part


async def test_history_gives_a_presigned_get_that_opens_without_a_token_when_the_store_presigns(
    store: Any, redis_stream: Any, s3_endpoint: str, asgi_client: Any
) -> None:
    services = services_with(store, redis_stream, s3_endpoint, presign=True, ttl_s=600)
    async with asgi_client(services) as client:
        # WHEN history lists a message with an image, the store being able to presign (AWS)
        part = await history_part(client, services, "th-presigned")
    # THEN its URL is a presigned GET of the object in the bucket, valid for the configured 10 minutes
    url = urlsplit(part["url"])
    assert f"{url.scheme}://{url.netloc}" == s3_endpoint and url.path.startswith(f"/{BUCKET}/tenant-1/user-1/")
    query = parse_qs(url.query)
    assert query["X-Amz-Expires"] == ["600"] and "X-Amz-Signature" in query
    # AND a client opens it over HTTP with no token: the same bytes, straight from S3
    async with httpx.AsyncClient(timeout=10) as s3:
        got = await s3.get(part["url"])
    assert got.status_code == 200 and got.content == PNG_1X1


async def test_history_gives_the_api_route_when_the_store_does_not_presign(
    store: Any, redis_stream: Any, s3_endpoint: str, asgi_client: Any
) -> None:
    services = services_with(store, redis_stream, s3_endpoint, presign=False)
    async with asgi_client(services) as client:
        # WHEN the store makes no presigned URLs (make dev's in-process S3)
        part = await history_part(client, services, "th-routed")
        # THEN the URL is the API's parts route, which serves the bytes to the caller only
        assert part["url"] == "/api/v1/threads/th-routed/messages/m-th-routed/parts/0"
        mine = await client.get(part["url"], headers=bearer())
        theirs = await client.get(part["url"], headers=bearer(user="user-2"))
    assert mine.status_code == 200 and mine.content == PNG_1X1
    assert theirs.status_code == 404


def test_a_read_url_never_lasts_more_than_15_minutes() -> None:
    from pydantic import ValidationError

    from shared.attachments.read_urls import MAX_READ_URL_TTL_S

    assert MAX_READ_URL_TTL_S == 900
    with pytest.raises(ValidationError):
        make_settings(attachment_url_ttl_s=901)


async def test_a_followers_snapshot_gives_the_same_presigned_get_as_the_history(
    store: Any, redis_stream: Any, s3_endpoint: str, asgi_client: Any
) -> None:
    """On AWS the parts route is not on the REST API: a follower's ``MESSAGES_SNAPSHOT`` must carry the presigned
    GET too, or a second device could not open the image."""
    import json
    import time

    from shared.runs.deadline import LAMBDA_CONTEXT_HEADER
    from tests.support.streams import events_of

    services = services_with(store, redis_stream, s3_endpoint, presign=True, ttl_s=600)
    async with asgi_client(services) as client:
        await history_part(client, services, "th-snap-signed")
        deadline = json.dumps({"deadline": int((time.time() + 1.0) * 1000)})
        followed = await client.get(
            "/api/v1/threads/th-snap-signed/events",
            params={"snapshot": "messages"},
            headers={**bearer(), LAMBDA_CONTEXT_HEADER: deadline},
        )
    snapshot = events_of(followed.text)[0]
    assert snapshot["type"] == "MESSAGES_SNAPSHOT"
    image = next(p for p in snapshot["messages"][0]["content"] if p["type"] == "image")
    url = urlsplit(image["source"]["value"])
    assert f"{url.scheme}://{url.netloc}" == s3_endpoint and "X-Amz-Signature" in parse_qs(url.query)
    async with httpx.AsyncClient(timeout=10) as s3:
        got = await s3.get(image["source"]["value"])
    assert got.status_code == 200 and got.content == PNG_1X1
