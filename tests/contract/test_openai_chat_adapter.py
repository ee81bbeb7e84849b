"""The OpenAI-compatible adapter against a scripted server over real HTTP, with the real ``openai`` client."""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.preflight import main, run_preflight
from shared.errors import ModelError
from shared.llm.openai_chat import OpenAIChatModel
from shared.llm.openai_errors import explain_rejection
from shared.llm.thinking import Provider
from shared.llm.types import (
    ChatChunk,
    ChatMessage,
    ChatRequest,
    ChatTurn,
    Finished,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
)
from shared.media.image_tokens import image_tokens
from shared.media.kinds import image_size, sniff
from shared.tokens import estimate_tokens
from tests.support.images import png
from tests.support.model_server import (
    ModelServer,
    ScriptedToolCall,
    ScriptedTurn,
    model_server_fixture,  # noqa: F401  (registers the exported `model_server` fixture here)
)

MODEL = "qwen3.5-35b-a3b"
REPO_ROOT = Path(__file__).resolve().parents[2]
MakeModel = Callable[..., OpenAIChatModel]


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


@pytest.fixture
async def make_model(server: ModelServer) -> AsyncIterator[MakeModel]:
    made: list[OpenAIChatModel] = []

    def make(**options: Any) -> OpenAIChatModel:
        options.setdefault("provider", "openai-compatible")
        model = OpenAIChatModel(options.pop("base_url", server.base_url), "test-key", **options)
        made.append(model)
        return model

    yield make
    for model in made:
        await model.aclose()


def ask(text: str = "hello", **options: Any) -> ChatRequest:
    return ChatRequest(model=MODEL, messages=(ChatMessage(role="user", content=text),), **options)


async def collect(model: OpenAIChatModel, request: ChatRequest) -> list[ChatChunk]:
    return [chunk async for chunk in model.stream(request)]


async def collect_into(received: list[ChatChunk], model: OpenAIChatModel, request: ChatRequest) -> None:
    """Like ``collect``, but what arrived before an error stays visible to the test."""
    async for chunk in model.stream(request):
        received.append(chunk)


def accumulate(chunks: list[ChatChunk]) -> ChatTurn:
    """Fold chunks the strictest way: ids and names are concatenated too, so a repeat would show."""
    turn = ChatTurn()
    for chunk in chunks:
        if isinstance(chunk, TextDelta):
            turn.text += chunk.text
        elif isinstance(chunk, ReasoningDelta):
            turn.reasoning += chunk.text
        elif isinstance(chunk, ToolCallDelta):
            call = turn.tool_calls.setdefault(chunk.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += chunk.id or ""
            call["name"] += chunk.name or ""
            call["arguments"] += chunk.arguments
        else:
            turn.finish_reason = chunk.reason
            turn.usage = chunk.usage
    return turn


def finished(chunks: list[ChatChunk]) -> Finished:
    ends = [c for c in chunks if isinstance(c, Finished)]
    assert len(ends) == 1, "exactly one Finished"
    assert chunks[-1] is ends[0], "Finished comes last"
    return ends[0]


# -- streaming -----------------------------------------------------------------------------------------------


async def test_streamed_text_arrives_as_text_deltas_in_order(server: ModelServer, make_model: MakeModel) -> None:
    # GIVEN a server that streams three content chunks
    server.enqueue(ScriptedTurn(text=["Hel", "lo ", "world"]))
    # WHEN the adapter streams a turn
    chunks = await collect(make_model(), ask())
    # THEN each chunk is a TextDelta, in order, and one Finished("stop") ends the stream
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["Hel", "lo ", "world"]
    assert finished(chunks).reason == "stop"
    body = server.requests[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "hello"}]


async def test_parallel_tool_calls_with_repeated_ids_and_names_accumulate_by_index(
    server: ModelServer, make_model: MakeModel
) -> None:
    # GIVEN two parallel calls, streamed in 7-character argument fragments with id and name in every delta
    weather = json.dumps({"city": "Hangzhou", "unit": "celsius", "days": 3})
    clock = json.dumps({"timezone": "Asia/Shanghai"})
    server.enqueue(
        ScriptedTurn(
            tool_calls=[
                ScriptedToolCall("get_weather", weather, id="call_weather"),
                ScriptedToolCall("get_current_time", clock, id="call_clock"),
            ]
        )
    )
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}}
    tool = ToolSpec("get_weather", "Weather by city", parameters)
    # WHEN the adapter streams the turn
    chunks = await collect(make_model(), ask("weather and time?", tools=(tool,)))
    turn = accumulate(chunks)
    # THEN each index holds one call with its id and name once and the arguments whole
    assert turn.tool_calls == {
        0: {"id": "call_weather", "name": "get_weather", "arguments": weather},
        1: {"id": "call_clock", "name": "get_current_time", "arguments": clock},
    }
    assert len([c for c in chunks if isinstance(c, ToolCallDelta)]) > 4, "arguments came in fragments"
    assert turn.finish_reason == "tool_calls"
    assert server.requests[0]["tools"] == [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
        }
    ]


