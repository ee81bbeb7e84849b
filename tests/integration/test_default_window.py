"""The shipped default profile's window is the design's (design §10.3, docs/policy.md §2.1): the 25th request of a
thread holds exactly user messages 6..25, and with the emergency widening (``WINDOW_N_OVERRIDE=25``) the 28th holds
4..28. Through the app, the store and the real profile catalog; the model is scripted and records what it was sent.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from shared.llm.types import ChatRequest
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.tokens import bearer

NUMBERED = re.compile(r"user message (\d+)\b")


def _answer(request: ChatRequest) -> Turn:
    return Turn(text=["Noted."])


def users_in(request: ChatRequest) -> list[int]:
    """The numbers of the user messages a model request carries, in order."""
    found: list[int] = []
    for message in request.messages:
        if message.role == "user" and message.content:
            found += [int(n) for n in NUMBERED.findall(message.content)]
    return found


async def converse(asgi_client: Any, services: Any, thread: str, turns: int) -> None:
    async with asgi_client(services) as client:
        for n in range(1, turns + 1):
            body = {
                "threadId": thread,
                "runId": f"{thread}-run-{n}",
                "messages": [{"id": f"{thread}-m{n}", "role": "user", "content": f"user message {n}"}],
            }
            response = await client.post("/api/v1/agent", json=body, headers=bearer())
            assert response.status_code == 200, response.text
            assert "RUN_FINISHED" in response.text
    await services.runs.wait_idle()


@pytest.mark.slow
async def test_the_25th_request_on_the_default_profile_holds_exactly_user_messages_6_to_25(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN the shipped catalog, with no roll-out: every chat runs on chat_default
    model = ScriptedModel(fallback=_answer)
    services = make_services(model)
    # WHEN a user sends 25 messages on one thread
    await converse(asgi_client, services, "th-window", 25)
    # THEN the 25th model request holds exactly the last 20 user messages, the current one included
    assert users_in(model.requests[-1]) == list(range(6, 26))
    # AND every earlier request held the last min(n, 20) of them: the window slides one message per turn
    assert [users_in(r)[0] for r in model.requests] == [max(1, n - 19) for n in range(1, 26)]


@pytest.mark.slow
async def test_the_emergency_widening_holds_user_messages_4_to_28_on_the_28th_request(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN the emergency override of the design (20 -> 25), set as a deployment sets WINDOW_N_OVERRIDE
    model = ScriptedModel(fallback=_answer)
    services = make_services(model, window_n_override=25)
    # WHEN a user sends 28 messages on one thread
    await converse(asgi_client, services, "th-wide", 28)
    # THEN the 28th request holds exactly the last 25 user messages
    assert users_in(model.requests[-1]) == list(range(4, 29))
