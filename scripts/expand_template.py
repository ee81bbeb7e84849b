"""Expand template.yaml into plain CloudFormation offline, with the SAM translator and no AWS account.

Why: cfn-lint no longer expands SAM resources, so mistakes that only show on the generated resources (a buffered
integration URI, a missing ``ReportBatchItemFailures``) pass ``sam validate --lint``. The expansion is what the
gate lints with cfn-lint and what tests/infra asserts on.

Runs in the SAM tools venv (``.tools/sam-venv``, see scripts/install_sam_tools.sh), which has ``samtranslator``
and ``samcli``; the project venv does not, on purpose. Usage::

    .tools/sam-venv/bin/python scripts/expand_template.py template.yaml build/template.expanded.json

Library use (same venv): ``expand(load_template(path))``.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

from samcli.yamlhelper import yaml_parse  # type: ignore[import-not-found, unused-ignore]
from samtranslator.translator.managed_policy_translator import (  # type: ignore[import-not-found, unused-ignore]
    ManagedPolicyLoader,
)
from samtranslator.translator.transform import transform  # type: ignore[import-not-found, unused-ignore]

OFFLINE_REGION = "us-east-1"
PLACEHOLDER_BUCKET = "offline-gate-artifacts"

# AWS managed policies a template may name by short name in a SAM ``Policies`` list. The translator normally lists
# them through IAM; offline we answer from this table (an unknown name fails the expansion, which is what we want).
_MANAGED_POLICY_PATHS = {
    "AWSLambdaBasicExecutionRole": "service-role/AWSLambdaBasicExecutionRole",
    "AWSLambdaVPCAccessExecutionRole": "service-role/AWSLambdaVPCAccessExecutionRole",
    "AWSLambdaSQSQueueExecutionRole": "service-role/AWSLambdaSQSQueueExecutionRole",
    "AWSLambdaRole": "service-role/AWSLambdaRole",
    "AWSXRayDaemonWriteAccess": "AWSXRayDaemonWriteAccess",
    "AWSXrayWriteOnlyAccess": "AWSXrayWriteOnlyAccess",
    "CloudWatchLambdaInsightsExecutionRolePolicy": "CloudWatchLambdaInsightsExecutionRolePolicy",
}


class OfflineManagedPolicyLoader(ManagedPolicyLoader):  # type: ignore[misc, unused-ignore]
    """Answers managed-policy lookups from a fixed table instead of ``iam:ListPolicies``."""

    def __init__(self) -> None:
        super().__init__(iam_client=None)

    def load(self) -> dict[str, str]:
        return {name: f"arn:aws:iam::aws:policy/{path}" for name, path in _MANAGED_POLICY_PATHS.items()}


def load_template(path: Path) -> dict[str, Any]:
    """Parse a SAM template (YAML short-form intrinsics such as ``!Ref`` included) into a dict."""
    parsed: dict[str, Any] = yaml_parse(path.read_text(encoding="utf-8"))
    return parsed


def with_offline_code_uris(template: dict[str, Any]) -> dict[str, Any]:
    """Return a copy whose local ``CodeUri``/``ContentUri`` values are ``s3://`` URIs.

    The translator accepts only S3 locations for ZIP packages (``sam package`` would upload them); the expansion
    does not depend on the code itself, so a placeholder object per resource is enough.
    """
    result = copy.deepcopy(template)
    function_globals = result.get("Globals", {}).get("Function", {})
    if _is_local_path(function_globals.get("CodeUri")):
        function_globals["CodeUri"] = f"s3://{PLACEHOLDER_BUCKET}/globals.zip"
    for logical_id, resource in result.get("Resources", {}).items():
        properties = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if _is_local_path(properties.get(key)):
                properties[key] = f"s3://{PLACEHOLDER_BUCKET}/{logical_id}.zip"
    return result


def expand(template: dict[str, Any]) -> dict[str, Any]:
    """Translate a SAM template into plain CloudFormation, offline."""
    # Pseudo parameters (AWS::Region, the partition in ARNs) come from the boto3 session's region.
    os.environ.setdefault("AWS_DEFAULT_REGION", OFFLINE_REGION)
    expanded: dict[str, Any] = transform(with_offline_code_uris(template), {}, OfflineManagedPolicyLoader())
    return expanded


def _is_local_path(value: object) -> bool:
    return isinstance(value, str) and not value.startswith("s3://")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: expand_template.py TEMPLATE OUTPUT_JSON", file=sys.stderr)
        return 2
    source, target = Path(argv[0]), Path(argv[1])
    expanded = expand(load_template(source))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(expanded, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    resources = expanded.get("Resources", {})
    print(f"expanded {source} -> {target} ({len(resources)} resources)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
