"""Per-run metrics: names the template's alarms use, one EMF document per run on stdout."""

from __future__ import annotations

import dataclasses
import json

import pytest

from shared.executors.context import RunContext
from shared.executors.worker import ExecutionResult
from shared.models import ExecutionMeta, Identity, RunStatus, Usage
from shared.observability import emit_run_metrics, run_metrics
from shared.profiles import default_catalog


def a_context() -> RunContext:
    profile = default_catalog().get("chat_default")
    return RunContext(
        identity=Identity(tenant_id="t", user_id="u"), thread_id="th", run_id="r", profile=profile, meta=ExecutionMeta()
    )


def a_result() -> ExecutionResult:
    result = ExecutionResult(
        usage=[Usage(model="m", input_tokens=100, output_tokens=7), Usage(model="m", input_tokens=50, output_tokens=3)],
        tool_refusals=2,
        window_repairs=1,
    )
    result.first_event_at = result.started_at + 0.25
    result.finished_at = result.started_at + 1.5
    return result


def test_run_metrics_are_the_runs_totals() -> None:
    figures = run_metrics(a_context(), RunStatus.FAILED, a_result())
    assert figures["InputTokens"] == 150
    assert figures["OutputTokens"] == 10
    assert figures["ToolRefusals"] == 2
    assert figures["WindowRepairs"] == 1
    assert figures["RunErrors"] == 1
    assert figures["TimeToFirstEventMs"] == 250
    assert figures["RunDurationMs"] == 1500


async def test_one_emf_document_per_run_with_the_service_dimension(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "agent-backend-test")
    await emit_run_metrics(a_context(), RunStatus.SUCCEEDED, a_result())
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(lines) == 1
    doc = lines[0]
    directive = doc["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "AgentBackend"
    # the alarms' set first, then the run's profile; no ramp covered this run, so no ramp set
    assert directive["Dimensions"] == [["service"], ["service", "profile"]]
    assert doc["profile"] == "chat_default"
    assert {m["Name"] for m in directive["Metrics"]} >= {"InputTokens", "RunErrors", "RunDurationMs", "ToolRefusals"}
    assert doc["service"] == "agent-backend-test"
    assert doc["InputTokens"] in (150, [150])
    assert doc["run_id"] == "r"


async def test_the_metric_document_names_each_models_logical_and_provider_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a run that called the worker model (mapped) twice and an unmapped model once
    mapped = Usage(model="qwen3.5-30b-a3b", provider_model="qwen3.5-35b-a3b", input_tokens=1)
    result = ExecutionResult(usage=[mapped, mapped, Usage(model="qwen3.5-flash", provider_model="qwen3.5-flash")])
    # WHEN its metrics are emitted
    await emit_run_metrics(a_context(), RunStatus.SUCCEEDED, result)
    doc = next(json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{"))
    # THEN the document's metadata lists each model once, with both ids
    assert doc["models"] == [
        {"model": "qwen3.5-30b-a3b", "providerModel": "qwen3.5-35b-a3b"},
        {"model": "qwen3.5-flash", "providerModel": "qwen3.5-flash"},
    ]


async def test_a_ramped_run_is_counted_per_profile_and_per_ramp_side(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a run that ramp "trial-1" sent to its new side
    ctx = dataclasses.replace(a_context(), meta=ExecutionMeta(rollout_id="trial-1", rollout_side="new"))
    # WHEN its metrics are emitted
    await emit_run_metrics(ctx, RunStatus.FAILED, a_result())
    doc = next(json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{"))
    # THEN the same figures are published per service, per profile and per side of the ramp
    directive = doc["_aws"]["CloudWatchMetrics"][0]
    assert directive["Dimensions"] == [["service"], ["service", "profile"], ["service", "rollout", "side"]]
    assert (doc["profile"], doc["rollout"], doc["side"]) == ("chat_default", "trial-1", "new")
    assert doc["RunErrors"] in (1, [1]) and doc["InputTokens"] in (150, [150])


def test_a_memory_run_counts_the_proposals_its_gate_rejected() -> None:
    from shared.memory.executor import MemoryExecutionResult
    from shared.memory.gate import GateOutcome
    from shared.models import ExecutorKind

    # GIVEN a memory run whose gate stored one proposal and rejected two
    outcomes = [
        GateOutcome("memory_write", "stored", "stored", "ok"),
        GateOutcome("memory_write", "rejected", "evidence_not_found", "no quote"),
        GateOutcome("memory_write", "rejected", "low_confidence", "unsure"),
    ]
    result = MemoryExecutionResult(outcomes=outcomes)
    memory_ctx = dataclasses.replace(a_context(), meta=ExecutionMeta(executor=ExecutorKind.MEMORY))
    # THEN its figures count the two rejections; a worker run has no such figure
    assert run_metrics(memory_ctx, RunStatus.SUCCEEDED, result)["MemoryRejections"] == 2
    assert "MemoryRejections" not in run_metrics(a_context(), RunStatus.SUCCEEDED, a_result())
