"""Server tools that need a person's approval, through the ASGI app: the call is held and the run ends with AG-UI 1.0's
interrupt outcome; the next run's ``resume`` approves (with or without edited arguments) or declines it; bad resumes
are refused with 422 and nothing stored (docs/policy.md §3.7)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from ag_ui.core import RunFinishedEvent

from shared.llm.types import ToolSpec
from shared.models import Identity, utc_now
from shared.profiles import ExecutionProfile, ProfileCatalog, ProfileChoice
from shared.tools.clock import make_clock_tool
from shared.tools.registry import ServerTool, ToolContext, ToolRegistry
from shared.wiring import ServiceOverrides, Services
from tests.support.profiles import chat_catalog
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.sse import parse_sse
from tests.support.tokens import bearer

EMAIL_SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "subject": {"type": "string", "maxLength": 40}},
    "required": ["to", "subject"],
    "additionalProperties": False,
}
EMAIL_CALL = ("call_mail_1", "send_email", '{"to": "ann@example.com", "subject": "Hi"}')
SECOND_EMAIL_CALL = ("call_mail_2", "send_email", '{"to": "bob@example.com", "subject": "Yo"}')


class Outbox:
    """The ``send_email`` tool's handler: records every call it is given (the side effect approval guards)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        self.sent.append(arguments)
        return json.dumps({"sent": True, "to": arguments["to"]})

    def tool(self) -> ServerTool:
        spec = ToolSpec(name="send_email", description="Send an email.", parameters=EMAIL_SCHEMA)
        return ServerTool(spec=spec, handler=self)


class SwappableProfiles:
    """A profile source whose catalog a test swaps between runs (the runtime configuration changing)."""

    def __init__(self, catalog: ProfileCatalog) -> None:
        self.catalog = catalog

    @property
    def names(self) -> frozenset[str]:
        return self.catalog.names

    def __iter__(self) -> Iterator[ExecutionProfile]:
        return iter(self.catalog)

    def get(self, name: str) -> ExecutionProfile:
        return self.catalog.get(name)

    def choose(self, name: str, *, tenant_id: str, user_id: str | None = None,
               task_type: str | None = None) -> ProfileChoice:
        return self.catalog.choose(name, tenant_id=tenant_id, user_id=user_id, task_type=task_type)

    def resolve(self, name: str, *, tenant_id: str, user_id: str | None = None,
                task_type: str | None = None) -> ExecutionProfile:
        return self.catalog.resolve(name, tenant_id=tenant_id, user_id=user_id, task_type=task_type)


def approval_catalog(allowlist: tuple[str, ...] = ("get_current_time", "send_email")) -> ProfileCatalog:
    return chat_catalog(allowlist=list(allowlist), require_approval=["send_*"])


class Rig:
    def __init__(self, store: Any, stream: Any, model: ScriptedModel) -> None:
        self.outbox = Outbox()
        self.profiles = SwappableProfiles(approval_catalog())
        self.services = Services(
            make_settings(),
            overrides=ServiceOverrides(
                store=store,
                stream=stream,
                model=model,
                profiles=self.profiles,
                tools=ToolRegistry({"get_current_time": make_clock_tool(), "send_email": self.outbox.tool()}),
            ),
        )


def body(run: str, resume: list[dict[str, Any]] | None = None, *, thread: str = "th-ap",
         messages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "threadId": thread, "runId": run, "tools": [], "context": [],
        "messages": messages if messages is not None else [{"id": "u1", "role": "user", "content": "Mail Ann"}],
    }
    if resume is not None:
        payload["resume"] = resume
    return payload


async def post(client: httpx.AsyncClient, payload: dict[str, Any],
               headers: dict[str, str] | None = None) -> tuple[int, list[dict[str, Any]]]:
    resp = await client.post("/api/v1/agent", json=payload, headers=headers or bearer())
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        return resp.status_code, [f.json() for f in parse_sse(resp.text) if not f.is_comment_only]
    return resp.status_code, [resp.json()["error"]]


async def interrupted(client: httpx.AsyncClient) -> dict[str, Any]:
    status, events = await post(client, body("run-1"))
    assert status == 200 and events[-1]["outcome"]["type"] == "interrupt", events[-1]
    return dict(events[-1]["outcome"]["interrupts"][0])


def answer(interrupt: dict[str, Any], status: str = "resolved", **payload: Any) -> list[dict[str, Any]]:
    """A resume that answers ``interrupt`` alone: approved (with an edited ``payload``, if given) or cancelled."""
    return [{"interruptId": interrupt["id"], "status": status, **payload}]


async def raw_thread(store: Any, thread: str = "th-ap") -> list[Any]:
    return list(reversed(await store.threads.read_back("tenant-1", thread, before_seq=None, limit=50)))


