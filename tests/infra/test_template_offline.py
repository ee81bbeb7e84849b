"""template.yaml, expanded offline with the SAM translator, checked as CloudFormation.

Each test names the property it guards; the shared checks live in template_checks.py (the gate runs them too).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.aws.scheduler import SCHEDULE_NAME_PREFIX, schedule_name
from tests.support.sam_tools import REPO_ROOT, TEMPLATE_PATH, SamTools

from . import template_checks as checks

Template = dict[str, Any]

# The contract with the code: environment variable names read by the settings models.
APP_ENV_VARS = {
    "TABLE_NAME",
    "IDEMPOTENCY_TABLE_NAME",
    "REDIS_URL",
    "REDIS_CLUSTER_MODE",
    "LLM_BASE_URL",
    "LLM_API_KEY_SECRET_NAME",
    "LLM_PROVIDER",
    "MODEL_ID_MAP",
    "EMBEDDINGS_MODEL_ID",
    "WINDOW_N_OVERRIDE",
    "MEMORY_CONFIDENCE_THRESHOLD",
    "PROFILE_ROLLOUT",
    "APPCONFIG_APPLICATION",
    "APPCONFIG_ENVIRONMENT",
    "APPCONFIG_PROFILE",
    "TOOL_PLUGINS",
    "MCP_SERVERS",
    "EVENT_BUS_NAME",
    "AUTH_MODE",
    "JWT_ISSUER",
    "JWT_AUDIENCE",
    "JWKS_URL",
    "SERVED_TENANTS",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "LOG_LEVEL",
    "RUN_RETENTION_DAYS",
    "AUDIT_RETENTION_DAYS",
}
SCHEDULER_ENV_VARS = {
    "SCHEDULER_GROUP_NAME",
    "SCHEDULER_ROLE_ARN",
    "SCHEDULER_DEAD_LETTER_ARN",
    "AUTOMATION_FUNCTION_ARN",
}
HANDLERS = {
    "StreamingApiFunction": "functions/agent_api/run.sh",
    "BufferedApiFunction": "functions.agent_api.lambda_buffered.handler",
    "MemoryFunction": "functions.memory_extract.handler.handler",
    "WebhookFunction": "functions.webhook_delivery.handler.handler",
    "AutomationFunction": "functions.automation.handler.handler",
    "SweeperFunction": "functions.agent_api.sweeper_handler.handler",
    "MigrationFunction": "functions.migrate.handler.handler",
    "BackgroundRunFunction": "functions.background_run.handler.handler",
}


def _resource(template: Template, logical_id: str) -> dict[str, Any]:
    resource: dict[str, Any] = template["Resources"][logical_id]
    return resource


def _props(template: Template, logical_id: str) -> dict[str, Any]:
    properties: dict[str, Any] = _resource(template, logical_id)["Properties"]
    return properties


def _integration(template: Template, path: str, method: str) -> dict[str, Any]:
    for route_path, route_method, integration in checks.integrations(template):
        if (route_path, route_method) == (path, method):
            return integration
    raise AssertionError(f"{method.upper()} {path} is not on the REST API")


# ------------------------------------------------------------------------------------------------ the gate's checks
def test_sse_integrations_use_response_streaming_invocations(expanded_template: Template) -> None:
    # GIVEN the expanded template WHEN reading each SSE route's integration
    for path, method in checks.SSE_ROUTES:
        integration = _integration(expanded_template, path, method)
        # THEN it invokes the streaming function through the streaming API, in STREAM transfer mode
        uri = checks.flatten(integration["uri"])
        assert uri.endswith("/response-streaming-invocations"), (path, uri)
        assert "${StreamingApiFunction.Arn}" in uri
        assert integration["responseTransferMode"] == "STREAM"
        assert integration["timeoutInMillis"] == 900_000
    assert checks.check_sse_routes_stream(expanded_template) == []


def test_buffered_routes_stay_on_the_mangum_function(expanded_template: Template) -> None:
    integration = _integration(expanded_template, "/api/v1/threads/{threadId}/history", "get")
    uri = checks.flatten(integration["uri"])
    assert uri.endswith("/invocations")
    assert "${BufferedApiFunction.Arn}" in uri
    assert "responseTransferMode" not in integration


def test_memory_event_source_reports_batch_item_failures(expanded_template: Template) -> None:
    mapping = _props(expanded_template, "MemoryFunctionRunCompleted")
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": ["MemoryQueue", "Arn"]}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert checks.check_sqs_sources_report_batch_item_failures(expanded_template) == []


def test_memory_function_can_delay_extraction_on_its_own_queue(expanded_template: Template) -> None:
    """Coalesced extraction: the memory function sends "extraction due" messages (DelaySeconds) to its queue."""
    env = _props(expanded_template, "MemoryFunction")["Environment"]["Variables"]
    assert env["MEMORY_QUEUE_URL"] == {"Ref": "MemoryQueue"}
    statements = [
        st
        for policy in _props(expanded_template, "MemoryRole")["Policies"]
        for st in policy["PolicyDocument"]["Statement"]
    ]
    sends = [st for st in statements if "sqs:SendMessage" in checks.flatten(st["Action"])]
    assert [st["Resource"] for st in sends] == [{"Fn::GetAtt": ["MemoryQueue", "Arn"]}]


def test_every_cron_expression_has_six_fields(expanded_template: Template) -> None:
    expressions = checks.schedule_expressions(expanded_template)
    assert "cron(0 6 * * ? *)" in expressions
    assert all(len(expression[len("cron(") : -1].split()) == 6 for expression in expressions)
    assert checks.check_schedule_expressions(expanded_template) == []


def test_queue_visibility_timeout_is_at_least_six_times_the_memory_function_timeout(
    expanded_template: Template,
) -> None:
    visibility = _props(expanded_template, "MemoryQueue")["VisibilityTimeout"]
    timeout = _props(expanded_template, "MemoryFunction")["Timeout"]
    assert visibility >= 6 * timeout
    assert "RedrivePolicy" in _props(expanded_template, "MemoryQueue")
    assert checks.check_queue_visibility_timeouts(expanded_template) == []


def test_no_wildcard_actions_or_resources_on_data_permissions(expanded_template: Template) -> None:
    assert checks.check_no_wildcard_data_permissions(expanded_template) == []


def test_every_function_has_a_log_group_with_retention(expanded_template: Template) -> None:
    functions = dict(checks.resources(expanded_template, "AWS::Lambda::Function"))
    assert set(functions) == set(HANDLERS)
    for logical_id, function in functions.items():
        group_id = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        group = _resource(expanded_template, group_id)
        assert group["Type"] == "AWS::Logs::LogGroup", logical_id
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert checks.check_function_log_groups(expanded_template) == []


ACCESS_LOG_FIELDS = {
    "requestId",
    "extendedRequestId",
    "ip",
    "tenantId",
    "userId",
    "requestTime",
    "httpMethod",
    "route",
    "path",
    "status",
    "protocol",
    "responseLength",
    "latencyMs",
    "integrationLatencyMs",
    "integrationStatus",
    "integrationRequestId",
    "traceId",
}


def test_the_api_stage_writes_json_access_logs_to_a_log_group_with_retention(expanded_template: Template) -> None:
    stages = dict(checks.resources(expanded_template, "AWS::ApiGateway::Stage"))
    assert list(stages) == ["AgentApiStage"]
    setting = stages["AgentApiStage"]["Properties"]["AccessLogSetting"]
    assert setting["DestinationArn"] == {"Fn::GetAtt": ["ApiAccessLogGroup", "Arn"]}
    group = _resource(expanded_template, "ApiAccessLogGroup")
    assert group["Type"] == "AWS::Logs::LogGroup"
    assert group["Properties"]["RetentionInDays"] == {"Ref": "AccessLogRetentionDays"}
    # One JSON object per request, each field a $context variable.
    fields = json.loads(setting["Format"])
    assert set(fields) == ACCESS_LOG_FIELDS
    assert all(value.startswith("$context.") for value in fields.values()), fields


# ------------------------------------------------------------------------------------------------ the wiring
def test_entry_points_run_python_312_from_one_code_folder(expanded_template: Template) -> None:
    for logical_id, handler in HANDLERS.items():
        properties = _props(expanded_template, logical_id)
        assert properties["Handler"] == handler
        assert properties["Runtime"] == "python3.12"
        assert properties["Architectures"] == ["arm64"]
    # The expansion replaces the local folder by one placeholder object: all four share it.
    code = {str(_props(expanded_template, logical_id)["Code"]) for logical_id in HANDLERS}
    assert len(code) == 1


def test_streaming_function_runs_under_the_web_adapter(expanded_template: Template) -> None:
    properties = _props(expanded_template, "StreamingApiFunction")
    variables = properties["Environment"]["Variables"]
    assert variables["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert variables["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert variables["AWS_LWA_READINESS_CHECK_PATH"] == "/healthz"
    assert variables["PORT"] == "8080"
    layer = checks.flatten(properties["Layers"][0])
    assert ":753240598075:layer:LambdaAdapterLayerArm64:" in layer
    # Streams last up to 15 minutes behind the REST API.
    assert properties["Timeout"] == 900


def test_every_function_gets_the_app_environment(expanded_template: Template) -> None:
    for logical_id in HANDLERS:
        variables = _props(expanded_template, logical_id)["Environment"]["Variables"]
        assert set(variables) >= APP_ENV_VARS, logical_id
        assert variables["REDIS_CLUSTER_MODE"] == "true"
        assert checks.flatten(variables["REDIS_URL"]).startswith("rediss://")
        assert variables["AUTH_MODE"] == "jwks"
        assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "AgentBackend"
        assert variables["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
    buffered = _props(expanded_template, "BufferedApiFunction")["Environment"]["Variables"]
    assert set(buffered) >= SCHEDULER_ENV_VARS


def _store_table() -> dict[str, Any]:
    from shared.adapters.aws.table_schema import create_table

    class Recorder:
        def create_table(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    recorder = Recorder()
    create_table(recorder, "t")  # type: ignore[arg-type]
    return recorder.kwargs


def _index_shapes(indexes: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    return {
        i["IndexName"]: (
            tuple((k["AttributeName"], k["KeyType"]) for k in i["KeySchema"]),
            i["Projection"]["ProjectionType"],
            tuple(sorted(i["Projection"].get("NonKeyAttributes", ()))),
        )
        for i in indexes
    }


def test_app_table_has_the_keys_index_ttl_and_recovery_the_store_needs(expanded_template: Template) -> None:
    table = _props(expanded_template, "AgentTable")
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["KeySchema"] == [
        {"AttributeName": "PK", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    # The same indexes as the table the store creates locally and in tests (shared.adapters.aws.table_schema)
    assert _index_shapes(table["GlobalSecondaryIndexes"]) == _index_shapes(_store_table()["GlobalSecondaryIndexes"])
    assert {i["IndexName"] for i in table["GlobalSecondaryIndexes"]} == {"GSI1", "GSI2", "GSI3"}
    assert all(attribute["AttributeType"] == "S" for attribute in table["AttributeDefinitions"])
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    idempotency = _props(expanded_template, "IdempotencyTable")
    assert idempotency["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert idempotency["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}


def test_cache_is_serverless_and_reached_over_tls(expanded_template: Template) -> None:
    cache = _props(expanded_template, "AgentCache")
    assert cache["Engine"] in {"valkey", "redis"}
    ingress = _props(expanded_template, "CacheSecurityGroup")["SecurityGroupIngress"]
    assert [(rule["FromPort"], rule["ToPort"]) for rule in ingress] == [(6379, 6380)]


def test_run_ended_events_reach_the_webhook_queue_and_only_its_rule_may_send(expanded_template: Template) -> None:
    from shared.memory.trigger import EVENT_SOURCE, RUN_COMPLETED

    rule = _props(expanded_template, "RunEndedWebhookRule")
    assert rule["EventPattern"] == {"source": [EVENT_SOURCE], "detail-type": [RUN_COMPLETED]}
    assert rule["Targets"][0]["Arn"] == {"Fn::GetAtt": ["WebhookQueue", "Arn"]}
    (statement,) = _props(expanded_template, "WebhookQueuePolicy")["PolicyDocument"]["Statement"]
    assert statement["Condition"]["ArnEquals"]["aws:SourceArn"] == {"Fn::GetAtt": ["RunEndedWebhookRule", "Arn"]}
    mapping = _props(expanded_template, "WebhookFunctionRunEnded")
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": ["WebhookQueue", "Arn"]}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    redrive = _props(expanded_template, "WebhookQueue")["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": ["WebhookDeadLetterQueue", "Arn"]}


def test_run_completed_events_reach_the_memory_queue(expanded_template: Template) -> None:
    rule = _props(expanded_template, "RunCompletedRule")
    assert rule["EventPattern"] == {
        "source": ["agent-backend"],
        "detail-type": ["agent.run.completed", "agent.branch.switched"],  # docs/memory.md, "Memories and branches"
    }
    assert rule["Targets"][0]["Arn"] == {"Fn::GetAtt": ["MemoryQueue", "Arn"]}
    statement = _props(expanded_template, "MemoryQueuePolicy")["PolicyDocument"]["Statement"][0]
    assert statement["Condition"]["ArnEquals"]["aws:SourceArn"] == {"Fn::GetAtt": ["RunCompletedRule", "Arn"]}


@pytest.mark.parametrize(
    ("role_id", "function_id"),
    [("SchedulerInvokeRole", "AutomationFunction"), ("SweeperInvokeRole", "SweeperFunction")],
)
def test_scheduler_roles_may_only_invoke_their_function_and_dead_letter_a_fire(
    expanded_template: Template, role_id: str, function_id: str
) -> None:
    role = _props(expanded_template, role_id)
    (policy,) = role["Policies"]
    invoke, dead_letters = policy["PolicyDocument"]["Statement"]
    assert invoke["Action"] == "lambda:InvokeFunction"
    assert invoke["Resource"] == {"Fn::GetAtt": [function_id, "Arn"]}
    assert dead_letters["Action"] == "sqs:SendMessage"
    assert dead_letters["Resource"] == {"Fn::GetAtt": ["AsyncDeadLetterQueue", "Arn"]}
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


def test_api_manages_schedules_in_its_group_and_passes_only_the_scheduler_role(
    expanded_template: Template,
) -> None:
    statements = {
        statement["Sid"]: statement
        for statement in _props(expanded_template, "BufferedApiRole")["Policies"][0]["PolicyDocument"]["Statement"]
    }
    schedules = statements["AutomationSchedules"]
    assert sorted(schedules["Action"]) == [
        "scheduler:CreateSchedule",
        "scheduler:DeleteSchedule",
        "scheduler:UpdateSchedule",
    ]
    # Only the schedules the adapter names (task-<id>), never the sweeper's or the canary's in the same group.
    resource = checks.flatten(schedules["Resource"])
    assert resource.endswith(f":schedule/${{AutomationScheduleGroup}}/{SCHEDULE_NAME_PREFIX}*")
    assert schedule_name("any-task").startswith(SCHEDULE_NAME_PREFIX)
    assert checks.TASK_SCHEDULE_PREFIX == SCHEDULE_NAME_PREFIX
    template_schedules = [
        props["Properties"]["Name"] for _, props in checks.resources(expanded_template, "AWS::Scheduler::Schedule")
    ]
    assert template_schedules and not any(name.startswith(SCHEDULE_NAME_PREFIX) for name in template_schedules)
    assert checks.check_schedule_permissions(expanded_template) == []
    pass_role = statements["PassSchedulerRoleToSchedulerOnly"]
    assert pass_role["Resource"] == {"Fn::GetAtt": ["SchedulerInvokeRole", "Arn"]}
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}


def test_alarms_watch_the_metrics_the_code_emits(expanded_template: Template) -> None:
    alarms = [props["Properties"] for _, props in checks.resources(expanded_template, "AWS::CloudWatch::Alarm")]
    by_metric = {(alarm["Namespace"], alarm["MetricName"]): alarm for alarm in alarms}
    assert by_metric["AgentBackend", "RunErrors"]["Statistic"] == "Sum"
    assert by_metric["AgentBackend", "RunDurationMs"]["ExtendedStatistic"] == "p95"
    assert by_metric["AgentBackend", "InputTokens"]["Statistic"] == "Average"
    assert by_metric["AgentBackend", "ToolRefusals"]["Statistic"] == "Sum"
    depth_alarmed = {
        checks.flatten(alarm["Dimensions"][0]["Value"])
        for alarm in alarms
        if (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    }
    queues = ("MemoryDeadLetterQueue", "WebhookDeadLetterQueue", "AsyncDeadLetterQueue")
    assert depth_alarmed == {f"${{{queue}.QueueName}}" for queue in queues}
    assert checks.check_dead_letter_queues_alarmed(expanded_template) == []
    for alarm in alarms:
        if alarm["Namespace"] == "AgentBackend":
            assert alarm["Dimensions"][0]["Name"] == "service"
    body = checks.flatten(_props(expanded_template, "OperationsDashboard")["DashboardBody"])
    for metric in ("RunErrors", "RunDurationMs", "InputTokens", "ToolRefusals", "ApproximateNumberOfMessagesVisible"):
        assert f'"{metric}"' in body


# ------------------------------------------------------------------------------------------------ the linters
def test_expansion_passes_cfn_lint(sam_tools: SamTools, expanded_template_path: Path) -> None:
    result = sam_tools.run(sam_tools.cfn_lint, expanded_template_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_gate_script_passes_on_the_template(sam_tools: SamTools, tmp_path: Path) -> None:
    """sam validate, sam validate --lint, expansion, cfn-lint on the expansion, the checks and checkov, as CI runs
    them: on the template (StreamHost lambda, the default) and on its copy with StreamHost fargate-all."""
    result = sam_tools.run(
        "bash",
        REPO_ROOT / "scripts" / "sam_gate.sh",
        TEMPLATE_PATH,
        extra_env={"SAM_GATE_OUT_DIR": str(tmp_path), "SAM_GATE_SKIP_BUILD": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for host in ("lambda", "fargate-all"):
        assert f"== [{host}] checkov" in result.stdout, result.stdout
    assert "sam_gate: all steps passed" in result.stdout


# ------------------------------------------------------------------------------------------------ issue 17
def test_the_gateway_preflight_allows_what_the_app_allows(expanded_template: Template) -> None:
    from functions.agent_api.cors import ALLOWED_HEADERS, ALLOWED_METHODS, PREFLIGHT_MAX_AGE_S

    paths = _props(expanded_template, "AgentApi")["Body"]["paths"]
    for path, operations in paths.items():
        integration = operations["options"]["x-amazon-apigateway-integration"]
        assert integration["type"] == "mock", path
        params = integration["responses"]["default"]["responseParameters"]
        assert params["method.response.header.Access-Control-Allow-Headers"] == "'" + ",".join(ALLOWED_HEADERS) + "'"
        assert params["method.response.header.Access-Control-Allow-Methods"] == "'" + ",".join(ALLOWED_METHODS) + "'"
        assert params["method.response.header.Access-Control-Max-Age"] == f"'{PREFLIGHT_MAX_AGE_S}'"
        assert params["method.response.header.Access-Control-Allow-Origin"] == {"Fn::Sub": "'${CorsAllowedOrigin}'"}
    responses = _props(expanded_template, "AgentApi")["Body"]["x-amazon-apigateway-gateway-responses"]
    for kind in ("DEFAULT_4XX", "DEFAULT_5XX"):
        assert responses[kind]["responseParameters"]["gatewayresponse.header.Access-Control-Allow-Origin"] == {
            "Fn::Sub": "'${CorsAllowedOrigin}'"
        }
    assert checks.check_cors(expanded_template) == []


def _evaluate(expression: Any, parameters: dict[str, Any]) -> Any:
    """The few intrinsic functions the template's Rules use, evaluated as CloudFormation does."""
    if isinstance(expression, dict):
        ((name, arg),) = expression.items()
        if name == "Ref":
            return parameters[arg]
        if name == "Fn::Equals":
            return _evaluate(arg[0], parameters) == _evaluate(arg[1], parameters)
        if name == "Fn::Not":
            return not _evaluate(arg[0], parameters)
        if name == "Fn::And":
            return all(_evaluate(item, parameters) for item in arg)
        if name == "Fn::Contains":
            return _evaluate(arg[1], parameters) in _evaluate(arg[0], parameters)
        raise AssertionError(f"unexpected function {name} in Rules")
    return expression


