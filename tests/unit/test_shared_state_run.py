"""Shared state in a chat run on the fakes: the snapshot that opens every run, the state in the model's run notes,
and ``update_state`` patches applied, stored and streamed, or refused with nothing changed."""

from __future__ import annotations

import json
from typing import Any

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.adapters.in_memory.thread_state import InMemoryThreadStates
from shared.executors.context import RunContext
from shared.executors.worker import WorkerExecutor
from shared.models import ExecutionMeta, Identity, Message, Origin, Role
from shared.profiles import ExecutionProfile, default_catalog
from shared.runs.service import RunService
from shared.thread_state.limits import MAX_STATE_BYTES
from shared.thread_state.models import StoredState
from shared.tools.registry import ToolRegistry
from tests.support.scripted_model import ScriptedModel, Turn

USER = Identity(tenant_id="t1", user_id="u1")
PLAN = {"steps": [{"description": "book hotel", "status": "pending"}]}


def patch_call(call_id: str, patch: list[dict[str, Any]]) -> Turn:
    return Turn(tool_calls=[(call_id, "update_state", json.dumps({"patch": patch}))])


class StateRig:
    def __init__(self, *turns: Turn, profile: ExecutionProfile | None = None) -> None:
        self.store = InMemoryStore()
        self.stream = InMemoryEventStream()
        self.states = InMemoryThreadStates()
        self.model = ScriptedModel(*turns)
        self.runs = RunService(self.store.threads, self.store.runs, self.store.audit, self.stream)
        self.profile = profile or default_catalog().get("chat_default")

    async def run(self, run_id: str, text: str, state: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        worker = WorkerExecutor(self.model, self.store.threads, self.store.audit, ToolRegistry(), states=self.states)
        ctx = RunContext(
            identity=USER,
            thread_id="th-1",
            run_id=run_id,
            profile=self.profile,
            meta=ExecutionMeta(origin=Origin.CHAT),
            latest_user_text=text,
            client_state=state,
        )
        message = Message(id=f"m-{run_id}", thread_id="th-1", role=Role.USER, content=text)
        await self.runs.admit(ctx, body_digest=run_id, new_messages=[message], executor=worker)
        events = [e.event async for e in self.runs.tail_run(USER.tenant_id, run_id) if e is not None]
        await self.runs.wait_idle()
        return events

    async def stored(self) -> StoredState | None:
        return await self.states.read(USER, "th-1")


def snapshot(event: dict[str, Any]) -> tuple[str, Any]:
    return event["type"], event.get("snapshot")


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def tool_results(events: list[dict[str, Any]]) -> list[Any]:
    return [json.loads(e["content"]) for e in of_type(events, "TOOL_CALL_RESULT")]


async def test_the_clients_state_opens_the_run_is_stored_and_reaches_the_model_after_the_history() -> None:
    rig = StateRig(Turn(text=["Noted."]))
    events = await rig.run("run-1", "plan my trip", state=PLAN)
    # THEN the run declares AG-UI 1.0 and its first event after RUN_STARTED is the client's state, whole
    assert events[0]["type"] == "RUN_STARTED" and events[0]["protocolVersion"] == "1.0"
    assert snapshot(events[1]) == ("STATE_SNAPSHOT", PLAN)
    # AND the state is stored with the thread, version 1
    assert await rig.stored() == StoredState(PLAN, 1)
    # AND the model reads it in the run notes, inside the newest user message (after the system prompt and history)
    request = rig.model.requests[0]
    newest = request.messages[-1]
    assert newest.role == "user" and '"book hotel"' in (newest.content or "")
    assert "Shared state" not in (request.messages[0].content or "")
    # AND update_state is offered (chat_default allows it)
    assert "update_state" in [t.name for t in request.tools]


async def test_a_valid_patch_is_applied_stored_and_streamed_as_a_delta_and_the_next_run_starts_from_it() -> None:
    patch = [{"op": "replace", "path": "/steps/0/status", "value": "done"}]
    rig = StateRig(patch_call("c1", patch), Turn(text=["Booked."]), Turn(text=["Still booked."]))
    events = await rig.run("run-1", "book it", state=PLAN)
    # THEN the patch went out as STATE_DELTA, exactly as the model wrote it, before the tool's result
    deltas = of_type(events, "STATE_DELTA")
    assert [d["delta"] for d in deltas] == [patch]
    assert events.index(deltas[0]) < events.index(of_type(events, "TOOL_CALL_RESULT")[0])
    done = {"steps": [{"description": "book hotel", "status": "done"}]}
    assert tool_results(events) == [{"applied": 1, "version": 2, "state": done}]
    assert await rig.stored() == StoredState(done, 2)
    # WHEN the next run sends no state THEN it opens with the stored one, and the model reads that
    second = await rig.run("run-2", "status?")
    assert snapshot(second[1]) == ("STATE_SNAPSHOT", done)
    assert '"done"' in (rig.model.requests[-1].messages[-1].content or "")


async def test_invalid_patches_are_tool_errors_that_change_nothing() -> None:
    bad_pointer = [{"op": "replace", "path": "/steps/7/status", "value": "done"}]
    failed_test = [{"op": "test", "path": "/steps/0/status", "value": "done"}, {"op": "remove", "path": "/steps/0"}]
    too_large = [{"op": "add", "path": "/blob", "value": "x" * MAX_STATE_BYTES}]
    escaping = [{"op": "add", "path": "/../../other-thread", "value": 1}]
    rig = StateRig(
        Turn(
            tool_calls=[
                ("c1", "update_state", json.dumps({"patch": bad_pointer})),
                ("c2", "update_state", json.dumps({"patch": failed_test})),
                ("c3", "update_state", json.dumps({"patch": too_large})),
                ("c4", "update_state", json.dumps({"patch": escaping})),
                ("c5", "update_state", '{"patch": "not a list"}'),
            ]
        ),
        Turn(text=["I could not change it."]),
    )
    events = await rig.run("run-1", "break it", state=PLAN)
    results = tool_results(events)
    assert [r["error"]["code"] for r in results] == ["invalid_patch"] * 4 + ["invalid_arguments"]
    assert "out of range" in results[0]["error"]["message"]
    assert "test failed" in results[1]["error"]["message"]
    assert f"at most {MAX_STATE_BYTES}" in results[2]["error"]["message"]
    assert "does not exist" in results[3]["error"]["message"]
    # AND nothing was streamed or stored beyond the client's state
    assert of_type(events, "STATE_DELTA") == []
    assert await rig.stored() == StoredState(PLAN, 1)


async def test_update_state_passes_the_gate_a_profile_without_it_refuses_the_call_and_audits_it() -> None:
    chat = default_catalog().get("chat_default")
    narrow = chat.model_copy(
        update={"tool_policy": chat.tool_policy.model_copy(update={"allowlist": ["get_current_time"]})}
    )
    patch = [{"op": "add", "path": "/x", "value": 1}]
    rig = StateRig(patch_call("c1", patch), Turn(text=["Not allowed."]), profile=narrow)
    events = await rig.run("run-1", "try", state=PLAN)
    assert "update_state" not in [t.name for t in rig.model.requests[0].tools]
    assert tool_results(events)[0]["error"]["code"] == "tool_not_allowed"
    assert of_type(events, "STATE_DELTA") == []
    assert await rig.stored() == StoredState(PLAN, 1)
    decisions = [
        r.details
        for r in await rig.store.audit.list_for_thread("t1", "th-1", limit=50)
        if r.kind == "tool_decision" and r.details["tool_name"] == "update_state"
    ]
    assert [(d["decision"], d["layer"]) for d in decisions] == [("refused", "profile")]


async def test_an_allowed_update_state_call_is_audited_like_every_tool() -> None:
    rig = StateRig(patch_call("c1", [{"op": "add", "path": "/x", "value": 1}]), Turn(text=["ok"]))
    await rig.run("run-1", "go", state=PLAN)
    decisions = [
        r.details
        for r in await rig.store.audit.list_for_thread("t1", "th-1", limit=50)
        if r.kind == "tool_decision" and r.details["tool_name"] == "update_state"
    ]
    assert [(d["decision"], d["tool_kind"]) for d in decisions] == [("allowed", "executor")]


async def test_a_run_without_state_opens_with_an_empty_snapshot_and_sends_no_state_note() -> None:
    rig = StateRig(Turn(text=["hi"]))
    events = await rig.run("run-1", "hello")
    assert snapshot(events[1]) == ("STATE_SNAPSHOT", {})
    assert "Shared state" not in (rig.model.requests[0].messages[-1].content or "")
    # AND the stored state was read once (beside admission) and nothing was written
    assert (rig.states.reads, rig.states.writes) == (1, 0)
    assert await rig.stored() is None
