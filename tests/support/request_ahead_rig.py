"""A run service whose admission write takes a known time, and a model that records when each request left and whether
its stream was read to the end or closed early: the rig of the tests of the first model request sent ahead."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.adapters.in_memory.threads import InMemoryThreads
from shared.executors.worker import WorkerExecutor
from shared.llm.types import ChatChunk, ChatRequest
from shared.models import Identity, Message, Role, Run
from shared.ports.threads import AdmittedRun
from shared.runs.service import RunService
from shared.tools.registry import ToolRegistry
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.worker_rig import USER, context

WRITE_S = 0.05


SLOW_MODEL_S = 1.0


class SlowThreads(InMemoryThreads):
    """The threads fake whose admission write (messages and run record) takes ``WRITE_S``, or fails after it."""

    written_at: list[float]
    fail = False

    async def admit_messages(
        self, identity: Identity, thread_id: str, messages: Sequence[Message], run: Run, **kwargs: Any
    ) -> AdmittedRun:
        await asyncio.sleep(WRITE_S)
        if self.fail:
            raise ConnectionError("the store went away")
        try:
            return await super().admit_messages(identity, thread_id, messages, run, **kwargs)
        finally:
            self.written_at.append(time.monotonic())


class SlowWrite(InMemoryStore):
    """The in-memory table whose admission write is slow (``SlowThreads``); ``fail``: it fails after the wait."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = SlowThreads(self.runs, self)
        self.slow.written_at = []
        self.threads = self.slow

    @property
    def written_at(self) -> list[float]:
        return self.slow.written_at

    @property
    def fail(self) -> bool:
        return self.slow.fail

    @fail.setter
    def fail(self, value: bool) -> None:
        self.slow.fail = value


class Watched(ScriptedModel):
    """Records when each request left and whether its stream was read to the end or closed before."""

    def __init__(self, *turns: Turn) -> None:
        super().__init__(*turns)
        self.sent_at: list[float] = []
        self.ended_at: list[float] = []
        self.closed_early = 0
        self.read_through = 0

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        self.sent_at.append(time.monotonic())
        ended = False
        try:
            async for chunk in super().stream(request):
                yield chunk
            ended = True
        finally:
            self.ended_at.append(time.monotonic())
            if ended:
                self.read_through += 1
            else:
                self.closed_early += 1


class Rig:
    def __init__(self, *turns: Turn) -> None:
        self.store = SlowWrite()
        self.stream = InMemoryEventStream()
        self.model = Watched(*turns)
        self.runs = RunService(self.store.threads, self.store.runs, self.store.audit, self.stream)

    async def admit(self, run_id: str, text: str, *, digest: str | None = None, message_id: str | None = None) -> Any:
        message = Message(id=message_id or f"m-{run_id}", thread_id="th-1", role=Role.USER, content=text)
        worker = WorkerExecutor(self.model, self.store.threads, self.store.audit, ToolRegistry())
        return await self.runs.admit(
            context(run_id, text), body_digest=digest or run_id, new_messages=[message], executor=worker, reconcile=True
        )

    async def answer(self, run_id: str) -> str:
        events = [e.event async for e in self.runs.tail_run(USER.tenant_id, run_id) if e is not None]
        await self.runs.wait_idle()
        assert events[-1]["type"] == "RUN_FINISHED", events
        return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