def _rule_failures(template: Template, **overrides: Any) -> list[str]:
    """Names of the rules that would refuse a deploy with these parameters (defaults for the rest)."""
    parameters: dict[str, Any] = {}
    for name, spec in template["Parameters"].items():
        default = spec.get("Default")
        parameters[name] = default.split(",") if spec["Type"] == "CommaDelimitedList" else default
    parameters.update(overrides)
    failures = []
    for name, rule in template["Rules"].items():
        if "RuleCondition" in rule and not _evaluate(rule["RuleCondition"], parameters):
            continue
        if not all(_evaluate(a["Assert"], parameters) for a in rule["Assertions"]):
            failures.append(name)
    return failures


STREAM_HOST_ON = {
    "StreamHostImageRepository": "agent-backend-streams",
    "StreamHostImageTag": "abc123",
    "StreamHostCertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/x",
}
EXISTING_VPC = {"ExistingVpcId": "vpc-1", "ExistingSubnetIds": ["subnet-a", "subnet-b"]}


@pytest.mark.parametrize(
    ("overrides", "refused_by"),
    [
        ({}, []),
        ({"Stage": "prod"}, ["ProdCorsOrigin"]),
        ({"Stage": "prod", "CorsAllowedOrigin": "https://app.example.com"}, []),
        ({"Stage": "staging"}, []),
        ({"ExistingVpcId": "vpc-1"}, ["ExistingVpcNeedsSubnets"]),
        ({"ExistingVpcId": "vpc-1", "ExistingSubnetIds": ["subnet-a", ""]}, ["ExistingVpcNeedsSubnets"]),
        ({"ExistingVpcId": "vpc-1", "ExistingSubnetIds": ["subnet-a", "subnet-b"]}, []),
        # The Fargate option (docs/deployment.md "Fargate option") needs its image and certificate ...
        ({"StreamHost": "fargate-follow"}, ["StreamHostNeedsImageAndCertificate"]),
        ({"StreamHost": "fargate-all", "StreamHostImageRepository": "r", "StreamHostImageTag": "t"},
         ["StreamHostNeedsImageAndCertificate"]),
        ({"StreamHost": "fargate-all", **STREAM_HOST_ON}, []),
        # ... public subnets for its ALB in an existing VPC ...
        ({"StreamHost": "fargate-follow", **STREAM_HOST_ON, **EXISTING_VPC},
         ["StreamHostInExistingVpcNeedsPublicSubnets"]),
        ({"StreamHost": "fargate-follow", **STREAM_HOST_ON, **EXISTING_VPC,
          "StreamHostPublicSubnetIds": ["subnet-p", "subnet-q"]}, []),
        # ... and runs no turn while the functions follow a runtime configuration the task cannot read.
        ({"StreamHost": "fargate-all", **STREAM_HOST_ON, "AppConfigExtensionLayerArn": "arn:layer"},
         ["StreamHostRunsWithoutRuntimeConfig"]),
        ({"StreamHost": "fargate-follow", **STREAM_HOST_ON, "AppConfigExtensionLayerArn": "arn:layer"}, []),
    ],
)
def test_rules_refuse_a_star_origin_in_prod_an_existing_vpc_without_subnets_and_an_incomplete_stream_host(
    expanded_template: Template, overrides: dict[str, Any], refused_by: list[str]
) -> None:
    assert _rule_failures(expanded_template, **overrides) == refused_by


