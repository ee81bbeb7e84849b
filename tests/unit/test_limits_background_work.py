"""Background work over a token budget, on the fakes with a clock the test controls: a memory extraction is deferred
until the budget resets (its messages stay pending) and then extracted; an automation fire is skipped with an
audit record, and the task's next fire runs normally."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.adapters.in_memory.automation import InMemoryAutomationStore
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.adapters.in_memory.pending_extractions import InMemoryPendingExtractions
from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.adapters.in_memory.usage import InMemoryUsageCounters
from shared.automation.models import AutomationTask, TaskRef
from shared.automation.runner import AutomationRunner
from shared.executors.context import RunContext
from shared.executors.worker import WorkerExecutor
from shared.limits.config import LimitSet, parse_limits
from shared.limits.gate import LimitGate, estimate_tokens
from shared.limits.models import ReserveRequest, RunSpend, ScopeAsk, TokenCounts
from shared.limits.windows import Windows
from shared.memory.coalescing import ExtractionCoalescer, ExtractionDue
from shared.memory.job import MEMORY_PROFILE, MemoryExtraction
from shared.models import ExecutionMeta, Identity, Message, Origin, Role, RunStatus
from shared.profiles import default_catalog
from shared.runs.service import RunService
from shared.tools.registry import ToolRegistry
from tests.support.scripted_model import ScriptedModel, Turn

USER = Identity(tenant_id="t1", user_id="u1")
T0 = datetime(2026, 12, 2, 22, 0, tzinfo=UTC)
CATALOG = default_catalog()


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class ListQueue:
    def __init__(self) -> None:
        self.sent: list[tuple[ExtractionDue, int]] = []

    async def send(self, due: ExtractionDue, *, delay_s: int) -> None:
        self.sent.append((due, delay_s))


async def spend(counters: InMemoryUsageCounters, tokens: int, at: datetime) -> None:
    """What earlier runs of the user used today."""
    windows = Windows.at(at)
    nothing = ScopeAsk(limits=LimitSet(), tokens=0, takes_slot=False, counts_run=False)
    earlier = ReserveRequest("t1", "u1", "earlier", windows, nothing, 0)
    await counters.settle(earlier, RunSpend("worker", {"m": TokenCounts(input=tokens)}), windows=windows)


async def a_thread_with_a_user_message(store: InMemoryStore, stream: InMemoryEventStream) -> None:
    """A chat turn stored through a run service without limits (the turn itself is not what is tested)."""
    model = ScriptedModel(Turn(text=["noted"]))
    runs = RunService(store.threads, store.runs, store.audit, stream)
    ctx = RunContext(
        identity=USER,
        thread_id="th",
        run_id="chat-1",
        profile=CATALOG.get("chat_default"),
        meta=ExecutionMeta(origin=Origin.CHAT),
    )
    message = Message(id="m-1", thread_id="th", role=Role.USER, content="I play the cello every morning.")
    worker = WorkerExecutor(model, store.threads, store.audit, ToolRegistry())
    await runs.run_inline(ctx, body_digest="d", new_messages=[message], executor=worker)


async def test_memory_extraction_over_budget_is_deferred_until_the_reset_then_extracted() -> None:
    store, stream, counters, clock = InMemoryStore(), InMemoryEventStream(), InMemoryUsageCounters(), Clock(T0)
    await a_thread_with_a_user_message(store, stream)
    memory_estimate = estimate_tokens(CATALOG.get(MEMORY_PROFILE))
    budget = memory_estimate + 1_000
    # GIVEN a user whose daily budget has less left than a memory run reserves
    await spend(counters, 2_000, T0)
    gate = LimitGate(counters, parse_limits(f'{{"user": {{"tokensPerDay": {budget}}}}}'), clock=clock)
    memories = InMemoryMemoryStore()
    model = ScriptedModel(Turn(text=["none"]))
    extraction = MemoryExtraction(
        runs=RunService(store.threads, store.runs, store.audit, stream, limits=gate),
        threads=store.threads,
        audit=store.audit,
        memories=memories,
        model=model,
        profiles=CATALOG,
        confidence_threshold=0.7,
    )
    pending, queue = InMemoryPendingExtractions(), ListQueue()
    coalescer = ExtractionCoalescer(extraction, pending, queue, CATALOG, clock=clock)
    generation = await pending.note("t1", "u1", "th", now=T0)
    due = ExtractionDue(tenant_id="t1", user_id="u1", thread_id="th", generation=generation)
    # WHEN its extraction is due
    deferred = await coalescer.on_due(due)
    # THEN it is deferred, not dropped: sent again for the reset (2 h away; at most 15 min per message), the
    # messages still pending (cursor unmoved), no memory run stored and nothing asked of the model
    assert (deferred.status, deferred.reason) == ("scheduled", "deferred_over_budget")
    [(again, delay)] = queue.sent
    assert again.generation == generation and delay == 900
    assert await memories.get_cursor("t1", "th") == 0
    assert await extraction.pending_user_messages("t1", "th") == 1
    assert model.requests == []
    # WHEN the budget has reset (the next day) and the due message comes back
    clock.now = T0 + timedelta(hours=2, minutes=1)
    extracted = await coalescer.on_due(again)
    # THEN the extraction runs and reads the pending message
    assert extracted.status == "extracted", extracted
    assert await memories.get_cursor("t1", "th") >= 1
    assert await extraction.pending_user_messages("t1", "th") == 0


async def test_an_automation_fire_over_budget_is_skipped_and_audited_and_the_next_fire_runs() -> None:
    store, stream, counters, clock = InMemoryStore(), InMemoryEventStream(), InMemoryUsageCounters(), Clock(T0)
    chat = CATALOG.get("chat_default")
    budget = estimate_tokens(chat) + 500
    await spend(counters, 1_000, T0)
    gate = LimitGate(counters, parse_limits(f'{{"user": {{"tokensPerDay": {budget}}}}}'), clock=clock)
    tasks = InMemoryAutomationStore()
    task = AutomationTask(
        task_id="task-1",
        tenant_id="t1",
        owner_user_id="u1",
        name="daily",
        schedule_expression="rate(1 day)",
        thread_id="th-auto",
        prompt="summarise",
        execution_profile_name="chat_default",
    )
    await tasks.create(task)
    model = ScriptedModel(Turn(text=["summary"]))
    runner = AutomationRunner(
        tasks,
        RunService(store.threads, store.runs, store.audit, stream, limits=gate),
        store.runs,
        store.audit,
        CATALOG,
        lambda kind: WorkerExecutor(model, store.threads, store.audit, ToolRegistry()),
    )
    # WHEN a fire comes while the budget has less left than the run reserves
    skipped = await runner.fire(_ref(task), "fire-1")
    # THEN it is skipped with an audit record, and no run is stored
    assert skipped.status == "skipped_over_limit" and skipped.run_id is None
    audit = await store.audit.list_for_thread("t1", "th-auto", limit=10)
    assert [r.kind for r in audit] == ["automation_fire_skipped"]
    assert audit[0].details["limit"]["kind"] == "tokensPerDay"
    assert await store.runs.list_runs_for_thread("t1", "th-auto", limit=10) == []
    # WHEN the next fire comes after the reset
    clock.now = T0 + timedelta(days=1)
    ran = await runner.fire(_ref(task), "fire-2")
    assert ran.status == RunStatus.SUCCEEDED.value


def _ref(task: AutomationTask) -> TaskRef:
    return TaskRef(task_id=task.task_id, tenant_id=task.tenant_id, user_id=task.owner_user_id)