@pytest.fixture
def rig(store: Any, redis_stream: Any) -> Any:
    return lambda *turns: Rig(store, redis_stream, ScriptedModel(*turns))


async def test_a_call_to_a_tool_that_needs_approval_is_held_and_the_run_ends_with_an_interrupt(
    rig: Any, asgi_client: Any, store: Any
) -> None:
    # GIVEN a profile that requires approval for send_* and a model that calls send_email
    r = rig(Turn(text=["I'll send it."], tool_calls=[EMAIL_CALL]))
    async with asgi_client(r.services) as client:
        # WHEN the user asks
        status, events = await post(client, body("run-1"))
    assert status == 200
    # AND the call streamed, was not executed, and the run finished with one interrupt for it
    assert r.outbox.sent == []
    types = [e["type"] for e in events]
    assert "TOOL_CALL_RESULT" not in types and types[-2:] == ["STEP_FINISHED", "RUN_FINISHED"]
    outcome = events[-1]["outcome"]
    assert outcome["type"] == "interrupt" and len(outcome["interrupts"]) == 1
    interrupt = outcome["interrupts"][0]
    assert interrupt["id"].startswith("int_")
    assert {k: interrupt[k] for k in ("reason", "toolCallId", "responseSchema")} == {
        "reason": "tool_call", "toolCallId": "call_mail_1", "responseSchema": EMAIL_SCHEMA}
    assert interrupt["message"] == "Approve the call of send_email with these arguments?"
    assert interrupt["metadata"] == {"toolName": "send_email", "arguments": {"to": "ann@example.com", "subject": "Hi"}}
    expires = RunFinishedEvent.model_validate(events[-1]).outcome.interrupts[0].expires_at  # type: ignore[union-attr]
    left = utc_now() + timedelta(hours=24) - datetime.fromisoformat(expires or "")
    assert timedelta(0) <= left < timedelta(minutes=5)
    # AND the request is audited, and the thread holds the call with its open interrupt
    audit = await store.audit.list_for_thread("tenant-1", "th-ap", limit=50)
    requested = [a for a in audit if a.kind == "tool_approval_requested"]
    assert [(a.details["interrupt_id"], a.details["tool_name"]) for a in requested] == [(interrupt["id"], "send_email")]
    stored = await raw_thread(store)
    assert stored[-1].flags["approval_interrupts"][0]["id"] == interrupt["id"]
    thread = await store.threads.get_thread(Identity(tenant_id="tenant-1", user_id="user-1"), "th-ap")
    assert thread.active_run_id is None


async def test_resolved_runs_the_call_once_and_the_model_continues_in_that_run(
    rig: Any, asgi_client: Any, store: Any
) -> None:
    r = rig(Turn(tool_calls=[EMAIL_CALL]), Turn(text=["Sent."]))
    async with asgi_client(r.services) as client:
        interrupt = await interrupted(client)
        assert r.outbox.sent == []
        # WHEN the user approves it
        status, events = await post(client, body("run-2", answer(interrupt)))
    # THEN the tool ran once, with the model's arguments, and its result streamed in the resuming run
    assert status == 200 and events[-1]["outcome"] == {"type": "success"}
    assert r.outbox.sent == [{"to": "ann@example.com", "subject": "Hi"}]
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "call_mail_1" and json.loads(result["content"])["sent"] is True
    # AND the model's next request holds the call and its result, in order
    roles = [(m.role, m.tool_call_id) for m in r.services.overrides.model.requests[1].messages if m.role != "system"]
    assert roles == [("user", None), ("assistant", None), ("tool", "call_mail_1")]
    # (the handler's own result, not a repair of a call the model request would see without one)
    assert json.loads(r.services.overrides.model.requests[1].messages[-1].content or "") == {
        "sent": True, "to": "ann@example.com"}
    # AND the decision is audited with the user who made it
    audit = await store.audit.list_for_thread("tenant-1", "th-ap", limit=50)
    decided = [a.details for a in audit if a.kind == "tool_approval_decided"]
    assert [(d["status"], d["decided_by"], d["edited"]) for d in decided] == [("resolved", "user-1", False)]


async def test_resolved_with_edited_arguments_runs_the_edited_call(rig: Any, asgi_client: Any) -> None:
    r = rig(Turn(tool_calls=[EMAIL_CALL]), Turn(text=["Sent."]))
    async with asgi_client(r.services) as client:
        interrupt = await interrupted(client)
        edited = {"to": "ann@example.org", "subject": "Hello"}
        status, _ = await post(client, body("run-2", answer(interrupt, payload=edited)))
    assert status == 200
    assert r.outbox.sent == [edited]
    last = r.services.overrides.model.requests[1].messages[-1]
    assert json.loads(last.content or "") == {"sent": True, "to": "ann@example.org"}


