"""Checks run on the EXPANDED template (plain CloudFormation, after the SAM translator).

Each check takes the expanded template as a dict and returns a list of violations (empty means it passes). They
catch the mistakes that ``sam validate``, ``sam validate --lint`` and cfn-lint all let through:

- ``ResponseTransferMode: STREAM`` (instead of ``RESPONSE_STREAM``) deploys a *buffered* integration, so every
  SSE stream arrives in one piece at the end of the run;
- an SQS event source without ``ReportBatchItemFailures`` retries the whole batch when one record fails;
- a 5-field ``cron(...)`` (Unix style) is rejected by EventBridge at deploy time, not by the linters;
- a visibility timeout shorter than 6x the consumer's timeout redelivers messages that are still being processed;
- a wildcard on data permissions (``dynamodb:*``, ``Resource: "*"``) breaks least privilege; the one wildcard
  allowed is the namespace of secrets the code names at run time (each tenant's webhook signing secret,
  ``<WEBHOOK_SECRET_PREFIX>/<tenantId>``), and only where that prefix is the one the functions are given;
- a function without its own log group with retention keeps logs forever;
- a REST API path without an OPTIONS method (or an API function without the app's CORS setting) fails every
  browser preflight, and a literal ``*`` origin cannot be narrowed for production;
- an asynchronous target without a dead-letter queue or on-failure destination drops what it could not deliver;
- a function without an Errors and a Throttles alarm fails silently when it is killed (timeout, out of memory);
- a dead-letter queue (of a queue's redrive policy, a rule or schedule target, an on-failure destination) without a
  depth alarm keeps what failed where nobody looks;
- a buffered API function whose timeout reaches API Gateway's 29 s answers a slow call with a bare gateway 504;
- schedule permissions on a whole group let the API change schedules it never created (the sweeper's);
- a role the Scheduler assumes without ``aws:SourceAccount`` can be used by another account's schedules;
- a queue without ``SqsManagedSseEnabled: true`` or a KMS key may store messages unencrypted (checkov's CKV_AWS_27
  only recognises a KMS key, so it cannot tell an SSE-SQS queue from an unencrypted one);
- an alarm topic encrypted with the AWS-managed ``alias/aws/sns`` key, or with a key whose policy does not let
  ``cloudwatch.amazonaws.com`` use it, drops every alarm notification (checkov passes any key);
- a bucket without declared encryption, with any public access block setting off, with ACLs still in force, or
  without a policy denying requests made without TLS, is not the private bucket users' images are promised
  (checkov's S3 checks want versioning, logging and replication, and none of them reads the bucket policy);
- the attachment bucket without a rule expiring ``uploads/`` within a day keeps every upload never attached forever.
- the streams service (``StreamHost``, docs/deployment.md "Fargate option"): a container that logs to no log group of
  the template with retention, or writes to its root file system; a load balancer listener that is not HTTPS with a
  TLS 1.2+ policy (the bearer tokens would cross the internet in clear text); tasks with a public address.

Only the standard library is used, so the same module runs in the project venv (tests) and in the SAM tools venv
(``scripts/sam_gate.sh`` runs it as ``python tests/infra/template_checks.py EXPANDED.json``).
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Template = dict[str, Any]
Check = Callable[[Template], list[str]]

# The SSE routes (path, method) that must be streamed end to end.
SSE_ROUTES: tuple[tuple[str, str], ...] = (
    ("/api/v1/agent", "post"),
    ("/api/v1/agent/runs/{runId}/events", "get"),
    ("/api/v1/threads/{threadId}/events", "get"),
)
STREAMING_URI_SUFFIX = "/response-streaming-invocations"
VISIBILITY_TIMEOUT_FACTOR = 6
DATA_SERVICES = ("dynamodb", "sqs", "secretsmanager", "s3")
# AWS managed policies that grant data actions on every resource.
DATA_WIDE_MANAGED_POLICIES = frozenset(
    {
        "AdministratorAccess",
        "PowerUserAccess",
        "AmazonDynamoDBFullAccess",
        "AmazonDynamoDBReadOnlyAccess",
        "AmazonSQSFullAccess",
        "AmazonSQSReadOnlyAccess",
        "SecretsManagerReadWrite",
        "AWSLambdaSQSQueueExecutionRole",
        "AWSLambdaDynamoDBExecutionRole",
        "AWSLambdaInvocation-DynamoDB",
    }
)
_LAMBDA_DEFAULT_TIMEOUT = 3
_SQS_DEFAULT_VISIBILITY_TIMEOUT = 30
_SCHEDULE_EXPRESSION = re.compile(r"\b(cron|rate)\(([^)]*)\)")
_BUCKET_OBJECTS = re.compile(r"(?<=\.Arn\})(/[\w-]+)*/\*$")
_RATE_BODY = re.compile(r"^(\d+) (minute|minutes|hour|hours|day|days)$")


# ------------------------------------------------------------------------------------------------ helpers
def flatten(value: Any) -> str:
    """Render an intrinsic-bearing value as one string, keeping references visible as ``${Name}``."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float | bool):
        return str(value)
    if isinstance(value, list):
        return ",".join(flatten(item) for item in value)
    if isinstance(value, dict) and len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Ref":
            return "${" + str(arg) + "}"
        if key == "Fn::GetAtt":
            return "${" + (".".join(arg) if isinstance(arg, list) else str(arg)) + "}"
        if key == "Fn::Sub":
            return arg if isinstance(arg, str) else flatten(arg[0])
        if key == "Fn::Join":
            separator, parts = arg
            return str(separator).join(flatten(part) for part in parts)
    return json.dumps(value, sort_keys=True)


