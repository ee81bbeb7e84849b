"""The services behind the thread and run routes, on the in-memory adapters: a thread's history hides hidden runs'
messages and pages with an opaque cursor; the audit view needs its scope; a chat run's context comes from the
request."""

from __future__ import annotations

import json

import pytest

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.auth import AUDIT_SCOPE
from shared.chat import CHAT_PROFILE, chat_context, chat_meta
from shared.errors import Forbidden, InvalidRequest
from shared.models import ExecutionMeta, Identity, Message, Role
from shared.profiles import ProfileChoice, default_catalog
from shared.runs import intake
from shared.runs.service import RunService
from shared.threads import ThreadService, decode_cursor, encode_cursor

USER = Identity(tenant_id="t", user_id="u")


def a_message(mid: str, *, hidden: bool = False) -> Message:
    return Message(id=mid, thread_id="th", role=Role.USER, content=mid, meta=ExecutionMeta(hidden_from_user=hidden))


@pytest.fixture
async def threads() -> ThreadService:
    store = InMemoryStore()
    await store.threads.open_thread(USER, "th")
    await store.threads.append_messages(USER, "th", [a_message("m1"), a_message("h1", hidden=True), a_message("m2")])
    runs = RunService(store.threads, store.runs, store.audit, InMemoryEventStream())
    return ThreadService(store.threads, store.runs, store.audit, runs)


async def test_history_hides_hidden_messages_and_pages_with_a_cursor(threads: ThreadService) -> None:
    first = await threads.history(USER, "th", limit=2, cursor=None)
    assert [m.id for m in first.messages] == ["m1"] and first.next_cursor is not None
    rest = await threads.history(USER, "th", limit=2, cursor=first.next_cursor)
    assert [m.id for m in rest.messages] == ["m2"] and rest.next_cursor is None


async def test_the_audit_view_needs_the_audit_scope_and_shows_hidden_messages(threads: ThreadService) -> None:
    with pytest.raises(Forbidden):
        await threads.audit(USER, "th", limit=10)
    auditor = Identity(tenant_id="t", user_id="u", scopes=[AUDIT_SCOPE])
    audit = await threads.audit(auditor, "th", limit=10)
    assert [m.id for m in audit.messages] == ["m1", "h1", "m2"]


def test_a_cursor_is_opaque_and_a_forged_one_is_refused() -> None:
    assert decode_cursor(encode_cursor(42)) == 42
    with pytest.raises(InvalidRequest):
        decode_cursor("bm90LWEtc2Vx")  # "not-a-seq"


def test_a_chat_context_comes_from_the_request() -> None:
    body = {
        "threadId": "th",
        "runId": "r1",
        "state": {},
        "messages": [{"id": "m1", "role": "user", "content": "first"}, {"id": "m2", "role": "user", "content": "last"}],
        "tools": [],
        "context": [{"description": "page", "value": "settings"}],
        "forwardedProps": {},
    }
    profile = default_catalog().get(CHAT_PROFILE)
    request = intake.read_run_request(json.dumps(body).encode(), chat_meta(ProfileChoice(profile)))
    ctx = chat_context(USER, request, ProfileChoice(profile))
    assert (ctx.thread_id, ctx.run_id, ctx.latest_user_text) == ("th", "r1", "last")
    assert ctx.meta.execution_profile_name == profile.name and not ctx.meta.hidden_from_user
    assert ctx.request_summary == "chat run, 2 messages from client" and len(ctx.context_notes) == 1