async def test_cancelled_stores_a_declined_result_and_never_calls_the_tool(
    rig: Any, asgi_client: Any, store: Any
) -> None:
    r = rig(Turn(tool_calls=[EMAIL_CALL]), Turn(text=["OK, not sent."]))
    async with asgi_client(r.services) as client:
        interrupt = await interrupted(client)
        status, events = await post(client, body("run-2", answer(interrupt, "cancelled")))
    assert status == 200 and events[-1]["outcome"] == {"type": "success"}
    assert r.outbox.sent == []
    last = r.services.overrides.model.requests[1].messages[-1]
    assert (last.role, last.tool_call_id) == ("tool", "call_mail_1")
    assert json.loads(last.content or "")["error"]["code"] == "declined"
    audit = await store.audit.list_for_thread("tenant-1", "th-ap", limit=50)
    assert [a.details["status"] for a in audit if a.kind == "tool_approval_decided"] == ["cancelled"]


async def test_an_edited_payload_outside_the_schema_is_refused_and_nothing_changes(
    rig: Any, asgi_client: Any, store: Any
) -> None:
    r = rig(Turn(tool_calls=[EMAIL_CALL]), Turn(text=["Sent."]))
    async with asgi_client(r.services) as client:
        interrupt = await interrupted(client)
        before = await raw_thread(store)
        for payload in ({"to": "ann@example.com"}, {"to": "a", "subject": "x" * 41}, ["not", "an", "object"]):
            status, errors = await post(client, body("run-2", answer(interrupt, payload=payload)))
            assert (status, errors[0]["code"]) == (422, "invalid_resume_payload")
        assert await raw_thread(store) == before and r.outbox.sent == []
        # AND the interrupt is still open: a valid answer goes through
        status, _ = await post(client, body("run-3", answer(interrupt)))
    assert status == 200 and len(r.outbox.sent) == 1


async def test_a_tool_removed_from_the_profile_before_the_resume_is_refused_by_the_gate(
    rig: Any, asgi_client: Any, store: Any
) -> None:
    r = rig(Turn(tool_calls=[EMAIL_CALL]), Turn(text=["It is no longer allowed."]))
    async with asgi_client(r.services) as client:
        interrupt = await interrupted(client)
        # WHEN the profile stops allowing send_email, then the user approves
        r.profiles.catalog = approval_catalog(allowlist=("get_current_time",))
        status, events = await post(client, body("run-2", answer(interrupt)))
    # THEN the gate refused the call at that moment: never executed, the model told, the refusal audited
    assert status == 200 and r.outbox.sent == []
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert json.loads(result["content"])["error"]["code"] == "tool_not_allowed"
    audit = await store.audit.list_for_thread("tenant-1", "th-ap", limit=50)
    refusals = [a.details for a in audit if a.kind == "tool_decision" and a.details["decision"] == "refused"]
    assert [(d["tool_name"], d["layer"]) for d in refusals] == [("send_email", "profile")]


async def test_attackers_cannot_answer_an_interrupt_they_do_not_own_or_answer_it_twice(
    rig: Any, asgi_client: Any, store: Any
) -> None:
    r = rig(Turn(tool_calls=[EMAIL_CALL]), Turn(text=["Sent."]))
    async with asgi_client(r.services) as client:
        interrupt = await interrupted(client)
        resume = answer(interrupt)
        before = await raw_thread(store)
        # WHEN another user, a user of another tenant, and the owner on another thread send the resume
        attempts = [
            (body("run-x1", resume), bearer(user="user-2"), (404, "not_found")),
            (body("run-x2", resume), bearer(tenant="tenant-2"), (422, "unknown_interrupt")),
            (body("run-x3", resume, thread="th-other"), bearer(user="user-2"), (422, "unknown_interrupt")),
            (body("run-x4", resume, thread="th-other"), bearer(), (422, "unknown_interrupt")),
        ]
        for payload, headers, expected in attempts:
            status, errors = await post(client, payload, headers)
            # THEN each is refused and nothing changed
            assert (status, errors[0]["code"]) == expected
        assert await raw_thread(store) == before and r.outbox.sent == []
        # WHEN the owner resumes, then replays the same resume in a new run
        assert (await post(client, body("run-2", resume)))[0] == 200
        after = await raw_thread(store)
        status, errors = await post(client, body("run-3", resume))
        # THEN the replay is refused: the tool ran once
        assert (status, errors[0]["code"]) == (422, "interrupt_already_answered")
        assert await raw_thread(store) == after
    assert len(r.outbox.sent) == 1


