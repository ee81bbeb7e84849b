"""checkov on template.yaml, offline, against the accepted list (infra/checkov-accepted.yaml).

The scan runs as scripts/sam_gate.sh runs it: scripts/checkov_gate.py with the checkov venv's python
(.tools/checkov-venv, installed by scripts/install_checkov.sh), here with ``--report-json`` so the tests read its
findings. Without that venv the scanning tests skip with the install command, except under CI (``CI`` set), where
they fail. The tests of the accepted list's rules import the gate script and need no checkov.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.ci import running_in_ci
from tests.support.sam_tools import REPO_ROOT, TEMPLATE_PATH, offline_env

from .planted_mistakes import MISTAKES

CHECKOV_GATE = REPO_ROOT / "scripts" / "checkov_gate.py"
ACCEPTED = REPO_ROOT / "infra" / "checkov-accepted.yaml"
# Removing either makes checkov report a failure no entry accepts.
ALARM_TOPIC_ENCRYPTION = "      KmsMasterKeyId: !Ref AlarmTopicKey\n"
AUTOMATION_CONCURRENCY = (
    "      ReservedConcurrentExecutions: !If [ReserveAutomationConcurrency, !Ref AutomationReservedConcurrency, "
    "!Ref AWS::NoValue]\n"
)


def checkov_venv() -> Path:
    """Where scripts/install_checkov.sh puts the venv (CHECKOV_VENV overrides it)."""
    return Path(os.environ.get("CHECKOV_VENV", REPO_ROOT / ".tools" / "checkov-venv"))


@dataclass(frozen=True)
class GateRun:
    returncode: int
    output: str
    report: dict[str, Any]

    def findings(self, key: str) -> set[tuple[str, str]]:
        return {(item["check"], item["resource"]) for item in self.report[key]}


@dataclass(frozen=True)
class CheckovGate:
    python: Path

    def run(self, directory: Path, template: Path = TEMPLATE_PATH, accepted: Path = ACCEPTED) -> GateRun:
        """scripts/checkov_gate.py on a template and an accepted list; its exit code, output and JSON report."""
        report = directory / "checkov-report.json"
        result = subprocess.run(
            [
                str(self.python),
                str(CHECKOV_GATE),
                str(template),
                "--accepted",
                str(accepted),
                "--report-json",
                str(report),
            ],
            cwd=REPO_ROOT,
            env=offline_env(),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        output = result.stdout + result.stderr
        assert result.returncode in (0, 1), f"checkov_gate.py could not judge the scan:\n{output}"
        return GateRun(result.returncode, output, json.loads(report.read_text(encoding="utf-8")))


@pytest.fixture(scope="session")
def checkov_gate() -> CheckovGate:
    venv = checkov_venv()
    if not all((venv / "bin" / name).exists() for name in ("python", "checkov")):
        reason = f"checkov venv not found at {venv}; install it with: bash scripts/install_checkov.sh"
        if running_in_ci():
            pytest.fail(f"CI is set and the checkov scan cannot run: {reason}")
        pytest.skip(reason)
    return CheckovGate(venv / "bin" / "python")


@pytest.fixture(scope="module")
def template_scan(checkov_gate: CheckovGate, tmp_path_factory: pytest.TempPathFactory) -> GateRun:
    return checkov_gate.run(tmp_path_factory.mktemp("checkov"))


def _describe(findings: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"  {item['check']} on {item['resource']} ({item['type']}, template.yaml line {item['line']}): {item['name']}"
        for item in findings
    )


def _plant(directory: Path, *replacements: tuple[str, str]) -> Path:
    text = TEMPLATE_PATH.read_text(encoding="utf-8")
    for correct, mistaken in replacements:
        assert correct in text, f"template.yaml no longer contains {correct!r}"
        text = text.replace(correct, mistaken, 1)
    planted = directory / "template.yaml"
    planted.write_text(text, encoding="utf-8")
    return planted


# ------------------------------------------------------------------------------------------------ the template
def test_every_failed_check_is_accepted(template_scan: GateRun) -> None:
    new = template_scan.report["new_failures"]
    assert not new, (
        "checkov reports failures that infra/checkov-accepted.yaml does not accept; fix the template, or accept each "
        f"with a one-line reason (reviewed):\n{_describe(new)}"
    )


def test_every_accepted_entry_still_fails(template_scan: GateRun) -> None:
    stale = template_scan.report["stale_acceptances"]
    listed = "\n".join(f"  {item['check']} on {item['resource']}: {item['reason']}" for item in stale)
    assert not stale, f"accepted checks that no longer fail; remove them from infra/checkov-accepted.yaml:\n{listed}"


def test_the_scan_reads_the_whole_template_and_the_gate_passes(template_scan: GateRun) -> None:
    report = template_scan.report
    assert report["parsing_errors"] == 0
    assert report["passed"] >= report["min_passed"], f"{report['passed']} passed, floor {report['min_passed']}"
    assert report["failed"] == len(report["accepted"])
    assert template_scan.returncode == 0, template_scan.output
    # The Fargate option's entries are inactive: StreamHost's default (lambda) creates none of its resources.
    assert template_scan.findings("inactive_acceptances") == STREAM_HOST_ENTRIES


STREAM_HOST_ENTRIES = {("CKV_AWS_158", "StreamHostLogGroup"), ("CKV_AWS_91", "StreamHostLoadBalancer")}


def test_with_stream_host_on_checkov_scans_its_resources_and_every_failure_is_accepted(
    checkov_gate: CheckovGate, template_scan: GateRun, tmp_path: Path
) -> None:
    # GIVEN the copy of the template whose defaults turn the Fargate option on, as scripts/sam_gate.sh scans it
    variant = tmp_path / "template.fargate-all.yaml"
    text = TEMPLATE_PATH.read_text(encoding="utf-8")
    variant.write_text(VARIANT.with_defaults(text, VARIANT.VARIANTS["fargate-all"]), encoding="utf-8")
    # WHEN the gate scans it
    run = checkov_gate.run(tmp_path, template=variant)
    # THEN it read the option's resources (more checks passed), accepted the two failures kept for them, and no
    # entry is inactive or stale there
    assert run.returncode == 0, run.output
    assert run.report["passed"] > template_scan.report["passed"]
    assert STREAM_HOST_ENTRIES <= run.findings("accepted")
    assert run.report["inactive_acceptances"] == [] and run.report["stale_acceptances"] == []


# ------------------------------------------------------------------------------------------------ planted
@pytest.mark.slow
def test_a_new_failure_fails_the_gate_and_is_named(checkov_gate: CheckovGate, tmp_path: Path) -> None:
    # GIVEN a copy of the template whose alarm topic is not encrypted and whose automation function reserves nothing
    planted = _plant(tmp_path, (ALARM_TOPIC_ENCRYPTION, ""), (AUTOMATION_CONCURRENCY, ""))
    # WHEN the gate scans it
    run = checkov_gate.run(tmp_path, template=planted)
    # THEN exactly those two are new failures, named with the check, the resource and the check's name
    assert run.findings("new_failures") == {("CKV_AWS_26", "AlarmTopic"), ("CKV_AWS_115", "AutomationFunction")}
    assert run.returncode == 1
    assert "FAIL new failure: CKV_AWS_26 on AlarmTopic (AWS::SNS::Topic" in run.output
    assert "Ensure all data stored in the SNS topic is encrypted" in run.output
    assert run.report["stale_acceptances"] == []


@pytest.mark.slow
def test_a_stale_acceptance_fails_the_gate(checkov_gate: CheckovGate, tmp_path: Path) -> None:
    # GIVEN the accepted list with an entry for a check that passes (the alarm topic is encrypted)
    accepted = tmp_path / "accepted.yaml"
    stale_entry = "  - check: CKV_AWS_26\n    resource: AlarmTopic\n    reason: Planted, passes.\n"
    accepted.write_text(ACCEPTED.read_text(encoding="utf-8") + stale_entry, encoding="utf-8")
    # WHEN the gate scans the template with it
    run = checkov_gate.run(tmp_path, accepted=accepted)
    # THEN the entry is reported as stale and nothing else is wrong
    assert run.findings("stale_acceptances") == {("CKV_AWS_26", "AlarmTopic")}
    assert run.report["new_failures"] == []
    assert run.returncode == 1
    assert "stale acceptance: CKV_AWS_26 on AlarmTopic no longer fails" in run.output


@pytest.mark.slow
def test_checkov_misses_what_the_template_checks_catch(checkov_gate: CheckovGate, tmp_path: Path) -> None:
    """Why the accepted SSE-SQS queues and the alarm topic key have template checks of their own."""
    # GIVEN a queue without encryption and the alarm topic on the AWS-managed key (which CloudWatch cannot use)
    mistakes = [mistake for mistake in MISTAKES if mistake.name.startswith(("queue_without", "alarm_topic_with"))]
    assert len(mistakes) == 2
    planted = _plant(tmp_path, *((mistake.correct, mistake.mistaken) for mistake in mistakes))
    # WHEN the gate scans it
    run = checkov_gate.run(tmp_path, template=planted)
    # THEN checkov sees no difference: CKV_AWS_27 fails on SSE-SQS queues anyway, CKV_AWS_26 passes any key
    assert run.report["new_failures"] == []
    assert run.report["stale_acceptances"] == []
    assert run.returncode == 0


def _load_variant_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("template_variant", REPO_ROOT / "scripts" / "template_variant.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VARIANT = _load_variant_module()


# ------------------------------------------------------------------------------------------------ the list's rules
@pytest.fixture(scope="module")
def gate_module() -> ModuleType:
    """scripts/checkov_gate.py imported in the project venv (its judging needs PyYAML only, not checkov)."""
    spec = importlib.util.spec_from_file_location("checkov_gate", CHECKOV_GATE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _report(*failed: tuple[str, str], passed: int = 120) -> dict[str, Any]:
    checks = [
        {"check_id": check, "resource": resource, "check_name": "n", "file_line_range": [1, 2]}
        for check, resource in failed
    ]
    summary = {"passed": passed, "failed": len(checks), "parsing_errors": 0}
    return {"summary": summary, "results": {"failed_checks": checks}}


def test_the_accepted_list_names_a_reason_for_every_entry_and_no_wildcard(gate_module: ModuleType) -> None:
    entries, min_passed = gate_module.load_accepted(ACCEPTED)
    assert min_passed >= 100
    assert all(entry.reason for entry in entries)
    # Every entry is per resource today; a wildcard would need a reason that holds for any resource of its type.
    assert [entry.describe() for entry in entries if entry.resource == "*"] == []


def test_a_wildcard_entry_covers_its_type_only(gate_module: ModuleType) -> None:
    entry = gate_module.Acceptance("CKV_AWS_158", "*", "AWS::Logs::LogGroup", "r")
    report = _report(("CKV_AWS_158", "AWS::Logs::LogGroup.A"), ("CKV_AWS_158", "AWS::Other::Thing.B"))
    outcome = gate_module.judge(report, 1.0, [entry], 100)
    assert [finding.resource for finding in outcome.accepted] == ["A"]
    assert [finding.resource for finding in outcome.new_failures] == ["B"]
    assert outcome.stale_acceptances == []


def test_a_conditional_entry_is_inactive_only_while_its_resource_is_not_scanned(gate_module: ModuleType) -> None:
    entry = gate_module.Acceptance("CKV_AWS_91", "Alb", None, "r", "StreamsOnFargate")
    # GIVEN a scan that did not read the resource (its condition false for the defaults): inactive, not stale
    outcome = gate_module.judge(_report(), 1.0, [entry], 100)
    assert (outcome.inactive_acceptances, outcome.stale_acceptances) == ([entry], [])
    # GIVEN a scan that read it and found the check passing: stale, as any entry
    scanned = _report()
    balancer = "AWS::ElasticLoadBalancingV2::LoadBalancer.Alb"
    scanned["results"]["passed_checks"] = [{"check_id": "CKV_AWS_91", "resource": balancer}]
    outcome = gate_module.judge(scanned, 1.0, [entry], 100)
    assert (outcome.inactive_acceptances, outcome.stale_acceptances) == ([], [entry])
    # GIVEN an entry without a condition for a resource the scan never read: stale (a removed or renamed resource)
    plain = gate_module.Acceptance("CKV_AWS_91", "Alb", None, "r")
    assert gate_module.judge(_report(), 1.0, [plain], 100).stale_acceptances == [plain]


def test_fewer_passed_checks_than_the_floor_is_a_problem(gate_module: ModuleType) -> None:
    outcome = gate_module.judge(_report(passed=99), 1.0, [], 100)
    assert outcome.problems == ["only 99 checks passed, below the floor of 100 (min_passed)"]


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("  - {check: CKV_AWS_1, resource: A}\n", "'reason' must be one line of text"),
        ("  - {check: CKV_AWS_1, resource: '*', reason: r}\n", "resource '*' needs the resource 'type'"),
        ("  - {check: CKV_AWS_1, resource: A, reason: r, note: x}\n", "unknown keys ['note']"),
        ("  - {check: CKV_AWS_1, resource: A, reason: r}\n" * 2, "listed twice"),
        ("  - {check: CKV_AWS_1, resource: '*', type: T, reason: r, condition: C}\n", "'condition' must name"),
    ],
)
def test_malformed_entries_are_refused(gate_module: ModuleType, tmp_path: Path, entry: str, error: str) -> None:
    path = tmp_path / "accepted.yaml"
    path.write_text(f"min_passed: 100\naccepted:\n{entry}", encoding="utf-8")
    with pytest.raises(gate_module.GateError, match=re.escape(error)):
        gate_module.load_accepted(path)
