"""A chat run end to end below HTTP: ``RunService`` admits it, the worker executor talks to a scripted model, the
emitter writes the events, all on the in-memory store and stream (the fakes that pass the same contract suites as
DynamoDB and Redis, tests/contract). No moto, no redis-server: these are the fast checks of the run path."""

from __future__ import annotations

from typing import Any

import pytest

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.errors import Conflict, ModelError
from shared.executors.context import RunContext
from shared.executors.worker import WorkerExecutor
from shared.models import ExecutionMeta, Identity, Message, Origin, Role, RunStatus
from shared.profiles import default_catalog
from shared.runs.service import RunService
from shared.tools.clock import make_clock_tool
from shared.tools.registry import ToolRegistry
from tests.support.scripted_model import ScriptedModel, Turn

USER = Identity(tenant_id="t1", user_id="u1")
TIME_CALL = ("call_time", "get_current_time", '{"timezone": "Europe/Paris"}')
FORBIDDEN_CALL = ("call_bad", "delete_account", '{"user": "everyone"}')


class Rig:
    """One process's run path on the fakes: store, stream, run service and the worker for a scripted model."""

    def __init__(self, *turns: Turn) -> None:
        self.store = InMemoryStore()
        self.stream = InMemoryEventStream()
        self.model = ScriptedModel(*turns)
        tools = ToolRegistry()
        tools.register(make_clock_tool())
        self.worker = WorkerExecutor(self.model, self.store.threads, self.store.audit, tools)
        self.runs = RunService(self.store.threads, self.store.runs, self.store.audit, self.stream)

    async def start(self, run_id: str, text: str, thread_id: str = "th-1") -> RunContext:
        ctx = RunContext(
            identity=USER,
            thread_id=thread_id,
            run_id=run_id,
            profile=default_catalog().get("chat_default"),
            meta=ExecutionMeta(origin=Origin.CHAT),
            request_summary="a test run",
            latest_user_text=text,
        )
        message = Message(id=f"m-{run_id}", thread_id=thread_id, role=Role.USER, content=text)
        admission = await self.runs.admit(ctx, body_digest=run_id, new_messages=[message], executor=self.worker)
        assert admission.created
        return ctx

    async def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events as a client tailing it sees them, through its terminal event."""
        return [entry.event async for entry in self.runs.tail_run(USER.tenant_id, run_id) if entry is not None]

    async def run(self, run_id: str, text: str) -> list[dict[str, Any]]:
        await self.start(run_id, text)
        events = await self.events(run_id)
        await self.runs.wait_idle()
        return events

    async def stored(self, thread_id: str = "th-1") -> list[Message]:
        """The thread's messages, oldest first (``read_back`` pages backwards from the newest)."""
        newest_first = await self.store.threads.read_back(USER.tenant_id, thread_id, before_seq=None, limit=50)
        return sorted(newest_first, key=lambda m: m.seq)


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


async def test_a_chat_run_streams_its_events_in_order_and_stores_the_conversation() -> None:
    # GIVEN a model that answers in two pieces
    rig = Rig(Turn(text=["Hello ", "there."], input_tokens=12, output_tokens=3))
    # WHEN a user's run is admitted and tailed
    events = await rig.run("run-1", "hi")
    # THEN the stream is the AG-UI sequence, one step, the text in its pieces, and RUN_FINISHED last
    assert types(events) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    assert [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["Hello ", "there."]
    assert (events[0]["threadId"], events[0]["runId"]) == ("th-1", "run-1")
    assert events[-1]["outcome"] == {"type": "success"}
    # AND the model saw the user's message, and the thread holds it and the answer, in order
    assert rig.model.requests[0].messages[-1].content == "hi"
    assert [(m.role, m.content) for m in await rig.stored()] == [(Role.USER, "hi"), (Role.ASSISTANT, "Hello there.")]
    # AND the ledger says the run succeeded, with the model's usage, and the thread is free again
    run = await rig.store.runs.get_run(USER.tenant_id, "run-1")
    assert run is not None and run.status is RunStatus.SUCCEEDED
    assert [(u.input_tokens, u.output_tokens) for u in run.usage] == [(12, 3)]
    assert (await rig.store.threads.get_thread(USER, "th-1")).active_run_id is None


async def test_the_stream_ids_grow_and_a_reader_resuming_after_one_gets_only_what_followed() -> None:
    rig = Rig(Turn(text=["a", "b", "c"]))
    await rig.start("run-1", "hi")
    entries = [e async for e in rig.runs.tail_run(USER.tenant_id, "run-1") if e is not None]
    ids = [e.id for e in entries]
    assert ids == sorted(ids, key=lambda i: tuple(int(p) for p in i.split("-"))) and len(set(ids)) == len(ids)
    # WHEN a reader resumes after the third event THEN it gets exactly the rest, through the terminal event
    resumed = [e async for e in rig.runs.tail_run(USER.tenant_id, "run-1", after=ids[2]) if e is not None]
    assert [e.id for e in resumed] == ids[3:]
    await rig.runs.wait_idle()


async def test_the_same_run_admitted_twice_runs_once() -> None:
    rig = Rig(Turn(text=["once"]))
    ctx = await rig.start("run-1", "hi")
    again = await rig.runs.admit(ctx, body_digest="run-1", new_messages=[], executor=rig.worker)
    await rig.events("run-1")
    await rig.runs.wait_idle()
    assert not again.created and again.run.run_id == "run-1"
    assert len(rig.model.requests) == 1


async def test_an_allowed_tool_call_passes_the_gate_runs_and_its_result_reaches_the_model() -> None:
    # GIVEN a model that asks for the clock (allowed by chat_default), then answers
    rig = Rig(Turn(tool_calls=[TIME_CALL]), Turn(text=["It is noon."]))
    events = await rig.run("run-1", "time in Paris?")
    # THEN the call and its result are streamed before the answer
    assert types(events)[2:7] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
    ]
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "call_time" and "Europe/Paris" in result["content"]
    # AND the model's second request carries the call and its result
    second = rig.model.requests[1].messages
    assert (second[-1].role, second[-1].tool_call_id) == ("tool", "call_time")
    # AND the thread holds user, call, result, answer; the gate's decision is audited as allowed
    assert [m.role for m in await rig.stored()] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    audit = await rig.store.audit.list_for_thread(USER.tenant_id, "th-1", limit=20)
    decision = next(r for r in audit if r.details.get("tool_name") == "get_current_time")
    assert decision.details["decision"] == "allowed"


