"""The title job: after a thread's first exchange, name the thread, once, unless its client named it.

It rides on the memory function's ``agent.run.completed`` events (``functions/memory_extract``; ``make dev``: the
in-process memory worker), so it never runs on the run path and never delays a run. For each event,
:meth:`ThreadTitler.on_run_completed`

1. skips events about runs that are not worker runs or did not succeed (the answer has not finished);
2. skips a thread that has a title, or whose client set or removed one (``thread_fields.may_generate_title``): after
   the first title this is all a later turn costs, one read of the thread item;
3. reads the thread's first messages: the first message the person wrote, and an answer to it stored by a run;
   without an answer, no title (a later turn's event tries again);
4. reserves the call's tokens on the user's budgets (when ``LIMITS`` is set), asks the memory profile's model
   (:mod:`shared.titles.naming`: a small prompt, ``max_tokens`` capped), and settles what it used as usage of its
   own kind, ``title`` (``runs.title`` in the usage API, its tokens under the model's id);
5. falls back to the first user message cut at a word boundary when the model fails, times out, answers nothing,
   or the budget refuses the call;
6. writes the title with the store's condition (no title, none set by the client: a ``PATCH`` made meanwhile wins);
7. publishes ``CUSTOM`` ``thread_title`` (``{"threadId", "title"}``) on the thread's stream, to its followers.

It never raises: a failure is logged and reported, the thread stays untitled, and the next finished turn's event
tries again (the store's condition makes a second title impossible either way).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ag_ui.core import CustomEvent

from shared.errors import AgentError, NotFound
from shared.llm.types import ChatRequest, Finished, TextDelta
from shared.memory.executor import ThreadReader, is_human_message
from shared.memory.job import MEMORY_PROFILE, RunCompleted
from shared.models import ExecutorKind, Identity, Message, Role, RunStatus, Thread, Usage, digest
from shared.ports import EventStream
from shared.ports.model import ChatModel
from shared.profiles import Profiles
from shared.stream_keys import thread_stream_key
from shared.thread_fields import may_generate_title
from shared.titles.naming import clean_title, fallback_title, title_request
from shared.tokens import MESSAGE_OVERHEAD_TOKENS, count_tokens

if TYPE_CHECKING:
    from shared.limits.gate import LimitGate

logger = logging.getLogger(__name__)

TITLE_USAGE_KIND = "title"
"""The kind a title's usage is counted under (as ``worker`` and ``memory`` for runs)."""
THREAD_TITLE_EVENT = "thread_title"
"""The ``CUSTOM`` event's ``name`` (docs/protocols/agent/sse-events.md)."""
TITLE_TIMEOUT_S = 20.0
"""The model call's bound; past it the fallback title is written."""
FIRST_MESSAGES = 20
"""Messages read from the thread's start to find the first question and its answer (one store request)."""


# A role, not a port: the thread reads and the one write of the title job (``ThreadStore`` has them).
class _ThreadStore(ThreadReader, Protocol):
    async def get_thread(self, identity: Identity, thread_id: str) -> Thread: ...

    async def set_generated_title(self, identity: Identity, thread_id: str, title: str) -> bool: ...


@dataclass(frozen=True)
class TitleReport:
    status: Literal["titled", "skipped", "failed"]
    reason: str
    source: Literal["model", "fallback"] | None = None
    published: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "source": self.source, "published": self.published}


@dataclass(frozen=True)
class FirstExchange:
    question: str
    answer: str


