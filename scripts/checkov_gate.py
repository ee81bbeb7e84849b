"""Scan a SAM template with checkov, offline, and compare the failures with the accepted list.

Run it with the checkov venv's python (scripts/install_checkov.sh), which has checkov and PyYAML:

    .tools/checkov-venv/bin/python scripts/checkov_gate.py [TEMPLATE] [--accepted FILE] [--report-json FILE]

It fails (exit 1) on a failed check that no entry of the accepted list (infra/checkov-accepted.yaml) accepts, on an
entry whose check no longer fails (a stale acceptance), on fewer passed checks than the list's ``min_passed``, and on
a template checkov could not parse; exit 2 is a usage or tool error. An entry with ``condition:`` is for a resource
the template creates only under that condition (StreamHost's): checkov skips such a resource when the parameters'
defaults make its condition false, and the entry is then inactive, not stale; scripts/sam_gate.sh scans a copy of
the template whose defaults make it true (scripts/template_variant.py), where the entry must match again.
``--report-json`` writes the counts and findings for tests/infra/test_checkov.py. scripts/sam_gate.sh runs it as one
of its steps.

Offline: checkov runs with ``--skip-download``, ``BC_SKIP_MAPPING=TRUE``, no platform API key or URL and no package
update check (``CKV_SKIP_PACKAGE_UPDATE_CHECK``), so it reaches no network service.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TEMPLATE = REPO_ROOT / "template.yaml"
DEFAULT_ACCEPTED = REPO_ROOT / "infra" / "checkov-accepted.yaml"
SCAN_TIMEOUT_S = 300
ENTRY_KEYS = {"check", "resource", "type", "reason", "condition"}
# Variables that would make checkov talk to the Bridgecrew / Prisma Cloud platform, or a developer's AWS account.
_ONLINE_ENV = (
    "BC_API_KEY",
    "BC_API_URL",
    "PRISMA_API_URL",
    "CKV_EXTERNAL_CHECKS_PUBLIC_KEY",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)


class GateError(Exception):
    """A usage or tool error: the scan could not be judged."""


@dataclass(frozen=True)
class Finding:
    check: str
    resource: str
    type: str
    name: str
    line: int | None

    def describe(self) -> str:
        where = f", line {self.line}" if self.line else ""
        return f"{self.check} on {self.resource} ({self.type}{where}): {self.name}"


@dataclass(frozen=True)
class Acceptance:
    check: str
    resource: str
    type: str | None
    reason: str
    condition: str | None = None

    def matches(self, finding: Finding) -> bool:
        if self.check != finding.check:
            return False
        if self.resource == "*":
            return self.type == finding.type
        return self.resource == finding.resource and self.type in (None, finding.type)

    def describe(self) -> str:
        scope = f"every {self.type}" if self.resource == "*" else self.resource
        return f"{self.check} on {scope}"


@dataclass(frozen=True)
class Outcome:
    checkov_version: str
    seconds: float
    passed: int
    failed: int
    parsing_errors: int
    min_passed: int
    accepted: list[Finding]
    new_failures: list[Finding]
    stale_acceptances: list[Acceptance]
    inactive_acceptances: list[Acceptance]

    @property
    def problems(self) -> list[str]:
        found = [f"new failure: {finding.describe()}" for finding in self.new_failures]
        found += [
            f"stale acceptance: {entry.describe()} no longer fails; remove it from the accepted list"
            for entry in self.stale_acceptances
        ]
        if self.parsing_errors:
            found.append(f"checkov could not parse the template ({self.parsing_errors} parsing errors)")
        if self.passed < self.min_passed:
            found.append(f"only {self.passed} checks passed, below the floor of {self.min_passed} (min_passed)")
        return found


def offline_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in _ONLINE_ENV}
    env.update(
        {
            "BC_SKIP_MAPPING": "TRUE",
            "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true",
            # checkov reads LOG_LEVEL for its own logging; the project's LOG_LEVEL is for the functions.
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


def checkov_executable() -> Path:
    """checkov of the venv whose python runs this script."""
    executable = Path(sys.executable).with_name("checkov")
    if not executable.exists():
        raise GateError(f"no checkov beside {sys.executable}; run this script with the checkov venv's python")
    return executable


def run_checkov(template: Path) -> tuple[dict[str, Any], float]:
    """checkov's JSON report for one CloudFormation/SAM template, and the scan's duration in seconds."""
    command = [
        str(checkov_executable()),
        "--file",
        str(template),
        "--framework",
        "cloudformation",
        "--output",
        "json",
        "--skip-download",
        "--compact",
    ]
    start = time.monotonic()
    try:
        result = subprocess.run(
            command, env=offline_env(), capture_output=True, text=True, timeout=SCAN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as error:
        raise GateError(f"checkov did not finish within {SCAN_TIMEOUT_S}s") from error
    seconds = time.monotonic() - start
    # 0: no failed check, 1: some failed; anything else is checkov's own error.
    if result.returncode not in (0, 1):
        raise GateError(f"checkov exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError as error:
        raise GateError(f"checkov printed no JSON report:\n{result.stdout}\n{result.stderr}") from error
    if isinstance(report, list):  # one report per framework; only cloudformation was asked for
        report = next((item for item in report if item.get("check_type") == "cloudformation"), {})
    if not isinstance(report, dict) or "results" not in report:
        raise GateError(f"checkov found nothing to scan in {template}:\n{result.stdout}\n{result.stderr}")
    return report, seconds


def load_accepted(path: Path) -> tuple[list[Acceptance], int]:
    """The accepted entries and the passed-checks floor, checked for shape."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise GateError(f"{path}: cannot read the accepted list: {error}") from error
    if not isinstance(document, dict) or not isinstance(document.get("accepted"), list):
        raise GateError(f"{path}: expected a mapping with an 'accepted' list")
    min_passed = document.get("min_passed")
    if not isinstance(min_passed, int) or min_passed < 1:
        raise GateError(f"{path}: min_passed must be a positive integer")
    entries: list[Acceptance] = []
    for index, raw in enumerate(document["accepted"], start=1):
        where = f"{path}: entry {index}"
        if not isinstance(raw, dict):
            raise GateError(f"{where}: expected a mapping")
        unknown = set(raw) - ENTRY_KEYS
        if unknown:
            raise GateError(f"{where}: unknown keys {sorted(unknown)}")
        check, resource, reason, type_ = raw.get("check"), raw.get("resource"), raw.get("reason"), raw.get("type")
        if not (isinstance(check, str) and check.startswith("CKV")):
            raise GateError(f"{where}: 'check' must be a checkov check id")
        if not (isinstance(resource, str) and resource):
            raise GateError(f"{where}: 'resource' must be a logical id or '*'")
        if resource == "*" and not isinstance(type_, str):
            raise GateError(f"{where}: resource '*' needs the resource 'type' it applies to")
        if not (isinstance(reason, str) and reason.strip() and "\n" not in reason.strip()):
            raise GateError(f"{where}: 'reason' must be one line of text")
        condition = raw.get("condition")
        if condition is not None and not (isinstance(condition, str) and condition and resource != "*"):
            raise GateError(f"{where}: 'condition' must name the template condition of one resource")
        entry = Acceptance(check, resource, type_ if isinstance(type_, str) else None, reason.strip(), condition)
        if any(other.describe() == entry.describe() and other.type == entry.type for other in entries):
            raise GateError(f"{where}: {entry.describe()} is listed twice")
        entries.append(entry)
    return entries, min_passed


