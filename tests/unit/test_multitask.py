"""The multitask strategy on its own (``shared.runs.multitask``): which strategy a request gets, and what an
interrupting admission does with a busy thread. The wire behaviour is in tests/e2e/test_multitask_e2e.py and across
instances in tests/lambda_emulation/test_multitask_across_instances.py."""

from __future__ import annotations

from typing import Any

import pytest

from shared.errors import Conflict, InvalidRequest, NotFound
from shared.models import AuditRecord, ExecutionMeta, Identity, Run, Thread
from shared.runs.multitask import Interrupting, strategy_of

CALLER = Identity(tenant_id="t", user_id="u")


class HeldThread:
    """A thread held by ``holder`` until ``release()``; the audit records it got."""

    def __init__(self, holder: str | None) -> None:
        self.holder = holder
        self.audit: list[AuditRecord] = []

    async def get_thread(self, identity: Identity, thread_id: str) -> Thread:
        return Thread(thread_id=thread_id, tenant_id="t", owner_user_id="u", active_run_id=self.holder)

    async def record(self, record: AuditRecord) -> None:
        self.audit.append(record)


def test_the_request_chooses_else_the_profile_and_an_unknown_value_is_refused() -> None:
    assert strategy_of({"multitaskStrategy": "interrupt"}, "reject") == "interrupt"
    assert strategy_of({"other": 1}, "reject") == "reject"
    assert strategy_of(None, "interrupt") == "interrupt"
    assert strategy_of({"multitaskStrategy": "enqueue"}, "reject") == "enqueue"
    with pytest.raises(InvalidRequest) as refused:
        strategy_of({"multitaskStrategy": "rollback"}, "reject")
    assert refused.value.details[0]["loc"] == ["body", "forwardedProps", "multitaskStrategy"]


async def test_a_busy_thread_is_interrupted_then_the_run_admitted() -> None:
    thread = HeldThread("run-1")
    cancelled: list[str] = []
    attempts: list[str] = []

    async def cancel(identity: Identity, run_id: str) -> Run:
        cancelled.append(run_id)
        thread.holder = None  # the interrupted run winds down and releases the thread
        return Run(run_id=run_id, thread_id="th", tenant_id="t", user_id="u", meta=ExecutionMeta())

    async def attempt() -> Any:
        attempts.append("try")
        if thread.holder is not None or len(attempts) == 1:
            raise Conflict("busy", code="thread_busy")
        return "admitted"

    result: Any = await Interrupting(thread, thread, cancel, wait_s=5).admit(CALLER, "th", "run-2", attempt)
    assert result == "admitted"
    assert cancelled == ["run-1"] and len(attempts) == 2
    assert [(r.kind, r.run_id, r.details["interrupted_by_run_id"]) for r in thread.audit] == [
        ("run_interrupted", "run-1", "run-2")
    ]


async def test_a_run_the_caller_may_not_stop_is_not_interrupted() -> None:
    thread = HeldThread("hidden-run")

    async def cancel(identity: Identity, run_id: str) -> Run:
        raise NotFound("run not found")

    async def attempt() -> Any:
        raise Conflict("busy", code="thread_busy")

    with pytest.raises(Conflict) as refused:
        await Interrupting(thread, thread, cancel, wait_s=5).admit(CALLER, "th", "run-2", attempt)
    assert refused.value.code == "thread_busy" and thread.audit == []


async def test_other_refusals_are_not_retried() -> None:
    calls: list[str] = []

    async def cancel(identity: Identity, run_id: str) -> Run:
        raise AssertionError("nothing to interrupt")

    async def attempt() -> Any:
        calls.append("try")
        raise Conflict("same runId, other body", code="run_id_conflict")

    held = HeldThread(None)
    with pytest.raises(Conflict) as refused:
        await Interrupting(held, held, cancel, wait_s=5).admit(CALLER, "th", "run-2", attempt)
    assert refused.value.code == "run_id_conflict" and calls == ["try"]
