"""Runs a fired automation task: the task's profile, on the task's thread, as an ``origin: automation`` run.

A fire over a token budget (its run's admission refused with ``quota_exceeded``: ``shared.limits``) is skipped: an
``automation_fire_skipped`` audit record and an ``AutomationFiresSkipped`` metric, no run, no error (a retry would
be refused the same way); the task's next fire runs normally.

Exactly-once per fire: the run id is derived from (task id, fire id), and the run ledger keeps one run per id, so
a fire delivered twice (a Scheduler retry, a Lambda async retry) attaches to the first run instead of running again.
The fire id is the Scheduler's scheduled time when the input carries it: it is the same for every attempt of one
fire, whereas the execution id changes per attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic import ValidationError

from shared.automation.models import AutomationTask, TaskRef
from shared.automation.ports import AutomationStore
from shared.errors import Conflict, InvalidRequest, TooManyRequests
from shared.executors.context import RunContext
from shared.limits.metrics import AUTOMATION_FIRES_SKIPPED, emit_limit_metric
from shared.models import (
    AuditRecord,
    ExecutionMeta,
    ExecutorKind,
    Identity,
    Message,
    Origin,
    Role,
    Run,
    digest,
    utc_now,
)
from shared.ports import AuditLog, RunLedger
from shared.profiles import Profiles
from shared.runs.service import Executor, RunService
from shared.tenancy import ALL_TENANTS, TENANT_NOT_SERVED, ServedTenants, count_dropped_event

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------------------
# Reading a fire
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fire:
    """One delivery of a schedule: the task it names and the id shared by every delivery of the same fire."""

    ref: TaskRef
    fire_id: str


def _is_envelope(event: Mapping[str, Any]) -> bool:
    return "detail" in event and ("detail-type" in event or "source" in event)


def parse_fire(event: Mapping[str, Any], *, request_id: str | None = None) -> Fire:
    """Read the Scheduler's static input, or an EventBridge scheduled-event envelope with the task ref in
    ``detail``.

    The fire id, most stable first: the scheduled time (same for every retry of a fire), the envelope's ``time``
    (an EventBridge rule's scheduled time), the Scheduler's execution id or the envelope's event id, and last the
    Lambda request id (which Lambda keeps across its own async retries).
    """
    envelope_time: str | None = None
    envelope_id: str | None = None
    payload: Any = event
    if _is_envelope(event):
        payload = event.get("detail")
        envelope_time = event.get("time") or None
        envelope_id = event.get("id") or None
    if not isinstance(payload, Mapping):
        raise InvalidRequest("the scheduled input is not a JSON object", code="invalid_fire")
    try:
        ref = TaskRef.model_validate(dict(payload))
    except ValidationError as exc:
        raise InvalidRequest(
            "the scheduled input does not name a task",
            code="invalid_fire",
            details=[
                {"loc": list(err["loc"]), "msg": err["msg"], "type": err["type"]}
                for err in exc.errors(include_url=False, include_context=False, include_input=False)
            ],
        ) from exc
    for kind, value in (
        ("scheduled", ref.scheduled_time),
        ("scheduled", envelope_time),
        ("execution", ref.execution_id),
        ("event", envelope_id),
        ("request", request_id),
    ):
        if value:
            return Fire(ref=ref, fire_id=f"{kind}:{value}")
    raise InvalidRequest(
        "the scheduled input carries no fire id (scheduledTime, executionId) and there is no request id",
        code="invalid_fire",
    )


def fire_run_id(task_id: str, fire_id: str) -> str:
    """The run id of one fire of a task: deterministic, so a second delivery finds the first run."""
    return f"auto_{digest(f'{task_id}|{fire_id}')}"


# ----------------------------------------------------------------------------------------------------------
# Running it
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FireOutcome:
    task_id: str
    status: str
    """The run's status, or ``task_not_found`` / ``disabled`` / ``tenant_not_served`` when nothing ran."""
    run_id: str | None = None
    duplicate: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"taskId": self.task_id, "status": self.status, "runId": self.run_id, "duplicate": self.duplicate}


ExecutorFor = Callable[[ExecutorKind], Executor]

MEMORY_LEASE_S = 900
"""How long a memory run holds its thread's lease: above the automation function's timeout (600 s), as the
coalescer's lease is above the memory function's, so a crashed run's lease ends."""