def failures(report: dict[str, Any]) -> list[Finding]:
    found = []
    for item in report["results"].get("failed_checks", []):
        resource_type, _, logical_id = str(item["resource"]).rpartition(".")
        line_range = item.get("file_line_range") or [None]
        found.append(Finding(item["check_id"], logical_id, resource_type, item.get("check_name", ""), line_range[0]))
    return found


def scanned_resources(report: dict[str, Any]) -> set[str]:
    """Logical ids of the resources checkov checked (passed or failed): a resource under a condition that is false for
    the parameters' defaults is not among them."""
    results = report["results"]
    items = [*results.get("passed_checks", []), *results.get("failed_checks", [])]
    return {str(item["resource"]).rpartition(".")[2] for item in items}


def judge(report: dict[str, Any], seconds: float, entries: list[Acceptance], min_passed: int) -> Outcome:
    found = failures(report)
    summary = report.get("summary", {})
    scanned = scanned_resources(report)
    unmatched = [entry for entry in entries if not any(entry.matches(finding) for finding in found)]
    inactive = [entry for entry in unmatched if entry.condition is not None and entry.resource not in scanned]
    return Outcome(
        checkov_version=str(summary.get("checkov_version", "?")),
        seconds=round(seconds, 1),
        passed=int(summary.get("passed", 0)),
        failed=int(summary.get("failed", len(found))),
        parsing_errors=int(summary.get("parsing_errors", 0)),
        min_passed=min_passed,
        accepted=[finding for finding in found if any(entry.matches(finding) for entry in entries)],
        new_failures=[finding for finding in found if not any(entry.matches(finding) for entry in entries)],
        stale_acceptances=[entry for entry in unmatched if entry not in inactive],
        inactive_acceptances=inactive,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("template", nargs="?", type=Path, default=DEFAULT_TEMPLATE)
    parser.add_argument("--accepted", type=Path, default=DEFAULT_ACCEPTED, help="the accepted list (YAML)")
    parser.add_argument("--report-json", type=Path, help="write the counts and findings here as JSON")
    args = parser.parse_args(argv)
    try:
        entries, min_passed = load_accepted(args.accepted)
        report, seconds = run_checkov(args.template)
    except GateError as error:
        print(f"checkov_gate: {error}", file=sys.stderr)
        return 2
    outcome = judge(report, seconds, entries, min_passed)
    if args.report_json:
        args.report_json.write_text(json.dumps(asdict(outcome), indent=2) + "\n", encoding="utf-8")
    print(
        f"  checkov {outcome.checkov_version} in {outcome.seconds}s: {outcome.passed} passed (floor "
        f"{outcome.min_passed}), {outcome.failed} failed, of which {len(outcome.accepted)} accepted "
        f"({args.accepted.name}); {len(outcome.inactive_acceptances)} entries for resources this template's "
        "defaults do not create"
    )
    for problem in outcome.problems:
        print(f"  FAIL {problem}")
    if outcome.new_failures:
        print(f"  Fix the template, or accept a failure with a one-line reason in {args.accepted} (reviewed).")
    return 1 if outcome.problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
