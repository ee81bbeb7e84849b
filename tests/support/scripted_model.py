"""A scripted model at the port (``ChatModel``): tests write the model's turns; requests are recorded.

The script is strict. A request after the last turn raises ``ScriptExhausted`` (unless the test gave a
``fallback``, which then answers every further request), and turns left over at the end of a test fail it:
``assert_consumed()`` checks both, and the autouse fixture in tests/conftest.py calls it on every model made
during a test. A test that expects the run to stop early says so by scripting exactly the turns it needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import ClassVar

from shared.llm.types import ChatChunk, ChatRequest, Finished, TextDelta, ToolCallDelta
from shared.models import Usage


@dataclass
class Turn:
    text: list[str] = field(default_factory=list)
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, arguments)
    delay_s: float = 0.0
    raise_error: Exception | None = None  # raised after the turn's text: a stream that breaks mid-answer
    input_tokens: int = 10
    output_tokens: int = 5
    estimated: bool = False  # the counts were made locally (the server sent no usage)


class ScriptExhausted(AssertionError):
    """The code under test asked the model once more than the test scripted."""


class ScriptedModel:
    provider = "scripted"
    made: ClassVar[list[ScriptedModel]] = []  # every model made since the last check (see tests/conftest.py)

    def __init__(self, *turns: Turn, fallback: Callable[[ChatRequest], Turn] | None = None) -> None:
        self.turns = list(turns)
        self.requests: list[ChatRequest] = []
        self.overruns: list[ChatRequest] = []
        self._fallback = fallback
        ScriptedModel.made.append(self)

    async def list_models(self) -> list[str]:
        return ["scripted"]

    def _next_turn(self, request: ChatRequest) -> Turn:
        if self.turns:
            return self.turns.pop(0)
        if self._fallback is not None:
            return self._fallback(request)
        self.overruns.append(request)
        raise ScriptExhausted(
            f"the script is used up: request {len(self.requests)} was not scripted "
            f"(last message: {request.messages[-1] if request.messages else None!r})"
        )

    def assert_consumed(self) -> None:
        """Fail if a request found the script used up or if scripted turns were never asked for."""
        if self.overruns:
            raise ScriptExhausted(f"{len(self.overruns)} request(s) after the script was used up")
        if self.turns:
            raise AssertionError(f"{len(self.turns)} scripted turn(s) never consumed: {self.turns!r}")

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        self.requests.append(request)
        turn = self._next_turn(request)
        for piece in turn.text:
            if turn.delay_s:
                await asyncio.sleep(turn.delay_s)
            yield TextDelta(piece)
        if turn.raise_error is not None:
            raise turn.raise_error
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


def check_scripts() -> None:
    """Run ``assert_consumed`` on every model made since the last call (the fixture's teardown)."""
    made, ScriptedModel.made[:] = list(ScriptedModel.made), []
    for model in made:
        model.assert_consumed()
