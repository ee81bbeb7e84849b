"""Images and files in a user message (issue 43): checked at intake, stored in S3 (moto), sent to the model as
OpenAI ``image_url`` parts, read back through the history's URL, deleted with the thread and the user.

Real ``openai`` client over HTTP against the scripted model server, moto's S3 and DynamoDB, a real redis-server.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from ag_ui.core import MessagesSnapshotEvent

from shared.adapters.aws.attachments import S3Attachments
from shared.adapters.aws.clients import client_factory
from shared.llm.openai_chat import OpenAIChatModel
from shared.profiles import ProfileCatalog, default_catalog
from shared.runs.deadline import LAMBDA_CONTEXT_HEADER
from shared.wiring import ServiceOverrides, Services
from tests.support.agui_clients import js_event_problems
from tests.support.images import png
from tests.support.model_server import ModelServer, ScriptedTurn
from tests.support.settings import make_settings
from tests.support.streams import events_of
from tests.support.tokens import bearer

BUCKET = "attachments-it"


def pdf_with(text: str) -> bytes:
    """A one-page PDF whose page shows ``text`` (Helvetica), with a correct cross-reference table."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return out


def image_part(data: bytes, mime: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "data", "value": base64.b64encode(data).decode(), "mimeType": mime}}


def body(run: str, *parts: dict[str, Any], thread: str = "th-img", text: str = "What is this?") -> dict[str, Any]:
    content = [{"type": "text", "text": text}, *parts]
    return {"threadId": thread, "runId": run, "messages": [{"id": f"{run}-u", "role": "user", "content": content}]}


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture
def attachments(aws: Any) -> S3Attachments:
    make = client_factory("s3", region="us-east-1")
    make().create_bucket(Bucket=BUCKET)
    return S3Attachments(make, BUCKET, presign=False)


def build(store: Any, redis_stream: Any, model: Any, attachments: S3Attachments, **profile: Any) -> Services:
    profiles = None
    if profile:
        catalog = {p.name: p for p in default_catalog()}
        chat = catalog["chat_default"]
        catalog["chat_default"] = chat.model_copy(update={"model": chat.model.model_copy(update=profile)})
        profiles = ProfileCatalog(catalog)
    overrides = ServiceOverrides(
        store=store, stream=redis_stream, model=model, attachments=attachments, profiles=profiles
    )
    return Services(make_settings(), overrides=overrides)


@pytest.fixture
async def model(model_server: ModelServer) -> Any:
    chat = OpenAIChatModel(model_server.base_url, "test-key", provider="openai-compatible", max_retries=0)
    yield chat
    await chat.aclose()


@pytest.fixture
def services(store: Any, redis_stream: Any, model: Any, attachments: S3Attachments) -> Services:
    return build(store, redis_stream, model, attachments)


async def run(client: httpx.AsyncClient, services: Services, payload: dict[str, Any], **headers: str) -> httpx.Response:
    resp = await client.post("/api/v1/agent", json=payload, headers={**bearer(), **headers})
    await services.runs.wait_idle()
    return resp


