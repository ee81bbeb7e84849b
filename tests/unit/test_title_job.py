"""The title job on the fakes (in-memory store, stream and usage counters) with a scripted model: the title is
generated once after the first exchange, in the user's language, never over a client's title, never before the
answer has finished; the fallback when the model fails; its usage counted as ``title``; the ``thread_title`` event
reaching a follower of the thread. The memory function's handler runs the same job on moto and a real
redis-server in tests/integration/test_thread_titles.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.adapters.in_memory.usage import InMemoryUsageCounters
from shared.errors import ModelError
from shared.limits.config import parse_limits
from shared.limits.gate import LimitGate
from shared.llm.types import ChatChunk, ChatRequest
from shared.memory.job import RunCompleted
from shared.models import ExecutionMeta, Identity, Message, Role, utc_now
from shared.ports import StreamEntry
from shared.profiles import default_catalog
from shared.runs.service import RunService
from shared.stream_keys import thread_stream_key
from shared.thread_fields import check_changes
from shared.threads import ThreadService
from shared.titles.job import ThreadTitler
from shared.titles.naming import SYSTEM_PROMPT, TITLE_MAX_CHARS, TITLE_MAX_TOKENS, clean_title, fallback_title
from tests.support.scripted_model import ScriptedModel, Turn

USER = Identity(tenant_id="t1", user_id="u1")
QUESTION = "Wie lange dauert die Zugfahrt von Berlin nach Lissabon, und wo muss ich umsteigen?"
ANSWER = "Mit dem Zug brauchst du etwa zwei Tage: über Paris und Hendaye, dann mit dem Nachtzug weiter."


@dataclass
class Rig:
    store: InMemoryStore
    stream: InMemoryEventStream
    counters: InMemoryUsageCounters
    model: ScriptedModel
    titler: ThreadTitler


def rig(*turns: Turn, limits: str = '{"user": {"tokensPerDay": 100000}}', timeout_s: float = 5.0) -> Rig:
    store, stream, counters = InMemoryStore(), InMemoryEventStream(), InMemoryUsageCounters()
    model = ScriptedModel(*turns)
    gate = LimitGate(counters, parse_limits(limits))
    titler = ThreadTitler(
        threads=store.threads,
        model=model,
        profiles=default_catalog(),
        stream=stream,
        limits=gate,
        timeout_s=timeout_s,
    )
    return Rig(store, stream, counters, model, titler)


async def a_thread(store: InMemoryStore, *, answered: bool = True, thread_id: str = "th") -> None:
    """A thread whose first run stored the question and (``answered``) its answer."""
    await store.threads.open_thread(USER, thread_id)
    messages = [Message(id="m1", thread_id=thread_id, role=Role.USER, content=QUESTION, run_id="r1")]
    if answered:
        messages.append(Message(id="m2", thread_id=thread_id, role=Role.ASSISTANT, content=ANSWER, run_id="r1"))
    await store.threads.append_messages(USER, thread_id, messages)


def finished(run_id: str = "r1", status: str = "succeeded", thread_id: str = "th") -> RunCompleted:
    return RunCompleted(tenantId="t1", userId="u1", threadId=thread_id, runId=run_id, status=status)


async def title_events(stream: InMemoryEventStream, thread_id: str = "th") -> list[dict[str, object]]:
    entries = await stream.read_after(thread_stream_key("t1", thread_id), "0-0", block_ms=0)
    return [e.event for e in entries if e.event.get("type") == "CUSTOM"]


async def test_the_first_exchange_is_titled_once_in_the_users_language_and_counted_as_title_usage() -> None:
    r = rig(Turn(text=["„Zugreise Berlin–Lissabon“"], input_tokens=180, output_tokens=9))
    # GIVEN a thread whose first exchange (a German question, its answer) has finished
    await a_thread(r.store)
    # WHEN its run-completed event comes, then the next turn's
    first = await r.titler.on_run_completed(finished("r1"))
    second = await r.titler.on_run_completed(finished("r2"))
    # THEN the model's German title is stored, marked generated, and published once; the second event asked nothing
    assert (first.status, first.source, first.published) == ("titled", "model", True)
    assert (second.status, second.reason) == ("skipped", "has_title")
    thread = await r.store.threads.get_thread(USER, "th")
    assert (thread.title, thread.title_source) == ("Zugreise Berlin–Lissabon", "generated")
    assert (await title_events(r.stream)) == [
        {"type": "CUSTOM", "name": "thread_title", "value": {"threadId": "th", "title": "Zugreise Berlin–Lissabon"}}
    ]
    # AND the one request asked for a short title in the language of the user's message, quoting the question
    [request] = r.model.requests
    assert request.model == "qwen3.5-flash" and request.max_tokens == TITLE_MAX_TOKENS and request.thinking == "off"
    assert request.messages[0].content == SYSTEM_PROMPT and "in the language of the user's message" in SYSTEM_PROMPT
    assert QUESTION in (request.messages[1].content or "") and request.tools == ()
    # AND its tokens are the user's usage of a kind of its own, under the model's id
    usage = await r.counters.usage("t1", "u1", utc_now().strftime("%Y-%m"))
    assert usage.runs == {"title": 1}
    assert (usage.tokens["qwen3.5-flash"].input, usage.tokens["qwen3.5-flash"].output) == (180, 9)


async def test_a_thread_the_client_titled_is_never_titled_and_the_model_is_not_asked() -> None:
    r = rig()
    await a_thread(r.store)
    await r.store.threads.update_thread(USER, "th", check_changes({"title": "Urlaub"}))
    report = await r.titler.on_run_completed(finished())
    assert (report.status, report.reason) == ("skipped", "has_title")
    assert r.model.requests == [] and (await title_events(r.stream)) == []
    assert (await r.store.threads.get_thread(USER, "th")).title == "Urlaub"


class PatchingModel(ScriptedModel):
    """A model during whose answer the client renames the thread (a PATCH that lands before the title's write)."""

    def __init__(self, store: InMemoryStore, *turns: Turn) -> None:
        super().__init__(*turns)
        self._store = store

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        await self._store.threads.update_thread(USER, "th", check_changes({"title": "Mein Titel"}))
        async for chunk in super().stream(request):
            yield chunk


async def test_a_client_title_set_while_the_title_is_generated_wins() -> None:
    r = rig()
    model = PatchingModel(r.store, Turn(text=["Zugreise nach Lissabon"]))
    titler = ThreadTitler(threads=r.store.threads, model=model, profiles=default_catalog(), stream=r.stream)
    await a_thread(r.store)
    report = await titler.on_run_completed(finished())
    assert (report.status, report.reason) == ("skipped", "has_title")
    thread = await r.store.threads.get_thread(USER, "th")
    assert (thread.title, thread.title_source) == ("Mein Titel", "client")
    assert (await title_events(r.stream)) == []


@pytest.mark.parametrize("status", ["failed", "cancelled"])
async def test_a_run_that_did_not_succeed_titles_nothing(status: str) -> None:
    r = rig()
    await a_thread(r.store)
    report = await r.titler.on_run_completed(finished(status=status))
    assert (report.status, report.reason) == ("skipped", "run_not_succeeded")
    assert r.model.requests == [] and (await r.store.threads.get_thread(USER, "th")).title is None


async def test_a_question_without_a_stored_answer_is_not_titled_until_the_answer_is_there() -> None:
    r = rig(Turn(text=["Zugreise nach Lissabon"]))
    # GIVEN a thread holding only the question (its answer not stored)
    await a_thread(r.store, answered=False)
    # WHEN its run's event comes
    early = await r.titler.on_run_completed(finished())
    # THEN nothing is asked or written
    assert (early.status, early.reason) == ("skipped", "no_answer")
    assert r.model.requests == [] and (await r.store.threads.get_thread(USER, "th")).title is None
    # AND once the answer is stored, the next event titles it
    answer = Message(id="m2", thread_id="th", role=Role.ASSISTANT, content=ANSWER, run_id="r2")
    await r.store.threads.append_messages(USER, "th", [answer])
    assert (await r.titler.on_run_completed(finished("r2"))).status == "titled"


async def test_a_hidden_runs_message_is_not_an_answer() -> None:
    r = rig()
    await a_thread(r.store, answered=False)
    hidden = Message(
        id="m2", thread_id="th", role=Role.ASSISTANT, content="x", meta=ExecutionMeta(hidden_from_user=True)
    )
    await r.store.threads.append_messages(USER, "th", [hidden])
    assert (await r.titler.on_run_completed(finished())).reason == "no_answer"


@pytest.mark.parametrize(
    "turn",
    [
        Turn(raise_error=ModelError("the model endpoint is down", code="model_unavailable")),
        Turn(text=["  \n"]),
        Turn(text=["Zugreise"], delay_s=1.0),
    ],
    ids=["model-error", "empty-answer", "timeout"],
)
async def test_the_fallback_is_the_first_message_cut_at_a_word_boundary(turn: Turn) -> None:
    r = rig(turn, timeout_s=0.3)
    await a_thread(r.store)
    report = await r.titler.on_run_completed(finished())
    assert (report.status, report.source) == ("titled", "fallback")
    title = (await r.store.threads.get_thread(USER, "th")).title
    assert title == "Wie lange dauert die Zugfahrt von Berlin nach Lissabon…"
    assert len(title) <= TITLE_MAX_CHARS and QUESTION.startswith(title.removesuffix("…"))
    assert (await title_events(r.stream))[0]["value"] == {"threadId": "th", "title": title}


async def test_over_the_token_budget_the_fallback_is_written_without_asking_the_model() -> None:
    r = rig(limits='{"user": {"tokensPerDay": 50}}')
    await a_thread(r.store)
    report = await r.titler.on_run_completed(finished())
    assert (report.status, report.source) == ("titled", "fallback")
    assert r.model.requests == []
    assert (await r.counters.usage("t1", "u1", utc_now().strftime("%Y-%m"))).runs == {}


async def test_the_thread_title_event_reaches_a_follower_of_the_thread() -> None:
    r = rig(Turn(text=["Zugreise nach Lissabon"]))
    await a_thread(r.store)
    runs = RunService(r.store.threads, r.store.runs, r.store.audit, r.stream)
    threads = ThreadService(r.store.threads, r.store.runs, r.store.audit, runs)
    # GIVEN a client following the thread's live events (GET /threads/{id}/events), from now
    entries = await threads.events(USER, "th", after=None, deadline=None)

    async def first_custom() -> StreamEntry:
        async for entry in entries:
            if entry is not None and entry.event["type"] == "CUSTOM":
                return entry
        raise AssertionError("the follower's stream ended without the title")

    following = asyncio.create_task(first_custom())
    await asyncio.sleep(0.05)
    # WHEN the title job runs
    await r.titler.on_run_completed(finished())
    # THEN the follower receives the thread_title event
    entry = await asyncio.wait_for(following, 5)
    assert entry.event == {
        "type": "CUSTOM",
        "name": "thread_title",
        "value": {"threadId": "th", "title": "Zugreise nach Lissabon"},
    }


@pytest.mark.parametrize(
    ("answer", "title"),
    [
        ('Title: "Trip to Lisbon."', "Trip to Lisbon"),
        ("**Reise nach Lissabon**\n\nDas ist ein guter Titel.", "Reise nach Lissabon"),
        ("《去里斯本的火车》。", "去里斯本的火车"),
        ("<think>The user asks about trains.</think>\nTrains to Lisbon", "Trains to Lisbon"),
        ("A " + "very " * 30 + "long title", "A" + " very" * 11 + "…"),
        ("<think>unterminated", ""),
        ('""', ""),
    ],
)
def test_clean_title_keeps_the_title_alone_and_caps_it(answer: str, title: str) -> None:
    assert clean_title(answer) == title
    assert len(clean_title(answer)) <= TITLE_MAX_CHARS


def test_the_fallback_of_a_cjk_message_without_spaces_is_cut_at_the_cap() -> None:
    message = "请帮我规划一次从柏林到里斯本的火车旅行，" * 5
    assert fallback_title(message) == message[: TITLE_MAX_CHARS - 1] + "…"
    assert fallback_title("  short\n question ") == "short question"
