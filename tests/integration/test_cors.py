"""Browser clients: the app's CORS headers, from ``CORS_ALLOWED_ORIGINS`` (template.yaml ``CorsAllowedOrigin``).

Behind API Gateway the OPTIONS preflight is answered by the gateway (tests/infra checks the expansion); the browser
still needs ``Access-Control-Allow-Origin`` on every real response, the SSE stream and the error bodies included,
or it hides them from the page. A site that is not allowed gets no CORS header at all.
"""

from __future__ import annotations

from typing import Any

from shared.settings import Settings
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.tokens import bearer

APP_ORIGIN = "https://app.example.com"
EVIL_ORIGIN = "https://evil.example.com"


def _services(store: Any, redis_stream: Any, origins: tuple[str, ...], *turns: Turn) -> Services:
    overrides = ServiceOverrides(store=store, stream=redis_stream, model=ScriptedModel(*turns))
    return Services(make_settings(cors_allowed_origins=origins), overrides=overrides)


def _run_body(thread: str, run: str) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [{"id": f"m-{run}", "role": "user", "content": "hello"}]}


async def test_the_preflight_allows_the_configured_origin_with_the_headers_a_client_sends(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    async with asgi_client(_services(store, redis_stream, (APP_ORIGIN,))) as client:
        resp = await client.options(
            "/api/v1/agent",
            headers={
                "Origin": APP_ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type,last-event-id",
            },
        )
    assert resp.status_code == 200
    assert resp.headers["access-control-allow-origin"] == APP_ORIGIN
    assert "POST" in resp.headers["access-control-allow-methods"]
    allowed = {h.strip().lower() for h in resp.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "last-event-id"} <= allowed
    assert "access-control-allow-credentials" not in resp.headers


async def test_the_stream_and_the_json_routes_and_their_errors_carry_the_origin(
    store: Any, redis_stream: Any, asgi_client: Any
) -> None:
    origin = {"Origin": APP_ORIGIN}
    async with asgi_client(_services(store, redis_stream, (APP_ORIGIN,), Turn(text=["hi"]))) as client:
        stream = await client.post("/api/v1/agent", json=_run_body("th-c", "run-c"), headers={**bearer(), **origin})
        listed = await client.get("/api/v1/threads", headers={**bearer(), **origin})
        unauthorised = await client.get("/api/v1/threads", headers=origin)
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    assert "RUN_FINISHED" in stream.text and '"delta":"hi"' in stream.text.replace(" ", "")
    for resp in (stream, listed, unauthorised):
        assert resp.headers["access-control-allow-origin"] == APP_ORIGIN, resp.request.url
    assert unauthorised.status_code == 401


async def test_another_site_gets_no_cors_header(store: Any, redis_stream: Any, asgi_client: Any) -> None:
    async with asgi_client(_services(store, redis_stream, (APP_ORIGIN,))) as client:
        preflight = await client.options(
            "/api/v1/threads", headers={"Origin": EVIL_ORIGIN, "Access-Control-Request-Method": "GET"}
        )
        actual = await client.get("/api/v1/threads", headers={**bearer(), "Origin": EVIL_ORIGIN})
    assert preflight.status_code == 400
    assert "access-control-allow-origin" not in preflight.headers
    assert actual.status_code == 200 and "access-control-allow-origin" not in actual.headers


async def test_no_origins_configured_sends_no_cors_headers(store: Any, redis_stream: Any, asgi_client: Any) -> None:
    async with asgi_client(_services(store, redis_stream, ())) as client:
        resp = await client.get("/api/v1/threads", headers={**bearer(), "Origin": APP_ORIGIN})
    assert resp.status_code == 200 and "access-control-allow-origin" not in resp.headers


def test_origins_are_read_from_the_environment() -> None:
    env = {"CORS_ALLOWED_ORIGINS": f" {APP_ORIGIN}, http://localhost:5173 ,"}
    assert Settings.from_env(env).cors_allowed_origins == (APP_ORIGIN, "http://localhost:5173")
    assert Settings.from_env({}).cors_allowed_origins == ()


def test_the_contract_states_the_headers_methods_and_max_age_the_app_allows() -> None:
    from pathlib import Path

    from functions.agent_api.cors import ALLOWED_HEADERS, ALLOWED_METHODS, PREFLIGHT_MAX_AGE_S

    text = (Path(__file__).resolve().parents[2] / "docs/protocols/agent/api-endpoints.md").read_text(encoding="utf-8")
    rule = text[text.index("- **Browser clients (CORS):**") :].split("\n- **", 1)[0]
    assert all(f"`{header}`" in rule for header in ALLOWED_HEADERS)
    assert ", ".join(m for m in ALLOWED_METHODS if m != "OPTIONS") in rule
    assert f"cached for {PREFLIGHT_MAX_AGE_S // 60} minutes" in rule