def test_cors_origin_parameter_accepts_an_origin_and_refuses_paths_and_lists(expanded_template: Template) -> None:
    import re

    pattern = re.compile(expanded_template["Parameters"]["CorsAllowedOrigin"]["AllowedPattern"])
    for good in ("*", "https://app.example.com", "http://localhost:5173"):
        assert pattern.fullmatch(good), good
    for bad in ("", "https://app.example.com/", "app.example.com", "https://a.com,https://b.com", "'*'"):
        assert not pattern.fullmatch(bad), bad


def test_served_tenants_parameter_is_every_tenant_by_default_or_a_list(expanded_template: Template) -> None:
    import re

    parameter = expanded_template["Parameters"]["ServedTenants"]
    assert parameter["Default"] == "*"
    pattern = re.compile(parameter["AllowedPattern"])
    for good in ("*", "tenant-a", "tenant-a,tenant-b", "tenant-a, tenant-b"):
        assert pattern.fullmatch(good), good
    for bad in ("", "*,tenant-a", "tenant-a,*", ",", "tenant-a,", " tenant-a"):
        assert not pattern.fullmatch(bad), bad


RESERVED_CONCURRENCY = {
    "MemoryFunction": ("MemoryReservedConcurrency", "5"),
    "AutomationFunction": ("AutomationReservedConcurrency", "10"),
    "SweeperFunction": ("SweeperReservedConcurrency", "1"),
    "WebhookFunction": ("WebhookReservedConcurrency", "5"),
    # A cap rather than a reservation (a reservation is both): empty by default, so a low quota can deploy.
    "StreamingApiFunction": ("StreamingMaxConcurrency", ""),
}


