"""The built-in offline model: the time through ``get_current_time``, and bookings through the playground's
front-end tool ``confirm_booking`` only when a client offers it."""

from __future__ import annotations

import json

from shared.llm.offline import BOOKING_TOOL, LABEL, OfflineChatModel
from shared.llm.types import ChatChunk, ChatMessage, ChatRequest, Finished, TextDelta, ToolCallDelta, ToolSpec
from shared.titles.naming import clean_title, title_request
from shared.tokens import estimate_tokens

CLOCK = ToolSpec(name="get_current_time", description="", parameters={"type": "object"})
BOOKING = ToolSpec(name=BOOKING_TOOL, description="", parameters={"type": "object"})


async def answer(*messages: ChatMessage, tools: tuple[ToolSpec, ...]) -> list[ChatChunk]:
    request = ChatRequest(model="offline-model", messages=messages, tools=tools)
    return [chunk async for chunk in OfflineChatModel().stream(request)]


def call_of(chunks: list[ChatChunk]) -> tuple[str, dict[str, str]]:
    deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert deltas and isinstance(chunks[-1], Finished) and chunks[-1].reason == "tool_calls"
    return deltas[0].name or "", json.loads("".join(d.arguments for d in deltas))


def text_of(chunks: list[ChatChunk]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


async def test_a_booking_request_calls_the_front_end_tool_when_it_is_offered() -> None:
    chunks = await answer(ChatMessage(role="user", content="Please book a table for two"), tools=(CLOCK, BOOKING))
    assert call_of(chunks) == (BOOKING_TOOL, {"what": "Please book a table for two"})


async def test_without_the_front_end_tool_a_booking_request_is_only_acknowledged() -> None:
    chunks = await answer(ChatMessage(role="user", content="Please book a table for two"), tools=(CLOCK,))
    assert not any(isinstance(c, ToolCallDelta) for c in chunks)
    assert text_of(chunks).startswith(f"{LABEL} This is the built-in offline model")


async def test_the_time_question_still_calls_the_clock() -> None:
    chunks = await answer(ChatMessage(role="user", content="What time is it in Asia/Tokyo?"), tools=(CLOCK, BOOKING))
    assert call_of(chunks) == ("get_current_time", {"timezone": "Asia/Tokyo"})


async def test_the_answer_reports_what_the_person_decided() -> None:
    for confirmed, expected in ((True, "You confirmed"), (False, "You declined")):
        chunks = await answer(
            ChatMessage(role="user", content="book it"),
            ChatMessage(role="assistant", tool_calls=(("c1", BOOKING_TOOL, '{"what": "book it"}'),)),
            ChatMessage(role="tool", content=json.dumps({"confirmed": confirmed}), tool_call_id="c1"),
            tools=(CLOCK, BOOKING),
        )
        assert text_of(chunks).startswith(f"{LABEL} {expected}")


async def test_its_usage_is_the_shared_estimate_of_the_prompt_and_the_answer() -> None:
    # GIVEN a two-message conversation the model answers with text
    messages = (ChatMessage(role="system", content="You are helpful."), ChatMessage(role="user", content="你好 there"))
    # WHEN the offline model answers
    chunks = await answer(*messages, tools=())
    # THEN its usage is the shared estimate of what it read and what it wrote, flagged as estimated
    end = chunks[-1]
    assert isinstance(end, Finished) and end.usage is not None
    assert end.usage.input_tokens == estimate_tokens("You are helpful.你好 there")
    assert end.usage.output_tokens == estimate_tokens(text_of(chunks))
    assert end.usage.estimated is True


async def test_a_thread_title_request_is_answered_with_the_first_words_of_the_users_message() -> None:
    request = title_request("offline-model", "Wie lange dauert die Zugfahrt von Berlin nach Lissabon?", "Zwei Tage.")
    chunks = [chunk async for chunk in OfflineChatModel().stream(request)]
    assert clean_title(text_of(chunks)) == "Wie lange dauert die Zugfahrt von"
