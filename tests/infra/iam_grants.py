"""What the expanded template grants each role, as (IAM action, resource) pairs: read by the least-privilege test
(nothing granted that no call needs) and by the runtime check (every call made is granted)."""

from __future__ import annotations

import re
from typing import Any

from . import template_checks as checks

Template = dict[str, Any]
Grant = tuple[str, str]  # (action, resource: a logical id, or "<table>/index/<name>")
MIGRATE_SELF = "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-migrate"
BACKGROUND_RUNS = (
    "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-background-run"
)
# Each tenant's webhook signing secret, named at run time under WEBHOOK_SECRET_PREFIX.
WEBHOOK_SECRETS = "secret:${AWS::StackName}/webhooks/*"


def _resource_key(resource: Any) -> str:
    text = checks.flatten(resource)
    if ":schedule/" in text:
        return "schedule/" + text.rsplit("/", 1)[-1]
    if ":secretsmanager:" in text and ":secret:" in text:
        return "secret:" + text.partition(":secret:")[2]
    if ":appconfig:" in text:  # .../application/${App.ApplicationId}/environment/${Env.EnvironmentId}/...
        return "appconfig/" + "/".join(re.findall(r"\$\{(\w+)\.\w+\}", text.partition(":application/")[2]))
    text = text.replace(".Arn}", "}")
    if text.startswith("${") and "}" in text:
        name, _, rest = text[2:].partition("}")
        return name + rest
    return text


def _statement_grants(statement: dict[str, Any]) -> set[Grant]:
    assert statement.get("Effect", "Allow") == "Allow", statement
    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    targets = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    return {(action, _resource_key(target)) for action in actions for target in targets}


def granted(template: Template) -> dict[str, set[Grant]]:
    """Per role: the (action, resource) pairs its inline policies allow, and those of the ``AWS::IAM::Policy``
    resources attached to it (a policy under a condition included: when it exists, the role has it)."""
    grants: dict[str, set[Grant]] = {}
    for role_id, role in checks.resources(template, "AWS::IAM::Role"):
        found = grants.setdefault(role_id, set())
        for policy in role["Properties"].get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                found |= _statement_grants(statement)
    for _, policy in checks.resources(template, "AWS::IAM::Policy"):
        attached = [str(role["Ref"]) for role in policy["Properties"].get("Roles", [])]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            for role_id in attached:
                grants.setdefault(role_id, set()).update(_statement_grants(statement))
    return grants
