"""Each planted mistake is written into a copy of template.yaml, and the gate must fail on it.

These are the mistakes that ``sam validate``, ``sam validate --lint`` and cfn-lint (even on the expansion) let
through; only the checks on the expanded template catch them. The fast tests run each check on its planted copy;
the slow ones show cfn-lint passing every copy and the whole gate script failing at the template checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from . import template_checks as checks
from .sam_tools import REPO_ROOT, TEMPLATE_PATH, SamTools


@dataclass(frozen=True)
class PlantedMistake:
    name: str
    correct: str
    mistaken: str
    check: checks.Check
    expected_violation: str

    def plant(self, directory: Path) -> Path:
        """Write a copy of template.yaml with the first occurrence of the correct text replaced."""
        text = TEMPLATE_PATH.read_text(encoding="utf-8")
        assert self.correct in text, f"template.yaml no longer contains {self.correct!r}; update {self.name}"
        planted = directory / "template.yaml"
        planted.write_text(text.replace(self.correct, self.mistaken, 1), encoding="utf-8")
        return planted


MISTAKES = [
    PlantedMistake(
        name="stream_instead_of_response_stream",
        correct="ResponseTransferMode: RESPONSE_STREAM",
        mistaken="ResponseTransferMode: STREAM",
        check=checks.check_sse_routes_stream,
        expected_violation="POST /api/v1/agent: integration URI does not end in /response-streaming-invocations",
    ),
    PlantedMistake(
        name="five_field_cron",
        correct="cron(0 6 * * ? *)",
        mistaken="cron(0 6 * * *)",
        check=checks.check_schedule_expressions,
        expected_violation="cron(0 6 * * *): cron(...) needs 6 fields",
    ),
    PlantedMistake(
        name="missing_report_batch_item_failures",
        correct="            FunctionResponseTypes:\n              - ReportBatchItemFailures\n",
        mistaken="",
        check=checks.check_sqs_sources_report_batch_item_failures,
        expected_violation="MemoryFunctionRunCompleted: FunctionResponseTypes lacks ReportBatchItemFailures",
    ),
    PlantedMistake(
        name="wildcard_dynamodb_action",
        correct="- dynamodb:GetItem",
        mistaken="- dynamodb:*",
        check=checks.check_no_wildcard_data_permissions,
        expected_violation="StreamingApiRole/agent-data: wildcard action 'dynamodb:*'",
    ),
    PlantedMistake(
        name="no_cors",
        correct="      Cors:\n        AllowOrigin: !Sub \"'${CorsAllowedOrigin}'\"\n",
        mistaken="      Cors:\n        AllowOrigin: \"'*'\"\n",
        check=checks.check_cors,
        expected_violation="/api/v1/agent: OPTIONS origin '*' is not a template parameter",
    ),
    PlantedMistake(
        name="buffered_timeout_at_the_gateway_limit",
        correct="      Timeout: 25\n",
        mistaken="      Timeout: 29\n",
        check=checks.check_buffered_timeouts,
        expected_violation="BufferedApiFunction: Timeout 29s >= API Gateway's 29s",
    ),
    PlantedMistake(
        name="rule_target_without_dead_letters",
        correct="          DeadLetterConfig:\n            Arn: !GetAtt AsyncDeadLetterQueue.Arn\n",
        mistaken="",
        check=checks.check_async_targets_have_dead_letters,
        expected_violation="RunCompletedRule: target MemoryQueue has no DeadLetterConfig",
    ),
    PlantedMistake(
        name="schedule_permissions_on_the_whole_group",
        correct=":schedule/${AutomationScheduleGroup}/task-*",
        mistaken=":schedule/${AutomationScheduleGroup}/*",
        check=checks.check_schedule_permissions,
        expected_violation="BufferedApiRole/agent-data: schedule actions on",
    ),
    PlantedMistake(
        name="function_without_errors_alarm",
        correct="      Dimensions: [{Name: FunctionName, Value: !Ref SweeperFunction}]\n",
        mistaken="      Dimensions: [{Name: FunctionName, Value: !Ref MemoryFunction}]\n",
        check=checks.check_failure_alarms,
        expected_violation="SweeperFunction: no Errors alarm",
    ),
    PlantedMistake(
        name="queue_without_encryption",
        correct="      SqsManagedSseEnabled: true\n      RedrivePolicy:\n",
        mistaken="      RedrivePolicy:\n",
        check=checks.check_queues_encrypted,
        expected_violation="MemoryQueue: no encryption declared",
    ),
    PlantedMistake(
        name="alarm_topic_with_the_aws_managed_key",
        correct="      KmsMasterKeyId: !Ref AlarmTopicKey\n",
        mistaken="      KmsMasterKeyId: alias/aws/sns\n",
        check=checks.check_alarm_topics_usable_by_cloudwatch,
        expected_violation="AlarmTopic: encrypted with 'alias/aws/sns'",
    ),
]
MISTAKE_IDS = [mistake.name for mistake in MISTAKES]


@pytest.mark.parametrize("mistake", MISTAKES, ids=MISTAKE_IDS)
def test_the_check_fails_on_the_planted_mistake(
    mistake: PlantedMistake, sam_tools: SamTools, expanded_template: checks.Template, tmp_path: Path
) -> None:
    # GIVEN the check passes on the real template
    assert mistake.check(expanded_template) == []
    # WHEN the mistake is planted and the copy expanded
    expanded = sam_tools.expand(mistake.plant(tmp_path), tmp_path / "expanded.json")
    # THEN the same check reports it
    violations = mistake.check(expanded)
    assert any(violation.startswith(mistake.expected_violation) for violation in violations), violations


@pytest.mark.slow
def test_the_linters_miss_every_planted_mistake(sam_tools: SamTools, tmp_path: Path) -> None:
    """Why the checks exist: cfn-lint (what ``sam validate --lint`` runs) passes every planted copy."""
    # GIVEN each planted copy and its expansion
    files: list[Path] = []
    for mistake in MISTAKES:
        directory = tmp_path / mistake.name
        directory.mkdir()
        planted = mistake.plant(directory)
        files += [planted, directory / "expanded.json"]
        sam_tools.expand(planted, files[-1])
    # WHEN cfn-lint reads them all (one process: its start-up dominates)
    result = sam_tools.run(sam_tools.cfn_lint, *files)
    # THEN it finds nothing
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_gate_script_fails_on_a_planted_mistake_at_the_template_checks(sam_tools: SamTools, tmp_path: Path) -> None:
    # GIVEN the STREAM mistake (the one that silently buffers every SSE stream)
    mistake = MISTAKES[0]
    # WHEN the whole gate script runs on it
    result = sam_tools.run(
        "bash",
        REPO_ROOT / "scripts" / "sam_gate.sh",
        mistake.plant(tmp_path),
        extra_env={"SAM_GATE_OUT_DIR": str(tmp_path / "out"), "SAM_GATE_SKIP_BUILD": "1"},
    )
    # THEN sam validate, --lint and cfn-lint on the expansion passed, and the template checks failed the gate
    assert "== template checks on the expansion" in result.stdout, result.stdout + result.stderr
    assert result.returncode != 0, result.stdout
    assert mistake.expected_violation in result.stdout
    assert "sam_gate: all steps passed" not in result.stdout
