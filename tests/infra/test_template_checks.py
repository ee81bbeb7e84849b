"""The template checks on small hand-written CloudFormation fragments (no SAM tools needed)."""

from __future__ import annotations

from typing import Any

import pytest

from . import template_checks as checks


def _role(statement: dict[str, Any], managed: list[str] | None = None) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "Policies": [{"PolicyName": "data", "PolicyDocument": {"Statement": [statement]}}],
        "ManagedPolicyArns": managed or [],
    }
    return {"Resources": {"Role": {"Type": "AWS::IAM::Role", "Properties": properties}}}


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("cron(0 6 * * ? *)", None),
        ("cron(0/15 * ? * MON-FRI *)", None),
        ("rate(1 day)", None),
        ("rate(5 minutes)", None),
        ("cron(0 6 * * *)", "cron(...) needs 6 fields"),
        ("cron(0 6 * * * *)", "cron(...) needs '?' in exactly one"),
        ("rate(1 days)", "rate(...) unit must be singular"),
        ("rate(five minutes)", "rate(...) must be"),
    ],
)
def test_schedule_expression_problem(expression: str, problem: str | None) -> None:
    found = checks.schedule_expression_problem(expression)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(problem)


def test_schedule_expressions_are_found_inside_intrinsics() -> None:
    template = {"Resources": {"S": {"Properties": {"ScheduleExpression": {"Fn::Sub": "cron(0 ${H} * * ? *)"}}}}}
    assert checks.schedule_expressions(template) == ["cron(0 ${H} * * ? *)"]


def test_index_arns_of_a_named_table_are_allowed() -> None:
    statement = {
        "Effect": "Allow",
        "Action": ["dynamodb:Query"],
        "Resource": [{"Fn::GetAtt": ["Table", "Arn"]}, {"Fn::Sub": "${Table.Arn}/index/*"}],
    }
    assert checks.check_no_wildcard_data_permissions(_role(statement)) == []


@pytest.mark.parametrize(
    ("statement", "violation"),
    [
        ({"Action": "sqs:SendMessage", "Resource": "*"}, "wildcard resource '*'"),
        (
            {"Action": "dynamodb:Query", "Resource": {"Fn::Sub": "arn:aws:dynamodb:*:*:table/*"}},
            "wildcard resource",
        ),
        ({"Action": "secretsmanager:Get*", "Resource": "arn:aws:secretsmanager:r:1:secret:x"}, "wildcard data"),
        ({"Action": "*", "Resource": "arn:aws:s3:::bucket"}, "wildcard action '*'"),
        ({"NotAction": "iam:*", "Resource": "*"}, "Allow with NotAction"),
    ],
)
def test_wildcard_data_permissions_are_reported(statement: dict[str, Any], violation: str) -> None:
    violations = checks.check_no_wildcard_data_permissions(_role({"Effect": "Allow", **statement}))
    assert any(violation in found for found in violations), violations


NAMESPACE = "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:${AWS::StackName}/webhooks/*"


def _with_secret_prefix(template: dict[str, Any], prefix: Any) -> dict[str, Any]:
    variables = {"WEBHOOK_SECRET_PREFIX": prefix}
    function = {"Type": "AWS::Lambda::Function", "Properties": {"Environment": {"Variables": variables}}}
    template["Resources"]["Fn"] = function
    return template