def resources(template: Template, resource_type: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(logical id, resource) pairs, optionally of one type."""
    for logical_id, resource in template.get("Resources", {}).items():
        if resource_type is None or resource.get("Type") == resource_type:
            yield logical_id, resource


def _props(resource: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = resource.get("Properties", {})
    return properties


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _referenced_id(value: Any) -> str | None:
    """Logical id behind ``{"Ref": X}`` or ``{"Fn::GetAtt": [X, ...]}``."""
    if isinstance(value, dict):
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            return str(target[0] if isinstance(target, list) else target.split(".")[0])
    return None


def _all_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _all_strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _all_strings(item)


# ------------------------------------------------------------------------------------------------ checks
def integrations(template: Template) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(path, method, integration) from REST API bodies; integration keys are normalised to camelCase."""
    for _, api in resources(template, "AWS::ApiGateway::RestApi"):
        body = _props(api).get("Body", {})
        for path, operations in body.get("paths", {}).items():
            for method, operation in operations.items():
                if isinstance(operation, dict) and "x-amazon-apigateway-integration" in operation:
                    yield path, method.lower(), operation["x-amazon-apigateway-integration"]
    for _, method_resource in resources(template, "AWS::ApiGateway::Method"):
        properties = _props(method_resource)
        integration = properties.get("Integration", {})
        normalised = {
            "uri": integration.get("Uri"),
            "responseTransferMode": integration.get("ResponseTransferMode"),
        }
        yield flatten(properties.get("ResourceId")), str(properties.get("HttpMethod", "")).lower(), normalised


def _streaming_function_ids(template: Template) -> set[str]:
    found = set()
    for logical_id, function in resources(template, "AWS::Lambda::Function"):
        variables = _props(function).get("Environment", {}).get("Variables", {})
        if variables.get("AWS_LWA_INVOKE_MODE") == "response_stream":
            found.add(logical_id)
    return found


def check_sse_routes_stream(template: Template) -> list[str]:
    """SSE routes, and every route of a response_stream (Web Adapter) function, use a streaming integration."""
    violations = []
    streaming_functions = _streaming_function_ids(template)
    if not streaming_functions:
        violations.append("no function runs the Web Adapter with AWS_LWA_INVOKE_MODE=response_stream")
    seen = set()
    for path, method, integration in integrations(template):
        uri = flatten(integration.get("uri"))
        targets_streaming = any("${" + fn + ".Arn}" in uri or fn in uri for fn in streaming_functions)
        if (path, method) in SSE_ROUTES:
            seen.add((path, method))
        elif not targets_streaming:
            continue
        if not uri.endswith(STREAMING_URI_SUFFIX):
            violations.append(f"{method.upper()} {path}: integration URI does not end in {STREAMING_URI_SUFFIX}")
        if integration.get("responseTransferMode") != "STREAM":
            violations.append(f"{method.upper()} {path}: integration responseTransferMode is not STREAM")
    for path, method in SSE_ROUTES:
        if (path, method) not in seen:
            violations.append(f"{method.upper()} {path}: SSE route missing from the REST API")
    return violations


def _sqs_event_sources(template: Template) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """(mapping id, mapping properties, queue logical id or None for a literal ARN) for SQS event sources."""
    all_resources = template.get("Resources", {})
    for logical_id, mapping in resources(template, "AWS::Lambda::EventSourceMapping"):
        properties = _props(mapping)
        source = properties.get("EventSourceArn")
        queue_id = _referenced_id(source)
        if queue_id is not None and all_resources.get(queue_id, {}).get("Type") == "AWS::SQS::Queue":
            yield logical_id, properties, queue_id
        elif ":sqs:" in flatten(source):
            yield logical_id, properties, None


def check_sqs_sources_report_batch_item_failures(template: Template) -> list[str]:
    """Every SQS event source mapping reports partial batch failures (and there is at least one)."""
    violations = []
    mappings = list(_sqs_event_sources(template))
    if not mappings:
        violations.append("no SQS event source mapping found (the memory function must consume the queue)")
    for logical_id, properties, _ in mappings:
        if "ReportBatchItemFailures" not in properties.get("FunctionResponseTypes", []):
            violations.append(f"{logical_id}: FunctionResponseTypes lacks ReportBatchItemFailures")
    return violations


def schedule_expressions(template: Template) -> list[str]:
    """Every ``cron(...)`` / ``rate(...)`` expression found anywhere in the template."""
    found: list[str] = []
    for text in _all_strings(template):
        found.extend(match.group(0) for match in _SCHEDULE_EXPRESSION.finditer(text))
    return found


def schedule_expression_problem(expression: str) -> str | None:
    """Why an EventBridge schedule expression is invalid, or None."""
    match = _SCHEDULE_EXPRESSION.fullmatch(expression)
    if match is None:
        return "not a cron(...) or rate(...) expression"
    kind, body = match.groups()
    if kind == "rate":
        rate = _RATE_BODY.match(body.strip())
        if rate is None:
            return "rate(...) must be 'rate(<n> minute|minutes|hour|hours|day|days)'"
        if (rate.group(1) == "1") != (not rate.group(2).endswith("s")):
            return "rate(...) unit must be singular for 1 and plural otherwise"
        return None
    fields = body.split()
    if len(fields) != 6:
        return f"cron(...) needs 6 fields (minutes hours day-of-month month day-of-week year), got {len(fields)}"
    day_of_month, day_of_week = fields[2], fields[4]
    if (day_of_month == "?") == (day_of_week == "?"):
        return "cron(...) needs '?' in exactly one of day-of-month and day-of-week"
    return None


def check_schedule_expressions(template: Template) -> list[str]:
    """Every cron has six fields (EventBridge style) and every rate is well formed."""
    violations = []
    for expression in schedule_expressions(template):
        problem = schedule_expression_problem(expression)
        if problem is not None:
            violations.append(f"{expression}: {problem}")
    return violations


def check_queue_visibility_timeouts(template: Template) -> list[str]:
    """Queues consumed by Lambda: visibility >= 6 x function timeout + batching window, and a redrive policy."""
    violations = []
    all_resources = template.get("Resources", {})
    for logical_id, properties, queue_id in _sqs_event_sources(template):
        if queue_id is None:
            violations.append(f"{logical_id}: consumes a queue outside the template; cannot check its timeout")
            continue
        queue = _props(all_resources[queue_id])
        function_id = _referenced_id(properties.get("FunctionName"))
        function = _props(all_resources.get(function_id or "", {}))
        timeout = int(function.get("Timeout", _LAMBDA_DEFAULT_TIMEOUT))
        window = int(properties.get("MaximumBatchingWindowInSeconds", 0))
        visibility = int(queue.get("VisibilityTimeout", _SQS_DEFAULT_VISIBILITY_TIMEOUT))
        required = VISIBILITY_TIMEOUT_FACTOR * timeout + window
        if visibility < required:
            violations.append(
                f"{queue_id}: VisibilityTimeout {visibility}s < {VISIBILITY_TIMEOUT_FACTOR} x {function_id} "
                f"timeout {timeout}s + batching window {window}s = {required}s"
            )
        if "RedrivePolicy" not in queue:
            violations.append(f"{queue_id}: no RedrivePolicy (dead-letter queue)")
    return violations


def _policy_documents(template: Template) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(where, policy document, is an identity policy)."""
    for logical_id, role in resources(template, "AWS::IAM::Role"):
        for policy in _props(role).get("Policies", []):
            yield f"{logical_id}/{policy.get('PolicyName', '?')}", policy.get("PolicyDocument", {}), True
    for resource_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for logical_id, policy in resources(template, resource_type):
            yield logical_id, _props(policy).get("PolicyDocument", {}), True
    for resource_type in ("AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy", "AWS::S3::BucketPolicy"):
        for logical_id, policy in resources(template, resource_type):
            yield logical_id, _props(policy).get("PolicyDocument", {}), False


# Environment variables naming a prefix under which the code creates and reads secrets at run time (one per tenant):
# their names cannot be listed in the template, so ``secret:<prefix>/*`` is the narrowest grant there is.
RUNTIME_SECRET_PREFIX_VARS = ("WEBHOOK_SECRET_PREFIX",)
_SECRET_ARN_HEAD = "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:"
STACK_NAME_PREFIX = "${AWS::StackName}/"


def runtime_secret_namespaces(template: Template) -> set[str]:
    """``arn:...:secret:<prefix>/*`` for each runtime secret prefix a function of the template is given."""
    found = set()
    for _, function in resources(template, "AWS::Lambda::Function"):
        variables = _props(function).get("Environment", {}).get("Variables", {})
        for name in RUNTIME_SECRET_PREFIX_VARS:
            prefix = flatten(variables[name]) if name in variables else ""
            # Only a prefix under the stack's own name: "", "*" or a fixed name would reach other stacks' secrets.
            if prefix.startswith(STACK_NAME_PREFIX) and not set(prefix) & {"*", "?"}:
                found.add(_SECRET_ARN_HEAD + prefix.rstrip("/") + "/*")
    return found


def _statement_problems(
    statement: dict[str, Any], identity: bool, secret_namespaces: frozenset[str] = frozenset()
) -> list[str]:
    if statement.get("Effect", "Allow") != "Allow":
        return []
    problems = []
    if identity and ("NotAction" in statement or "NotResource" in statement):
        problems.append("Allow with NotAction/NotResource")
    actions = [flatten(action) for action in _as_list(statement.get("Action", []))]
    data_actions = [action for action in actions if action.split(":")[0].lower() in DATA_SERVICES]
    for action in actions:
        if action == "*" or action.endswith(":*"):
            problems.append(f"wildcard action {action!r}")
        elif action in data_actions and "*" in action:
            problems.append(f"wildcard data action {action!r}")
    if identity and data_actions:
        for resource in (flatten(item) for item in _as_list(statement.get("Resource", []))):
            # A table's indexes are addressed as <table arn>/index/<name>, a bucket's objects as <bucket arn>/<key>
            # (all of them, or those under a prefix); allow those suffixes only, on a reference of the template.
            if "*" not in _BUCKET_OBJECTS.sub("", resource.removesuffix("/index/*")):
                continue
            # Secrets named at run time under a prefix the functions are given, by Secrets Manager actions only.
            only_secrets = all(action.startswith("secretsmanager:") for action in data_actions)
            if not (only_secrets and resource in secret_namespaces):
                problems.append(f"wildcard resource {resource!r} for {', '.join(data_actions)}")
    return problems


def check_no_wildcard_data_permissions(template: Template) -> list[str]:
    """No wildcard actions anywhere; no wildcard resources or data-wide managed policies on data services, except
    Secrets Manager actions on a runtime secret namespace (:func:`runtime_secret_namespaces`)."""
    violations: list[str] = []
    namespaces = frozenset(runtime_secret_namespaces(template))
    for where, document, identity in _policy_documents(template):
        for statement in _as_list(document.get("Statement", [])):
            problems = _statement_problems(statement, identity, namespaces)
            violations.extend(f"{where}: {problem}" for problem in problems)
    for logical_id, role in resources(template, "AWS::IAM::Role"):
        for arn in (flatten(item) for item in _props(role).get("ManagedPolicyArns", [])):
            if arn.rsplit("/", 1)[-1] in DATA_WIDE_MANAGED_POLICIES:
                violations.append(f"{logical_id}: managed policy {arn} grants data access on every resource")
    return violations


def check_function_log_groups(template: Template) -> list[str]:
    """Every function writes to a log group of this template that has a retention."""
    violations = []
    all_resources = template.get("Resources", {})
    log_groups = dict(resources(template, "AWS::Logs::LogGroup"))
    names = {flatten(_props(group).get("LogGroupName")): group_id for group_id, group in log_groups.items()}
    for logical_id, function in resources(template, "AWS::Lambda::Function"):
        properties = _props(function)
        target = properties.get("LoggingConfig", {}).get("LogGroup")
        group_id = _referenced_id(target) if target is not None else None
        if group_id is None:
            explicit = target if isinstance(target, str) else None
            default_names = ["/aws/lambda/${" + logical_id + "}"]
            if "FunctionName" in properties:
                default_names.append("/aws/lambda/" + flatten(properties["FunctionName"]))
            group_id = next((names[name] for name in [explicit, *default_names] if name in names), None)
        group = all_resources.get(group_id or "")
        if group is None or group.get("Type") != "AWS::Logs::LogGroup":
            violations.append(f"{logical_id}: no log group of its own in the template")
        elif "RetentionInDays" not in _props(group):
            violations.append(f"{logical_id}: log group {group_id} has no RetentionInDays")
    return violations


# The app's setting that must accompany the gateway's CORS answer on every function behind the REST API.
CORS_ENV_VAR = "CORS_ALLOWED_ORIGINS"
API_GATEWAY_TIMEOUT_S = 29
# Names of the schedules the API creates at run time (shared/adapters/aws/scheduler.py SCHEDULE_NAME_PREFIX).
TASK_SCHEDULE_PREFIX = "task-"
_SCHEDULE_ACTIONS = frozenset(
    {"scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule", "scheduler:GetSchedule"}
)


def _api_paths(template: Template) -> Iterator[tuple[str, dict[str, Any]]]:
    for _, api in resources(template, "AWS::ApiGateway::RestApi"):
        yield from _props(api).get("Body", {}).get("paths", {}).items()


def _functions_behind_api(template: Template) -> set[str]:
    """Logical ids of functions some REST API route integrates with."""
    found = set()
    function_ids = {logical_id for logical_id, _ in resources(template, "AWS::Lambda::Function")}
    for _, operations in _api_paths(template):
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            uri = flatten(operation.get("x-amazon-apigateway-integration", {}).get("uri"))
            found.update(fn for fn in function_ids if "${" + fn + ".Arn}" in uri)
    return found


def _cors_origin_parameter(value: Any) -> str | None:
    """The parameter behind ``{"Fn::Sub": "'${Param}'"}`` (a header value in single quotes), or None."""
    text = flatten(value)
    match = re.fullmatch(r"'\$\{([A-Za-z0-9]+)\}'", text)
    return match.group(1) if match else None


def _rule_forbids_star_in_prod(template: Template, parameter: str) -> bool:
    for rule in template.get("Rules", {}).values():
        if "prod" not in flatten(rule.get("RuleCondition", {})):
            continue
        for assertion in rule.get("Assertions", []):
            if assertion.get("Assert") == {"Fn::Not": [{"Fn::Equals": [{"Ref": parameter}, "*"]}]}:
                return True
    return False


def check_cors(template: Template) -> list[str]:
    """Every API path answers the browser's OPTIONS preflight with the origin parameter, which prod may not set to
    ``*``; every function behind the API gets the same origin for the app's own CORS headers."""
    violations = []
    parameters: set[str] = set()
    paths = list(_api_paths(template))
    if not paths:
        violations.append("no REST API paths found")
    for path, operations in paths:
        options = operations.get("options")
        if not isinstance(options, dict):
            violations.append(f"{path}: no OPTIONS method (browser preflights fail)")
            continue
        integration = options.get("x-amazon-apigateway-integration", {})
        params = integration.get("responses", {}).get("default", {}).get("responseParameters", {})
        origin = params.get("method.response.header.Access-Control-Allow-Origin")
        parameter = _cors_origin_parameter(origin)
        if origin is None:
            violations.append(f"{path}: OPTIONS answers no Access-Control-Allow-Origin")
        elif parameter is None:
            violations.append(f"{path}: OPTIONS origin {flatten(origin)} is not a template parameter")
        else:
            parameters.add(parameter)
    for parameter in sorted(parameters):
        if parameter not in template.get("Parameters", {}):
            violations.append(f"CORS origin parameter {parameter} is not declared")
        elif not _rule_forbids_star_in_prod(template, parameter):
            violations.append(f"no rule refuses {parameter} = '*' when the stage is prod")
    all_resources = template.get("Resources", {})
    for function_id in sorted(_functions_behind_api(template)):
        variables = _props(all_resources[function_id]).get("Environment", {}).get("Variables", {})
        value = variables.get(CORS_ENV_VAR)
        if value is None:
            violations.append(f"{function_id}: behind the API but has no {CORS_ENV_VAR} (the app sends no CORS)")
        elif parameters and _referenced_id(value) not in parameters:
            violations.append(f"{function_id}: {CORS_ENV_VAR} is not the preflight's origin parameter")
    return violations


def _scheduler_targets(template: Template) -> Iterator[tuple[str, dict[str, Any]]]:
    for logical_id, schedule in resources(template, "AWS::Scheduler::Schedule"):
        yield logical_id, _props(schedule).get("Target", {})


def check_async_targets_have_dead_letters(template: Template) -> list[str]:
    """Rule targets and schedule targets name a DLQ; functions invoked asynchronously by the Scheduler (template
    schedules, or the API's schedules through ``AUTOMATION_FUNCTION_ARN``) have an on-failure destination."""
    violations = []
    all_resources = template.get("Resources", {})
    for logical_id, rule in resources(template, "AWS::Events::Rule"):
        for target in _props(rule).get("Targets", []):
            if "Arn" not in target.get("DeadLetterConfig", {}):
                violations.append(f"{logical_id}: target {target.get('Id')} has no DeadLetterConfig")
    async_functions: set[str] = set()
    for logical_id, target in _scheduler_targets(template):
        if "Arn" not in target.get("DeadLetterConfig", {}):
            violations.append(f"{logical_id}: schedule target has no DeadLetterConfig")
        function_id = _referenced_id(target.get("Arn"))
        if all_resources.get(function_id or "", {}).get("Type") == "AWS::Lambda::Function":
            async_functions.add(str(function_id))
    for logical_id, function in resources(template, "AWS::Lambda::Function"):
        variables = _props(function).get("Environment", {}).get("Variables", {})
        if "AUTOMATION_FUNCTION_ARN" in variables:
            target_id = _referenced_id(variables["AUTOMATION_FUNCTION_ARN"])
            if target_id:
                async_functions.add(target_id)
            if "SCHEDULER_DEAD_LETTER_ARN" not in variables:
                violations.append(f"{logical_id}: creates schedules but has no SCHEDULER_DEAD_LETTER_ARN")
    destinations = {
        _referenced_id(_props(config).get("FunctionName")): _props(config)
        for _, config in resources(template, "AWS::Lambda::EventInvokeConfig")
    }
    for function_id in sorted(async_functions):
        on_failure = destinations.get(function_id, {}).get("DestinationConfig", {}).get("OnFailure", {})
        if "Destination" not in on_failure:
            violations.append(f"{function_id}: invoked asynchronously by the Scheduler, no on-failure destination")
    return violations


def _alarmed(template: Template, namespace: str, metric: str) -> set[str]:
    """Flattened dimension values of the alarms on one metric."""
    found = set()
    for _, alarm in resources(template, "AWS::CloudWatch::Alarm"):
        properties = _props(alarm)
        if properties.get("Namespace") == namespace and properties.get("MetricName") == metric:
            found.update(flatten(dimension.get("Value")) for dimension in properties.get("Dimensions", []))
    return found


def check_failure_alarms(template: Template) -> list[str]:
    """An Errors and a Throttles alarm per function, and a 5XXError alarm per REST API."""
    violations = []
    for metric in ("Errors", "Throttles"):
        alarmed = _alarmed(template, "AWS/Lambda", metric)
        for logical_id, _ in resources(template, "AWS::Lambda::Function"):
            if "${" + logical_id + "}" not in alarmed:
                violations.append(f"{logical_id}: no {metric} alarm")
    alarmed_apis = _alarmed(template, "AWS/ApiGateway", "5XXError")
    for logical_id, api in resources(template, "AWS::ApiGateway::RestApi"):
        if flatten(_props(api).get("Name")) not in alarmed_apis:
            violations.append(f"{logical_id}: no 5XXError alarm")
    return violations


def _dead_letter_queues(template: Template) -> set[str]:
    """Logical ids of the queues that receive what failed: redrive targets, rule and schedule targets' dead-letter
    queues, and on-failure destinations of asynchronous invocations."""
    found: set[str] = set()
    for _, queue in resources(template, "AWS::SQS::Queue"):
        redrive = _props(queue).get("RedrivePolicy", {})
        found.add(str(_referenced_id(redrive.get("deadLetterTargetArn"))))
    for _, rule in resources(template, "AWS::Events::Rule"):
        for target in _props(rule).get("Targets", []):
            found.add(str(_referenced_id(target.get("DeadLetterConfig", {}).get("Arn"))))
    for _, target in _scheduler_targets(template):
        found.add(str(_referenced_id(target.get("DeadLetterConfig", {}).get("Arn"))))
    for _, config in resources(template, "AWS::Lambda::EventInvokeConfig"):
        on_failure = _props(config).get("DestinationConfig", {}).get("OnFailure", {})
        found.add(str(_referenced_id(on_failure.get("Destination"))))
    queues = {logical_id for logical_id, _ in resources(template, "AWS::SQS::Queue")}
    return found & queues


def check_dead_letter_queues_alarmed(template: Template) -> list[str]:
    """Every dead-letter queue has an alarm on its depth (ApproximateNumberOfMessagesVisible)."""
    alarmed = _alarmed(template, "AWS/SQS", "ApproximateNumberOfMessagesVisible")
    return [
        f"{queue_id}: a dead-letter queue without a depth alarm"
        for queue_id in sorted(_dead_letter_queues(template))
        if "${" + queue_id + ".QueueName}" not in alarmed
    ]


def check_buffered_timeouts(template: Template) -> list[str]:
    """A function behind a buffered (non-streaming) API route times out before API Gateway's 29 s."""
    violations = []
    all_resources = template.get("Resources", {})
    streaming = _streaming_function_ids(template)
    for function_id in sorted(_functions_behind_api(template) - streaming):
        timeout = int(_props(all_resources[function_id]).get("Timeout", _LAMBDA_DEFAULT_TIMEOUT))
        if timeout >= API_GATEWAY_TIMEOUT_S:
            violations.append(
                f"{function_id}: Timeout {timeout}s >= API Gateway's {API_GATEWAY_TIMEOUT_S}s (a bare 504 instead of "
                "the app's error)"
            )
    return violations


def check_schedule_permissions(template: Template) -> list[str]:
    """Schedule actions only on task schedules (``.../schedule/<group>/task-*``), which no schedule of the
    template is named like; every role the Scheduler assumes is limited to this account."""
    violations = []
    template_schedules = [
        flatten(_props(schedule).get("Name", logical_id))
        for logical_id, schedule in resources(template, "AWS::Scheduler::Schedule")
    ]
    for where, document, identity in _policy_documents(template):
        if not identity:
            continue
        for statement in _as_list(document.get("Statement", [])):
            actions = {flatten(action) for action in _as_list(statement.get("Action", []))}
            if not actions & _SCHEDULE_ACTIONS:
                continue
            for resource in (flatten(item) for item in _as_list(statement.get("Resource", []))):
                if not resource.endswith("/" + TASK_SCHEDULE_PREFIX + "*"):
                    violations.append(f"{where}: schedule actions on {resource!r}, not only on task schedules")
    for name in template_schedules:
        if name.startswith(TASK_SCHEDULE_PREFIX):
            violations.append(f"schedule {name!r} is named like a task schedule (the API could change it)")
    for logical_id, role in resources(template, "AWS::IAM::Role"):
        for statement in _props(role).get("AssumeRolePolicyDocument", {}).get("Statement", []):
            principal = flatten(statement.get("Principal", {}))
            if "scheduler.amazonaws.com" not in principal:
                continue
            condition = statement.get("Condition", {}).get("StringEquals", {})
            if "aws:SourceAccount" not in condition:
                violations.append(f"{logical_id}: the Scheduler may assume it without an aws:SourceAccount condition")
    return violations


def check_queues_encrypted(template: Template) -> list[str]:
    """Every queue declares encryption at rest: SSE-SQS (``SqsManagedSseEnabled: true``) or a KMS key."""
    violations = []
    for logical_id, queue in resources(template, "AWS::SQS::Queue"):
        properties = _props(queue)
        if "KmsMasterKeyId" not in properties and properties.get("SqsManagedSseEnabled") not in (True, "true"):
            violations.append(f"{logical_id}: no encryption declared (SqsManagedSseEnabled: true or KmsMasterKeyId)")
    return violations


CLOUDWATCH_PRINCIPAL = "cloudwatch.amazonaws.com"
# What CloudWatch calls on the key of an encrypted topic when an alarm publishes to it.
CLOUDWATCH_TOPIC_KEY_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")
_ALARM_ACTION_KEYS = ("AlarmActions", "OKActions", "InsufficientDataActions")


def _alarm_topics(template: Template) -> set[str]:
    """Logical ids of the template's SNS topics that alarms notify."""
    all_resources = template.get("Resources", {})
    topics = set()
    for _, alarm in resources(template, "AWS::CloudWatch::Alarm"):
        for key in _ALARM_ACTION_KEYS:
            for action in _as_list(_props(alarm).get(key, [])):
                topic_id = _referenced_id(action)
                if all_resources.get(topic_id or "", {}).get("Type") == "AWS::SNS::Topic":
                    topics.add(str(topic_id))
    return topics


def _allows(statement: dict[str, Any], principal: str, action: str) -> bool:
    if statement.get("Effect") != "Allow" or principal not in flatten(statement.get("Principal", {})):
        return False
    granted = (flatten(item) for item in _as_list(statement.get("Action", [])))
    return any(fnmatch.fnmatchcase(action, pattern) for pattern in granted)


def check_alarm_topics_usable_by_cloudwatch(template: Template) -> list[str]:
    """A topic that alarms notify is unencrypted, or encrypted with a key of this template whose policy lets
    CloudWatch use it; with ``alias/aws/sns`` (or a key without that grant) every notification is dropped."""
    violations = []
    all_resources = template.get("Resources", {})
    for topic_id in sorted(_alarm_topics(template)):
        key = _props(all_resources[topic_id]).get("KmsMasterKeyId")
        if key is None:
            continue
        key_id = _referenced_id(key)
        key_resource = all_resources.get(key_id or "", {})
        if key_resource.get("Type") != "AWS::KMS::Key":
            violations.append(
                f"{topic_id}: encrypted with {flatten(key)!r}, not a key of this template that lets "
                f"{CLOUDWATCH_PRINCIPAL} use it (every alarm notification would be dropped)"
            )
            continue
        statements = _as_list(_props(key_resource).get("KeyPolicy", {}).get("Statement", []))
        missing = [
            action
            for action in CLOUDWATCH_TOPIC_KEY_ACTIONS
            if not any(_allows(statement, CLOUDWATCH_PRINCIPAL, action) for statement in statements)
        ]
        if missing:
            violations.append(
                f"{topic_id}: the policy of key {key_id} does not allow {CLOUDWATCH_PRINCIPAL} "
                f"{', '.join(missing)} (every alarm notification would be dropped)"
            )
    return violations


BUCKET_ACCESS_BLOCKS = ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")
BUCKET_SSE_ALGORITHMS = ("AES256", "aws:kms", "aws:kms:dsse")
ATTACHMENTS_ENV_VAR = "ATTACHMENTS_BUCKET"
# shared/attachments/uploads.py keeps an upload under uploads/{tenant}/{user}/{id} until a message attaches it.
UPLOADS_PREFIX = "uploads/"
UPLOAD_EXPIRY_DAYS = 1


def _is_true(value: Any) -> bool:
    return value is True or value == "true"


def _denies_insecure_transport(statement: dict[str, Any], bucket_id: str) -> bool:
    """A Deny of every S3 action, to everyone, on the bucket and its objects, when the request is not over TLS."""
    if statement.get("Effect") != "Deny" or flatten(statement.get("Principal")) not in ("*", '{"AWS": "*"}'):
        return False
    if not {"s3:*", "*"} & {flatten(action) for action in _as_list(statement.get("Action", []))}:
        return False
    targets = {flatten(item) for item in _as_list(statement.get("Resource", []))}
    if not {"${" + bucket_id + ".Arn}", "${" + bucket_id + ".Arn}/*"} <= targets:
        return False
    condition = statement.get("Condition", {}).get("Bool", {})
    return str(condition.get("aws:SecureTransport")).lower() == "false"


def check_buckets_private_and_encrypted(template: Template) -> list[str]:
    """Every bucket declares default encryption, blocks all public access, disables ACLs (bucket owner enforced),
    and has a bucket policy denying requests made without TLS."""
    violations = []
    policies = [
        (_referenced_id(_props(policy).get("Bucket")), _props(policy).get("PolicyDocument", {}))
        for _, policy in resources(template, "AWS::S3::BucketPolicy")
    ]
    for logical_id, bucket in resources(template, "AWS::S3::Bucket"):
        properties = _props(bucket)
        rules = properties.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
        algorithms = {rule.get("ServerSideEncryptionByDefault", {}).get("SSEAlgorithm") for rule in rules}
        if not algorithms & set(BUCKET_SSE_ALGORITHMS):
            violations.append(f"{logical_id}: no default encryption declared (BucketEncryption)")
        block = properties.get("PublicAccessBlockConfiguration", {})
        off = [name for name in BUCKET_ACCESS_BLOCKS if not _is_true(block.get(name))]
        if off:
            violations.append(f"{logical_id}: public access not blocked ({', '.join(off)} not true)")
        ownership = {rule.get("ObjectOwnership") for rule in properties.get("OwnershipControls", {}).get("Rules", [])}
        if ownership != {"BucketOwnerEnforced"}:
            violations.append(f"{logical_id}: ACLs in force (OwnershipControls is not BucketOwnerEnforced)")
        statements = [
            statement
            for bucket_id, document in policies
            if bucket_id == logical_id
            for statement in _as_list(document.get("Statement", []))
        ]
        if not any(_denies_insecure_transport(statement, logical_id) for statement in statements):
            violations.append(f"{logical_id}: no bucket policy denies requests without TLS (aws:SecureTransport)")
    return violations


def _expires_uploads(rule: dict[str, Any]) -> bool:
    if rule.get("Status") != "Enabled":
        return False
    prefix = rule.get("Prefix", rule.get("Filter", {}).get("Prefix"))
    days = rule.get("ExpirationInDays")
    return prefix == UPLOADS_PREFIX and days is not None and int(days) <= UPLOAD_EXPIRY_DAYS


def check_attachment_uploads_expire(template: Template) -> list[str]:
    """The bucket the functions store attachments in (``ATTACHMENTS_BUCKET``) is a bucket of this template with an
    enabled lifecycle rule expiring ``uploads/`` within a day (an upload no message attached)."""
    violations = []
    all_resources = template.get("Resources", {})
    buckets = set()
    for logical_id, function in resources(template, "AWS::Lambda::Function"):
        value = _props(function).get("Environment", {}).get("Variables", {}).get(ATTACHMENTS_ENV_VAR)
        if value is None:
            continue
        bucket_id = _referenced_id(value)
        if all_resources.get(bucket_id or "", {}).get("Type") != "AWS::S3::Bucket":
            violations.append(f"{logical_id}: {ATTACHMENTS_ENV_VAR} is not a bucket of this template")
        else:
            buckets.add(str(bucket_id))
    if not buckets and not violations:
        violations.append(f"no function has {ATTACHMENTS_ENV_VAR} (attachments would live in a process's memory)")
    for bucket_id in sorted(buckets):
        rules = _props(all_resources[bucket_id]).get("LifecycleConfiguration", {}).get("Rules", [])
        if not any(_expires_uploads(rule) for rule in rules):
            violations.append(
                f"{bucket_id}: no enabled lifecycle rule expires {UPLOADS_PREFIX} within {UPLOAD_EXPIRY_DAYS} day"
            )
    return violations


# ELB's predefined policies that refuse TLS below 1.2 (TLS13-1-2-*: 1.2 and 1.3; TLS-1-2-*: 1.2 only).
TLS_12_POLICIES = ("ELBSecurityPolicy-TLS13-1-2", "ELBSecurityPolicy-TLS-1-2")


def check_stream_host(template: Template) -> list[str]:
    """ECS containers log to a log group of the template with retention and keep a read-only root file system; every
    ALB listener is HTTPS with a TLS 1.2 or 1.3 policy; no ECS service gives its tasks a public address."""
    violations = []
    all_resources = template.get("Resources", {})
    for logical_id, task in resources(template, "AWS::ECS::TaskDefinition"):
        for container in _props(task).get("ContainerDefinitions", []):
            name = f"{logical_id}/{container.get('Name')}"
            options = container.get("LogConfiguration", {}).get("Options", {})
            group_id = _referenced_id(options.get("awslogs-group"))
            group = all_resources.get(group_id or "", {})
            if container.get("LogConfiguration", {}).get("LogDriver") != "awslogs" or group.get(
                "Type"
            ) != "AWS::Logs::LogGroup":
                violations.append(f"{name}: logs to no log group of this template")
            elif "RetentionInDays" not in _props(group):
                violations.append(f"{name}: log group {group_id} has no RetentionInDays")
            if container.get("ReadonlyRootFilesystem") is not True:
                violations.append(f"{name}: root file system is writable")
    for logical_id, listener in resources(template, "AWS::ElasticLoadBalancingV2::Listener"):
        properties = _props(listener)
        if properties.get("Protocol") != "HTTPS":
            violations.append(f"{logical_id}: listener protocol {properties.get('Protocol')} is not HTTPS")
        elif not str(properties.get("SslPolicy", "")).startswith(TLS_12_POLICIES):
            violations.append(f"{logical_id}: SslPolicy {properties.get('SslPolicy')} allows TLS below 1.2")
    for logical_id, service in resources(template, "AWS::ECS::Service"):
        network = _props(service).get("NetworkConfiguration", {}).get("AwsvpcConfiguration", {})
        if network.get("AssignPublicIp") != "DISABLED":
            violations.append(f"{logical_id}: tasks get a public address (AssignPublicIp is not DISABLED)")
    return violations


ALL_CHECKS: dict[str, Check] = {
    "sse_routes_stream": check_sse_routes_stream,
    "sqs_sources_report_batch_item_failures": check_sqs_sources_report_batch_item_failures,
    "schedule_expressions": check_schedule_expressions,
    "queue_visibility_timeouts": check_queue_visibility_timeouts,
    "no_wildcard_data_permissions": check_no_wildcard_data_permissions,
    "function_log_groups": check_function_log_groups,
    "cors": check_cors,
    "async_targets_have_dead_letters": check_async_targets_have_dead_letters,
    "failure_alarms": check_failure_alarms,
    "dead_letter_queues_alarmed": check_dead_letter_queues_alarmed,
    "buffered_timeouts": check_buffered_timeouts,
    "schedule_permissions": check_schedule_permissions,
    "queues_encrypted": check_queues_encrypted,
    "alarm_topics_usable_by_cloudwatch": check_alarm_topics_usable_by_cloudwatch,
    "buckets_private_and_encrypted": check_buckets_private_and_encrypted,
    "attachment_uploads_expire": check_attachment_uploads_expire,
    "stream_host": check_stream_host,
}


def run_all(template: Template) -> dict[str, list[str]]:
    """Violations per check name (only failing checks are listed)."""
    results = {name: check(template) for name, check in ALL_CHECKS.items()}
    return {name: violations for name, violations in results.items() if violations}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: template_checks.py EXPANDED_TEMPLATE.json", file=sys.stderr)
        return 2
    template = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    failures = run_all(template)
    for name in ALL_CHECKS:
        status = "FAIL" if name in failures else "ok"
        print(f"  {status:4} {name}")
        for violation in failures.get(name, []):
            print(f"         - {violation}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