class ThreadTitler:
    """Names a thread after its first exchange (the module docstring says how)."""

    def __init__(
        self,
        *,
        threads: _ThreadStore,
        model: ChatModel,
        profiles: Profiles,
        stream: EventStream,
        limits: LimitGate | None = None,
        profile_name: str = MEMORY_PROFILE,
        timeout_s: float = TITLE_TIMEOUT_S,
    ) -> None:
        self._threads = threads
        self._model = model
        self._profiles = profiles
        self._stream = stream
        self._limits = limits
        self._profile_name = profile_name
        self._timeout_s = timeout_s

    async def on_run_completed(self, event: RunCompleted) -> TitleReport:
        """Title the event's thread if it is time to; never raises (a failure is logged and reported)."""
        try:
            return await self._title(event)
        except Exception as exc:
            logger.exception("thread title failed", extra={"thread_id": event.thread_id, "run_id": event.run_id})
            return TitleReport("failed", type(exc).__name__)

    async def _title(self, event: RunCompleted) -> TitleReport:
        if event.executor != ExecutorKind.WORKER.value:
            return TitleReport("skipped", "not_a_worker_run")
        if event.status != RunStatus.SUCCEEDED.value:
            return TitleReport("skipped", "run_not_succeeded")
        identity = Identity(tenant_id=event.tenant_id, user_id=event.user_id)
        try:
            thread = await self._threads.get_thread(identity, event.thread_id)
        except NotFound:
            return TitleReport("skipped", "thread_not_found")
        if not may_generate_title(thread):
            return TitleReport("skipped", "has_title")
        exchange = first_exchange(
            await self._threads.read_forward(event.tenant_id, event.thread_id, after_seq=0, limit=FIRST_MESSAGES)
        )
        if exchange is None:
            return TitleReport("skipped", "no_answer")
        title, source = await self._name(identity, event.thread_id, exchange)
        if not await self._threads.set_generated_title(identity, event.thread_id, title):
            return TitleReport("skipped", "has_title", source)  # a client's PATCH came first
        published = await self._publish(event.tenant_id, event.thread_id, title)
        return TitleReport("titled", "ok", source, published)

    async def _name(
        self, identity: Identity, thread_id: str, exchange: FirstExchange
    ) -> tuple[str, Literal["model", "fallback"]]:
        """The model's title, or the fallback; the call's usage settled as ``title`` when limits are on."""
        profile = self._profiles.resolve(self._profile_name, tenant_id=identity.tenant_id, user_id=identity.user_id)
        request = title_request(profile.model.name, exchange.question, exchange.answer)
        reservation_id = f"title_{digest(f'{identity.tenant_id}/{thread_id}')[:16]}"
        if self._limits is not None:
            try:
                self._limits.hold(
                    await self._limits.reserve(
                        identity, reservation_id, interactive=False, estimate=estimate_tokens(request)
                    )
                )
            except AgentError as exc:  # over a budget (or the limits unreachable): no call, the fallback
                logger.info("thread title without a model call", extra={"thread_id": thread_id, "reason": exc.code})
                return fallback_title(exchange.question), "fallback"
        usage: list[Usage] = []
        try:
            text = await self._ask(request, usage)
        except Exception as exc:
            logger.warning("title model call failed", extra={"thread_id": thread_id, "error": type(exc).__name__})
            text = ""
        finally:
            if self._limits is not None:
                await self._limits.settle(identity.tenant_id, reservation_id, usage, TITLE_USAGE_KIND)
        title = clean_title(text)
        logger.info(
            "thread title",
            extra={
                "thread_id": thread_id,
                "source": "model" if title else "fallback",
                "tokens": [{"input": u.input_tokens, "output": u.output_tokens} for u in usage],
            },
        )
        return (title, "model") if title else (fallback_title(exchange.question), "fallback")

    async def _ask(self, request: ChatRequest, usage: list[Usage]) -> str:
        """The model's answer text, within the timeout; its usage appended to ``usage`` when the stream ends."""
        parts: list[str] = []
        async with asyncio.timeout(self._timeout_s):
            async for chunk in self._model.stream(request):
                if isinstance(chunk, TextDelta):
                    parts.append(chunk.text)
                elif isinstance(chunk, Finished) and chunk.usage is not None:
                    usage.append(chunk.usage)
        return "".join(parts)

    async def _publish(self, tenant_id: str, thread_id: str, title: str) -> bool:
        """``CUSTOM`` ``thread_title`` on the thread's stream; a stream failure is logged (the title is stored)."""
        event = CustomEvent(name=THREAD_TITLE_EVENT, value={"threadId": thread_id, "title": title})
        try:
            await self._stream.append(
                thread_stream_key(tenant_id, thread_id),
                event.model_dump(mode="json", by_alias=True, exclude_none=True),
            )
        except Exception as exc:
            logger.warning("thread title not published", extra={"thread_id": thread_id, "error": type(exc).__name__})
            return False
        return True


def first_exchange(messages: list[Message]) -> FirstExchange | None:
    """The first message the person wrote in ``messages`` (the thread's first, oldest first) and the start of the
    answer to it; None when no visible assistant message follows it yet."""
    question = next((m for m in messages if is_human_message(m) and m.content.strip()), None)
    if question is None:
        return None
    answers = [m for m in messages if m.seq > question.seq and m.role is Role.ASSISTANT and not m.meta.hidden_from_user]
    if not answers:
        return None
    return FirstExchange(question.content, next((m.content for m in answers if m.content.strip()), ""))


def estimate_tokens(request: ChatRequest) -> int:
    """What a title call is reserved: its prompt's tokens (the Qwen tokenizer) plus its output cap."""
    prompt = sum(count_tokens(m.content or "") + MESSAGE_OVERHEAD_TOKENS for m in request.messages)
    return prompt + (request.max_tokens or 0)