def test_background_functions_reserve_concurrency_and_the_streaming_function_is_capped_from_parameters(
    expanded_template: Template,
) -> None:
    parameters = expanded_template["Parameters"]
    for function_id in HANDLERS:
        reserved = _props(expanded_template, function_id).get("ReservedConcurrentExecutions")
        if function_id not in RESERVED_CONCURRENCY:
            assert reserved is None, function_id
            continue
        parameter, default = RESERVED_CONCURRENCY[function_id]
        condition, value, otherwise = reserved["Fn::If"]
        assert (value, otherwise) == ({"Ref": parameter}, {"Ref": "AWS::NoValue"}), function_id
        assert expanded_template["Conditions"][condition] == {"Fn::Not": [{"Fn::Equals": [{"Ref": parameter}, ""]}]}
        assert parameters[parameter]["Default"] == default
    # A queue consumer's reservation never throttles its event source: at least the mapping's MaximumConcurrency.
    mappings = {
        mapping["Properties"]["FunctionName"]["Ref"]: mapping
        for _, mapping in checks.resources(expanded_template, "AWS::Lambda::EventSourceMapping")
    }
    assert set(mappings) == {"MemoryFunction", "WebhookFunction"}
    for function_id, mapping in mappings.items():
        maximum = mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"]
        parameter, _ = RESERVED_CONCURRENCY[function_id]
        pattern = re.compile(parameters[parameter]["AllowedPattern"])
        assert all(pattern.fullmatch(str(n)) for n in (maximum, maximum + 1, 10, 25, 100, 1000)), function_id
        assert not any(pattern.fullmatch(str(n)) for n in range(maximum)), function_id
        assert pattern.fullmatch("")


