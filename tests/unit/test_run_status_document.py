"""A run's status document (functions/agent_api/run_views.py) from ledger records in each status, including the
``queued`` one a background run is stored with before a worker starts it."""

from __future__ import annotations

import pytest

from functions.agent_api.run_views import run_status_view
from shared.errors import InvalidRequest
from shared.models import Run, RunStatus, Usage
from shared.ports.threads import RunMessageIds
from shared.runs.outcomes import RUN_ERROR_MESSAGES, terminal_from_ledger
from shared.runs.status import RunReport, decode_cursor, encode_cursor, public_status


def a_run(status: RunStatus, **fields: object) -> Run:
    return Run(run_id="r1", thread_id="t1", tenant_id="t", user_id="u", status=status, **fields)  # type: ignore[arg-type]


def view(run: Run) -> dict[str, object]:
    return run_status_view(RunReport(run, public_status(run), RunMessageIds(("m1",), complete=True)))


def test_a_queued_run_is_not_ended_and_has_no_lease_yet() -> None:
    run = a_run(RunStatus.QUEUED)
    assert not run.status.is_terminal
    doc = view(run)
    assert doc["status"] == "queued"
    assert not {"heartbeatAt", "endedAt", "outcome", "error"} & set(doc)


def test_a_run_that_ended_on_an_interrupt_is_interrupted_and_only_then() -> None:
    interrupt = {"id": "int_1", "reason": "tool_call"}
    interrupted = view(a_run(RunStatus.SUCCEEDED, interrupts=[interrupt]))
    assert (interrupted["status"], interrupted["outcome"]) == (
        "interrupted",
        {"type": "interrupt", "interrupts": [interrupt]},
    )
    assert view(a_run(RunStatus.SUCCEEDED))["status"] == "succeeded"


def test_a_failed_run_shows_the_documented_code_for_an_old_or_unknown_one() -> None:
    renamed = view(a_run(RunStatus.FAILED, error_code="model_bad_request"))
    unknown = view(a_run(RunStatus.FAILED, error_code="internal_thing"))
    assert renamed["error"] == {
        "code": "model_rejected_request",
        "message": RUN_ERROR_MESSAGES["model_rejected_request"],
    }
    assert unknown["error"] == {"code": "run_failed", "message": RUN_ERROR_MESSAGES["run_failed"]}
    assert "outcome" not in renamed


def test_estimated_usage_and_a_cut_list_of_messages_say_so() -> None:
    run = a_run(RunStatus.SUCCEEDED, usage=[Usage(model="m", input_tokens=3, output_tokens=2, estimated=True)])
    doc = run_status_view(RunReport(run, "succeeded", RunMessageIds(("m1",), complete=False)))
    assert doc["usageEstimated"] is True and doc["messageIdsComplete"] is False
    assert doc["usage"] == [
        {"provider": "openai-compatible", "model": "m", "inputTokens": 3, "outputTokens": 2, "totalTokens": 5}
    ]


def test_a_cursor_is_tied_to_its_thread() -> None:
    cursor = encode_cursor("t1", a_run(RunStatus.SUCCEEDED))
    assert decode_cursor(cursor, "t1").run_id == "r1"
    with pytest.raises(InvalidRequest):
        decode_cursor(cursor, "t2")


def test_a_terminal_event_rebuilt_from_the_ledger_carries_what_the_run_left_open() -> None:
    interrupt = {"id": "int_1", "reason": "tool_call"}
    held = terminal_from_ledger(a_run(RunStatus.SUCCEEDED, interrupts=[interrupt]))
    handed = terminal_from_ledger(a_run(RunStatus.SUCCEEDED, pending_tool_call_ids=["call_1"]))
    dumped = [e.model_dump(by_alias=True, exclude_none=True)["outcome"] for e in (held, handed)]
    assert dumped == [
        {"type": "interrupt", "interrupts": [interrupt]},
        {"type": "success", "pendingToolCallIds": ["call_1"]},
    ]