async def test_a_resume_must_answer_every_open_interrupt_and_only_those(rig: Any, asgi_client: Any) -> None:
    r = rig(Turn(tool_calls=[EMAIL_CALL, SECOND_EMAIL_CALL]), Turn(text=["Both sent."]))
    async with asgi_client(r.services) as client:
        status, events = await post(client, body("run-1"))
        interrupts = events[-1]["outcome"]["interrupts"]
        assert [i["toolCallId"] for i in interrupts] == ["call_mail_1", "call_mail_2"]
        first, second = (i["id"] for i in interrupts)
        refused = [
            ([{"interruptId": first, "status": "resolved"}], "interrupts_unanswered"),
            ([{"interruptId": first, "status": "resolved"}, {"interruptId": first, "status": "cancelled"}],
             "interrupt_already_answered"),
            ([{"interruptId": "int_nobody", "status": "resolved"}], "unknown_interrupt"),
        ]
        for resume, code in refused:
            status, errors = await post(client, body("run-x", resume))
            assert (status, errors[0]["code"]) == (422, code)
        with_new_message = body("run-y", [{"interruptId": first, "status": "resolved"},
                                          {"interruptId": second, "status": "cancelled"}],
                                messages=[{"id": "u1", "role": "user", "content": "Mail Ann"},
                                          {"id": "u2", "role": "user", "content": "and also"}])
        status, errors = await post(client, with_new_message)
        assert (status, errors[0]["code"]) == (422, "resume_with_new_message")
        assert r.outbox.sent == []
        status, _ = await post(client, body("run-2", [{"interruptId": first, "status": "resolved"},
                                                      {"interruptId": second, "status": "cancelled"}]))
    assert status == 200
    assert r.outbox.sent == [{"to": "ann@example.com", "subject": "Hi"}]


async def test_an_expired_interrupt_cannot_be_resolved_and_its_call_gets_an_expired_result(
    rig: Any, asgi_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = rig(Turn(tool_calls=[EMAIL_CALL]), Turn(text=["It expired."]))
    async with asgi_client(r.services) as client:
        interrupt = await interrupted(client)
        # WHEN a day and a minute have passed
        later = utc_now() + timedelta(hours=24, minutes=1)
        monkeypatch.setattr("shared.chat.utc_now", lambda: later)
        status, errors = await post(client, body("run-2", answer(interrupt)))
        # THEN approving is refused; cancelling closes it with the expired result
        assert (status, errors[0]["code"]) == (422, "interrupt_expired")
        status, _ = await post(client, body("run-3", answer(interrupt, "cancelled")))
    assert status == 200 and r.outbox.sent == []
    last = r.services.overrides.model.requests[1].messages[-1]
    assert json.loads(last.content or "")["error"]["code"] == "approval_expired"


async def test_a_new_message_without_resume_cancels_the_open_interrupts(
    rig: Any, asgi_client: Any, store: Any
) -> None:
    r = rig(Turn(tool_calls=[EMAIL_CALL]), Turn(text=["Never mind then."]))
    async with asgi_client(r.services) as client:
        await interrupted(client)
        messages = [{"id": "u1", "role": "user", "content": "Mail Ann"},
                    {"id": "u2", "role": "user", "content": "Actually, don't."}]
        status, _ = await post(client, body("run-2", messages=messages))
    assert status == 200 and r.outbox.sent == []
    sent = [(m.role, m.tool_call_id) for m in r.services.overrides.model.requests[1].messages if m.role != "system"]
    assert sent == [("user", None), ("assistant", None), ("tool", "call_mail_1"), ("user", None)]
    cancelled = r.services.overrides.model.requests[1].messages[3]
    assert json.loads(cancelled.content or "")["error"]["code"] == "cancelled"
    # AND the synthetic result is stored, before the new message (not only repaired when the window is read)
    stored = await raw_thread(store)
    assert [(m.role.value, m.flags.get("ended_by")) for m in stored[:4]] == [
        ("user", None), ("assistant", None), ("tool", "superseded"), ("user", None)]


async def test_require_approval_never_widens_the_gate(rig: Any, asgi_client: Any) -> None:
    # GIVEN a profile that requires approval for every tool but does not allow send_email
    r = rig(Turn(tool_calls=[EMAIL_CALL]), Turn(text=["I cannot send mail."]))
    r.profiles.catalog = chat_catalog(allowlist=["get_current_time", "update_state"], require_approval=["*"])
    async with asgi_client(r.services) as client:
        # WHEN the model calls send_email anyway
        status, events = await post(client, body("run-1"))
    # THEN the gate refused it as always: no interrupt, nothing sent, the model told it is not available
    assert status == 200 and events[-1]["outcome"] == {"type": "success"}
    assert r.outbox.sent == []
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert json.loads(result["content"])["error"]["code"] == "tool_not_allowed"