def test_prod_gets_a_nat_per_az_and_there_is_no_sqs_endpoint(expanded_template: Template) -> None:
    conditions = expanded_template["Conditions"]
    assert conditions["NatPerAz"] == {"Fn::And": [{"Condition": "CreateVpc"}, {"Condition": "IsProd"}]}
    for logical_id in ("NatEipB", "NatGatewayB", "PrivateRouteTableB", "PrivateDefaultRouteB"):
        assert _resource(expanded_template, logical_id)["Condition"] == "NatPerAz"
    assert _props(expanded_template, "NatGatewayB")["SubnetId"] == {"Ref": "PublicSubnetB"}
    association = _props(expanded_template, "PrivateSubnetBRouteTableAssociation")
    assert association["RouteTableId"] == {
        "Fn::If": ["NatPerAz", {"Ref": "PrivateRouteTableB"}, {"Ref": "PrivateRouteTable"}]
    }
    # Lambda polls SQS from the service side: nothing in the VPC calls SQS.
    services = [
        checks.flatten(props["Properties"]["ServiceName"])
        for _, props in checks.resources(expanded_template, "AWS::EC2::VPCEndpoint")
    ]
    assert not any(name.endswith(".sqs") for name in services)
    # The attachment bucket through a gateway endpoint, as the table: no NAT charge per GB of images.
    assert {name.rsplit(".", 1)[-1] for name in services} == {"dynamodb", "events", "s3", "scheduler", "secretsmanager"}


