"""Where the playground exists: its page only when the setting is on, its dev-token route only in the local runner.

The deployed entry points (the Mangum handler and ``run.sh``) build the app with ``create_app``; the dev-token
route is added by ``devtools.local.runner`` alone, so it cannot exist in a deployed stack whatever its settings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from devtools.local.runner import local_app
from functions.agent_api import lambda_buffered
from functions.agent_api.app import create_app
from functions.agent_api.playground import STATIC_DIR
from shared.auth import AUDIT_SCOPE, TokenVerifier
from shared.settings import Settings
from shared.wiring import Services
from tests.support.lambda_events import ROOT, LambdaContext, proxy_event
from tests.support.settings import TABLE, TEST_SECRET, make_settings

DEV_TOKEN = "/playground/dev-token"


def client_for(app: Any, host: str = "127.0.0.1") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(host, 50000)), base_url="http://app")


def route_paths(app: Any) -> set[str]:
    return {getattr(route, "path", "") for route in app.routes}


@pytest.fixture
def built() -> None:
    if not (STATIC_DIR / "index.html").is_file():
        pytest.fail("the playground is not built: run `make playground` (make test does)")


async def test_a_deployed_app_has_no_playground_by_default() -> None:
    # GIVEN the app as a deployed stack builds it, with the settings of the template's defaults
    app = create_app(Services(Settings.from_env({"AUTH_MODE": "jwks", "JWKS_URL": "https://issuer.example/jwks"})))
    async with client_for(app) as client:
        # WHEN the playground's paths are requested
        page = await client.get("/playground")
        token = await client.post(DEV_TOKEN, json={})
    # THEN none of them exists
    assert page.status_code == 404 and token.status_code == 404
    assert not any(path.startswith("/playground") for path in route_paths(app))


async def test_a_deployed_app_with_the_page_turned_on_serves_it_but_never_mints_tokens(built: None) -> None:
    # GIVEN a deployed app whose PLAYGROUND_ENABLED setting is on
    settings = Settings.from_env(
        {"AUTH_MODE": "jwks", "JWKS_URL": "https://issuer.example/jwks", "PLAYGROUND_ENABLED": "true"}
    )
    app = create_app(Services(settings))
    async with client_for(app) as client:
        page = await client.get("/playground")
        script = await client.get("/playground/assets/app.js")
        config = await client.get("/playground/config.json")
        # WHEN the dev-token route is tried, from loopback and from elsewhere, by POST and by GET
        attempts = [
            await client.post(DEV_TOKEN, json={"audit": True}),
            await client.get(DEV_TOKEN),
        ]
        async with client_for(app, host="10.1.2.3") as remote:
            attempts.append(await remote.post(DEV_TOKEN, json={}))
        # AND the API the page calls is asked without a token
        api = await client.get("/api/v1/threads")
    # THEN the page and its bundle are served, with a CSP that keeps it to its own origin
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert config.json() == {"devTokens": False}
    # AND the dev-token route does not exist at all
    assert [a.status_code for a in attempts] == [404, 404, 404]
    assert all(a.json()["error"]["code"] == "not_found" and "token" not in a.json() for a in attempts)
    assert DEV_TOKEN not in route_paths(app)
    # AND the API stays behind the same bearer auth
    assert api.status_code == 401 and api.json()["error"]["code"] == "missing_token"


async def test_only_the_known_page_files_are_served(built: None) -> None:
    app = create_app(Services(make_settings(playground_enabled=True)))
    async with client_for(app) as client:
        answers = [
            (await client.get(path)).status_code
            for path in (
                "/playground/assets/index.html",
                "/playground/assets/..%2F..%2Fapp.py",
                "/playground/assets/../playground.py",
                "/playground/assets/package.json",
            )
        ]
    assert answers == [404, 404, 404, 404]


@pytest.fixture
def buffered_env(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TABLE_NAME", TABLE)
    monkeypatch.setenv("JWT_SECRET", TEST_SECRET)
    monkeypatch.setenv("AUTH_MODE", "hs256")
    monkeypatch.setenv("PLAYGROUND_ENABLED", "true")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # never reached by the routes used here
    monkeypatch.setattr(lambda_buffered, "_handler", None)
    yield
    monkeypatch.setattr(lambda_buffered, "_handler", None)


def test_the_deployed_lambda_handler_has_no_dev_token_route_even_with_the_page_on(
    buffered_env: None, built: None
) -> None:
    # GIVEN the buffered Lambda function with the page turned on (and even a shared secret configured)
    # WHEN API Gateway sends it the dev-token request
    minted = lambda_buffered.handler(proxy_event("POST", DEV_TOKEN, {}, body="{}"), LambdaContext())
    page = lambda_buffered.handler(proxy_event("GET", "/playground", {}), LambdaContext())
    # THEN there is no such route, while the page itself is served
    assert minted["statusCode"] == 404
    assert json.loads(minted["body"])["error"]["code"] == "not_found"
    assert page["statusCode"] == 200


def test_the_template_keeps_the_page_off_and_routes_no_dev_token() -> None:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    template = yaml.load((ROOT / "template.yaml").read_text(), Loader=Loader)
    assert template["Parameters"]["PlaygroundEnabled"]["Default"] == "false"
    assert "PLAYGROUND_ENABLED" in template["Globals"]["Function"]["Environment"]["Variables"]
    routes = [
        (event["Properties"]["Path"], event["Properties"]["Method"])
        for resource in template["Resources"].values()
        if resource.get("Type") == "AWS::Serverless::Function"
        for event in (resource["Properties"].get("Events") or {}).values()
        if event.get("Type") == "Api"
    ]
    assert ("/playground", "get") in routes
    assert all("dev-token" not in path and not (path.startswith("/playground") and m != "get") for path, m in routes)


async def test_the_local_runner_mints_page_tokens_for_loopback_callers_only(built: None) -> None:
    # GIVEN the app as `make dev` composes it
    settings = make_settings(playground_enabled=True)
    app = local_app(Services(settings))
    verifier = TokenVerifier(settings)
    async with client_for(app) as client:
        # WHEN the page asks for its token, and for one with the audit scope
        plain = (await client.post(DEV_TOKEN, json={})).json()
        audit = (await client.post(DEV_TOKEN, json={"audit": True})).json()
        config = (await client.get("/playground/config.json")).json()
    async with client_for(app, host="192.168.1.20") as remote:
        # AND a caller from another machine tries the same
        refused = await remote.post(DEV_TOKEN, json={})
    # THEN the tokens are valid for the local user, with the scope only when asked
    assert verifier.verify(f"Bearer {plain['token']}").scopes == frozenset()
    identity = verifier.verify(f"Bearer {audit['token']}")
    assert (identity.user_id, identity.tenant_id, identity.scopes) == ("local-user", "local-tenant", {AUDIT_SCOPE})
    assert config == {"devTokens": True}
    # AND a non-loopback caller gets nothing
    assert refused.status_code == 404 and "token" not in refused.json()