async def test_a_refused_tool_is_audited_never_run_and_the_model_is_told() -> None:
    # GIVEN a model that calls a tool nobody offered it, then answers
    rig = Rig(Turn(tool_calls=[FORBIDDEN_CALL]), Turn(text=["I cannot do that."]))
    events = await rig.run("run-1", "delete everyone")
    # THEN the refusal is audited with the tool's name and the refusing layer
    audit = await rig.store.audit.list_for_thread(USER.tenant_id, "th-1", limit=20)
    refusal = next(r for r in audit if r.details.get("tool_name") == "delete_account")
    assert (refusal.details["decision"], refusal.details["layer"], refusal.run_id) == ("refused", "system", "run-1")
    assert refusal.details["reason"] == "unknown_tool"
    # AND the model gets an error result for the call (not the tool's output), and the run still succeeds
    tool_message = rig.model.requests[1].messages[-1]
    assert tool_message.tool_call_id == "call_bad" and "error" in (tool_message.content or "")
    assert events[-1]["type"] == "RUN_FINISHED"
    stored = await rig.stored()
    assert [m.role for m in stored] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]


async def test_a_model_error_mid_answer_ends_in_run_error_and_keeps_the_partial_text() -> None:
    # GIVEN a model whose stream breaks after some text
    broken = ModelError("the model endpoint is down", code="model_unavailable")
    rig = Rig(Turn(text=["Half an "], raise_error=broken))
    events = await rig.run("run-1", "hi")
    # THEN the text streamed so far is closed, the step too, and RUN_ERROR with the documented code ends the run
    assert types(events) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_ERROR",
    ]
    assert events[-1]["code"] == "model_unavailable"
    # AND the partial text is stored, marked as such, and the run is failed in the ledger
    [_, partial] = await rig.stored()
    assert (partial.content, partial.flags.get("partial")) == ("Half an ", True)
    run = await rig.store.runs.get_run(USER.tenant_id, "run-1")
    assert run is not None and (run.status, run.error_code) == (RunStatus.FAILED, "model_unavailable")


async def test_a_cancelled_run_stops_the_model_keeps_what_was_said_and_ends_cancelled() -> None:
    # GIVEN a slow model answer
    rig = Rig(Turn(text=[f"w{i} " for i in range(200)], delay_s=0.01))
    await rig.start("run-1", "tell me a long story")
    seen: list[dict[str, Any]] = []
    # WHEN the user cancels once the first words arrived
    async for entry in rig.runs.tail_run(USER.tenant_id, "run-1"):
        if entry is None:
            continue
        seen.append(entry.event)
        if entry.event["type"] == "TEXT_MESSAGE_CONTENT" and len(seen) < 10:
            await rig.runs.cancel(USER, "run-1")
    await rig.runs.wait_idle()
    # THEN the run ends with one terminal event, well before the answer was complete
    deltas = [e["delta"] for e in seen if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert 0 < len(deltas) < 200
    assert sum(1 for e in seen if e["type"] in {"RUN_FINISHED", "RUN_ERROR"}) == 1
    run = await rig.store.runs.get_run(USER.tenant_id, "run-1")
    assert run is not None and run.status is RunStatus.CANCELLED
    # AND the words already sent are kept, marked partial; the thread is free for the next run
    partial = (await rig.stored())[-1]
    assert partial.role is Role.ASSISTANT and partial.flags.get("partial") is True
    assert partial.content == "".join(deltas)
    assert (await rig.store.threads.get_thread(USER, "th-1")).active_run_id is None


async def test_a_second_run_on_a_busy_thread_is_refused_until_the_first_ended() -> None:
    rig = Rig(Turn(text=["slow "] * 20, delay_s=0.01), Turn(text=["next"]))
    await rig.start("run-1", "first")
    with pytest.raises(Conflict) as refused:
        await rig.start("run-2", "second")
    assert refused.value.code == "thread_busy"
    await rig.events("run-1")
    await rig.runs.wait_idle()
    assert types(await rig.run("run-2", "second"))[-1] == "RUN_FINISHED"


async def test_the_first_text_goes_out_with_its_step_and_message_start_in_one_write() -> None:
    # GIVEN a stream that records each write (one Redis pipeline each)
    rig = Rig(Turn(text=["Hello ", "there."]))
    writes: list[list[str]] = []
    write = rig.stream.append_batch

    async def recording(entries: Any, *, clear: str | None = None, encoded: Any = None) -> list[str]:
        writes.append([event["type"] for key, event in entries if ":events" in key])
        return await write(entries, clear=clear, encoded=encoded)

    rig.stream.append_batch = recording  # type: ignore[method-assign]
    # WHEN a run streams its answer
    await rig.run("run-1", "hi")
    # THEN the first delta did not wait for a write of its own: the step, the message start and the first delta
    # went out together, right after RUN_STARTED
    assert writes[0] == ["RUN_STARTED"]
    assert writes[1] == ["STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
