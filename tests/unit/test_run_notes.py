"""The per-run notes ride in the newest user message, and a request never carries a system message but the first:
Qwen3.5's chat template refuses one anywhere else ("System message must be at the beginning")."""

from __future__ import annotations

from shared.executors.transcript import RUN_NOTES_BEGIN, RUN_NOTES_END, one_leading_system, with_run_notes
from shared.llm.offline import OfflineChatModel
from shared.llm.types import ChatMessage, ChatRequest, TextDelta, ToolCallDelta, without_run_notes
from shared.tools.clock import SPEC as CLOCK_SPEC


def test_notes_open_the_newest_user_message_and_leave_everything_before_it_unchanged() -> None:
    history = [
        ChatMessage(role="system", content="prompt"),
        ChatMessage(role="user", content="one"),
        ChatMessage(role="assistant", content="ok"),
        ChatMessage(role="user", content="two"),
        ChatMessage(role="assistant", tool_calls=(("c1", "clock", "{}"),)),
        ChatMessage(role="tool", content="12:00", tool_call_id="c1"),
    ]
    out = with_run_notes(history, ["memories", "context"])
    assert out[:3] == history[:3] and out[4:] == history[4:]
    assert out[3].role == "user"
    assert out[3].content == f"{RUN_NOTES_BEGIN}\n\nmemories\n\ncontext\n\n{RUN_NOTES_END}\n\ntwo"


def test_without_notes_the_history_is_untouched_and_without_a_user_message_the_notes_come_last() -> None:
    history = [ChatMessage(role="system", content="prompt")]
    assert with_run_notes(history, []) == history
    out = with_run_notes(history, ["memories"])
    assert [m.role for m in out] == ["system", "user"]
    assert "memories" in (out[1].content or "")


def test_a_later_system_message_is_sent_as_a_marked_user_message() -> None:
    messages = [
        ChatMessage(role="system", content="prompt"),
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="system", content="stored note"),
    ]
    out = one_leading_system(messages)
    assert [m.role for m in out] == ["system", "user", "user"]
    assert out[0] == messages[0]
    assert out[2].content == "[system note]\nstored note"


def test_a_model_reading_the_users_words_gets_them_without_the_notes() -> None:
    history = [ChatMessage(role="system", content="prompt"), ChatMessage(role="user", content="what time is it?")]
    [_, newest] = with_run_notes(history, ["- (fact) lives in Lyon at the time of writing"])
    assert without_run_notes(newest.content or "") == "what time is it?"
    assert without_run_notes("no notes here") == "no notes here"


async def test_the_offline_model_answers_the_users_words_not_the_notes() -> None:
    # GIVEN a request whose newest user message opens with notes that mention the time
    history = [ChatMessage(role="system", content="prompt"), ChatMessage(role="user", content="hello there")]
    messages = with_run_notes(history, ["- (fact) works at night, time zone Asia/Tokyo"])
    chunks = [
        c
        async for c in OfflineChatModel().stream(ChatRequest(model="m", messages=tuple(messages), tools=(CLOCK_SPEC,)))
    ]
    # THEN it does not call the clock for the notes' words, and echoes only what the user said
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    assert not any(isinstance(c, ToolCallDelta) for c in chunks)
    assert text.endswith("You said: hello there") and RUN_NOTES_BEGIN not in text