@pytest.mark.parametrize(
    ("actions", "prefix", "allowed"),
    [
        # The functions' prefix, the stack's own: each tenant's secret is named at run time under it.
        (
            ["secretsmanager:GetSecretValue", "secretsmanager:CreateSecret"],
            {"Fn::Sub": "${AWS::StackName}/webhooks"},
            True,
        ),
        # A data action of another service on the same resource.
        (["secretsmanager:GetSecretValue", "dynamodb:GetItem"], {"Fn::Sub": "${AWS::StackName}/webhooks"}, False),
        # The functions are given another prefix than the one granted.
        (["secretsmanager:GetSecretValue"], {"Fn::Sub": "${AWS::StackName}/other"}, False),
        # A prefix outside the stack's name reaches other stacks' secrets: never a namespace.
        (["secretsmanager:GetSecretValue"], "webhooks", False),
        (["secretsmanager:GetSecretValue"], None, False),
    ],
)
def test_a_runtime_secret_namespace_is_the_one_wildcard_on_secrets(
    actions: list[str], prefix: Any, allowed: bool
) -> None:
    statement = {"Effect": "Allow", "Action": actions, "Resource": {"Fn::Sub": NAMESPACE}}
    template = _role(statement)
    if prefix is not None:
        template = _with_secret_prefix(template, prefix)
    violations = checks.check_no_wildcard_data_permissions(template)
    assert (violations == []) is allowed, violations


def _depth_alarm(queue_id: str) -> dict[str, Any]:
    dimension = {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}
    properties = {"Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible", "Dimensions": [dimension]}
    return {"Type": "AWS::CloudWatch::Alarm", "Properties": properties}


def test_every_kind_of_dead_letter_queue_needs_a_depth_alarm() -> None:
    # GIVEN a redrive DLQ, a rule target's DLQ and an on-failure destination, only the first alarmed
    def arn(queue_id: str) -> dict[str, Any]:
        return {"Fn::GetAtt": [queue_id, "Arn"]}

    queue = {"Type": "AWS::SQS::Queue", "Properties": {}}
    work = {"Type": "AWS::SQS::Queue", "Properties": {"RedrivePolicy": {"deadLetterTargetArn": arn("Redrive")}}}
    rule = {
        "Type": "AWS::Events::Rule",
        "Properties": {"Targets": [{"Id": "t", "DeadLetterConfig": {"Arn": arn("Rule")}}]},
    }
    config = {
        "Type": "AWS::Lambda::EventInvokeConfig",
        "Properties": {"DestinationConfig": {"OnFailure": {"Destination": arn("Failed")}}},
    }
    template = {
        "Resources": {
            "Work": work,
            "Redrive": queue,
            "Rule": queue,
            "Failed": queue,
            "R": rule,
            "C": config,
            "RedriveAlarm": _depth_alarm("Redrive"),
        }
    }
    # THEN the two without an alarm are named, and the queue that is no dead-letter queue is not
    assert checks.check_dead_letter_queues_alarmed(template) == [
        "Failed: a dead-letter queue without a depth alarm",
        "Rule: a dead-letter queue without a depth alarm",
    ]


def test_data_wide_managed_policy_is_reported() -> None:
    statement = {"Effect": "Allow", "Action": "logs:PutLogEvents", "Resource": "arn:aws:logs:r:1:log-group:x"}
    arn = "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole"
    violations = checks.check_no_wildcard_data_permissions(_role(statement, managed=[arn]))
    assert violations == [f"Role: managed policy {arn} grants data access on every resource"]


def test_log_group_found_by_default_lambda_name_needs_retention() -> None:
    template: dict[str, Any] = {
        "Resources": {
            "Fn": {"Type": "AWS::Lambda::Function", "Properties": {}},
            "Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": {"Fn::Sub": "/aws/lambda/${Fn}"}}},
        }
    }
    assert checks.check_function_log_groups(template) == ["Fn: log group Logs has no RetentionInDays"]
    template["Resources"]["Logs"]["Properties"]["RetentionInDays"] = 30
    assert checks.check_function_log_groups(template) == []


