"""A worker admitted by the run service on in-memory parts, with a memory reader that counts its reads (and can fail
chosen ones) and a store that counts its history reads: the rig of the tests of what the worker reads beside
admission."""

from __future__ import annotations

import asyncio
from typing import Any

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.adapters.in_memory.threads import InMemoryThreads
from shared.executors.context import RunContext
from shared.executors.worker import WorkerExecutor
from shared.models import ExecutionMeta, Identity, Message, Origin, Role
from shared.profiles import default_catalog
from shared.runs.service import RunService
from shared.tools.registry import ToolRegistry
from tests.support.scripted_model import ScriptedModel, Turn

USER = Identity(tenant_id="t1", user_id="u1")
NOTE = "Known about the user: likes green tea."


class Notes:
    """A MemoryReader that counts its reads, can fail its first ones (``failures``) or chosen ones (``failing_calls``,
    numbered from 1), and says when a read has ended. With ``about_query`` each note names the message it was read
    for, so a test can tell whose note reached the model."""

    def __init__(self, failures: int = 0, *, failing_calls: frozenset[int] = frozenset(), about_query: bool = False):
        self.calls = 0
        self.failures = failures
        self.failing_calls = failing_calls
        self.about_query = about_query
        self.finished = 0

    async def note(self, identity: Identity, query: str, *, limit: int) -> str:
        self.calls += 1
        try:
            await asyncio.sleep(0.01)
            if self.calls <= self.failures or self.calls in self.failing_calls:
                raise ConnectionError("memory store unreachable")
            return f"{NOTE} Read for: {query}" if self.about_query else NOTE
        finally:
            self.finished += 1


class CountingThreads(InMemoryThreads):
    """The threads fake, counting its backward reads."""

    read_backs = 0

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        self.read_backs += 1
        return await super().read_back(tenant_id, thread_id, before_seq=before_seq, limit=limit)


class CountingStore(InMemoryStore):
    """The in-memory table whose threads fake counts its backward reads (``read_backs``)."""

    def __init__(self) -> None:
        super().__init__()
        self.counting = CountingThreads(self.runs, self)
        self.threads = self.counting

    @property
    def read_backs(self) -> int:
        return self.counting.read_backs

    @read_backs.setter
    def read_backs(self, value: int) -> None:
        self.counting.read_backs = value


def context(run_id: str, text: str) -> RunContext:
    return RunContext(
        identity=USER,
        thread_id="th-1",
        run_id=run_id,
        profile=default_catalog().get("chat_default"),
        meta=ExecutionMeta(origin=Origin.CHAT),
        latest_user_text=text,
    )


async def start(runs: RunService, worker: WorkerExecutor, run_id: str, text: str) -> Any:
    message = Message(id=f"m-{run_id}", thread_id="th-1", role=Role.USER, content=text)
    return await runs.admit(
        context(run_id, text), body_digest=run_id, new_messages=[message], executor=worker, reconcile=True
    )


def rig(notes: Notes, *turns: Turn) -> tuple[CountingStore, ScriptedModel, RunService, Any]:
    store = CountingStore()
    model = ScriptedModel(*turns)
    runs = RunService(store.threads, store.runs, store.audit, InMemoryEventStream())
    return store, model, runs, lambda: WorkerExecutor(model, store.threads, store.audit, ToolRegistry(), memories=notes)
