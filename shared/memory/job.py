"""One memory extraction as a run: a thread's unprocessed messages, read by a hidden memory run.

:class:`MemoryExtraction` is what the coalescer (:mod:`shared.memory.coalescing`, fed by ``functions/memory_extract``
and the local runner) and the automation handler call. :meth:`MemoryExtraction.extract`

- skips threads the user does not own;
- skips, without a run, a thread with no new message written by the user (the cursor makes a second extraction
  over already processed messages a no-op);
- otherwise admits a run through :class:`~shared.runs.service.RunService` (so it has a run record, a run stream
  and a ``memory`` step on the thread stream) with ``claim_thread=False`` (it only reads the thread and must
  never make it busy) and the meta ``origin=automation, executor=memory,
  execution_profile_name=automation_memory_default, hidden_from_user=true``.

The caller chooses the run id: an id that already exists attaches to that run instead of extracting twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import TRANSIENT_MODEL_CODES, AgentError, NotFound
from shared.executors.context import RunContext
from shared.memory.branch_retraction import retract_abandoned
from shared.memory.executor import MAX_NEW_MESSAGES, MemoryExecutor, ThreadReader, is_human_message
from shared.memory.ports import Embedder, MemoryStore
from shared.models import ExecutionMeta, ExecutorKind, Identity, Origin, RunStatus, Thread, digest
from shared.ports import AuditLog
from shared.ports.model import ChatModel
from shared.profiles import Profiles
from shared.runs.service import RunService
from shared.tools.registry import ToolRegistry

logger = logging.getLogger(__name__)

MEMORY_PROFILE = "automation_memory_default"


class RunCompleted(BaseModel):
    """The ``detail`` of an ``agent.run.completed`` event (see :mod:`shared.memory.trigger`)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    tenant_id: str = Field(alias="tenantId", min_length=1)
    user_id: str = Field(alias="userId", min_length=1)
    thread_id: str = Field(alias="threadId", min_length=1)
    run_id: str = Field(alias="runId", min_length=1)
    executor: str = ExecutorKind.WORKER.value
    status: str | None = None