def test_visibility_timeout_includes_the_batching_window() -> None:
    template = {
        "Resources": {
            "Q": {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": 720, "RedrivePolicy": {}}},
            "Fn": {"Type": "AWS::Lambda::Function", "Properties": {"Timeout": 120}},
            "Esm": {
                "Type": "AWS::Lambda::EventSourceMapping",
                "Properties": {
                    "EventSourceArn": {"Fn::GetAtt": ["Q", "Arn"]},
                    "FunctionName": {"Ref": "Fn"},
                    "MaximumBatchingWindowInSeconds": 5,
                },
            },
        }
    }
    (violation,) = checks.check_queue_visibility_timeouts(template)
    assert "VisibilityTimeout 720s < 6 x Fn timeout 120s + batching window 5s = 725s" in violation


@pytest.mark.parametrize(
    ("properties", "violations"),
    [
        ({"SqsManagedSseEnabled": True}, []),
        ({"KmsMasterKeyId": "alias/aws/sqs"}, []),
        ({}, ["Q: no encryption declared (SqsManagedSseEnabled: true or KmsMasterKeyId)"]),
        ({"SqsManagedSseEnabled": False}, ["Q: no encryption declared (SqsManagedSseEnabled: true or KmsMasterKeyId)"]),
    ],
)
def test_queues_declare_encryption(properties: dict[str, Any], violations: list[str]) -> None:
    template = {"Resources": {"Q": {"Type": "AWS::SQS::Queue", "Properties": properties}}}
    assert checks.check_queues_encrypted(template) == violations


def _alarm_topic_template(topic: dict[str, Any], key_statements: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "Resources": {
            "Alarm": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"AlarmActions": [{"Ref": "Topic"}]}},
            "Topic": {"Type": "AWS::SNS::Topic", "Properties": topic},
            "Key": {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {"Statement": key_statements}}},
        }
    }


CLOUDWATCH_GRANT = {
    "Effect": "Allow",
    "Principal": {"Service": "cloudwatch.amazonaws.com"},
    "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
    "Resource": "*",
}


@pytest.mark.parametrize(
    ("topic", "statements", "violation"),
    [
        ({}, [], None),
        ({"KmsMasterKeyId": {"Ref": "Key"}}, [CLOUDWATCH_GRANT], None),
        ({"KmsMasterKeyId": {"Ref": "Key"}}, [{**CLOUDWATCH_GRANT, "Action": "kms:*"}], None),
        ({"KmsMasterKeyId": "alias/aws/sns"}, [CLOUDWATCH_GRANT], "Topic: encrypted with 'alias/aws/sns', not a key"),
        (
            {"KmsMasterKeyId": {"Ref": "Key"}},
            [{**CLOUDWATCH_GRANT, "Action": "kms:Decrypt"}],
            "Topic: the policy of key Key does not allow cloudwatch.amazonaws.com kms:GenerateDataKey",
        ),
        (
            {"KmsMasterKeyId": {"Ref": "Key"}},
            [{**CLOUDWATCH_GRANT, "Principal": {"Service": "sns.amazonaws.com"}}],
            "Topic: the policy of key Key does not allow cloudwatch.amazonaws.com kms:Decrypt, kms:GenerateDataKey",
        ),
    ],
)
def test_an_encrypted_alarm_topic_needs_a_key_cloudwatch_may_use(
    topic: dict[str, Any], statements: list[dict[str, Any]], violation: str | None
) -> None:
    found = checks.check_alarm_topics_usable_by_cloudwatch(_alarm_topic_template(topic, statements))
    if violation is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith(violation), found


@pytest.mark.parametrize(
    ("resource", "allowed"),
    [
        ({"Fn::Sub": "${Bucket.Arn}/*"}, True),
        ({"Fn::Sub": "${Bucket.Arn}/uploads/*"}, True),
        ({"Fn::Sub": "${Bucket.Arn}*"}, False),
        ("arn:aws:s3:::*", False),
        ("arn:aws:s3:::some-bucket/*", False),
    ],
)
def test_s3_object_resources_may_end_in_a_wildcard_only_under_a_bucket_of_the_template(
    resource: Any, allowed: bool
) -> None:
    statement = {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": resource}
    violations = checks.check_no_wildcard_data_permissions(_role(statement))
    assert (violations == []) is allowed, violations


def test_the_uploads_prefix_the_lifecycle_rule_expires_is_the_one_the_code_writes() -> None:
    from shared.attachments.uploads import UPLOADS_PREFIX

    assert checks.UPLOADS_PREFIX == UPLOADS_PREFIX
