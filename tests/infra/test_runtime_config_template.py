"""template.yaml's runtime configuration, expanded offline: the AppConfig resources, the rollback alarms, the roles,
and the extension layer that is off unless its parameter is set."""

from __future__ import annotations

import json
import re
from typing import Any

from shared.runtime_config import document_schema

from . import template_checks as checks

Template = dict[str, Any]
READERS = ("StreamingApiFunction", "BufferedApiFunction", "MemoryFunction", "AutomationFunction")
READER_ROLES = ["StreamingApiRole", "BufferedApiRole", "MemoryRole", "AutomationRole", "BackgroundRunRole"]


def _props(template: Template, logical_id: str) -> dict[str, Any]:
    properties: dict[str, Any] = template["Resources"][logical_id]["Properties"]
    return properties


def test_the_layer_parameter_is_empty_by_default_and_takes_only_an_appconfig_extension_arn(
    expanded_template: Template,
) -> None:
    parameter = expanded_template["Parameters"]["AppConfigExtensionLayerArn"]
    pattern = re.compile(parameter["AllowedPattern"])
    assert parameter["Default"] == ""
    assert pattern.fullmatch("")
    assert pattern.fullmatch("arn:aws:lambda:us-east-1:027255383542:layer:AWS-AppConfig-Extension-Arm64:224")
    assert not pattern.fullmatch("arn:aws:lambda:us-east-1:027255383542:layer:SomethingElse:1")
    condition = expanded_template["Conditions"]["UseRuntimeConfig"]
    assert condition == {"Fn::Not": [{"Fn::Equals": [{"Ref": "AppConfigExtensionLayerArn"}, ""]}]}


def test_the_configuration_profile_is_hosted_and_validated_by_the_generated_schema(
    expanded_template: Template,
) -> None:
    profile = _props(expanded_template, "RuntimeConfigProfile")
    assert (profile["LocationUri"], profile["Type"]) == ("hosted", "AWS.Freeform")
    (validator,) = profile["Validators"]
    assert validator["Type"] == "JSON_SCHEMA"
    assert json.loads(validator["Content"]) == document_schema()


def test_a_deployment_grows_ten_percent_a_step_and_is_rolled_back_by_the_error_alarms(
    expanded_template: Template,
) -> None:
    strategy = _props(expanded_template, "RuntimeConfigLinear")
    assert (strategy["GrowthType"], strategy["GrowthFactor"]) == ("LINEAR", 10)
    assert strategy["DeploymentDurationInMinutes"] == {"Ref": "RuntimeConfigRampMinutes"}
    assert strategy["FinalBakeTimeInMinutes"] == {"Ref": "RuntimeConfigBakeMinutes"}
    monitors = _props(expanded_template, "RuntimeConfigEnvironment")["Monitors"]
    assert [checks.flatten(m["AlarmArn"]) for m in monitors] == ["${RunErrorsAlarm.Arn}", "${Api5xxAlarm.Arn}"]
    assert {checks.flatten(m["AlarmRoleArn"]) for m in monitors} == {"${RuntimeConfigMonitorRole.Arn}"}
    # The first deployment is the empty document, at once: the extension has something to serve from the start.
    first = _props(expanded_template, "RuntimeConfigInitialDeployment")
    assert _props(expanded_template, "RuntimeConfigEmpty")["Content"] == "{}"
    assert checks.flatten(first["ConfigurationVersion"]) == "${RuntimeConfigEmpty.VersionNumber}"
    assert checks.flatten(first["DeploymentStrategyId"]) == "${RuntimeConfigAllAtOnce.Id}"


def test_appconfig_may_only_read_the_two_rollback_alarms(expanded_template: Template) -> None:
    role = _props(expanded_template, "RuntimeConfigMonitorRole")
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "appconfig.amazonaws.com"}
    assert "aws:SourceAccount" in trust["Condition"]["StringEquals"]
    (statement,) = [s for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]]
    assert statement["Action"] == "cloudwatch:DescribeAlarms"
    assert [checks.flatten(r) for r in statement["Resource"]] == ["${RunErrorsAlarm.Arn}", "${Api5xxAlarm.Arn}"]


def test_the_functions_that_choose_profiles_may_read_this_one_configuration_when_the_layer_is_set(
    expanded_template: Template,
) -> None:
    policy = expanded_template["Resources"]["RuntimeConfigReadPolicy"]
    assert policy["Condition"] == "UseRuntimeConfig"
    assert [role["Ref"] for role in policy["Properties"]["Roles"]] == READER_ROLES
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == ["appconfig:StartConfigurationSession", "appconfig:GetLatestConfiguration"]
    assert checks.flatten(statement["Resource"]).endswith(
        ":application/${RuntimeConfigApplication.ApplicationId}/environment/${RuntimeConfigEnvironment.EnvironmentId}"
        "/configuration/${RuntimeConfigProfile.ConfigurationProfileId}"
    )


def test_the_extension_layer_and_its_settings_reach_exactly_those_functions_and_only_when_set(
    expanded_template: Template,
) -> None:
    conditional_layer = {"Fn::If": ["UseRuntimeConfig", {"Ref": "AppConfigExtensionLayerArn"}, {"Ref": "AWS::NoValue"}]}
    for function_id in READERS:
        assert _props(expanded_template, function_id)["Layers"][-1] == conditional_layer, function_id
    assert "Layers" not in _props(expanded_template, "SweeperFunction")
    # The Web Adapter stays the streaming function's first layer.
    streaming = _props(expanded_template, "StreamingApiFunction")["Layers"]
    assert "LambdaAdapterLayerArm64" in checks.flatten(streaming[0])
    variables = _props(expanded_template, "MemoryFunction")["Environment"]["Variables"]
    for name in ("APPCONFIG_APPLICATION", "APPCONFIG_ENVIRONMENT", "APPCONFIG_PROFILE"):
        condition, when_set, otherwise = variables[name]["Fn::If"]
        assert (condition, otherwise) == ("UseRuntimeConfig", ""), name
        assert "Fn::GetAtt" in when_set
    # The extension prefetches, during INIT, the very path the adapter reads.
    _, prefetch, _ = variables["AWS_APPCONFIG_EXTENSION_PREFETCH_LIST"]["Fn::If"]
    assert checks.flatten(prefetch) == (
        "/applications/${RuntimeConfigApplication.ApplicationId}/environments/${RuntimeConfigEnvironment.EnvironmentId}"
        "/configurations/${RuntimeConfigProfile.ConfigurationProfileId}"
    )
    assert variables["AWS_APPCONFIG_EXTENSION_POLL_INTERVAL_SECONDS"] == {"Ref": "RuntimeConfigPollSeconds"}
