"""Attacker's-side tests: forged and misused tokens, other tenants' ids, hidden automation content."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from shared.executors.context import RunContext
from shared.models import ExecutionMeta, ExecutorKind, Identity, Message, Origin, Role
from shared.profiles import default_catalog
from shared.wiring import ServiceOverrides, Services
from tests.support.live_app import serve_app
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import TEST_SECRET, make_settings
from tests.support.sse import parse_sse
from tests.support.tokens import bearer

ISSUER = "https://issuer.test/"
AUDIENCE = "agent-api"


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def jwks_url(rsa_key: rsa.RSAPrivateKey) -> Iterator[str]:
    jwk = json.loads(RSAAlgorithm.to_jwk(rsa_key.public_key()))
    jwk.update({"kid": "k1", "use": "sig", "alg": "RS256"})
    payload = json.dumps({"keys": [jwk]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *_args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    server.shutdown()
    server.server_close()


def rs_token(key: rsa.RSAPrivateKey, **overrides: Any) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": "user-1",
        "tenant_id": "tenant-1",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "scope": "",
    }
    claims.update(overrides)
    return jwt.encode({k: v for k, v in claims.items() if v is not None}, key, algorithm="RS256", headers={"kid": "k1"})


def jwks_services(make_services: Any, jwks_url: str) -> Services:
    """The app's services verifying RS256 tokens against the test issuer's JWKS."""
    services: Services = make_services(
        ScriptedModel(Turn(text=["hello"])),
        auth_mode="jwks",
        jwks_url=jwks_url,
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
        jwt_secret=None,
    )
    return services


def body(thread: str = "th-1", run: str = "run-1") -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [{"id": "u-1", "role": "user", "content": "hi"}]}


async def test_jwks_tokens_are_verified_and_every_forgery_is_401(
    make_services: Any, asgi_client: Any, rsa_key: rsa.RSAPrivateKey, jwks_url: str
) -> None:
    services = jwks_services(make_services, jwks_url)
    now = int(time.time())
    public_pem = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    unsigned = jwt.encode({"sub": "user-1", "tenant_id": "tenant-1", "exp": now + 600}, None, algorithm="none")
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forgeries = {
        "expired": rs_token(rsa_key, exp=now - 120, iat=now - 900, nbf=now - 900),
        "not yet valid": rs_token(rsa_key, nbf=now + 600),
        "wrong issuer": rs_token(rsa_key, iss="https://evil.test/"),
        "wrong audience": rs_token(rsa_key, aud="another-api"),
        "alg none": unsigned,
        "HS256 with the public key as secret": _hs_confusion(public_pem, now),
        "signed by another key": rs_token(other_key),
        "no tenant claim": rs_token(rsa_key, tenant_id=None),
    }
    async with asgi_client(services) as client:
        ok = await client.post("/api/v1/agent", json=body(), headers={"Authorization": f"Bearer {rs_token(rsa_key)}"})
        assert ok.status_code == 200
        for name, token in forgeries.items():
            resp = await client.get("/api/v1/threads", headers={"Authorization": f"Bearer {token}"})
            assert resp.status_code == 401, name
            assert resp.json()["error"]["code"] in {"invalid_token", "token_expired"}, name


def _hs_confusion(public_pem: bytes, now: int) -> str:
    """HS256 signed with the RSA public key as the secret (PyJWT refuses to do it, so sign by hand)."""
    import base64
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    claims = b64(
        json.dumps(
            {"sub": "user-1", "tenant_id": "tenant-1", "iss": ISSUER, "aud": AUDIENCE, "exp": now + 600}
        ).encode()
    )
    signature = hmac.new(public_pem, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{b64(signature)}"


async def test_local_tokens_signed_with_another_secret_or_expired_are_401(make_services: Any, asgi_client: Any) -> None:
    services = make_services(ScriptedModel())
    now = int(time.time())
    bad = {
        "other secret": jwt.encode(
            {"sub": "u", "tenant_id": "t", "exp": now + 60},
            "a-different-secret-of-sufficient-length-0123",
            algorithm="HS256",
        ),
        "expired": jwt.encode({"sub": "u", "tenant_id": "t", "exp": now - 300}, TEST_SECRET, algorithm="HS256"),
        "no exp": jwt.encode({"sub": "u", "tenant_id": "t"}, TEST_SECRET, algorithm="HS256"),
        "garbage": "not-a-jwt",
    }
    async with asgi_client(services) as client:
        for name, token in bad.items():
            resp = await client.get("/api/v1/threads", headers={"Authorization": f"Bearer {token}"})
            assert resp.status_code == 401, name
        no_header = await client.get("/api/v1/threads")
    assert no_header.status_code == 401


async def test_every_endpoint_answers_404_for_another_users_or_tenants_ids(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN user-1 of tenant-1 owns a thread and a run with a secret in it
    model = ScriptedModel(Turn(text=["the secret is 4242"]), Turn(text=["a thread of your own"]))
    services = make_services(model)
    async with asgi_client(services) as client:
        await client.post("/api/v1/agent", json=body("th-victim", "run-victim"), headers=bearer())
        attackers = [
            {**bearer(user="user-2"), "x-scopes": ""},
            {**bearer(tenant="tenant-2"), "x-scopes": ""},
            {**bearer(user="user-2", scopes=("agent:audit",)), "x-scopes": "agent:audit"},
        ]
        for headers in attackers:
            # WHEN another user or tenant uses those ids on every endpoint
            responses = [
                await client.get("/api/v1/threads/th-victim/history", headers=headers),
                await client.get("/api/v1/threads/th-victim", headers=headers),
                await client.patch("/api/v1/threads/th-victim", json={"title": "pwned"}, headers=headers),
                await client.post(
                    "/api/v1/threads/th-victim/messages/u-1/feedback", json={"score": 1}, headers=headers
                ),
                await client.delete("/api/v1/threads/th-victim/messages/u-1/feedback", headers=headers),
                await client.get("/api/v1/threads/th-victim/audit", headers=headers),
                await client.get("/api/v1/threads/th-victim/events", headers=headers),
                await client.get("/api/v1/agent/runs/run-victim/events", headers=headers),
                await client.post("/api/v1/agent/runs/run-victim/cancel", headers=headers),
            ]
            # THEN each answer is 404 and carries nothing of the victim's data (audit without the scope is 403 for
            # every id alike, so it tells nothing either)
            for resp in responses:
                expected = (
                    403 if resp.request.url.path.endswith("/audit") and "agent:audit" not in str(headers) else 404
                )
                assert resp.status_code == expected, (resp.request.url, resp.status_code)
                assert "4242" not in resp.text and "th-victim" not in resp.text
            listing = await client.get("/api/v1/threads", headers=headers)
            assert listing.status_code == 200 and listing.json()["items"] == []
        # AND posting to the victim's thread id: another user of the tenant is refused; another tenant gets a
        # thread of its own under that name (ids are per tenant), with nothing of the victim's in it
        same_tenant = await client.post("/api/v1/agent", json=body("th-victim", "run-x"), headers=bearer(user="user-2"))
        other_tenant = await client.post(
            "/api/v1/agent", json=body("th-victim", "run-victim"), headers=bearer(tenant="tenant-2")
        )
        other_history = await client.get("/api/v1/threads/th-victim/history", headers=bearer(tenant="tenant-2"))
        own = await client.get("/api/v1/threads/th-victim/history", headers=bearer())
    assert same_tenant.status_code == 404
    assert other_tenant.status_code == 200 and "4242" not in other_tenant.text
    assert "a thread of your own" in other_tenant.text
    # AND the other tenant's run showed the model nothing of the victim's thread
    assert len(model.requests) == 2 and "4242" not in repr(model.requests[1].messages)
    assert "4242" not in other_history.text
    assert "4242" in own.text


async def test_audit_needs_the_audit_scope(make_services: Any, asgi_client: Any) -> None:
    services = make_services(ScriptedModel(Turn(text=["hi"])))
    async with asgi_client(services) as client:
        await client.post("/api/v1/agent", json=body("th-a", "run-a"), headers=bearer())
        denied = await client.get("/api/v1/threads/th-a/audit", headers=bearer())
        allowed = await client.get("/api/v1/threads/th-a/audit", headers=bearer(scopes=("agent:audit",)))
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "missing_scope"
    assert allowed.status_code == 200 and allowed.json()["runs"][0]["runId"] == "run-a"


async def test_hidden_automation_messages_reach_audit_and_the_model_but_never_the_user(
    make_services: Any, store: Any, redis_url: str
) -> None:
    # GIVEN a hidden automation run on the user's thread (run in this process), then a visible chat turn served
    # by uvicorn on loopback (the thread stream never ends, so it is read from a real socket)
    model = ScriptedModel(Turn(text=["HIDDEN-REPORT ready"]), Turn(text=["visible answer"]))
    services = make_services(model)
    identity = Identity(tenant_id="tenant-1", user_id="user-1")
    meta = ExecutionMeta(
        origin=Origin.AUTOMATION,
        executor=ExecutorKind.WORKER,
        execution_profile_name="chat_default",
        hidden_from_user=True,
    )
    profile = default_catalog().get("chat_default")
    ctx = RunContext(identity=identity, thread_id="th-hid", run_id="auto-1", profile=profile, meta=meta)
    prompt = Message(
        id="auto-msg-1", thread_id="th-hid", role=Role.USER, content="HIDDEN-PROMPT daily digest", meta=meta
    )
    await services.runs.run_inline(ctx, body_digest="d", new_messages=[prompt], executor=services.worker())
    served = Services(make_settings(redis_url=redis_url), overrides=ServiceOverrides(store=store, model=model))
    with serve_app(served) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            chat = await client.post("/api/v1/agent", json=body("th-hid", "run-visible"), headers=bearer())
            history = await client.get("/api/v1/threads/th-hid/history", headers=bearer())
            hidden_run = await client.get("/api/v1/agent/runs/auto-1/events", headers=bearer())
            audit = await client.get("/api/v1/threads/th-hid/audit", headers=bearer(scopes=("agent:audit",)))
            thread_events = await _read_thread_stream(client)
    # THEN history and every user-facing stream lack the hidden content
    assert "HIDDEN" not in history.text
    assert "HIDDEN" not in chat.text
    assert "HIDDEN" not in thread_events
    assert hidden_run.status_code == 404
    assert next(m["id"] for m in history.json()["items"]) == "u-1"
    # AND the thread stream shows the hidden run only as its lifecycle
    hidden_types = [
        f.json()["type"] for f in parse_sse(thread_events) if f.data and f.json()["metadata"]["runId"] == "auto-1"
    ]
    assert hidden_types == ["RUN_STARTED", "STEP_STARTED", "STEP_FINISHED", "RUN_FINISHED"]
    # AND audit shows the hidden messages and the hidden run
    audit_body = audit.json()
    hidden = [m for m in audit_body["messages"] if m["hiddenFromUser"]]
    assert {m["id"] for m in hidden} >= {"auto-msg-1"}
    assert any(r["runId"] == "auto-1" and r["hiddenFromUser"] for r in audit_body["runs"])
    # AND the model saw the hidden messages as context on the visible turn
    assert any("HIDDEN-PROMPT" in (m.content or "") for m in model.requests[1].messages)


async def _read_thread_stream(client: httpx.AsyncClient) -> str:
    """Read the thread stream until both runs have finished (it never ends on its own)."""
    text = ""
    async with client.stream("GET", "/api/v1/threads/th-hid/events", headers=bearer()) as resp:
        async for chunk in resp.aiter_text():
            text += chunk
            frames = [f for f in parse_sse(text[: text.rfind("\n\n") + 2]) if f.data]
            if sum(1 for f in frames if f.json()["type"] == "RUN_FINISHED") >= 2:
                break
    return text[: text.rfind("\n\n") + 2]


async def test_dependencies_of_a_run_stay_on_the_event_loop_unless_a_jwks_fetch_may_block(
    make_services: Any,
    asgi_client: Any,
    rsa_key: rsa.RSAPrivateKey,
    jwks_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FastAPI runs a plain ``def`` dependency in its thread pool: a thread hand-off per dependency and request. The
    run route's dependencies are async; only a JWKS check (it may fetch the issuer's keys) goes to a thread."""
    import fastapi.dependencies.utils as fastapi_deps

    import functions.agent_api.deps as deps

    hops: list[str] = []

    def counting(target: Any) -> Any:
        async def hop(func: Any, *args: Any, **kwargs: Any) -> Any:
            hops.append(getattr(func, "__name__", repr(func)))
            return await target(func, *args, **kwargs)

        return hop

    monkeypatch.setattr(fastapi_deps, "run_in_threadpool", counting(fastapi_deps.run_in_threadpool))
    monkeypatch.setattr(deps, "run_in_threadpool", counting(getattr(deps, "run_in_threadpool", None)), raising=False)
    # HS256: nothing leaves the event loop
    async with asgi_client(make_services(ScriptedModel(Turn(text=["hello"])))) as client:
        resp = await client.post("/api/v1/agent", json=body(), headers=bearer(user="user-1", tenant="tenant-1"))
        assert resp.status_code == 200 and "RUN_FINISHED" in resp.text
    assert hops == []
    # JWKS: the token check, and only it, runs in a worker thread
    services = jwks_services(make_services, jwks_url)
    async with asgi_client(services) as client:
        headers = {"Authorization": f"Bearer {rs_token(rsa_key)}"}
        resp = await client.post("/api/v1/agent", json=body(thread="th-2", run="run-2"), headers=headers)
        assert resp.status_code == 200
    assert hops == ["verify"]