async def test_an_inline_png_reaches_the_model_as_an_image_url_and_history_reads_it_back(
    services: Services, model_server: ModelServer, asgi_client: Any, attachments: S3Attachments
) -> None:
    image = png(8, 8)
    model_server.enqueue(ScriptedTurn(text=["A grey square."]))
    async with asgi_client(services) as client:
        # WHEN a user message carries an 8x8 PNG
        resp = await run(client, services, body("run-1", image_part(image)))
        assert resp.status_code == 200, resp.text
        # THEN the model's request carries it as an image_url part: a data URL of the same bytes
        user = model_server.requests[-1]["messages"][-1]
        assert user["role"] == "user" and isinstance(user["content"], list)
        urls = [p["image_url"]["url"] for p in user["content"] if p["type"] == "image_url"]
        assert len(urls) == 1 and urls[0].startswith("data:image/png;base64,")
        assert base64.b64decode(urls[0].split(",", 1)[1]) == image
        assert any(p["type"] == "text" and p["text"].endswith("What is this?") for p in user["content"])
        # AND the bytes are in the bucket under the tenant, user and thread; the stored message holds only the key
        keys = [o["Key"] for o in attachments.client.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        assert len(keys) == 1 and keys[0].startswith("tenant-1/user-1/th-img/run-1-u/0-")
        # AND history gives the part with a URL the caller can open, which returns the same bytes
        history = (await client.get("/api/v1/threads/th-img/history", headers=bearer())).json()
        part = history["items"][0]["parts"][0]
        assert part | {"url": ""} == {
            "type": "image",
            "mimeType": "image/png",
            "url": "",
            "size": len(image),
            "width": 8,
            "height": 8,
        }
        got = await client.get(part["url"], headers=bearer())
        assert got.status_code == 200 and got.content == image and got.headers["content-type"] == "image/png"
        # AND another user gets 404 on the same part
        other = await client.get(part["url"], headers=bearer(user="user-2"))
        assert other.status_code == 404
        # WHEN the thread is deleted THEN its objects are gone
        assert (await client.delete("/api/v1/threads/th-img", headers=bearer())).status_code in (200, 204)
    assert attachments.client.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0


async def test_the_messages_snapshot_and_a_catching_up_follower_carry_the_parts_with_a_url_that_opens(
    services: Services, model_server: ModelServer, asgi_client: Any
) -> None:
    image = png(8, 8)
    model_server.enqueue(ScriptedTurn(text=["A grey square."]))
    async with asgi_client(services) as client:
        # GIVEN a thread whose user message carries an image
        resp = await run(client, services, body("run-snap", image_part(image), thread="th-snap"))
        assert resp.status_code == 200, resp.text
        history = (await client.get("/api/v1/threads/th-snap/history", headers=bearer())).json()
        # WHEN a second device follows the thread with a snapshot, and a follower comes back with an id the stream
        # no longer holds (it catches up from the stored conversation); both end at their invocation's deadline
        followers = []
        for params in ({"snapshot": "messages"}, {"lastEventId": "1-0"}):
            deadline = json.dumps({"deadline": int((time.time() + 1.0) * 1000)})
            followed = await client.get(
                "/api/v1/threads/th-snap/events", params=params, headers={**bearer(), LAMBDA_CONTEXT_HEADER: deadline}
            )
            assert followed.status_code == 200, followed.text
            followers.append(events_of(followed.text)[0])
        # THEN each opens with a snapshot whose user message holds its text and the image with a url source, the
        # history's URL, its name and size in the metadata: never the bytes
        for snapshot in followers:
            assert snapshot["type"] == "MESSAGES_SNAPSHOT"
            user = snapshot["messages"][0]
            assert user["role"] == "user"
            text, part = user["content"]
            assert text == {"type": "text", "text": "What is this?"}
            assert part == {
                "type": "image",
                "source": {"type": "url", "value": history["items"][0]["parts"][0]["url"], "mimeType": "image/png"},
                "metadata": {"size": len(image), "width": 8, "height": 8},
            }
            # AND that URL opens with the caller's token, to the same bytes
            got = await client.get(part["source"]["value"], headers=bearer())
            assert got.status_code == 200 and got.content == image
    # AND both snapshots are valid AG-UI events for the Python SDK and for @ag-ui/core's schemas
    for snapshot in followers:
        MessagesSnapshotEvent.model_validate(snapshot)
    assert js_event_problems(followers) == [[], []]


async def test_erasing_the_user_removes_their_objects(
    services: Services, model_server: ModelServer, asgi_client: Any, attachments: S3Attachments
) -> None:
    model_server.enqueue(ScriptedTurn(text=["ok"]), ScriptedTurn(text=["ok"]))
    async with asgi_client(services) as client:
        for thread in ("th-a", "th-b"):
            resp = await run(client, services, body(f"run-{thread}", image_part(png(4, 4)), thread=thread))
            assert resp.status_code == 200, resp.text
        assert attachments.client.list_objects_v2(Bucket=BUCKET)["KeyCount"] == 2
        assert (await client.delete("/api/v1/me", headers=bearer(scopes=("agent:erase",)))).status_code in (200, 204)
    assert attachments.client.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0


async def test_a_pdfs_text_reaches_the_model_labelled_with_its_name(
    services: Services, model_server: ModelServer, asgi_client: Any
) -> None:
    document = {
        "type": "document",
        "source": {
            "type": "data",
            "value": base64.b64encode(pdf_with("Invoice 4711 total 99 EUR")).decode(),
            "mimeType": "application/pdf",
        },
        "metadata": {"filename": "invoice.pdf"},
    }
    model_server.enqueue(ScriptedTurn(text=["99 EUR"]))
    async with asgi_client(services) as client:
        resp = await run(client, services, body("run-pdf", document, text="What is the total?"))
    assert resp.status_code == 200, resp.text
    content = model_server.requests[-1]["messages"][-1]["content"]
    assert isinstance(content, str)
    assert "[document: invoice.pdf (application/pdf)]" in content and "Invoice 4711 total 99 EUR" in content


async def test_the_legacy_binary_part_is_accepted_as_an_image(
    services: Services, model_server: ModelServer, asgi_client: Any
) -> None:
    image = png(2, 3)
    legacy = {"type": "binary", "mimeType": "image/png", "data": base64.b64encode(image).decode()}
    model_server.enqueue(ScriptedTurn(text=["ok"]))
    async with asgi_client(services) as client:
        resp = await run(client, services, body("run-bin", legacy))
    assert resp.status_code == 200, resp.text
    parts = model_server.requests[-1]["messages"][-1]["content"]
    assert [base64.b64decode(p["image_url"]["url"].split(",", 1)[1]) for p in parts if p["type"] == "image_url"] == [
        image
    ]


@pytest.mark.parametrize(
    ("part", "code"),
    [
        (image_part(b"GIF89a" + b"\x00" * 20), "media_type_mismatch"),  # declared PNG, bytes GIF
        (image_part(b"\x89PNG\r\n\x1a\n" + b"\x00" * (600 * 1024)), "attachment_too_large"),
        (image_part(png(5000, 5000)), "image_too_large"),
        (
            {"type": "audio", "source": {"type": "data", "value": "AAAA", "mimeType": "audio/wav"}},
            "unsupported_modality",
        ),
        ({"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}, "unsafe_url"),
    ],
)
async def test_a_bad_part_is_refused_with_its_code_and_nothing_is_stored(
    services: Services, asgi_client: Any, attachments: S3Attachments, part: dict[str, Any], code: str
) -> None:
    async with asgi_client(services) as client:
        resp = await run(client, services, body("run-bad", part))
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["code"] == code
    assert attachments.client.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0


async def test_a_text_only_profile_refuses_images_before_storing_them(
    store: Any, redis_stream: Any, model: Any, attachments: S3Attachments, asgi_client: Any
) -> None:
    services = build(store, redis_stream, model, attachments, input_modalities=("text",))
    async with asgi_client(services) as client:
        resp = await run(client, services, body("run-txt", image_part(png(8, 8))))
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "unsupported_modality"
    assert attachments.client.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0


UNSAFE = [
    "http://example.com/a.png",
    "file:///etc/passwd",
    "data:image/png;base64,AAAA",
    "https://127.0.0.1/a.png",
    "https://169.254.169.254/latest/meta-data/",
    "https://localhost/a.png",
    "https://10.0.0.1/a.png",
    "https://[::1]/a.png",
]


async def test_url_sources_are_checked_never_fetched_and_a_public_https_one_goes_to_the_model_as_it_is(
    store: Any,
    redis_stream: Any,
    model: Any,
    model_server: ModelServer,
    attachments: S3Attachments,
    asgi_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
) -> None:
    services = build(store, redis_stream, model, attachments, url_sources=True)
    # GIVEN a guard on every outgoing connection except to the scripted model server and redis (name resolution of
    # the one public host faked: the test needs no network)
    allowed = {httpx.URL(model_server.base_url).port, httpx.URL(redis_url).port}
    dialled: list[Any] = []
    real_connect = socket.socket.connect

    def guarded(sock: socket.socket, address: Any) -> Any:
        if not (isinstance(address, tuple) and address[1] in allowed):
            dialled.append(address)
        return real_connect(sock, address)

    real_resolve = socket.getaddrinfo

    def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "images.example.com":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port))]
        return real_resolve(host, port, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    async with asgi_client(services) as client:
        for n, url in enumerate(UNSAFE):
            part = {"type": "image", "source": {"type": "url", "value": url, "mimeType": "image/png"}}
            resp = await run(client, services, body(f"run-u{n}", part))
            assert resp.status_code == 422, (url, resp.text)
            assert resp.json()["error"]["code"] == "unsafe_url", url
        public = "https://images.example.com/cat.png"
        model_server.enqueue(ScriptedTurn(text=["a cat"]))
        part = {"type": "image", "source": {"type": "url", "value": public, "mimeType": "image/png"}}
        resp = await run(client, services, body("run-ok", part))
        assert resp.status_code == 200, resp.text
    sent = model_server.requests[-1]["messages"][-1]["content"]
    assert [p["image_url"]["url"] for p in sent if p["type"] == "image_url"] == [public]
    # THEN the server connected to nothing but the model server
    assert dialled == []