def test_retention_parameters_reach_every_function(expanded_template: Template) -> None:
    from shared.adapters.aws.table_schema import Retention

    parameters = expanded_template["Parameters"]
    assert parameters["RunRetentionDays"]["Default"] == Retention().run.days
    assert parameters["AuditRetentionDays"]["Default"] == Retention().audit.days
    for logical_id in HANDLERS:
        variables = _props(expanded_template, logical_id)["Environment"]["Variables"]
        assert variables["RUN_RETENTION_DAYS"] == {"Ref": "RunRetentionDays"}
        assert variables["AUDIT_RETENTION_DAYS"] == {"Ref": "AuditRetentionDays"}


def test_failed_async_work_lands_in_one_alarmed_dead_letter_queue(expanded_template: Template) -> None:
    dlq = {"Fn::GetAtt": ["AsyncDeadLetterQueue", "Arn"]}
    rules = ("RunCompletedRule", "RunEndedWebhookRule")
    for rule in rules:
        assert _props(expanded_template, rule)["Targets"][0]["DeadLetterConfig"] == {"Arn": dlq}, rule
    # EventBridge may send dead letters to the queue for those two rules only.
    (statement,) = _props(expanded_template, "AsyncDeadLetterQueuePolicy")["PolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert statement["Condition"]["ArnEquals"]["aws:SourceArn"] == [{"Fn::GetAtt": [rule, "Arn"]} for rule in rules]
    for schedule in ("AutomationFunctionSchedulerCanary", "SweeperFunctionEvery5Minutes"):
        assert _props(expanded_template, schedule)["Target"]["DeadLetterConfig"] == {"Arn": dlq}
    # Lambda's retries run an automation fire refused on a busy thread (docs/automation.md); the sweeper's retry is
    # its next run, 5 minutes later.
    for function, retries in (("AutomationFunction", 2), ("SweeperFunction", 0)):
        config = _props(expanded_template, f"{function}EventInvokeConfig")
        assert config["DestinationConfig"]["OnFailure"]["Destination"] == dlq
        assert config["MaximumRetryAttempts"] == retries
    assert checks.check_async_targets_have_dead_letters(expanded_template) == []
    alarm = _props(expanded_template, "AsyncDeadLetterDepthAlarm")
    assert alarm["Dimensions"][0]["Value"] == {"Fn::GetAtt": ["AsyncDeadLetterQueue", "QueueName"]}


def test_failures_the_code_cannot_count_are_alarmed_and_the_sweeper_is_on_the_dashboard(
    expanded_template: Template,
) -> None:
    assert checks.check_failure_alarms(expanded_template) == []
    api = _props(expanded_template, "Api5xxAlarm")
    assert (api["Namespace"], api["MetricName"]) == ("AWS/ApiGateway", "5XXError")
    body = checks.flatten(_props(expanded_template, "OperationsDashboard")["DashboardBody"])
    assert '"FunctionName", "${SweeperFunction}"' in body
    # Every function's errors and throttles are on the dashboard, beside its alarms.
    for function_id in HANDLERS:
        for metric in ("Errors", "Throttles"):
            assert f'"{metric}", "FunctionName", "${{{function_id}}}"' in body, (function_id, metric)
    for queue in (
        "MemoryQueue",
        "MemoryDeadLetterQueue",
        "WebhookQueue",
        "WebhookDeadLetterQueue",
        "AsyncDeadLetterQueue",
    ):
        assert f'"QueueName", "${{{queue}.QueueName}}"' in body, queue
    assert '"RunsSwept"' in body and '"Throttles"' in body and '"5XXError"' in body
    assert checks.check_buffered_timeouts(expanded_template) == []
    assert _props(expanded_template, "BufferedApiFunction")["Timeout"] < checks.API_GATEWAY_TIMEOUT_S


def test_the_web_adapter_layer_version_is_a_parameter(expanded_template: Template) -> None:
    parameter = expanded_template["Parameters"]["WebAdapterLayerVersion"]
    assert parameter["Type"] == "Number" and parameter["MinValue"] == 1
    layer = checks.flatten(_props(expanded_template, "StreamingApiFunction")["Layers"][0])
    assert layer.endswith(":layer:LambdaAdapterLayerArm64:${WebAdapterLayerVersion}")


def test_the_deploy_docs_list_every_parameter_and_the_checklist_covers_what_the_gate_cannot_check(
    expanded_template: Template,
) -> None:
    readme = (REPO_ROOT / "infra" / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| Parameter | Default |") : readme.index("### ExistingVpc mode")]
    missing = [name for name in expanded_template["Parameters"] if f"`{name}`" not in table and "Threshold" not in name]
    assert missing == []
    deployment = (REPO_ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    checklist = deployment[deployment.index("## Pre-deploy checklist") :]
    for must in (
        "WebAdapterLayerVersion",
        "get-layer-version-by-arn",
        "devtools.preflight",
        "CorsAllowedOrigin",
        "llm-api-key",
        "ExistingSubnetIds",
        "enableDnsHostnames",
        "cloudwatchRoleArn",
        "ConcurrentExecutions",
    ):
        assert must in checklist, must


def test_the_functions_that_touch_attachments_get_the_bucket_and_no_other_function_does(
    expanded_template: Template,
) -> None:
    from typing import get_args

    from shared.settings import AttachmentSettings, ModelSettings

    def variables(logical_id: str) -> dict[str, Any]:
        found: dict[str, Any] = _props(expanded_template, logical_id).get("Environment", {}).get("Variables", {})
        return found

    bucket = {"Ref": "AttachmentsBucket"}
    # The API stores, reads and deletes parts; the automation function's worker reads a task thread's images.
    for logical_id in ("StreamingApiFunction", "BufferedApiFunction", "AutomationFunction"):
        assert variables(logical_id)["ATTACHMENTS_BUCKET"] == bucket, logical_id
    for logical_id in ("MemoryFunction", "SweeperFunction", "MigrationFunction"):
        assert "ATTACHMENTS_BUCKET" not in variables(logical_id), logical_id
    # History's presigned GETs on AWS, within the 15 minutes the settings allow.
    for logical_id in ("StreamingApiFunction", "BufferedApiFunction"):
        assert variables(logical_id)["ATTACHMENT_PRESIGNED_URLS"] == "true"
        ttl = int(variables(logical_id)["ATTACHMENT_URL_TTL_S"])
        assert ttl <= AttachmentSettings.model_fields["attachment_url_ttl_s"].default
    # How images reach the model: the parameter's values are the setting's.
    parameter = expanded_template["Parameters"]["LlmImageUrls"]
    assert parameter["AllowedValues"] == list(get_args(ModelSettings.model_fields["llm_image_urls"].annotation))
    for logical_id in ("StreamingApiFunction", "AutomationFunction"):
        assert variables(logical_id)["LLM_IMAGE_URLS"] == {"Ref": "LlmImageUrls"}
    assert checks.check_buckets_private_and_encrypted(expanded_template) == []
    assert checks.check_attachment_uploads_expire(expanded_template) == []


# Routes of the app that the REST API leaves out on purpose: on AWS a part's URL is a presigned S3 GET and an upload
# is PUT to a presigned S3 URL; these two serve make dev, whose in-process S3 no client reaches (docs/storage.md,
# "Attachments").
LOCAL_ONLY_ROUTES = {
    ("/api/v1/threads/{threadId}/messages/{messageId}/parts/{n}", "get"),
    ("/api/v1/uploads/{uploadId}", "put"),
}


def test_every_route_the_app_serves_is_on_the_rest_api(expanded_template: Template) -> None:
    from functions.agent_api.app import create_app
    from shared.wiring import Services
    from tests.support.settings import make_settings

    served = {
        (path, method)
        for path, operations in create_app(Services(make_settings())).openapi()["paths"].items()
        for method in operations
    }
    on_the_api = {(path, method) for path, method, _ in checks.integrations(expanded_template)}
    assert served - on_the_api == LOCAL_ONLY_ROUTES
