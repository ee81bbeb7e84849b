"""A deterministic built-in model for running without LLM credentials. It says what it is in every answer.

It understands one thing: questions about the time, which it answers by calling ``get_current_time`` (when it is
offered) and reading the result. Everything else is acknowledged, never invented.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

from shared.llm.types import ChatChunk, ChatRequest, Finished, TextDelta, ToolCallDelta
from shared.models import Usage, digest

OFFLINE_MODEL_ID = "offline-model"
LABEL = "[offline model]"
_TIME_WORDS = re.compile(r"\b(time|clock|hour)\b|几点|时间", re.IGNORECASE)
_ZONE = re.compile(r"\b([A-Z][A-Za-z]+/[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_]+)?)\b")


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


class OfflineChatModel:
    provider = "offline"

    def __init__(self, *, chunk_delay_s: float = 0.0) -> None:
        self._delay = chunk_delay_s

    async def list_models(self) -> list[str]:
        return [OFFLINE_MODEL_ID]

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        prompt_chars = sum(len(m.content or "") for m in request.messages)
        last = request.messages[-1] if request.messages else None
        offered = {t.name for t in request.tools}
        if last is not None and last.role == "tool":
            answer = self._answer_from_tool(last.content or "")
        elif (
            last is not None
            and last.role == "user"
            and "get_current_time" in offered
            and _TIME_WORDS.search(last.content or "")
        ):
            zone = _ZONE.search(last.content or "")
            arguments = json.dumps({"timezone": zone.group(1) if zone else "UTC"})
            call_id = "call_offline_" + digest(f"{len(request.messages)}:{last.content}")[:16]
            for start in range(0, len(arguments), 8):
                await self._pause()
                yield ToolCallDelta(
                    index=0, id=call_id, name="get_current_time", arguments=arguments[start : start + 8]
                )
            yield Finished(
                reason="tool_calls",
                usage=self._usage(request, prompt_chars, len(arguments)),
            )
            return
        else:
            said = (last.content or "").strip()[:200] if last is not None else ""
            answer = (
                f"{LABEL} This is the built-in offline model: it only tells the time. "
                f"Set LLM_BASE_URL and LLM_API_KEY to talk to a real model. You said: {said}"
            )
        for word in re.findall(r"\S+\s*", answer):
            await self._pause()
            yield TextDelta(word)
        yield Finished(reason="stop", usage=self._usage(request, prompt_chars, len(answer)))

    def _answer_from_tool(self, content: str) -> str:
        try:
            data = json.loads(content)
        except ValueError:
            data = {}
        if isinstance(data, dict) and "iso" in data:
            return f"{LABEL} The current time in {data.get('timezone', 'UTC')} is {data['iso']}."
        return f"{LABEL} The tool did not give me the time: {content[:200]}"

    def _usage(self, request: ChatRequest, prompt_chars: int, output_chars: int) -> Usage:
        return Usage(
            provider=self.provider,
            model=OFFLINE_MODEL_ID,
            input_tokens=_estimate_tokens("x" * prompt_chars),
            output_tokens=_estimate_tokens("x" * output_chars),
            estimated=True,
        )

    async def _pause(self) -> None:
        if self._delay:
            await asyncio.sleep(self._delay)
