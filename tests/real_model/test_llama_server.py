"""The backend against a real OpenAI-compatible server: llama.cpp's (llama-cpp-python) with SmolLM2-135M.

Everything is real except the choice to call a tool: the app under uvicorn, its ``openai`` client, the official
``@ag-ui/client``, redis-server, moto, and the model server's own message validation, streaming, missing usage and
single slot. The proxy only forces ``tool_choice`` (and caps ``max_tokens``); see tests/support/model_proxy.py.
The tiny model's answers are meaningless, so nothing here judges them.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.llm.openai_chat import OpenAIChatModel
from shared.memory.job import MemoryRunFailed
from shared.models import Identity
from shared.wiring import ServiceOverrides, Services
from tests.support.agui_clients import run_js_agent, turn_problems, validate_sse
from tests.support.images import png
from tests.support.live_app import serve_app
from tests.support.llama_server import LlamaServer
from tests.support.model_proxy import ForcePolicy, Forwarded, ModelProxy
from tests.support.sse import parse_sse
from tests.support.tokens import bearer

from .model_settings import MODEL_ID_MAP, PROVIDER_MODEL, real_settings, text_only_profiles

pytestmark = [pytest.mark.real_model, pytest.mark.e2e]

REPO_ROOT = Path(__file__).resolve().parents[2]
IDENTITY = Identity(tenant_id="tenant-1", user_id="user-1")
AUDIT_HEADERS = bearer(scopes=("agent:audit",))


def events_of(body: str) -> list[dict[str, Any]]:
    return [frame.json() for frame in parse_sse(body) if frame.data is not None]


def tool_call_messages(request: Forwarded) -> list[dict[str, Any]]:
    return [m for m in request.body["messages"] if m["role"] == "assistant" and m.get("tool_calls")]


def post_run(live: str, thread: str, run: str, text: str) -> list[dict[str, Any]]:
    body = {"threadId": thread, "runId": run, "messages": [{"id": f"{run}-u", "role": "user", "content": text}]}
    resp = httpx.post(f"{live}/api/v1/agent", json=body, headers=bearer(), timeout=600)
    assert resp.status_code == 200, resp.text
    assert validate_sse(resp.text).clean, validate_sse(resp.text).describe()
    return events_of(resp.text)


def test_a_forced_tool_call_then_two_more_turns_through_the_app_and_the_js_client(live: str, proxy: ModelProxy) -> None:
    # GIVEN llama.cpp behind the app, the first user message's request forced to call the time tool
    proxy.policy = ForcePolicy(force=("get_current_time",), times=1)
    # WHEN the official @ag-ui/client runs three turns on one thread
    report = run_js_agent(
        f"{live}/api/v1/agent",
        bearer(),
        "thread-real",
        [
            {"runId": "run-1", "userMessage": {"id": "u-1", "content": "What time is it in Asia/Shanghai?"}},
            {"runId": "run-2", "userMessage": {"id": "u-2", "content": "Thanks. And in Paris?"}},
            {"runId": "run-3", "userMessage": {"id": "u-3", "content": "Good night."}},
        ],
        timeout_s=900,
    )
    # THEN every turn ended cleanly for the client and for ag-ui-validate
    for turn in report["turns"]:
        assert turn_problems(turn) == [], turn_problems(turn)
        wire = turn["requests"][0]["response"]
        assert wire is not None
        verdict = validate_sse(wire["body"])
        assert not verdict.errors, verdict.describe()
        # AND each RUN_FINISHED says its usage was estimated: this server ignores stream_options
        finished = events_of(wire["body"])[-1]
        assert finished["type"] == "RUN_FINISHED"
        assert finished["metadata"]["usageEstimated"] is True
    # AND the thread holds the tool call, its result and three answers, each once
    items = httpx.get(f"{live}/api/v1/threads/thread-real/history", headers=bearer()).json()["items"]
    assert [m["role"] for m in items] == ["user", "assistant", "tool", "assistant"] + ["user", "assistant"] * 2
    call = items[1]["toolCalls"][0]
    assert call["function"]["name"] == "get_current_time"
    assert items[2]["toolCallId"] == call["id"]
    # AND llama.cpp accepted every request, each under the mapped id: the first forced, then the follow-up and both
    # later turns carrying the tool-call message with string content (it answers null with HTTP 500)
    forwarded = proxy.requests()
    assert [r.status for r in forwarded] == [200, 200, 200, 200]
    assert {r.body["model"] for r in forwarded} == {PROVIDER_MODEL}
    assert forwarded[0].body["tool_choice"] == {"type": "function", "function": {"name": "get_current_time"}}
    for request in forwarded[1:]:
        [assistant] = tool_call_messages(request)
        assert assistant["content"] == ""
        assert assistant["tool_calls"][0]["id"] == call["id"]
    # AND the audit trail records the logical and the provider model id, and that the counts were estimated
    audit = httpx.get(f"{live}/api/v1/threads/thread-real/audit", headers=AUDIT_HEADERS).json()
    usages = [u for run in audit["runs"] for u in run["usage"]]
    assert len(usages) == 3
    assert {(u["model"], u["provider_model"], u["estimated"]) for u in usages} == {
        ("qwen3.5-30b-a3b", PROVIDER_MODEL, True)
    }


def test_an_image_to_the_text_only_model_is_refused_before_the_model_is_called(live: str, proxy: ModelProxy) -> None:
    # GIVEN the tier's profiles, which say SmolLM2-135M reads text only
    image = base64.b64encode(png(8, 8)).decode()
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "data", "value": image, "mimeType": "image/png"}},
    ]
    body = {
        "threadId": "thread-img",
        "runId": "run-img",
        "messages": [{"id": "u-img", "role": "user", "content": content}],
    }
    # WHEN a user message carries an 8x8 PNG
    resp = httpx.post(f"{live}/api/v1/agent", json=body, headers=bearer(), timeout=60)
    # THEN it is refused with unsupported_modality, and nothing reached the model server
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["code"] == "unsupported_modality"
    assert proxy.requests() == []
    # AND the thread holds nothing of it
    history = httpx.get(f"{live}/api/v1/threads/thread-img/history", headers=bearer(), timeout=30)
    assert history.status_code == 404 or history.json()["items"] == []


def test_the_old_null_shape_is_rejected_once_without_retry_and_the_thread_works_after_the_fix(
    live: str, proxy: ModelProxy, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a proxy that puts back what the adapter used to send: "content": null on the tool-call message
    def old_shape(body: dict[str, Any]) -> None:
        for message in body["messages"]:
            if message.get("tool_calls"):
                message["content"] = None

    proxy.mutate = old_shape
    proxy.policy = ForcePolicy(force=("get_current_time",), times=1)
    # WHEN a turn calls a tool, so that its follow-up carries the tool-call message
    with caplog.at_level(logging.WARNING):
        events = post_run(live, "thread-null", "run-null-1", "What time is it in UTC?")
    # THEN llama.cpp rejected the follow-up (HTTP 500, a validation error), it was not retried, and the run ended
    # with model_rejected_request saying the history was rejected
    forwarded = proxy.requests()
    assert [r.status for r in forwarded] == [200, 500]
    assert "Input should be a valid string" in (forwarded[1].error_body or "")
    terminal = events[-1]
    assert (terminal["type"], terminal["code"]) == ("RUN_ERROR", "model_rejected_request")
    assert "rejected this conversation's history" in terminal["message"]
    # AND one log line carries the server's explanation (its pydantic errors, truncated), without a traceback
    [line] = [r for r in caplog.records if r.getMessage().startswith("model rejected the request")]
    assert "HTTP 500: 7 validation errors" in line.getMessage()
    assert "'messages', 2" in line.getMessage()
    assert line.exc_info is None
    # WHEN the cause is fixed (the adapter's own shape goes through again)
    proxy.mutate = None
    events = post_run(live, "thread-null", "run-null-2", "Are you there?")
    # THEN the next turn on the same thread, whose history holds that tool-call message, succeeds
    assert events[-1]["type"] == "RUN_FINISHED"
    last = proxy.requests()[-1]
    assert last.status == 200
    assert tool_call_messages(last)[0]["content"] == ""


async def seed_thread(live_services: Services, thread: str, runs: dict[str, str], asgi_client: Any) -> None:
    """One chat turn per ``run id -> user text`` (the user message's id is ``<run id>-u``)."""
    async with asgi_client(live_services) as client:
        for run, text in runs.items():
            body = {"threadId": thread, "runId": run, "messages": [{"id": f"{run}-u", "role": "user", "content": text}]}
            resp = await client.post("/api/v1/agent", json=body, headers=bearer())
            assert resp.status_code == 200
            await live_services.runs.wait_idle()


@pytest.fixture
async def memory_services(store: Any, redis_stream: Any, proxy: ModelProxy) -> Any:
    model = OpenAIChatModel(
        proxy.base_url, "test-key", provider="openai-compatible", timeout_s=120, model_ids=json.loads(MODEL_ID_MAP)
    )
    overrides = ServiceOverrides(store=store, stream=redis_stream, model=model, memory_store=InMemoryMemoryStore())
    yield Services(real_settings(proxy), overrides=overrides)
    await model.aclose()


async def test_a_memory_run_with_a_forced_memory_write(
    memory_services: Services, proxy: ModelProxy, asgi_client: Any
) -> None:
    # GIVEN a thread in which the user said something about themselves
    await seed_thread(memory_services, "thread-mem", {"m-1": "I live in Hangzhou and I work as a nurse."}, asgi_client)
    proxy.clear()
    # WHEN the memory run's first request is forced to call memory_write
    proxy.policy = ForcePolicy(force=("memory_write",), times=1)
    report = await memory_services.memory_extraction.extract(IDENTITY, "thread-mem", run_id="mem-1")
    # THEN the run went through: the forced call, its proposal judged by the gate, the follow-up with the decision
    assert report.status == "extracted"
    assert sum(report.decisions.values()) == 1
    first, follow_up = proxy.requests()[:2]
    assert [r.status for r in proxy.requests()] == [200] * len(proxy.requests())
    assert first.body["tool_choice"] == {"type": "function", "function": {"name": "memory_write"}}
    assert sorted(t["function"]["name"] for t in first.body["tools"]) == ["memory_forget", "memory_write"]
    [assistant] = tool_call_messages(follow_up)
    assert assistant["content"] == ""
    assert follow_up.body["messages"][-1]["role"] == "tool"
    assert await memory_services.overrides.memory_store.get_cursor("tenant-1", "thread-mem") == 2


async def test_a_single_slot_server_cutting_a_memory_run_is_retryable_and_the_next_extraction_covers_it(
    memory_services: Services, proxy: ModelProxy, llama: LlamaServer, asgi_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a thread with a user message
    await seed_thread(memory_services, "thread-cut", {"c-1": "My daughter is called Lin."}, asgi_client)
    memories = memory_services.overrides.memory_store
    # AND a memory request made long (end-of-turn tokens banned), cut by llama.cpp when another request arrives
    # at its single slot
    proxy.policy = ForcePolicy(max_tokens=400, extra={"logit_bias": {"0": -100, "2": -100}})
    competing: list[int] = []

    def another_client(_: Forwarded) -> None:
        body = {"model": "other", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        competing.append(httpx.post(f"{llama.base_url}/chat/completions", json=body, timeout=120).status_code)

    proxy.on_first_frame = another_client
    extraction = memory_services.memory_extraction
    # WHEN the memory run streams its answer
    with caplog.at_level(logging.INFO), pytest.raises(MemoryRunFailed) as failure:
        await extraction.extract(IDENTITY, "thread-cut", run_id="mem-cut-1")
    # THEN the run failed as a passing fault: retryable, one warning line, no traceback, no error
    assert competing == [200]
    assert failure.value.retryable, failure.value.details
    assert failure.value.details["error_code"] == "model_stream_interrupted"
    cut = [r for r in caplog.records if r.getMessage().startswith("run failed")]
    assert [(r.levelno, r.exc_info) for r in cut] == [(logging.WARNING, None)]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert await memories.get_cursor("tenant-1", "thread-cut") == 0
    # WHEN the user writes again and the next extraction runs undisturbed
    proxy.on_first_frame = None
    proxy.policy = ForcePolicy(force=("memory_write",), times=1)
    await seed_thread(memory_services, "thread-cut", {"c-2": "I moved to Suzhou last year."}, asgi_client)
    proxy.clear()
    report = await extraction.extract(IDENTITY, "thread-cut", run_id="mem-cut-2")
    # THEN it read both user messages as new, the one the cut run missed included
    assert report.status == "extracted"
    rendered = proxy.requests()[0].body["messages"][1]["content"]
    assert re.findall(r'<message id="([^"]+)" role="user" new="true">', rendered) == ["c-1-u", "c-2-u"]
    assert await memories.get_cursor("tenant-1", "thread-cut") == 4


def run_module(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"LLM_BASE_URL", "LLM_API_KEY", "MODEL_ID_MAP"}}
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO_ROOT,
        env={**env, "LLM_API_KEY": "test-key"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_preflight_passes_against_llama_cpp(llama: LlamaServer) -> None:
    # WHEN the preflight checks the shipped profiles' models through the deployment's map, the documented way, text
    # only as this tier's profiles are (SmolLM2-135M reads no images)
    result = run_module(
        "devtools.preflight",
        "--base-url",
        llama.base_url,
        "--model-id-map",
        MODEL_ID_MAP,
        "--timeout",
        "120",
        "--text-only",
    )
    # THEN every model passed the forced tool call and the follow-up with its result
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout
    assert f"PASS  qwen3.5-30b-a3b -> {PROVIDER_MODEL}" in result.stdout
    assert f"PASS  qwen3.5-flash -> {PROVIDER_MODEL}" in result.stdout


def test_the_intent_regression_runs_end_to_end_and_judges_its_threshold(proxy: ModelProxy) -> None:
    proxy.policy = ForcePolicy(force=("report_intent",))
    # WHEN the regression runs three cases as the README says, with a threshold
    result = run_module(
        "devtools.intent.regression",
        "--base-url",
        proxy.base_url,
        "--variant",
        "B",
        "--limit",
        "3",
        "--min-accuracy",
        "0",
    )
    # THEN every case got a label from the model (right or wrong), and the threshold is printed and met
    assert result.returncode == 0, result.stdout + result.stderr
    assert "error in" not in result.stdout
    assert "threshold: --min-accuracy 0.000; measured" in result.stdout
    assert len(proxy.requests()) == 3
    assert all(r.status == 200 for r in proxy.requests())


def test_the_memory_evaluation_runs_end_to_end_and_judges_its_threshold(proxy: ModelProxy) -> None:
    proxy.policy = ForcePolicy(force=("memory_write",))
    result = run_module("devtools.memory_evaluation", "--base-url", proxy.base_url, "--limit", "3", "--min-recall", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "memory extraction evaluation: 3 cases" in result.stdout
    assert "threshold: --min-recall 0.000; measured" in result.stdout
    assert all(r.status == 200 for r in proxy.requests())


def test_a_background_run_across_two_slices_against_llama_cpp_is_one_valid_run(
    store: Any, redis_url: str, proxy: ModelProxy
) -> None:
    # GIVEN the app under uvicorn on llama.cpp, slices that end after the first step, the first request forced to
    # call the time tool
    proxy.policy = ForcePolicy(force=("get_current_time",), times=1)
    overrides = ServiceOverrides(store=store, profiles=text_only_profiles())
    services = Services(real_settings(proxy, redis_url=redis_url, run_slice_s=0.01), overrides=overrides)
    with serve_app(services) as live:
        body = {
            "threadId": "thread-bg-real",
            "runId": "run-bg-real",
            "messages": [{"id": "u-bg-real", "role": "user", "content": "What time is it in Paris?"}],
            "forwardedProps": {"background": True},
        }
        # WHEN it is posted as a background run and followed once it ended
        accepted = httpx.post(f"{live}/api/v1/agent", json=body, headers=bearer(), timeout=60)
        status: dict[str, Any] = {}
        for _ in range(600):
            status = httpx.get(f"{live}/api/v1/agent/runs/run-bg-real", headers=bearer(), timeout=60).json()
            if status["status"] not in ("queued", "running"):
                break
            time.sleep(0.5)
        wire = httpx.get(f"{live}/api/v1/agent/runs/run-bg-real/events", headers=bearer(), timeout=60).text
    events = events_of(wire)
    # THEN 202 at once; the run went on after its tool step, against the real server, and ended once
    assert accepted.status_code == 202 and accepted.json()["status"] == "queued"
    assert status["status"] == "succeeded", status
    assert [r.status for r in proxy.requests()] == [200, 200]
    # AND the whole run, both slices, is one run for ag-ui-validate: one RUN_STARTED, one RUN_FINISHED, last
    verdict = validate_sse(wire)
    assert verdict.clean, verdict.describe()
    types = [e["type"] for e in events]
    assert types.count("RUN_STARTED") == 1 and types[-1] == "RUN_FINISHED" and types.count("RUN_FINISHED") == 1
    assert "TOOL_CALL_RESULT" in types and "TEXT_MESSAGE_START" in types[types.index("TOOL_CALL_RESULT") :]
    # AND it ran in two slices: each opened and closed its worker step, the second after the tool's result
    assert types.count("STEP_STARTED") == 2 and types.count("STEP_FINISHED") == 2
