"""A scripted model at the port (``ChatModel``): tests write the model's turns; requests are recorded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from shared.llm.types import ChatChunk, ChatRequest, Finished, TextDelta, ToolCallDelta
from shared.models import Usage


@dataclass
class Turn:
    text: list[str] = field(default_factory=list)
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, arguments)
    delay_s: float = 0.0
    raise_error: Exception | None = None
    input_tokens: int = 10
    output_tokens: int = 5
    estimated: bool = False  # the counts were made locally (the server sent no usage)


class ScriptedModel:
    provider = "scripted"

    def __init__(self, *turns: Turn, fallback: Callable[[ChatRequest], Turn] | None = None) -> None:
        self.turns = list(turns)
        self.requests: list[ChatRequest] = []
        self._fallback = fallback or (lambda _req: Turn(text=["ok"]))

    async def list_models(self) -> list[str]:
        return ["scripted"]

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        self.requests.append(request)
        turn = self.turns.pop(0) if self.turns else self._fallback(request)
        if turn.raise_error is not None:
            raise turn.raise_error
        for piece in turn.text:
            if turn.delay_s:
                await asyncio.sleep(turn.delay_s)
            yield TextDelta(piece)
        for index, (call_id, name, args) in enumerate(turn.tool_calls):
            if turn.delay_s:
                await asyncio.sleep(turn.delay_s)
            yield ToolCallDelta(index=index, id=call_id, name=name, arguments=args)
        yield Finished(
            reason="tool_calls" if turn.tool_calls else "stop",
            usage=Usage(
                provider=self.provider,
                model=request.model,
                input_tokens=turn.input_tokens,
                output_tokens=turn.output_tokens,
                estimated=turn.estimated,
            ),
        )