async def test_a_tool_call_without_an_id_gets_one_before_finished(server: ModelServer, make_model: MakeModel) -> None:
    # GIVEN a server whose tool-call deltas carry no id
    call = ScriptedToolCall("get_current_time", "{}")
    server.enqueue(ScriptedTurn(tool_calls=[call], omit_tool_call_ids=True))
    # WHEN the adapter streams the turn
    turn = accumulate(await collect(make_model(), ask()))
    # THEN the call still has an id to pair its result with
    assert turn.tool_calls[0]["name"] == "get_current_time"
    assert turn.tool_calls[0]["id"].startswith("call_")


async def test_slow_server_streams_incrementally(server: ModelServer, make_model: MakeModel) -> None:
    # GIVEN a server that pauses between chunks
    server.enqueue(ScriptedTurn(text=["one", " two", " three", " four"], chunk_delay_s=0.15))
    first_delta_at: float | None = None
    server_done_at_first_delta: bool | None = None
    # WHEN the adapter streams the turn
    async for chunk in make_model().stream(ask()):
        if isinstance(chunk, TextDelta) and first_delta_at is None:
            first_delta_at = time.monotonic()
            server_done_at_first_delta = server.served[0].completed
    # THEN the first delta reached us before the server even produced its last chunk
    served = server.served[0]
    assert first_delta_at is not None
    assert served.last_frame_at is not None
    assert first_delta_at < served.last_frame_at
    assert server_done_at_first_delta is False
    assert served.completed


# -- usage ---------------------------------------------------------------------------------------------------


async def test_usage_comes_from_the_final_usage_chunk(server: ModelServer, make_model: MakeModel) -> None:
    # GIVEN a server that reports usage, with cached prompt tokens, in a last chunk without choices
    server.enqueue(ScriptedTurn(text=["ok"], usage=(123, 45), cached_tokens=100))
    # WHEN the adapter streams the turn
    usage = finished(await collect(make_model(provider="dashscope"), ask())).usage
    # THEN Finished carries exactly those numbers, labelled with the request's model and the provider
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens) == (123, 45, 100)
    assert (usage.model, usage.provider, usage.estimated) == (MODEL, "dashscope", False)


async def test_usage_is_estimated_when_the_server_sends_none(server: ModelServer, make_model: MakeModel) -> None:
    # GIVEN a server that ignores include_usage
    server.enqueue(ScriptedTurn(text=["a fairly long answer ", "in two chunks"], send_usage=False))
    # WHEN the adapter streams the turn
    usage = finished(await collect(make_model(), ask("a question of some length"))).usage
    # THEN the usage is counted locally and says so
    assert usage is not None
    assert usage.estimated is True
    assert usage.input_tokens > 0
    # AND the output is counted with the one shared estimate
    assert usage.output_tokens == estimate_tokens("a fairly long answer in two chunks")


async def test_an_estimated_usage_counts_images_by_qwens_rule_not_by_their_base64(
    server: ModelServer, make_model: MakeModel
) -> None:
    # GIVEN a server that reports no usage, and a request with a 640x480 photo-like PNG as a data URL (its base64
    # is hundreds of thousands of characters) and a 1024x768 image the provider would fetch itself
    server.enqueue(ScriptedTurn(text=["a cat"], send_usage=False))
    photo = "data:image/png;base64," + base64.b64encode(png(640, 480, noise=True)).decode()
    assert len(photo) > 300_000
    message = ChatMessage(role="user", content="what is this?", images=(photo, "https://example.com/a.png"))
    # WHEN the adapter streams the turn
    usage = finished(await collect(make_model(), ChatRequest(model=MODEL, messages=(message,)))).usage
    # THEN the input is the text's estimate plus one token per 28x28 patch of each image: 23x17 for the photo,
    # the window's 1024x768 guess (37x27) for the URL whose bytes the request does not hold
    assert usage is not None and usage.estimated is True
    text_only = json.dumps([ChatMessage(role="user", content="what is this?").to_openai()], ensure_ascii=False)
    assert image_tokens(640, 480) == 23 * 17
    assert usage.input_tokens == estimate_tokens(text_only) + 23 * 17 + 37 * 27


