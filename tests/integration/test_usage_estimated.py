"""The terminal event says when token counts were estimated (sse-events.md, "outcome and usage")."""

from __future__ import annotations

from typing import Any

from shared.errors import ModelError
from tests.support.chat_requests import TIME_CALL, post_run, run_body, user
from tests.support.scripted_model import ScriptedModel, Turn


async def terminal_of(make_services: Any, asgi_client: Any, *turns: Turn) -> dict[str, Any]:
    async with asgi_client(make_services(ScriptedModel(*turns))) as client:
        status, frames = await post_run(client, run_body("th-u", "run-u", [user("m1", "time?")]))
    assert status == 200
    terminal: dict[str, Any] = frames[-1].json()
    return terminal


async def test_a_run_whose_server_sent_no_usage_says_usage_estimated(make_services: Any, asgi_client: Any) -> None:
    # GIVEN a tool-call turn counted by the server, then an answer the server sent no usage for
    finished = await terminal_of(
        make_services, asgi_client, Turn(tool_calls=[TIME_CALL]), Turn(text=["noon"], estimated=True)
    )
    # THEN RUN_FINISHED carries the counts and says that some are estimates
    assert finished["type"] == "RUN_FINISHED"
    assert finished["usage"][0]["inputTokens"] == 20
    assert finished["metadata"] == {"usageEstimated": True, "runId": finished["runId"]}


async def test_a_run_with_reported_usage_carries_no_estimate_flag(make_services: Any, asgi_client: Any) -> None:
    finished = await terminal_of(make_services, asgi_client, Turn(text=["noon"]))
    assert finished["type"] == "RUN_FINISHED"
    assert "usageEstimated" not in (finished.get("metadata") or {})


async def test_a_failed_run_says_its_partial_usage_was_estimated(make_services: Any, asgi_client: Any) -> None:
    # GIVEN an estimated tool-call turn, then a model failure
    failure = ModelError("cut", code="model_stream_interrupted")
    error = await terminal_of(
        make_services, asgi_client, Turn(tool_calls=[TIME_CALL], estimated=True), Turn(raise_error=failure)
    )
    # THEN RUN_ERROR carries the usage so far, flagged as estimated
    assert (error["type"], error["code"]) == ("RUN_ERROR", "model_stream_interrupted")
    assert error["usage"][0]["inputTokens"] == 10
    assert error["metadata"]["usageEstimated"] is True and set(error["metadata"]) == {"usageEstimated", "runId"}
