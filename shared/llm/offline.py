"""A deterministic built-in model for running without LLM credentials. It says what it is in every answer.

It understands two things: questions about the time, which it answers by calling ``get_current_time`` (when it is
offered) and reading the result; and requests to book something when the client offers the front-end tool
``confirm_booking`` (the /playground page does), which it calls and then reports the person's answer. Everything
else is acknowledged, never invented. A thread-title request (``shared.titles``: the message inside
``<user_message>``) is answered with the message's first words, so ``make dev`` shows titles without a model.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

from shared.llm.types import ChatChunk, ChatRequest, Finished, TextDelta, ToolCallDelta, without_run_notes
from shared.models import Usage, digest
from shared.tokens import estimate_tokens

OFFLINE_MODEL_ID = "offline-model"
LABEL = "[offline model]"
_TIME_WORDS = re.compile(r"\b(time|clock|hour)\b|几点|时间", re.IGNORECASE)
_BOOK_WORDS = re.compile(r"\b(book|booking|reserve|reservation)\b|预订|预约", re.IGNORECASE)
BOOKING_TOOL = "confirm_booking"
_TITLE_REQUEST = re.compile(r"<user_message>\n(.*?)\n</user_message>", re.S)
TITLE_WORDS = 6
_ZONE = re.compile(r"\b([A-Z][A-Za-z]+/[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_]+)?)\b")


class OfflineChatModel:
    provider = "offline"

    def __init__(self, *, chunk_delay_s: float = 0.0) -> None:
        self._delay = chunk_delay_s

    async def list_models(self) -> list[str]:
        return [OFFLINE_MODEL_ID]

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        prompt = "".join(m.content or "" for m in request.messages)
        last = request.messages[-1] if request.messages else None
        offered = {t.name for t in request.tools}
        text = without_run_notes(last.content or "") if last is not None else ""
        if last is not None and last.role == "tool":
            answer = self._answer_from_tool(last.content or "")
        elif last is not None and last.role == "user" and (titled := _TITLE_REQUEST.search(text)):
            answer = " ".join(titled.group(1).split()[:TITLE_WORDS])
        elif last is not None and last.role == "user" and BOOKING_TOOL in offered and _BOOK_WORDS.search(text):
            async for chunk in self._call(BOOKING_TOOL, {"what": text.strip()[:200]}, request, prompt):
                yield chunk
            return
        elif last is not None and last.role == "user" and "get_current_time" in offered and _TIME_WORDS.search(text):
            zone = _ZONE.search(text)
            arguments = {"timezone": zone.group(1) if zone else "UTC"}
            async for chunk in self._call("get_current_time", arguments, request, prompt):
                yield chunk
            return
        else:
            said = text.strip()[:200]
            answer = (
                f"{LABEL} This is the built-in offline model: it only tells the time. "
                f"Set LLM_BASE_URL and LLM_API_KEY to talk to a real model. You said: {said}"
            )
        for word in re.findall(r"\S+\s*", answer):
            await self._pause()
            yield TextDelta(word)
        yield Finished(reason="stop", usage=self._usage(prompt, answer))

    async def _call(
        self, name: str, arguments: dict[str, str], request: ChatRequest, prompt: str
    ) -> AsyncIterator[ChatChunk]:
        """One tool call, its arguments streamed in fragments as providers do."""
        last = request.messages[-1]
        text = json.dumps(arguments, ensure_ascii=False)
        call_id = "call_offline_" + digest(f"{len(request.messages)}:{last.content}")[:16]
        for start in range(0, len(text), 8):
            await self._pause()
            yield ToolCallDelta(index=0, id=call_id, name=name, arguments=text[start : start + 8])
        yield Finished(reason="tool_calls", usage=self._usage(prompt, text))

    def _answer_from_tool(self, content: str) -> str:
        try:
            data = json.loads(content)
        except ValueError:
            data = {}
        if isinstance(data, dict) and "iso" in data:
            return f"{LABEL} The current time in {data.get('timezone', 'UTC')} is {data['iso']}."
        if isinstance(data, dict) and isinstance(data.get("confirmed"), bool):
            if data["confirmed"]:
                return f"{LABEL} You confirmed: the booking is made (a demo; nothing was reserved)."
            return f"{LABEL} You declined: nothing was booked."
        return f"{LABEL} The tool did not give me the time: {content[:200]}"

    def _usage(self, prompt: str, output: str) -> Usage:
        return Usage(
            provider=self.provider,
            model=OFFLINE_MODEL_ID,
            input_tokens=estimate_tokens(prompt),
            output_tokens=estimate_tokens(output),
            estimated=True,
        )

    async def _pause(self) -> None:
        if self._delay:
            await asyncio.sleep(self._delay)