async def test_odd_chunks_are_read_for_what_they_hold_and_the_rest_is_ignored(
    server: ModelServer, make_model: MakeModel
) -> None:
    # GIVEN a server whose chunks have missing, null and mistyped fields, a second choice, and a usage trailer
    # without a completion count
    server.enqueue(
        ScriptedTurn(
            raw_chunks=[
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]},
                {"choices": [{"delta": {"content": "Hel"}}]},  # no index: the first choice
                {"choices": [{"index": 1, "delta": {"content": "other choice"}}]},
                {"choices": [{"index": 0, "delta": {"content": 42, "reasoning": ["not", "text"]}}]},
                {"choices": None},
                {"choices": [None, "x", {"index": 0, "delta": None}]},
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {
                                "content": "lo",
                                "tool_calls": [
                                    {"function": {"name": "no_index"}},
                                    {"index": 0, "id": 7, "function": {"name": "get_time", "arguments": None}},
                                    {"index": 0, "function": {"arguments": '{"tz": "UTC"}'}},
                                ],
                            },
                        }
                    ]
                },
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
                {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": None}},
            ]
        )
    )
    # WHEN the adapter streams the turn
    chunks = await collect(make_model(), ask())
    # THEN the text and the tool call are what the well-formed fields said, in order
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "Hello"
    assert not [c for c in chunks if isinstance(c, ReasoningDelta)]
    calls = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert [c.name for c in calls if c.name] == ["get_time"]
    assert "".join(c.arguments for c in calls) == '{"tz": "UTC"}'
    ids = [c.id for c in calls if c.id]
    assert len(ids) == 1 and ids[0].startswith("call_")  # the id was no string: one is made up
    # AND a usage trailer without both counts is no report: the usage is estimated
    usage = finished(chunks).usage
    assert usage is not None and usage.estimated is True
    assert finished(chunks).reason == "tool_calls"


