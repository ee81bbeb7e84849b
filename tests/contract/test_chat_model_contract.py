"""Contract of the ``ChatModel`` port: the same cases on the model fakes (``ScriptedModel``, the built-in offline
model) and on ``OpenAIChatModel`` talking over HTTP, with the real ``openai`` client, to the scripted test model
server. Each backend is told what to answer in its own terms (a scripted turn, a server turn, or the prompt the
offline model reacts to); the chunks that come back must look the same: text deltas in order, tool-call fragments
by index, exactly one ``Finished`` last with the usage, and failures as ``ModelError`` with a documented code.
The offline model cannot be told to fail, so the failure cases run on the scriptable backends only."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Protocol

import pytest

from shared.errors import ModelError
from shared.llm.offline import LABEL, OFFLINE_MODEL_ID, OfflineChatModel
from shared.llm.openai_chat import OpenAIChatModel
from shared.llm.types import ChatChunk, ChatMessage, ChatRequest, Finished, TextDelta, ToolCallDelta, ToolSpec
from shared.ports.model import ChatModel
from tests.support.model_server import ModelServer, ScriptedToolCall, ScriptedTurn
from tests.support.scripted_model import ScriptedModel, Turn

MODEL = "qwen3.5-35b-a3b"
CLOCK = ToolSpec(
    name="get_current_time",
    description="The current time in a timezone.",
    parameters={"type": "object", "properties": {"timezone": {"type": "string"}}, "additionalProperties": False},
)
FAILURES = {
    # kind: (the documented code, whether asking again later may help)
    "unavailable": ("model_unavailable", True),
    "rate_limited": ("model_rate_limited", True),
    "rejected": ("model_rejected_request", False),
}


class Backend(Protocol):
    model: ChatModel

    def text(self, pieces: list[str]) -> tuple[ChatRequest, str | None]:
        """Arrange a text answer; the request to send and the exact text expected (None: not scriptable)."""
        ...

    def tool_call(self, name: str, arguments: dict[str, str]) -> ChatRequest: ...

    def usage(self, reported: tuple[int, int] | None) -> tuple[ChatRequest, tuple[int, int] | None]:
        """Arrange an answer whose usage the endpoint reports (or not); the counts expected (None: any)."""
        ...

    def usage_model(self, request: ChatRequest) -> str: ...


def ask(text: str, *, tools: tuple[ToolSpec, ...] = ()) -> ChatRequest:
    return ChatRequest(model=MODEL, messages=(ChatMessage(role="user", content=text),), tools=tools)


class Scripted:
    def __init__(self) -> None:
        self.model = ScriptedModel()

    def text(self, pieces: list[str]) -> tuple[ChatRequest, str | None]:
        self.model.turns.append(Turn(text=pieces))
        return ask("hello"), "".join(pieces)

    def tool_call(self, name: str, arguments: dict[str, str]) -> ChatRequest:
        self.model.turns.append(Turn(tool_calls=[("call_1", name, json.dumps(arguments))]))
        return ask("what time is it?", tools=(CLOCK,))

    def usage(self, reported: tuple[int, int] | None) -> tuple[ChatRequest, tuple[int, int] | None]:
        i, o = reported or (7, 3)
        self.model.turns.append(Turn(text=["ok"], input_tokens=i, output_tokens=o, estimated=reported is None))
        return ask("hello"), reported

    def usage_model(self, request: ChatRequest) -> str:
        return request.model

    def fail(self, kind: str, after: list[str]) -> ChatRequest:
        code = FAILURES[kind][0] if not after else "model_stream_interrupted"
        self.model.turns.append(Turn(text=after, raise_error=ModelError("scripted failure", code=code)))
        return ask("hello")


class OverHttp:
    def __init__(self, server: ModelServer) -> None:
        self.server = server
        self.model = OpenAIChatModel(server.base_url, "test-key", provider="openai-compatible", max_retries=0)

    def text(self, pieces: list[str]) -> tuple[ChatRequest, str | None]:
        self.server.enqueue(ScriptedTurn(text=pieces))
        return ask("hello"), "".join(pieces)

    def tool_call(self, name: str, arguments: dict[str, str]) -> ChatRequest:
        self.server.enqueue(ScriptedTurn(tool_calls=[ScriptedToolCall(name, json.dumps(arguments))]))
        return ask("what time is it?", tools=(CLOCK,))

    def usage(self, reported: tuple[int, int] | None) -> tuple[ChatRequest, tuple[int, int] | None]:
        self.server.enqueue(ScriptedTurn(text=["ok"], usage=reported, send_usage=reported is not None))
        return ask("hello"), reported

    def usage_model(self, request: ChatRequest) -> str:
        return request.model

    def fail(self, kind: str, after: list[str]) -> ChatRequest:
        status = {"unavailable": 503, "rate_limited": 429, "rejected": 400}[kind]
        turn = ScriptedTurn(text=after, disconnect_after_chunks=len(after)) if after else ScriptedTurn(status=status)
        self.server.enqueue(turn)
        return ask("hello")


class Offline:
    """The built-in model: it reacts to what it is asked, so each case asks what gives the wanted answer."""

    def __init__(self) -> None:
        self.model = OfflineChatModel()

    def text(self, pieces: list[str]) -> tuple[ChatRequest, str | None]:
        return ask("hello"), None

    def tool_call(self, name: str, arguments: dict[str, str]) -> ChatRequest:
        assert (name, arguments) == ("get_current_time", {"timezone": "Europe/Paris"}), "the only call it makes"
        return ask("what time is it in Europe/Paris?", tools=(CLOCK,))

    def usage(self, reported: tuple[int, int] | None) -> tuple[ChatRequest, tuple[int, int] | None]:
        if reported is not None:
            pytest.skip("the offline model has no endpoint to report usage: it always estimates")
        return ask("hello"), None

    def usage_model(self, request: ChatRequest) -> str:
        return OFFLINE_MODEL_ID  # it names itself, so a run's usage never passes for a real model's


async def over_http() -> AsyncIterator[OverHttp]:
    with ModelServer() as server:
        backend = OverHttp(server)
        yield backend
        await backend.model.aclose()


@pytest.fixture(params=["scripted", "offline", "openai-http"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "scripted":
        yield Scripted()
    elif request.param == "offline":
        yield Offline()
    else:
        async for http in over_http():
            yield http


@pytest.fixture(params=["scripted", "openai-http"])
async def failing(request: pytest.FixtureRequest) -> AsyncIterator[Scripted | OverHttp]:
    if request.param == "scripted":
        yield Scripted()
    else:
        async for http in over_http():
            yield http


async def chunks_of(model: ChatModel, request: ChatRequest, into: list[ChatChunk] | None = None) -> list[ChatChunk]:
    received = [] if into is None else into
    stream: AsyncIterator[ChatChunk] = model.stream(request)
    async for chunk in stream:
        received.append(chunk)
    return received


def the_finish(chunks: list[ChatChunk]) -> Finished:
    ends = [c for c in chunks if isinstance(c, Finished)]
    assert len(ends) == 1 and chunks[-1] is ends[0], "exactly one Finished, and it comes last"
    return ends[0]


async def test_text_streams_as_deltas_in_order_and_ends_with_stop(backend: Backend) -> None:
    request, expected = backend.text(["Hel", "lo ", "world"])
    chunks = await chunks_of(backend.model, request)
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    assert text == expected if expected is not None else text.startswith(LABEL)
    assert not any(isinstance(c, ToolCallDelta) for c in chunks)
    assert the_finish(chunks).reason == "stop"


async def test_a_tool_call_arrives_as_fragments_of_one_index_with_one_id_and_name(backend: Backend) -> None:
    request = backend.tool_call("get_current_time", {"timezone": "Europe/Paris"})
    chunks = await chunks_of(backend.model, request)
    fragments = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert {f.index for f in fragments} == {0}
    assert len({f.id for f in fragments if f.id}) == 1, "one id for the call"
    assert {f.name for f in fragments if f.name} == {"get_current_time"}
    assert json.loads("".join(f.arguments for f in fragments)) == {"timezone": "Europe/Paris"}
    assert the_finish(chunks).reason == "tool_calls"


@pytest.mark.parametrize("reported", [(120, 30), None], ids=["reported", "estimated"])
async def test_the_finish_carries_the_usage_reported_or_an_estimate_marked_as_such(
    backend: Backend, reported: tuple[int, int] | None
) -> None:
    request, expected = backend.usage(reported)
    usage = the_finish(await chunks_of(backend.model, request)).usage
    assert usage is not None
    assert (usage.provider, usage.model) == (backend.model.provider, backend.usage_model(request))
    assert usage.estimated is (reported is None)
    if expected is not None:
        assert (usage.input_tokens, usage.output_tokens) == expected
    else:
        assert usage.input_tokens > 0 and usage.output_tokens > 0


@pytest.mark.parametrize("kind", sorted(FAILURES))
async def test_a_failed_call_raises_model_error_with_its_documented_code(
    failing: Scripted | OverHttp, kind: str
) -> None:
    request = failing.fail(kind, after=[])
    with pytest.raises(ModelError) as failed:
        await chunks_of(failing.model, request)
    code, transient = FAILURES[kind]
    assert (failed.value.code, failed.value.transient) == (code, transient)


async def test_a_stream_that_breaks_off_keeps_what_arrived_and_says_it_was_interrupted(
    failing: Scripted | OverHttp,
) -> None:
    request = failing.fail("unavailable", after=["Half ", "an "])
    received: list[ChatChunk] = []
    with pytest.raises(ModelError) as failed:
        await chunks_of(failing.model, request, received)
    assert failed.value.code == "model_stream_interrupted"
    assert "".join(c.text for c in received if isinstance(c, TextDelta)) == "Half an "
    assert not any(isinstance(c, Finished) for c in received)


async def test_list_models_names_at_least_one_model(backend: Backend) -> None:
    assert all(isinstance(name, str) and name for name in await backend.model.list_models())
    assert await backend.model.list_models()
