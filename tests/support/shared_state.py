"""Helpers of the shared-state and Dojo feature tests: tokens minted with the app's own secret, run bodies."""

from __future__ import annotations

from typing import Any

from shared.auth import mint_local_token
from shared.wiring import Services


def bearer_for(services: Services, user: str = "user-1", tenant: str = "tenant-1") -> dict[str, str]:
    """An ``Authorization`` header the app built from ``services`` accepts (local HS256 tokens)."""
    secret = services.settings.jwt_secret
    assert secret, "the services need a JWT secret (auth_mode hs256)"
    return {"Authorization": f"Bearer {mint_local_token(secret, user_id=user, tenant_id=tenant)}"}


def run_body(thread: str, run: str, text: str, **extra: Any) -> dict[str, Any]:
    """A ``RunAgentInput`` with one user message."""
    messages = [{"id": f"{run}-user", "role": "user", "content": text}]
    return {"threadId": thread, "runId": run, "messages": messages, "tools": [], "context": [], **extra}


DOJO_SECRET = "dojo-feature-tests-secret-0123456789abcdef"


def dojo_settings(redis_url: str, llm_base_url: str) -> Any:
    """Settings of the app the Dojo feature tests serve: local HS256 tokens, the scripted model server."""
    from shared.settings import Settings

    return Settings(
        table_name="agent-test",
        aws_region="us-east-1",
        jwt_secret=DOJO_SECRET,
        auth_mode="hs256",
        sse_ping_interval_s=1.0,
        redis_url=redis_url,
        llm_base_url=llm_base_url,
        llm_api_key="test-key",
    )