class BranchSwitched(BaseModel):
    """The ``detail`` of an ``agent.branch.switched`` event (see :mod:`shared.memory.trigger`)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    tenant_id: str = Field(alias="tenantId", min_length=1)
    user_id: str = Field(alias="userId", min_length=1)
    thread_id: str = Field(alias="threadId", min_length=1)
    leaf_message_id: str = Field(alias="leafMessageId", min_length=1)


class MemoryRunFailed(AgentError):
    """The memory run did not succeed; the caller reports the message as failed so it is delivered again."""

    code = "memory_run_failed"

    @property
    def retryable(self) -> bool:
        """True when the run failed for a passing reason (``TRANSIENT_MODEL_CODES``): a redelivery should succeed,
        and the extraction cursor did not move, so it covers the same messages."""
        return isinstance(self.details, dict) and bool(self.details.get("retryable"))


@dataclass(frozen=True)
class ExtractionReport:
    status: Literal["extracted", "skipped", "already_done", "scheduled"]
    reason: str
    run_id: str | None = None
    decisions: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "runId": self.run_id, "decisions": self.decisions}


# A role, not a port: the thread reads of a memory extraction (``ThreadStore`` has them).
class _ThreadStore(ThreadReader, Protocol):
    async def get_thread(self, identity: Identity, thread_id: str) -> Thread: ...


class MemoryExtraction:
    def __init__(
        self,
        *,
        runs: RunService,
        threads: _ThreadStore,
        audit: AuditLog,
        memories: MemoryStore,
        model: ChatModel,
        profiles: Profiles,
        confidence_threshold: float,
        tools: ToolRegistry | None = None,
        model_name: str | None = None,
        profile_name: str = MEMORY_PROFILE,
        embedder: Embedder | None = None,
    ) -> None:
        self._runs = runs
        self._threads = threads
        self._audit = audit
        self._memories = memories
        self._model = model
        self._profiles = profiles
        self._threshold = confidence_threshold
        self._tools = tools
        self._model_name = model_name
        self._profile_name = profile_name
        self._embedder = embedder

    async def owns_thread(self, identity: Identity, thread_id: str) -> bool:
        try:
            await self._threads.get_thread(identity, thread_id)
        except NotFound:
            return False
        return True

    async def pending_user_messages(self, tenant_id: str, thread_id: str) -> int:
        """How many messages written by the user wait after the extraction cursor (at most one run's read)."""
        cursor = await self._memories.get_cursor(tenant_id, thread_id)
        new = await self._threads.read_forward(tenant_id, thread_id, after_seq=cursor, limit=MAX_NEW_MESSAGES)
        return sum(1 for m in new if is_human_message(m))

    def _context(self, identity: Identity, thread_id: str, run_id: str, request_summary: str) -> RunContext:
        """The hidden memory run: the memory profile the user's runs get (after roll-out rules and ramps)."""
        choice = self._profiles.choose(self._profile_name, tenant_id=identity.tenant_id, user_id=identity.user_id)
        return RunContext(
            identity=identity,
            thread_id=thread_id,
            run_id=run_id,
            profile=choice.profile,
            meta=ExecutionMeta(
                origin=Origin.AUTOMATION,
                executor=ExecutorKind.MEMORY,
                execution_profile_name=choice.profile.name,
                hidden_from_user=True,
                rollout_id=choice.rollout_id,
                rollout_side=choice.rollout_side,
            ),
            request_summary=request_summary,
        )

    async def extract(
        self,
        identity: Identity,
        thread_id: str,
        *,
        run_id: str,
        request_summary: str = "memory extraction",
        deadline: float | None = None,
    ) -> ExtractionReport:
        """Run the memory executor on the thread's messages since the cursor; ``deadline``: the invocation's (epoch
        seconds; None: the function timeout from now), which the run ends before."""
        try:
            thread = await self._threads.get_thread(identity, thread_id)
        except NotFound:
            logger.warning("memory extraction for an unknown thread skipped", extra={"run_id": run_id})
            return ExtractionReport("skipped", "thread_not_found")
        await retract_abandoned(self._threads, self._memories, identity, thread, run_id=run_id)
        tenant = identity.tenant_id
        cursor = await self._memories.get_cursor(tenant, thread_id)
        new = await self._threads.read_forward(tenant, thread_id, after_seq=cursor, limit=MAX_NEW_MESSAGES)
        if not any(is_human_message(m) for m in new):
            if new:  # only assistant, tool or automation text since the cursor: nothing to read again later
                await self._memories.advance_cursor(tenant, thread_id, new[-1].seq)
            return ExtractionReport("skipped", "nothing_new")
        ctx = self._context(identity, thread_id, run_id, request_summary)
        executor = MemoryExecutor(
            self._model,
            self._threads,
            self._memories,
            self._audit,
            confidence_threshold=self._threshold,
            tools=self._tools,
            model_name=self._model_name,
            embedder=self._embedder,
        )
        run = await self._runs.run_inline(
            ctx,
            body_digest=digest(f"memory:{tenant}:{thread_id}:{run_id}"),
            new_messages=[],
            executor=executor,
            claim_thread=False,
            deadline=deadline,
        )
        result = executor.last_result
        if result is None:  # this run id already existed: another delivery ran (or runs) it
            if run.status is RunStatus.SUCCEEDED:
                return ExtractionReport("already_done", "run_exists", run_id)
            raise MemoryRunFailed(f"memory run {run_id} is {run.status.value}", details={"run_id": run_id})
        if run.status is not RunStatus.SUCCEEDED:
            raise MemoryRunFailed(
                f"memory run {run_id} ended {run.status.value}: {run.error_code or 'no error code'}",
                details={
                    "run_id": run_id,
                    "error_code": run.error_code,
                    "retryable": run.error_code in TRANSIENT_MODEL_CODES,
                },
            )
        return ExtractionReport("extracted", "ok", run_id, result.decisions())
