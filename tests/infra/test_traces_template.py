"""template.yaml's traces and access logs, expanded offline: every function gets the standard OTEL_* variables,
traces are off by default, the OTLP headers come only from Secrets Manager, and API Gateway's access log line is
JSON with the request id, the caller, the route, the status, both latencies and the trace id, kept for a parameter's
number of days."""

from __future__ import annotations

import json
from typing import Any

Template = dict[str, Any]
FUNCTIONS = ("StreamingApiFunction", "BufferedApiFunction", "MemoryFunction", "AutomationFunction")


def _env(template: Template, function: str) -> dict[str, Any]:
    variables: dict[str, Any] = template["Resources"][function]["Properties"]["Environment"]["Variables"]
    return variables


def test_traces_are_off_by_default_and_configured_by_the_standard_variables(expanded_template: Template) -> None:
    parameters = expanded_template["Parameters"]
    assert parameters["TracesEndpoint"]["Default"] == ""
    assert parameters["TracesHeadersSecretArn"]["Default"] == ""
    assert parameters["TracesCaptureContent"]["Default"] == "false"
    for function in FUNCTIONS:
        env = _env(expanded_template, function)
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == {"Ref": "TracesEndpoint"}, function
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
        assert env["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
        assert env["OTEL_TRACES_SAMPLER_ARG"] == {"Ref": "TracesSampleRatio"}
        assert env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] == {"Ref": "TracesCaptureContent"}


def test_the_otlp_headers_come_only_from_secrets_manager(expanded_template: Template) -> None:
    for function in FUNCTIONS:
        headers = _env(expanded_template, function)["OTEL_EXPORTER_OTLP_HEADERS"]
        condition, from_secret, without = headers["Fn::If"]
        assert condition == "HasTracesHeaders" and without == ""
        assert from_secret == {"Fn::Sub": "{{resolve:secretsmanager:${TracesHeadersSecretArn}}}"}
    assert not [name for name in expanded_template["Parameters"] if "Header" in name and "Secret" not in name]


def test_access_logs_are_json_with_the_caller_route_latencies_and_trace_id(expanded_template: Template) -> None:
    stages = [r for r in expanded_template["Resources"].values() if r["Type"] == "AWS::ApiGateway::Stage"]
    (stage,) = stages
    line = json.loads(stage["Properties"]["AccessLogSetting"]["Format"])
    assert line["requestId"] == "$context.requestId"
    assert (line["tenantId"], line["userId"]) == ("$context.authorizer.tenantId", "$context.authorizer.userId")
    assert (line["route"], line["status"]) == ("$context.resourcePath", "$context.status")
    assert line["latencyMs"] == "$context.responseLatency"
    assert line["integrationLatencyMs"] == "$context.integration.latency"
    assert line["traceId"] == "$context.xrayTraceId"
    group = expanded_template["Resources"]["ApiAccessLogGroup"]["Properties"]
    assert group["RetentionInDays"] == {"Ref": "AccessLogRetentionDays"}
