"""The AG-UI test harness judges canned streams the way the real tools do.

A tiny Starlette app, served by uvicorn on a free loopback port, streams AG-UI runs built with
the ``ag_ui`` package: one valid run, and broken variants (``\\r\\n`` framing, no terminal event,
``RUN_ERROR``). The tests pin what ``@ag-ui/client`` and ``ag-ui-validate`` really report for each,
so end-to-end tests can trust the helpers' verdicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from ag_ui import core
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.support import agui_clients
from tests.support.agui_clients import (
    AgUiHarnessError,
    Turn,
    run_js_agent,
    run_js_agent_async,
    turn_problems,
    validate_sse,
)
from tests.support.sse import SseFormatError, data_frames_json, iter_sse_frames, parse_sse

# --- the canned AG-UI server ---------------------------------------------------------------


def _valid_run(thread_id: str, run_id: str) -> list[core.BaseEvent]:
    """A complete run: a worker step with text, a server tool call and its result, then usage."""
    assistant_id, call_id = f"{run_id}-assistant", f"{run_id}-call"
    return [
        core.RunStartedEvent(thread_id=thread_id, run_id=run_id),
        core.StepStartedEvent(step_name="worker"),
        core.TextMessageStartEvent(message_id=assistant_id, role="assistant"),
        core.TextMessageContentEvent(message_id=assistant_id, delta="Let me check "),
        core.TextMessageContentEvent(message_id=assistant_id, delta="the clock."),
        core.TextMessageEndEvent(message_id=assistant_id),
        core.ToolCallStartEvent(tool_call_id=call_id, tool_call_name="clock", parent_message_id=assistant_id),
        core.ToolCallArgsEvent(tool_call_id=call_id, delta='{"timezone": '),
        core.ToolCallArgsEvent(tool_call_id=call_id, delta='"UTC"}'),
        core.ToolCallEndEvent(tool_call_id=call_id),
        core.ToolCallResultEvent(
            message_id=f"{run_id}-tool", tool_call_id=call_id, content="2026-01-01T12:00:00Z", role="tool"
        ),
        core.StepFinishedEvent(step_name="worker"),
        core.RunFinishedEvent(
            thread_id=thread_id,
            run_id=run_id,
            outcome=core.RunFinishedSuccessOutcome(),
            usage=[core.TokenUsage(model="canned", input_tokens=12, output_tokens=7, total_tokens=19)],
        ),
    ]


def _run_error(thread_id: str, run_id: str) -> list[core.BaseEvent]:
    return [
        core.RunStartedEvent(thread_id=thread_id, run_id=run_id),
        core.RunErrorEvent(message="model unavailable", code="LLM_UNAVAILABLE"),
    ]


def _events_for(variant: str, thread_id: str, run_id: str) -> list[core.BaseEvent]:
    if variant == "run-error":
        return _run_error(thread_id, run_id)
    events = _valid_run(thread_id, run_id)
    return events[:-1] if variant == "unterminated" else events


def _frame(index: int, event: core.BaseEvent, newline: str) -> str:
    data = json.dumps(event.model_dump(mode="json", by_alias=True, exclude_none=True))
    return f"id: {index}{newline}data: {data}{newline}{newline}"


class CannedAgUiServer:
    """Serves ``POST /agent/<variant>``; ``gate`` holds the ``gated`` variant after its first frame."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.app = Starlette(routes=[Route("/agent/{variant}", self._agent, methods=["POST"])])

    async def _agent(self, request: Request) -> StreamingResponse:
        run_input = await request.json()
        variant = request.path_params["variant"]
        events = _events_for(variant, run_input["threadId"], run_input["runId"])
        newline = "\r\n" if variant == "crlf" else "\n"

        async def body() -> AsyncIterator[str]:
            yield f": ping{newline}{newline}"
            for index, event in enumerate(events):
                yield _frame(index, event, newline)
                if variant == "gated" and index == 0:
                    await asyncio.to_thread(self.gate.wait, 10)
                await asyncio.sleep(0)

        return StreamingResponse(body(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def canned_server() -> Iterator[tuple[str, CannedAgUiServer]]:
    """The canned app under uvicorn in a background thread, on a free loopback port."""
    canned = CannedAgUiServer()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(canned.app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        threading.Event().wait(0.025)
    assert server.started, "canned AG-UI server did not start"
    try:
        yield f"http://127.0.0.1:{port}", canned
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def base_url(canned_server: tuple[str, CannedAgUiServer]) -> str:
    return canned_server[0]


def _require_node() -> None:
    """Skip without node, except under CI, where a missing node must fail the run."""
    if shutil.which("node") is not None:
        return
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail("node is not on PATH under CI: the AG-UI client tests must run there")
    pytest.skip("node is not on PATH: install Node.js 20+ to run the real @ag-ui/client")


def _capture(url: str, thread_id: str = "thread-1", run_id: str = "run-1") -> str:
    run_input = {"threadId": thread_id, "runId": run_id, "messages": [], "tools": [], "context": []}
    response = httpx.post(url, json=run_input, timeout=10)
    response.raise_for_status()
    return response.text


def _turn(run_id: str, text: str) -> Turn:
    return {"runId": run_id, "userMessage": {"id": f"user-{run_id}", "content": text}}


# --- SSE parser ----------------------------------------------------------------------------


def test_parse_sse_splits_on_blank_lines_and_keeps_ids_and_comments() -> None:
    # GIVEN a keep-alive comment, then two frames with ids
    body = ': ping\n\nid: 1\ndata: {"a": 1}\n\nid: 2\nevent: note\ndata: {"b": 2}\n\n'
    # WHEN it is parsed
    frames = parse_sse(body)
    # THEN the comment is surfaced and each frame keeps its id, event name and data
    assert frames[0].comments == ("ping",)
    assert frames[0].is_comment_only
    assert [(f.id, f.event) for f in frames[1:]] == [("1", None), ("2", "note")]
    assert data_frames_json(frames) == [{"a": 1}, {"b": 2}]


def test_parse_sse_joins_multi_line_data_with_newlines() -> None:
    frames = parse_sse("data: first\ndata:second\n\n")
    assert frames[0].data == "first\nsecond"


def test_parse_sse_rejects_crlf_framing_like_the_js_client() -> None:
    # GIVEN frames separated by \r\n\r\n, which @ag-ui/client never splits
    body = 'data: {"a": 1}\r\n\r\ndata: {"b": 2}\r\n\r\n'
    # THEN the strict parser finds no complete frame and says why
    with pytest.raises(SseFormatError, match=r"\\r\\n"):
        parse_sse(body)


def test_parse_sse_rejects_a_body_that_ends_inside_a_frame() -> None:
    with pytest.raises(SseFormatError, match="ended inside a frame"):
        parse_sse('id: 1\ndata: {"a": 1}\n\nid: 2\ndata: {"b"')


async def test_iter_sse_frames_yields_each_frame_before_the_next_is_sent(
    canned_server: tuple[str, CannedAgUiServer],
) -> None:
    base, canned = canned_server
    canned.gate.clear()
    run_input = {"threadId": "t-gated", "runId": "r-gated", "messages": []}
    seen: list[str | None] = []
    async with (
        httpx.AsyncClient(timeout=10) as client,
        client.stream("POST", f"{base}/agent/gated", json=run_input) as response,
    ):
        async for frame in iter_sse_frames(response):
            seen.append(frame.id)
            # WHEN the server is still holding every frame after id 0
            if frame.id == "0":
                # THEN the ping and RUN_STARTED have already arrived, and only now is the rest released
                assert seen == [None, "0"]
                assert frame.json()["type"] == "RUN_STARTED"
                canned.gate.set()
    assert seen == [None, *[str(i) for i in range(13)]]


# --- the real JS client --------------------------------------------------------------------


@pytest.mark.e2e
def test_js_client_accepts_a_valid_run_and_resends_history(base_url: str) -> None:
    _require_node()
    # WHEN two turns run through one HttpAgent against a valid stream
    report = run_js_agent(
        f"{base_url}/agent/valid",
        {"Authorization": "Bearer test"},
        "thread-1",
        [_turn("run-1", "what time is it?"), _turn("run-2", "and now?")],
    )
    first, second = report["turns"]
    # THEN the client reports no problem and saw every event
    assert turn_problems(first) == []
    assert turn_problems(second) == []
    assert [e["type"] for e in first["events"]] == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    # AND newMessages hold the assistant message with its tool call, then the tool result
    assistant, tool = first["newMessages"] or []
    assert assistant["role"] == "assistant"
    assert assistant["content"] == "Let me check the clock."
    assert assistant["toolCalls"] == [
        {
            "id": "run-1-call",
            "type": "function",
            "function": {"name": "clock", "arguments": '{"timezone": "UTC"}'},
        }
    ]
    assert tool == {
        "id": "run-1-tool",
        "role": "tool",
        "toolCallId": "run-1-call",
        "content": "2026-01-01T12:00:00Z",
    }
    # AND the second turn re-sent the whole first turn, with the headers, as a real client does
    request = second["requests"][0]
    assert [m["id"] for m in request["body"]["messages"]] == [
        "user-run-1",
        "run-1-assistant",
        "run-1-tool",
        "user-run-2",
    ]
    assert request["body"]["threadId"] == "thread-1"
    assert request["body"]["runId"] == "run-2"
    assert request["headers"]["Authorization"] == "Bearer test"
    assert [m["id"] for m in (second["newMessages"] or [])] == ["run-2-assistant", "run-2-tool"]
    assert len(second["messages"]) == 6


@pytest.mark.e2e
async def test_run_js_agent_async_reports_the_same_run_without_blocking_the_loop(base_url: str) -> None:
    _require_node()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    try:
        report = await run_js_agent_async(f"{base_url}/agent/valid", None, "thread-a", [_turn("run-a", "hi")])
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    turn = report["turns"][0]
    assert turn_problems(turn) == []
    assert [m["id"] for m in turn["newMessages"] or []] == ["run-a-assistant", "run-a-tool"]
    assert ticks > 1, "the event loop was blocked while node ran"


@pytest.mark.e2e
def test_js_client_parses_no_event_from_crlf_framed_stream(base_url: str) -> None:
    _require_node()
    report = run_js_agent(f"{base_url}/agent/crlf", None, "thread-crlf", [_turn("run-1", "hi")])
    turn = report["turns"][0]
    # THEN the whole run arrived on the wire, yet the client saw zero events: the body was one
    # unsplittable frame, and runAgent rejected when it failed to parse as a single JSON document
    response = turn["requests"][0]["response"] or {}
    assert response["status"] == 200
    assert '"type": "RUN_FINISHED"' in response["body"]
    assert "\r\n\r\n" in response["body"]
    assert turn["events"] == []
    assert turn["error"] is not None
    assert turn["error"]["name"] == "SyntaxError"
    assert turn["newMessages"] is None
    assert "the client parsed zero events" in turn_problems(turn)


@pytest.mark.e2e
def test_js_client_accepts_a_stream_without_terminal_event_but_the_helper_flags_it(base_url: str) -> None:
    _require_node()
    report = run_js_agent(f"{base_url}/agent/unterminated", None, "thread-cut", [_turn("run-1", "hi")])
    turn = report["turns"][0]
    # THEN the client itself is satisfied with the partial answer (this is its real behaviour)
    assert turn["error"] is None
    assert turn["runFailed"] == []
    assert [m["role"] for m in turn["newMessages"] or []] == ["assistant", "tool"]
    # AND the helper reports what the client did not
    assert turn_problems(turn) == ["stream ended after STEP_FINISHED without RUN_FINISHED or RUN_ERROR"]


@pytest.mark.e2e
def test_js_client_reports_run_error_through_on_run_error_event(base_url: str) -> None:
    _require_node()
    report = run_js_agent(f"{base_url}/agent/run-error", None, "thread-err", [_turn("run-1", "hi")])
    turn = report["turns"][0]
    # THEN RUN_ERROR does not reject runAgent, but reaches onRunErrorEvent
    assert turn["error"] is None
    assert [e["message"] for e in turn["runErrorEvents"]] == ["model unavailable"]
    assert turn_problems(turn) == ["RUN_ERROR event: model unavailable"]


@pytest.mark.e2e
def test_run_js_agent_raises_with_the_script_stderr_on_bad_input(base_url: str) -> None:
    _require_node()
    with pytest.raises(AgUiHarnessError, match=r"exited 2:\n.*input.turns must be a non-empty array"):
        run_js_agent(f"{base_url}/agent/valid", None, "thread-1", [])


def test_run_js_agent_explains_how_to_install_the_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(agui_clients, "JS_CLIENT_DIR", tmp_path)
    with pytest.raises(AgUiHarnessError, match="npm ci"):
        run_js_agent("http://127.0.0.1:9/agent", None, "thread-1", [_turn("run-1", "hi")])


# --- the validator -------------------------------------------------------------------------


def test_validator_reports_a_captured_valid_run_clean(base_url: str) -> None:
    body = _capture(f"{base_url}/agent/valid")
    result = validate_sse(body)
    assert result.exit_code == 0
    assert result.clean, result.describe()
    assert result.event_count == 13


def test_validator_reports_a_live_valid_endpoint_clean(base_url: str) -> None:
    result = validate_sse(f"{base_url}/agent/valid", headers={"Authorization": "Bearer test"})
    assert result.exit_code == 0
    assert result.clean, result.describe()
    assert result.event_count == 13


def test_validator_flags_a_stream_without_terminal_event(base_url: str) -> None:
    result = validate_sse(_capture(f"{base_url}/agent/unterminated"))
    assert result.exit_code == 1
    assert [(f.rule, f.severity) for f in result.errors] == [("AGUI003", "error")]
    assert "ended without RUN_FINISHED or RUN_ERROR" in result.errors[0].message


def test_validator_reads_a_recorded_stream_from_a_file(base_url: str, tmp_path: Path) -> None:
    recording = tmp_path / "run.sse"
    recording.write_text(_capture(f"{base_url}/agent/unterminated"))
    result = validate_sse(recording)
    assert [f.rule for f in result.errors] == ["AGUI003"]


def test_validator_does_not_see_crlf_framing_so_the_js_client_must_run_too(base_url: str) -> None:
    # GIVEN the stream that @ag-ui/client parses zero events from
    result = validate_sse(_capture(f"{base_url}/agent/crlf"))
    # THEN ag-ui-validate 0.4.0 still calls it clean: this is why e2e tests use both tools
    assert result.clean, result.describe()
    assert result.event_count == 13


def test_validator_failure_to_run_raises(unused_port: int) -> None:
    with pytest.raises(AgUiHarnessError, match="exit 2"):
        validate_sse(f"http://127.0.0.1:{unused_port}/agent/valid", timeout_s=5)


@pytest.fixture
def unused_port() -> Iterator[int]:
    """A loopback port nobody listens on (bound without listen, so connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]
