"""The Fargate option of the stack (template parameter ``StreamHost``, docs/deployment.md "Fargate option").

Off (``lambda``, the default) the template creates what it created before: every resource of the option carries a
condition that the default makes false, and nothing else refers to one. On, the ECS service runs the streaming
function's app with its environment and grants, behind an HTTPS listener that forwards only the SSE routes chosen.
The gate itself (cfn-lint, the template checks, checkov) runs for both values in scripts/sam_gate.sh
(test_template_offline.py runs the script; test_checkov.py scans the variant), and here on fargate-follow's copy.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.sam_tools import REPO_ROOT, SamTools

from . import template_checks as checks
from .iam_grants import granted

Template = dict[str, Any]
OPTION_CONDITIONS = {"StreamsOnFargate", "RunsOnFargate", "StreamHostLlmEgressRule", "StreamHostEndpointIngress"}
# The streaming function's variables a task has no use for: the Web Adapter's, and the AppConfig extension's (a
# Lambda layer the task does not have).
LAMBDA_ONLY = {
    "AWS_LAMBDA_EXEC_WRAPPER",
    "AWS_LWA_INVOKE_MODE",
    "AWS_LWA_READINESS_CHECK_PATH",
    "AWS_APPCONFIG_EXTENSION_POLL_INTERVAL_SECONDS",
    "AWS_APPCONFIG_EXTENSION_PREFETCH_LIST",
}
# What the Lambda runtime gives a function and a task must be told.
TASK_ONLY = {
    "AWS_REGION": {"Ref": "AWS::Region"},
    "FUNCTION_TIMEOUT_S": {"Ref": "StreamHostMaxStreamSeconds"},
    "ALB_IDLE_TIMEOUT_S": {"Ref": "StreamHostIdleTimeoutSeconds"},
}


def _variant_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("template_variant", REPO_ROOT / "scripts" / "template_variant.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VARIANT = _variant_module()


def _parameters(template: Template, **overrides: Any) -> dict[str, Any]:
    values = {name: spec.get("Default") for name, spec in template["Parameters"].items()}
    values.update(overrides)
    return values


def _holds(expression: Any, template: Template, parameters: dict[str, Any]) -> Any:
    """A condition of the template, evaluated as CloudFormation does for these parameter values."""
    if not isinstance(expression, dict):
        return expression
    ((name, arg),) = expression.items()
    if name == "Ref":
        return parameters[arg]
    if name == "Condition":
        return _holds(template["Conditions"][arg], template, parameters)
    if name == "Fn::Equals":  # CloudFormation compares a Number parameter's value as a string
        return str(_holds(arg[0], template, parameters)) == str(_holds(arg[1], template, parameters))
    if name == "Fn::Not":
        return not _holds(arg[0], template, parameters)
    if name == "Fn::And":
        return all(_holds(item, template, parameters) for item in arg)
    if name == "Fn::Or":
        return any(_holds(item, template, parameters) for item in arg)
    raise AssertionError(f"unexpected function {name} in Conditions")


def _created(template: Template, **overrides: Any) -> set[str]:
    parameters = _parameters(template, **overrides)
    return {
        logical_id
        for logical_id, resource in template["Resources"].items()
        if "Condition" not in resource or _holds({"Condition": resource["Condition"]}, template, parameters)
    }


def _option_resources(template: Template) -> set[str]:
    return {
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource.get("Condition") in OPTION_CONDITIONS
    }


def _refers_to(value: Any, targets: set[str]) -> set[str]:
    text = json.dumps(value)
    return {target for target in targets if re.search(rf'"{target}"|\$\{{{target}[.}}]', text)}


def _props(template: Template, logical_id: str) -> dict[str, Any]:
    properties: dict[str, Any] = template["Resources"][logical_id]["Properties"]
    return properties


# ------------------------------------------------------------------------------------------------ off, the default
def test_off_by_default_no_resource_of_the_option_exists_and_nothing_else_refers_to_one(
    expanded_template: Template,
) -> None:
    parameter = expanded_template["Parameters"]["StreamHost"]
    assert parameter["Default"] == "lambda"
    assert parameter["AllowedValues"] == list(VARIANT.VARIANTS)
    option = _option_resources(expanded_template)
    # GIVEN the option's resources: the ECS service and what it needs, the ALB, and the two ingress rules it adds
    types = {expanded_template["Resources"][r]["Type"] for r in option}
    assert {"AWS::ECS::Cluster", "AWS::ECS::Service", "AWS::ECS::TaskDefinition"} <= types
    assert {"AWS::ElasticLoadBalancingV2::LoadBalancer", "AWS::ElasticLoadBalancingV2::Listener"} <= types
    assert {r for r in option if not r.startswith("StreamHost")} == {
        "CacheFromStreamHostTasks",
        "EndpointsFromStreamHostTasks",
    }
    # THEN with the defaults none of them is created
    assert _created(expanded_template) & option == set()
    # AND no resource or output outside the option refers to one of them (the stack is what it was)
    for logical_id, resource in expanded_template["Resources"].items():
        if logical_id not in option:
            assert _refers_to(resource, option) == set(), logical_id
    for name, output in expanded_template["Outputs"].items():
        if _refers_to(output, option):
            assert output.get("Condition") == "StreamsOnFargate", name


@pytest.mark.parametrize("host", ["fargate-follow", "fargate-all"])
def test_on_the_option_adds_its_resources_and_changes_nothing_else(expanded_template: Template, host: str) -> None:
    off = _created(expanded_template)
    on = _created(expanded_template, StreamHost=host)
    run_route = {"StreamHostRunRoute"} if host == "fargate-all" else set()
    # The endpoints' ingress follows CreateInterfaceEndpoints, the LLM's egress rule LlmEgressPort.
    assert on - off == _option_resources(expanded_template) - {"StreamHostTasksToLlm", "StreamHostRunRoute"} | run_route
    assert off <= on


# ------------------------------------------------------------------------------------------------ on: what it runs
def test_the_task_runs_the_streaming_functions_app_with_its_environment(expanded_template: Template) -> None:
    function = _props(expanded_template, "StreamingApiFunction")["Environment"]["Variables"]
    (container,) = _props(expanded_template, "StreamHostTaskDefinition")["ContainerDefinitions"]
    task = {item["Name"]: item["Value"] for item in container["Environment"]}
    assert len(task) == len(container["Environment"])  # no name twice
    # The same variables and values, but the Lambda-only ones; runtime configuration off (no AppConfig agent).
    expected = {name: value for name, value in function.items() if name not in LAMBDA_ONLY}
    expected.update({"APPCONFIG_APPLICATION": "", "APPCONFIG_ENVIRONMENT": "", "APPCONFIG_PROFILE": ""}, **TASK_ONLY)
    assert task == expected
    assert task["PORT"] == "8080" == str(container["PortMappings"][0]["ContainerPort"])
    # The staged folder's server command, which the image's CMD names too.
    assert container["Command"] == ["functions/agent_api/serve.sh"]
    serve = REPO_ROOT / "functions" / "agent_api" / "serve.sh"
    assert serve.stat().st_mode & 0o111, "serve.sh must be executable"
    assert "AWS_LWA" not in serve.read_text(encoding="utf-8")
    dockerfile = (REPO_ROOT / "infra" / "streams.Dockerfile").read_text(encoding="utf-8")
    assert f"CMD {json.dumps(container['Command'])}" in dockerfile
    assert "--require-hashes" in dockerfile and "python:3.12" in dockerfile
    task_definition = _props(expanded_template, "StreamHostTaskDefinition")
    assert task_definition["RuntimePlatform"]["CpuArchitecture"] == "ARM64"
    assert container["User"] == "1000" and container["ReadonlyRootFilesystem"] is True


def test_the_task_role_grants_what_the_streaming_function_has_and_nothing_more(expanded_template: Template) -> None:
    grants = granted(expanded_template)
    appconfig = {grant for grant in grants["StreamingApiRole"] if grant[0].startswith("appconfig:")}
    assert appconfig, "the streaming role's conditional AppConfig policy"
    assert grants["StreamHostTaskRole"] == grants["StreamingApiRole"] - appconfig
    for role in ("StreamHostTaskRole", "StreamHostExecutionRole"):
        (trust,) = _props(expanded_template, role)["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
        assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


def _route_pattern(path: str) -> str:
    return re.sub(r"\{\w+\}", "*", path)


def test_the_listener_forwards_only_the_chosen_sse_routes_over_https(expanded_template: Template) -> None:
    listener = _props(expanded_template, "StreamHostListener")
    assert (listener["Protocol"], listener["Port"]) == ("HTTPS", 443)
    assert listener["Certificates"] == [{"CertificateArn": {"Ref": "StreamHostCertificateArn"}}]
    (default,) = listener["DefaultActions"]
    assert default["FixedResponseConfig"]["StatusCode"] == "404"
    follow = {_route_pattern(path) for path, method in checks.SSE_ROUTES if method == "get"}
    runs = {_route_pattern(path) for path, method in checks.SSE_ROUTES if method == "post"}
    rules = {
        logical_id: set(_props(expanded_template, logical_id)["Conditions"][0]["PathPatternConfig"]["Values"])
        for logical_id in ("StreamHostFollowRoutes", "StreamHostRunRoute")
    }
    assert rules == {"StreamHostFollowRoutes": follow | {"/healthz"}, "StreamHostRunRoute": runs}
    assert expanded_template["Resources"]["StreamHostRunRoute"]["Condition"] == "RunsOnFargate"
    target_group = _props(expanded_template, "StreamHostTargetGroup")
    assert (target_group["HealthCheckPath"], target_group["Matcher"]) == ("/healthz", {"HttpCode": "200"})
    # No 15-minute ceiling: the ALB's idle timeout goes to its maximum, and the app pings every 15 s anyway.
    idle = expanded_template["Parameters"]["StreamHostIdleTimeoutSeconds"]
    assert (idle["MinValue"], idle["MaxValue"]) == (30, 4000)
    balancer = _props(expanded_template, "StreamHostLoadBalancer")
    attributes = {a["Key"]: a["Value"] for a in balancer["LoadBalancerAttributes"]}
    assert attributes["idle_timeout.timeout_seconds"] == {"Ref": "StreamHostIdleTimeoutSeconds"}
    assert checks.check_stream_host(expanded_template) == []


def test_the_tasks_reach_the_cache_and_the_endpoints_and_only_the_alb_reaches_them(expanded_template: Template) -> None:
    cache = _props(expanded_template, "CacheFromStreamHostTasks")
    assert cache["GroupId"] == {"Ref": "CacheSecurityGroup"}
    assert cache["SourceSecurityGroupId"] == {"Ref": "StreamHostTaskSecurityGroup"}
    (ingress,) = _props(expanded_template, "StreamHostTaskSecurityGroup")["SecurityGroupIngress"]
    assert ingress["SourceSecurityGroupId"] == {"Ref": "StreamHostAlbSecurityGroup"}
    assert (ingress["FromPort"], ingress["ToPort"]) == (8080, 8080)
    network = _props(expanded_template, "StreamHostService")["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert network["AssignPublicIp"] == "DISABLED"
    assert network["Subnets"] == _props(expanded_template, "StreamingApiFunction")["VpcConfig"]["SubnetIds"]


# ------------------------------------------------------------------------------------------------ the gate, on
def test_the_gate_steps_pass_on_the_fargate_follow_copy(sam_tools: SamTools, tmp_path: Path) -> None:
    """fargate-all's copy goes through the whole gate script; fargate-follow's differs by one listener rule and goes
    through the expansion, cfn-lint and the template checks here."""
    template = tmp_path / "template.yaml"
    text = (REPO_ROOT / "template.yaml").read_text(encoding="utf-8")
    template.write_text(VARIANT.with_defaults(text, VARIANT.VARIANTS["fargate-follow"]), encoding="utf-8")
    expanded = sam_tools.expand(template, tmp_path / "expanded.json")
    assert expanded["Parameters"]["StreamHost"]["Default"] == "fargate-follow"
    assert checks.run_all(expanded) == {}
    result = sam_tools.run(sam_tools.cfn_lint, tmp_path / "expanded.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "StreamHostRunRoute" not in _created(expanded)
    assert {"StreamHostService", "StreamHostFollowRoutes"} <= _created(expanded)