async def test_no_sdk_model_is_built_per_streamed_chunk(
    server: ModelServer, make_model: MakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chunk is read as its decoded JSON: building an SDK model from it (``construct_type``, recursive) cost
    more CPU than everything else done with a delta, on every delta of every answer (docs/benchmarks.md §6)."""
    import openai._base_client as base_client

    built: list[object] = []
    original = base_client.construct_type

    def counting(**kwargs: Any) -> object:
        built.append(kwargs.get("type_"))
        return original(**kwargs)

    monkeypatch.setattr(base_client, "construct_type", counting)
    # GIVEN a server that streams 30 text chunks and a usage trailer
    server.enqueue(ScriptedTurn(text=[f"w{i} " for i in range(30)], usage=(10, 30)))
    # WHEN the adapter streams the turn
    chunks = await collect(make_model(), ask())
    # THEN every delta arrived and the reported usage with it
    assert len([c for c in chunks if isinstance(c, TextDelta)]) == 30
    usage = finished(chunks).usage
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (10, 30)
    # AND no chunk went through the SDK's model construction
    assert built == []


# -- thinking ------------------------------------------------------------------------------------------------

THINKING_OFF_BODY: dict[str, dict[str, Any]] = {
    "dashscope": {"enable_thinking": False},
    "vllm": {"chat_template_kwargs": {"enable_thinking": False}},
    "sglang": {"chat_template_kwargs": {"enable_thinking": False}},
    "openai-compatible": {"enable_thinking": False, "chat_template_kwargs": {"enable_thinking": False}},
}


@pytest.mark.parametrize("provider", list(THINKING_OFF_BODY))
async def test_thinking_off_keys_reach_the_server(
    server: ModelServer, make_model: MakeModel, provider: Provider
) -> None:
    # GIVEN a request with thinking off (the default)
    # WHEN the adapter for this provider streams it
    await collect(make_model(provider=provider), ask())
    # THEN the body the server received carries exactly this provider's switch
    body = server.requests[0]
    switch_keys = {key: body[key] for key in ("enable_thinking", "chat_template_kwargs") if key in body}
    assert switch_keys == THINKING_OFF_BODY[provider]


async def test_thinking_on_is_sent_explicitly_too(server: ModelServer, make_model: MakeModel) -> None:
    await collect(make_model(provider="dashscope"), ask(thinking="on"))
    assert server.requests[0]["enable_thinking"] is True


async def test_leaked_think_block_is_hidden_and_reported_as_reasoning(
    server: ModelServer, make_model: MakeModel
) -> None:
    # GIVEN a server that leaks a <think> block into content, split mid-tag across chunks
    leak = ["<thi", "nk>weighing the ", "options</th", "ink>\n\nThe answer", " is 42."]
    server.enqueue(ScriptedTurn(text=leak))
    # WHEN the adapter streams the turn
    chunks = await collect(make_model(), ask())
    turn = accumulate(chunks)
    # THEN users see only the answer; the block comes back as reasoning and is counted
    assert turn.text == "The answer is 42."
    assert turn.reasoning == "weighing the options"
    assert all("think>" not in c.text for c in chunks if isinstance(c, TextDelta))
    assert turn.usage is not None
    assert turn.usage.reasoning_tokens > 0


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_fields_are_passed_on_and_counted(
    server: ModelServer, make_model: MakeModel, field: str
) -> None:
    # GIVEN a server that sends reasoning in a separate delta field (no usage, so it is counted locally)
    reasoning = ["step one, ", "step two"]
    server.enqueue(ScriptedTurn(reasoning=reasoning, text=["Done."], reasoning_field=field, send_usage=False))
    # WHEN the adapter streams the turn
    turn = accumulate(await collect(make_model(), ask()))
    # THEN the reasoning is kept apart from the answer and counted
    assert turn.text == "Done."
    assert turn.reasoning == "step one, step two"
    assert turn.usage is not None
    assert turn.usage.reasoning_tokens > 0


async def test_reported_reasoning_tokens_win_over_the_estimate(server: ModelServer, make_model: MakeModel) -> None:
    server.enqueue(ScriptedTurn(reasoning=["hmm"], text=["ok"], usage=(10, 30), reasoning_tokens=25))
    usage = finished(await collect(make_model(), ask())).usage
    assert usage is not None
    assert (usage.output_tokens, usage.reasoning_tokens, usage.estimated) == (30, 25, False)


# -- errors and retries --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"), [(429, "model_rate_limited"), (500, "model_unavailable"), (503, "model_unavailable")]
)
async def test_retryable_statuses_are_retried_then_fail_with_a_stable_code(
    server: ModelServer, make_model: MakeModel, status: int, code: str
) -> None:
    # GIVEN a server that fails every attempt
    server.enqueue(*[ScriptedTurn(status=status) for _ in range(3)])
    # WHEN an adapter allowed two retries streams a turn
    with pytest.raises(ModelError) as failure:
        await collect(make_model(max_retries=2), ask())
    # THEN it tried three times and failed with the code for that status
    assert len(server.requests) == 3
    assert failure.value.code == code
    assert failure.value.details["status"] == status


async def test_a_retry_that_succeeds_streams_normally(server: ModelServer, make_model: MakeModel) -> None:
    server.enqueue(ScriptedTurn(status=503), ScriptedTurn(text=["recovered"]))
    turn = accumulate(await collect(make_model(max_retries=2), ask()))
    assert turn.text == "recovered"
    assert len(server.requests) == 2


async def test_a_bad_request_is_rejected_without_a_retry(server: ModelServer, make_model: MakeModel) -> None:
    server.enqueue(ScriptedTurn(status=400, error_message="unknown model"))
    with pytest.raises(ModelError) as failure:
        await collect(make_model(max_retries=2), ask())
    assert failure.value.code == "model_rejected_request"
    assert failure.value.details["rejected"] == "request"
    assert "unknown model" in failure.value.message
    assert len(server.requests) == 1


async def test_a_5xx_validation_error_is_a_rejection_of_the_history_not_an_outage(
    server: ModelServer, make_model: MakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a server that answers a schema error with HTTP 500, as llama.cpp does, quoting a credential
    explanation = (
        "1 validation error: body.messages.2.content: Input should be a valid string "
        "(request by api_key=sk-live-abcdef0123456789, Authorization: Bearer sk-live-abcdef0123456789) "
    ) + "x" * 600
    server.enqueue(*[ScriptedTurn(status=500, error_message=explanation) for _ in range(3)])
    # WHEN an adapter allowed two retries streams a turn
    with caplog.at_level(logging.WARNING, logger="shared.llm.openai_chat"), pytest.raises(ModelError) as failure:
        await collect(make_model(max_retries=2), ask())
    # THEN it was sent once, and ends as a rejected request that points at the history
    assert len(server.requests) == 1
    error = failure.value
    assert (error.code, error.transient) == ("model_rejected_request", False)
    assert error.details["rejected"] == "history"
    assert error.details["status"] == 500
    # AND one log line carries the server's explanation, truncated, without the credential
    [line] = [r for r in caplog.records if r.getMessage().startswith("model rejected the request")]
    logged = line.getMessage()
    assert "body.messages.2.content: Input should be a valid string" in logged
    assert "sk-live" not in logged and "sk-live" not in error.message
    assert len(logged) < 400
    assert "\n" not in logged
    assert line.exc_info is None


async def test_a_refused_key_is_not_retried(server: ModelServer, make_model: MakeModel) -> None:
    server.enqueue(*[ScriptedTurn(status=401, error_message="invalid api key") for _ in range(3)])
    with pytest.raises(ModelError) as failure:
        await collect(make_model(max_retries=2), ask())
    assert failure.value.code == "model_unavailable"
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("key sk-abcdefghijkl leaked", "key sk-*** leaked"),
        ('{"api_key": "abc123secret"}', '{"api_key": "***"}'),
        ("Authorization: Bearer eyJhbGciOi.x.y done", "Authorization: Bearer *** done"),
        ("plain\nmulti   line", "plain multi line"),
    ],
)
def test_explanations_lose_credentials_and_line_breaks(message: str, expected: str) -> None:
    assert explain_rejection(message) == expected


def test_an_explanation_drops_the_configured_key_wherever_it_appears() -> None:
    assert explain_rejection("bad key my-own-key-42 for model", secrets=["my-own-key-42"]) == "bad key *** for model"


# -- message shapes and model ids ------------------------------------------------------------------------------


async def test_tool_call_history_is_sent_with_string_content_and_json_arguments(
    server: ModelServer, make_model: MakeModel
) -> None:
    # GIVEN a history as stored before the fix: an assistant tool-call message without text (None), a call with no
    # arguments, an empty tool result and an empty answer
    history = (
        ChatMessage(role="user", content="time?"),
        ChatMessage(role="assistant", content=None, tool_calls=(("call_1", "get_current_time", ""),)),
        ChatMessage(role="tool", content=None, tool_call_id="call_1"),
        ChatMessage(role="assistant", content=None),
        ChatMessage(role="user", content="and now?"),
    )
    # WHEN the adapter sends it
    await collect(make_model(), ChatRequest(model=MODEL, messages=history))
    # THEN every content is a string (never null) and the arguments are a JSON object
    sent = server.requests[0]["messages"]
    assert [m["content"] for m in sent] == ["time?", "", "", "", "and now?"]
    assert sent[1]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "get_current_time", "arguments": "{}"}}
    ]
    assert sent[2]["tool_call_id"] == "call_1"
    assert all(m["content"] is not None for m in sent)


async def test_the_provider_is_sent_the_mapped_id_and_usage_records_both(
    server: ModelServer, make_model: MakeModel
) -> None:
    server.enqueue(ScriptedTurn(text=["ok"], usage=(5, 1)), ScriptedTurn(text=["ok"], usage=(5, 1)))
    model = make_model(model_ids={"qwen3.5-30b-a3b": "qwen3.5-35b-a3b"})
    mapped = finished(await collect(model, ChatRequest(model="qwen3.5-30b-a3b", messages=ask().messages))).usage
    unmapped = finished(await collect(model, ask())).usage
    assert [body["model"] for body in server.requests] == ["qwen3.5-35b-a3b", MODEL]
    assert mapped is not None and unmapped is not None
    assert (mapped.model, mapped.provider_model) == ("qwen3.5-30b-a3b", "qwen3.5-35b-a3b")
    assert (unmapped.model, unmapped.provider_model) == (MODEL, MODEL)


async def test_a_forced_tool_choice_reaches_the_server(server: ModelServer, make_model: MakeModel) -> None:
    tool = ToolSpec("get_current_time", "time", {"type": "object", "properties": {}})
    await collect(make_model(), ask(tools=(tool,), tool_choice="get_current_time"))
    await collect(make_model(), ask(tools=(tool,)))
    forced, free = server.requests
    assert forced["tool_choice"] == {"type": "function", "function": {"name": "get_current_time"}}
    assert "tool_choice" not in free


async def test_mid_stream_disconnect_fails_after_the_chunks_already_yielded(
    server: ModelServer, make_model: MakeModel
) -> None:
    # GIVEN a server that drops the connection after three of five content chunks
    server.enqueue(ScriptedTurn(text=["a", "b", "c", "d", "e"], disconnect_after_chunks=3))
    received: list[ChatChunk] = []
    # WHEN the adapter streams the turn
    with pytest.raises(ModelError) as failure:
        await collect_into(received, make_model(max_retries=2), ask())
    # THEN what arrived was yielded, then a stream-interrupted error, and nothing was retried
    # (chunks are NamedTuples, equal to any tuple with the same fields: the types are checked apart)
    assert [type(chunk) for chunk in received] == [TextDelta] * 3
    assert received == [TextDelta("a"), TextDelta("b"), TextDelta("c")]
    assert failure.value.code == "model_stream_interrupted"
    assert len(server.requests) == 1
    assert server.served[0].disconnected


async def test_a_break_after_the_finish_reason_only_costs_the_usage_trailer(
    server: ModelServer, make_model: MakeModel
) -> None:
    # GIVEN a server that drops the connection after the finish chunk, before the usage chunk
    server.enqueue(ScriptedTurn(text=["a", "b"], usage=(50, 2), disconnect_after_chunks=3))
    # WHEN the adapter streams the turn
    chunks = await collect(make_model(), ask())
    # THEN the complete answer finishes normally, with usage counted locally
    assert accumulate(chunks).text == "ab"
    end = finished(chunks)
    assert end.reason == "stop"
    assert end.usage is not None
    assert end.usage.estimated is True


async def test_a_server_that_stalls_times_out(server: ModelServer, make_model: MakeModel) -> None:
    server.enqueue(ScriptedTurn(text=["late"], first_chunk_delay_s=5))
    with pytest.raises(ModelError) as failure:
        await collect(make_model(timeout_s=0.3, max_retries=0), ask())
    assert failure.value.code == "model_timeout"


async def test_an_unreachable_endpoint_is_unavailable(make_model: MakeModel) -> None:
    # GIVEN a loopback port nobody listens on
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = make_model(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    with pytest.raises(ModelError) as failure:
        await collect(model, ask())
    assert failure.value.code == "model_unavailable"


# -- models and preflight ------------------------------------------------------------------------------------


async def test_list_models_returns_the_endpoint_ids(make_model: MakeModel) -> None:
    assert await make_model().list_models() == ["qwen3.5-35b-a3b", "qwen3.5-flash"]


def probe_turns() -> list[ScriptedTurn]:
    """What a working endpoint answers the preflight: the forced call, then text after the tool result."""
    return [
        ScriptedTurn(tool_calls=[ScriptedToolCall("preflight_echo", '{"word": "ping"}', id="call_probe")]),
        ScriptedTurn(text=["pong"]),
    ]


async def test_preflight_forces_a_tool_call_then_sends_the_result_in_the_shapes_every_server_takes(
    make_model: MakeModel, server: ModelServer
) -> None:
    # GIVEN an endpoint that answers the forced call and the follow-up
    server.enqueue(*probe_turns())
    # WHEN one logical model is checked through a model-id map
    report = await run_preflight(
        make_model(model_ids={"qwen3.5-30b-a3b": "qwen3.5-35b-a3b"}),
        ["qwen3.5-30b-a3b"],
        {"qwen3.5-30b-a3b": "qwen3.5-35b-a3b"},
    )
    # THEN it passed, and the endpoint saw the provider id, the forced tool_choice, then the tool-call message with
    # content "" (not null) and the tool result
    assert report.ok, report.render()
    first, follow_up = server.requests
    assert first["model"] == follow_up["model"] == "qwen3.5-35b-a3b"
    assert first["tool_choice"] == {"type": "function", "function": {"name": "preflight_echo"}}
    assert first["stream"] is True
    assert "tool_choice" not in follow_up
    assistant, tool = follow_up["messages"][1:]
    assert assistant["content"] == ""
    assert assistant["tool_calls"][0]["id"] == "call_probe"
    assert tool == {"role": "tool", "content": '{"echo": "ping"}', "tool_call_id": "call_probe"}
    assert "PASS  qwen3.5-30b-a3b -> qwen3.5-35b-a3b" in report.render()


async def test_preflight_fails_a_model_whose_follow_up_is_rejected_and_says_why(
    make_model: MakeModel, server: ModelServer
) -> None:
    # GIVEN an endpoint that takes the call but rejects the follow-up the way llama.cpp rejected null content
    server.enqueue(
        probe_turns()[0],
        ScriptedTurn(status=500, error_message="body.messages.1.content: Input should be a valid string"),
    )
    # WHEN the model is checked
    report = await run_preflight(make_model(max_retries=2), ["qwen3.5-flash"], {})
    # THEN it failed at the follow-up, with the code and the server's explanation, and was not retried
    assert not report.ok
    [check] = report.checks
    assert "follow-up with the tool result failed: [model_rejected_request]" in check.detail
    assert "Input should be a valid string" in check.detail
    assert len(server.requests) == 2


async def test_preflight_names_the_id_dashscope_publishes_for_an_unknown_worker_model(make_model: MakeModel) -> None:
    # GIVEN a DashScope-like endpoint that answers 404 for ids it does not serve
    with ModelServer(reject_unknown_models=True) as dashscope:
        dashscope.enqueue(*probe_turns())
        model = make_model(base_url=dashscope.base_url, provider="dashscope")
        # WHEN the design's id is checked without a map, and the memory model too
        report = await run_preflight(model, ["qwen3.5-30b-a3b", "qwen3.5-flash"], {})
    # THEN the worker id fails with the published id suggested and the reason given; the memory model passes
    assert report.failed == ["qwen3.5-30b-a3b"]
    worker = report.checks[0]
    assert worker.suggestion == "qwen3.5-35b-a3b"
    assert worker.note is not None
    assert "DashScope publishes the 3B-active Qwen3.5" in worker.note
    assert "[model_rejected_request]" in worker.detail
    assert report.checks[1].passed


def test_preflight_cli_exits_1_and_names_the_replacement(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with ModelServer(reject_unknown_models=True) as dashscope:
        dashscope.enqueue(*probe_turns())
        # GIVEN the endpoint and key in the environment, as on a deployment, and no model-id map
        monkeypatch.setenv("LLM_BASE_URL", dashscope.base_url)
        monkeypatch.setenv("LLM_API_KEY", "test-key")
        monkeypatch.delenv("MODEL_ID_MAP", raising=False)
        # WHEN the CLI checks the ids as a DashScope endpoint
        status = main(["--models", "qwen3.5-30b-a3b,qwen3.5-flash,qwen-nonexistent", "--provider", "dashscope"])
    # THEN it exits 1 and says what passed, what failed and what to use instead
    out = capsys.readouterr().out
    assert status == 1
    assert "FAIL  qwen3.5-30b-a3b" in out
    assert "use: qwen3.5-35b-a3b" in out
    assert "FAIL  qwen-nonexistent" in out
    assert "PASS  qwen3.5-flash" in out
    assert "1 of 3 model(s) passed" in out


def image_requests(requests: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(model, image URLs) of each request whose user message carries images."""
    out = []
    for body in requests:
        content = body["messages"][-1]["content"]
        if isinstance(content, list):
            out.append((body["model"], [p["image_url"]["url"] for p in content if p["type"] == "image_url"]))
    return out


@pytest.mark.parametrize("text_only", [False, True])
def test_preflight_cli_exits_0_for_the_shipped_profiles_models_through_the_map(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, text_only: bool
) -> None:
    # GIVEN a DashScope-like endpoint and the template's default map
    with ModelServer(reject_unknown_models=True, models=["qwen3.5-35b-a3b", "qwen3.5-flash", "deepseek-chat"]) as ds:
        # (in the order checked: deepseek-chat, then the chat model, whose shipped profiles read images, then the
        # memory model)
        ds.enqueue(*probe_turns(), *probe_turns())
        if not text_only:
            ds.enqueue(ScriptedTurn(text=["Red."]))
        ds.enqueue(*probe_turns())
        monkeypatch.setenv("MODEL_ID_MAP", '{"qwen3.5-30b-a3b": "qwen3.5-35b-a3b"}')
        # WHEN the CLI runs without --models (with --text-only: for a deployment whose profiles take no images)
        status = main(["--base-url", ds.base_url, "--api-key", "k", *(["--text-only"] if text_only else [])])
        sent = sorted({body["model"] for body in ds.requests})
        images = image_requests(ds.requests)
    # THEN every model the shipped profiles name passed, under its provider id
    out = capsys.readouterr().out
    assert status == 0, out
    assert "FAIL" not in out
    assert sent == ["deepseek-chat", "qwen3.5-35b-a3b", "qwen3.5-flash"]
    # AND only the model whose profiles read images got the 8x8 image, unless told text only
    if text_only:
        assert images == []
    else:
        [(model, [url])] = images
        assert model == "qwen3.5-35b-a3b"
        assert image_size(base64.b64decode(url.removeprefix("data:image/png;base64,"))) == (8, 8)
        assert "the 8x8 image answered" in out


async def test_preflight_sends_an_8x8_png_as_an_image_url_part_and_fails_a_model_that_refuses_it(
    make_model: MakeModel, server: ModelServer
) -> None:
    # GIVEN an endpoint that answers the tool probe but refuses images, as a text-only model's server does
    server.enqueue(*probe_turns(), ScriptedTurn(status=400, error_message="image input is not supported by this model"))
    # WHEN a model said to read images is checked
    report = await run_preflight(make_model(), ["qwen3.5-flash"], {}, image_models={"qwen3.5-flash"})
    # THEN the third request was a user message with the prompt and the PNG as a data URL
    third = server.requests[2]["messages"]
    assert len(server.requests) == 3 and [m["role"] for m in third] == ["user"]
    text, image = third[0]["content"]
    assert text["type"] == "text" and "colour" in text["text"]
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith("data:image/png;base64,")
    png_bytes = base64.b64decode(image["image_url"]["url"].split(",", 1)[1])
    assert sniff(png_bytes) == "image/png" and image_size(png_bytes) == (8, 8)
    # AND the model failed, with the server's reason
    [check] = report.checks
    assert not check.passed
    assert "the request with an 8x8 image failed: [model_rejected_request]" in check.detail
    assert "image input is not supported" in check.detail


def test_preflight_runs_as_a_module(server: ModelServer) -> None:
    server.enqueue(probe_turns()[0], ScriptedTurn(status=400, error_message="tool messages are not supported"))
    # WHEN the preflight is run the documented way, in its own process
    result = subprocess.run(
        [sys.executable, "-m", "devtools.preflight", "--models", "qwen3.5-flash"],
        cwd=REPO_ROOT,
        env={**os.environ, "LLM_BASE_URL": server.base_url, "LLM_API_KEY": "test-key"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # THEN it exits 1 and prints the server's reason
    assert result.returncode == 1, result.stderr
    assert "tool messages are not supported" in result.stdout


def test_preflight_cli_exits_1_when_the_endpoint_cannot_be_reached(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    status = main(["--base-url", base_url, "--api-key", "k", "--models", "x", "--timeout", "2"])
    assert status == 1
    assert "[model_unavailable]" in capsys.readouterr().out


def test_the_exported_fixture_serves_the_default_echo(model_server: ModelServer) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "ping"}]}
    reply = httpx.post(f"{model_server.base_url}/chat/completions", json=body).json()
    assert reply["choices"][0]["message"]["content"] == "echo: ping"


# -- the request on the wire ---------------------------------------------------------------------------------


async def test_the_request_body_and_headers_are_what_the_sdks_create_sends(
    server: ModelServer, make_model: MakeModel
) -> None:
    """The adapter posts a body it builds itself (the SDK's ``create`` walks it through a slow TypedDict transform
    that changes nothing): the server must receive exactly what ``create`` sends for the same arguments."""
    model = make_model(provider="openai-compatible")
    request = ChatRequest(
        model=MODEL,
        messages=(
            ChatMessage(role="system", content="You are helpful."),
            ChatMessage(role="user", content="What time is it in Paris? 巴黎几点了?"),
            ChatMessage(role="assistant", content="", tool_calls=(("call_1", "get_current_time", '{"tz": "Paris"}'),)),
            ChatMessage(role="tool", content="12:00", tool_call_id="call_1"),
        ),
        tools=(ToolSpec(name="get_current_time", description="The time.", parameters={"type": "object"}),),
        tool_choice="get_current_time",
        temperature=0.2,
        max_tokens=64,
        thinking="off",
    )
    await collect(model, request)
    # the same call through the SDK's own method, on the same client
    stream = await model.client.chat.completions.create(
        model=MODEL,
        messages=[m.to_openai() for m in request.messages],  # type: ignore[misc]
        tools=[
            {
                "type": "function",
                "function": {"name": "get_current_time", "description": "The time.", "parameters": {"type": "object"}},
            }
        ],
        tool_choice={"type": "function", "function": {"name": "get_current_time"}},
        temperature=0.2,
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"enable_thinking": False, "chat_template_kwargs": {"enable_thinking": False}},
    )
    async for _chunk in stream:
        pass
    ours, sdks = server.requests
    assert ours == sdks
    ours_headers, sdk_headers = server.request_headers
    for name in ("authorization", "content-type", "accept", "user-agent"):
        assert ours_headers.get(name) == sdk_headers.get(name), name
    assert ours_headers["authorization"] == "Bearer test-key"