# A role, not a port: the two PendingExtractions methods the runner needs (every PendingExtractions has them).
class MemoryRunLeases(Protocol):
    """The per-thread memory-run lease (``shared.memory.ports.PendingExtractions``)."""

    async def hold(
        self, tenant_id: str, user_id: str, thread_id: str, run_id: str, *, now: datetime, lease_until: datetime
    ) -> bool: ...

    async def release(self, tenant_id: str, thread_id: str, run_id: str) -> None: ...


class AutomationRunner:
    def __init__(
        self,
        tasks: AutomationStore,
        runs: RunService,
        ledger: RunLedger,
        audit: AuditLog,
        profiles: Profiles,
        executor_for: ExecutorFor,
        memory_leases: MemoryRunLeases | None = None,
        served: ServedTenants | None = None,
    ) -> None:
        self._served = served if served is not None else ServedTenants([ALL_TENANTS])
        self._tasks = tasks
        self._runs = runs
        self._ledger = ledger
        self._audit = audit
        self._profiles = profiles
        self._executor_for = executor_for
        self._memory_leases = memory_leases

    async def handle_event(
        self, event: Mapping[str, Any], *, request_id: str | None = None, deadline: float | None = None
    ) -> FireOutcome:
        """``deadline``: the invocation's (epoch seconds; None: the function timeout from now)."""
        fire = parse_fire(event, request_id=request_id)
        return await self.fire(fire.ref, fire.fire_id, deadline=deadline)

    async def _load(self, ref: TaskRef) -> AutomationTask | None:
        if ref.tenant_id and ref.user_id:
            return await self._tasks.get(ref.tenant_id, ref.user_id, ref.task_id)
        return await self._tasks.find(ref.task_id)

    async def fire(self, ref: TaskRef, fire_id: str, *, deadline: float | None = None) -> FireOutcome:
        """Run one fire of a task and wait for the run to end.

        A task that is gone (deleted while a fire was in flight) or disabled runs nothing and is not an error:
        retrying would not change it. A busy thread (a chat run in progress; for a memory task, a memory run in
        flight) raises ``Conflict`` so that the delivery is retried later; no run was stored, so the retry runs it.
        """
        log = {"task_id": ref.task_id, "fire_id": fire_id, "execution_id": ref.execution_id}
        if ref.tenant_id and not self._served.serves(ref.tenant_id):
            # Another stack's tenant (SERVED_TENANTS): nothing read or written (the schedule's input names it).
            return self._dropped(ref.task_id, ref.tenant_id, log)
        task = await self._load(ref)
        if task is None:
            logger.warning("automation fire for a task that does not exist", extra=log)
            return FireOutcome(task_id=ref.task_id, status="task_not_found")
        if not self._served.serves(task.tenant_id):  # an input without its tenant: known once the task is read
            return self._dropped(task.task_id, task.tenant_id, log)
        if not task.enabled:
            logger.info("automation fire for a disabled task skipped", extra=log)
            return FireOutcome(task_id=task.task_id, status="disabled")
        ctx = self._context(task, fire_id)
        is_worker = ctx.profile.executor is ExecutorKind.WORKER
        new_messages = [self._prompt_message(task, ctx.run_id, fire_id, ctx.meta)] if is_worker else []
        duplicate = await self._ledger.get_run(task.tenant_id, ctx.run_id) is not None
        try:
            run = await self._run(ctx, digest(f"{task.task_id}|{fire_id}"), new_messages, deadline)
        except TooManyRequests as exc:
            await self._record_skipped(task, fire_id, ctx, exc)
            logger.warning("automation fire skipped over a limit", extra={**log, "code": exc.code})
            return FireOutcome(task_id=task.task_id, status="skipped_over_limit", run_id=None)
        await self._record_fire(task, ref, fire_id, ctx, run, duplicate=duplicate)
        logger.info(
            "automation fire handled",
            extra={**log, "run_id": ctx.run_id, "status": run.status.value, "duplicate": duplicate},
        )
        return FireOutcome(task_id=task.task_id, status=run.status.value, run_id=ctx.run_id, duplicate=duplicate)

    @staticmethod
    def _dropped(task_id: str, tenant_id: str, log: dict[str, Any]) -> FireOutcome:
        """A fire of a tenant this stack does not serve: dropped, counted, and not an error (a retry changes
        nothing)."""
        logger.warning("automation fire of a tenant not served here dropped", extra={**log, "tenant_id": tenant_id})
        count_dropped_event("automation")
        return FireOutcome(task_id=task_id, status=TENANT_NOT_SERVED)

    def _context(self, task: AutomationTask, fire_id: str) -> RunContext:
        """The run of this fire: the task's profile (after rollout), on the task's thread, hidden if the task is."""
        choice = self._profiles.choose(
            task.execution_profile_name,
            tenant_id=task.tenant_id,
            user_id=task.owner_user_id,
            task_type=task.task_type,
        )
        profile = choice.profile
        meta = ExecutionMeta(
            origin=Origin.AUTOMATION,
            executor=profile.executor,
            execution_profile_name=profile.name,
            hidden_from_user=task.hidden_from_user,
            rollout_id=choice.rollout_id,
            rollout_side=choice.rollout_side,
        )
        return RunContext(
            identity=Identity(tenant_id=task.tenant_id, user_id=task.owner_user_id),
            thread_id=task.thread_id,
            run_id=fire_run_id(task.task_id, fire_id),
            profile=profile,
            meta=meta,
            # Memory profiles pin their own two tools; a worker task uses only the tools it declares.
            declared_tools=(frozenset(task.tools) if profile.executor is ExecutorKind.WORKER or task.tools else None),
            request_summary=f"automation task {task.task_id}, {fire_id}",
        )

    async def _record_fire(
        self, task: AutomationTask, ref: TaskRef, fire_id: str, ctx: RunContext, run: Run, *, duplicate: bool
    ) -> None:
        await self._audit.record(
            AuditRecord(
                kind="automation_fire",
                tenant_id=task.tenant_id,
                thread_id=task.thread_id,
                run_id=ctx.run_id,
                user_id=task.owner_user_id,
                details={
                    "task_id": task.task_id,
                    "fire_id": fire_id,
                    "execution_id": ref.execution_id,
                    "attempt_number": ref.attempt_number,
                    "execution_profile_name": ctx.profile.name,
                    "executor": ctx.profile.executor.value,
                    "hidden_from_user": task.hidden_from_user,
                    "duplicate_delivery": duplicate,
                    "run_status": run.status.value,
                },
            )
        )

    async def _record_skipped(self, task: AutomationTask, fire_id: str, ctx: RunContext, exc: TooManyRequests) -> None:
        details = exc.details if isinstance(exc.details, dict) else {}
        emit_limit_metric(AUTOMATION_FIRES_SKIPPED, limit=str(details.get("kind")), scope=str(details.get("scope")))
        await self._audit.record(
            AuditRecord(
                kind="automation_fire_skipped",
                tenant_id=task.tenant_id,
                thread_id=task.thread_id,
                run_id=ctx.run_id,
                user_id=task.owner_user_id,
                details={"task_id": task.task_id, "fire_id": fire_id, "code": exc.code, "limit": details},
            )
        )

    async def _run(
        self, ctx: RunContext, body_digest: str, new_messages: list[Message], deadline: float | None
    ) -> Run:
        """A worker run claims the thread (``thread_busy`` while a chat run holds it). A memory run only reads
        the thread, so it does not claim it: it holds the thread's memory-run lease instead, the one the
        coalescer's extractions take, so at most one memory run is in flight per thread whatever started it; a
        held lease raises ``Conflict`` and the delivery is retried later, as for a busy thread."""
        executor = self._executor_for(ctx.profile.executor)
        is_worker = ctx.profile.executor is ExecutorKind.WORKER
        leases = None if is_worker else self._memory_leases
        identity = ctx.identity
        if leases is not None:
            now = utc_now()
            until = now + timedelta(seconds=MEMORY_LEASE_S)
            if not await leases.hold(
                identity.tenant_id, identity.user_id, ctx.thread_id, ctx.run_id, now=now, lease_until=until
            ):
                raise Conflict("a memory run is in flight on this thread", code="thread_busy")
        try:
            return await self._runs.run_inline(
                ctx,
                body_digest=body_digest,
                new_messages=new_messages,
                executor=executor,
                claim_thread=is_worker,
                deadline=deadline,
            )
        finally:
            if leases is not None:
                await leases.release(identity.tenant_id, ctx.thread_id, ctx.run_id)

    @staticmethod
    def _prompt_message(task: AutomationTask, run_id: str, fire_id: str, meta: ExecutionMeta) -> Message:
        """The task's prompt as the user message of this fire; its id is per fire, so it is stored once."""
        return Message(
            id=f"msg_{run_id}",
            thread_id=task.thread_id,
            role=Role.USER,
            content=task.prompt,
            run_id=run_id,
            meta=meta,
            flags={"automation_task_id": task.task_id, "fire_id": fire_id},
        )
