"""Mistakes planted in a copy of the template, each one a finding the template checks must report: run by the
planted-mistakes test and the checkov gate alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.sam_tools import TEMPLATE_PATH

from . import template_checks as checks


@dataclass(frozen=True)
class PlantedMistake:
    name: str
    correct: str
    mistaken: str
    check: checks.Check
    expected_violation: str

    def plant(self, directory: Path) -> Path:
        """Write a copy of template.yaml with the first occurrence of the correct text replaced."""
        text = TEMPLATE_PATH.read_text(encoding="utf-8")
        assert self.correct in text, f"template.yaml no longer contains {self.correct!r}; update {self.name}"
        planted = directory / "template.yaml"
        planted.write_text(text.replace(self.correct, self.mistaken, 1), encoding="utf-8")
        return planted


MISTAKES = [
    PlantedMistake(
        name="stream_instead_of_response_stream",
        correct="ResponseTransferMode: RESPONSE_STREAM",
        mistaken="ResponseTransferMode: STREAM",
        check=checks.check_sse_routes_stream,
        expected_violation="POST /api/v1/agent: integration URI does not end in /response-streaming-invocations",
    ),
    PlantedMistake(
        name="five_field_cron",
        correct="cron(0 6 * * ? *)",
        mistaken="cron(0 6 * * *)",
        check=checks.check_schedule_expressions,
        expected_violation="cron(0 6 * * *): cron(...) needs 6 fields",
    ),
    PlantedMistake(
        name="missing_report_batch_item_failures",
        correct="            FunctionResponseTypes:\n              - ReportBatchItemFailures\n",
        mistaken="",
        check=checks.check_sqs_sources_report_batch_item_failures,
        expected_violation="MemoryFunctionRunCompleted: FunctionResponseTypes lacks ReportBatchItemFailures",
    ),
    PlantedMistake(
        name="wildcard_dynamodb_action",
        correct="- dynamodb:GetItem",
        mistaken="- dynamodb:*",
        check=checks.check_no_wildcard_data_permissions,
        expected_violation="StreamingApiRole/agent-data: wildcard action 'dynamodb:*'",
    ),
    PlantedMistake(
        # The runtime secret namespace is the one wildcard the check allows: widened to every secret, it is reported.
        name="webhook_secrets_on_every_secret",
        correct=":secret:${AWS::StackName}/webhooks/*",
        mistaken=":secret:*",
        check=checks.check_no_wildcard_data_permissions,
        expected_violation="BufferedApiRole/agent-data: wildcard resource",
    ),
    PlantedMistake(
        name="no_cors",
        correct="      Cors:\n        AllowOrigin: !Sub \"'${CorsAllowedOrigin}'\"\n",
        mistaken="      Cors:\n        AllowOrigin: \"'*'\"\n",
        check=checks.check_cors,
        expected_violation="/api/v1/agent: OPTIONS origin '*' is not a template parameter",
    ),
    PlantedMistake(
        name="buffered_timeout_at_the_gateway_limit",
        correct="      Timeout: 25\n",
        mistaken="      Timeout: 29\n",
        check=checks.check_buffered_timeouts,
        expected_violation="BufferedApiFunction: Timeout 29s >= API Gateway's 29s",
    ),
    PlantedMistake(
        name="rule_target_without_dead_letters",
        correct="          DeadLetterConfig:\n            Arn: !GetAtt AsyncDeadLetterQueue.Arn\n",
        mistaken="",
        check=checks.check_async_targets_have_dead_letters,
        expected_violation="RunCompletedRule: target MemoryQueue has no DeadLetterConfig",
    ),
    PlantedMistake(
        name="schedule_permissions_on_the_whole_group",
        correct=":schedule/${AutomationScheduleGroup}/task-*",
        mistaken=":schedule/${AutomationScheduleGroup}/*",
        check=checks.check_schedule_permissions,
        expected_violation="BufferedApiRole/agent-data: schedule actions on",
    ),
    PlantedMistake(
        name="function_without_errors_alarm",
        correct="      Dimensions: [{Name: FunctionName, Value: !Ref SweeperFunction}]\n",
        mistaken="      Dimensions: [{Name: FunctionName, Value: !Ref MemoryFunction}]\n",
        check=checks.check_failure_alarms,
        expected_violation="SweeperFunction: no Errors alarm",
    ),
    PlantedMistake(
        name="dead_letter_queue_without_an_alarm",
        correct="      Dimensions: [{Name: QueueName, Value: !GetAtt WebhookDeadLetterQueue.QueueName}]\n",
        mistaken="      Dimensions: [{Name: QueueName, Value: !GetAtt MemoryDeadLetterQueue.QueueName}]\n",
        check=checks.check_dead_letter_queues_alarmed,
        expected_violation="WebhookDeadLetterQueue: a dead-letter queue without a depth alarm",
    ),
    PlantedMistake(
        name="queue_without_encryption",
        correct="      SqsManagedSseEnabled: true\n      RedrivePolicy:\n",
        mistaken="      RedrivePolicy:\n",
        check=checks.check_queues_encrypted,
        expected_violation="MemoryQueue: no encryption declared",
    ),
    PlantedMistake(
        name="alarm_topic_with_the_aws_managed_key",
        correct="      KmsMasterKeyId: !Ref AlarmTopicKey\n",
        mistaken="      KmsMasterKeyId: alias/aws/sns\n",
        check=checks.check_alarm_topics_usable_by_cloudwatch,
        expected_violation="AlarmTopic: encrypted with 'alias/aws/sns'",
    ),
    PlantedMistake(
        name="bucket_without_encryption",
        correct=(
            "      BucketEncryption:\n        ServerSideEncryptionConfiguration:\n"
            "          - ServerSideEncryptionByDefault:\n              SSEAlgorithm: AES256\n"
            "            BucketKeyEnabled: true\n"
        ),
        mistaken="",
        check=checks.check_buckets_private_and_encrypted,
        expected_violation="AttachmentsBucket: no default encryption declared",
    ),
    PlantedMistake(
        name="bucket_public_access_not_blocked",
        correct="        RestrictPublicBuckets: true\n",
        mistaken="        RestrictPublicBuckets: false\n",
        check=checks.check_buckets_private_and_encrypted,
        expected_violation="AttachmentsBucket: public access not blocked (RestrictPublicBuckets not true)",
    ),
    PlantedMistake(
        name="bucket_policy_denies_tls_instead_of_plain_http",
        correct='                aws:SecureTransport: "false"\n',
        mistaken='                aws:SecureTransport: "true"\n',
        check=checks.check_buckets_private_and_encrypted,
        expected_violation="AttachmentsBucket: no bucket policy denies requests without TLS",
    ),
    PlantedMistake(
        name="unattached_uploads_kept_a_week",
        correct="            Prefix: uploads/\n            ExpirationInDays: 1\n",
        mistaken="            Prefix: uploads/\n            ExpirationInDays: 7\n",
        check=checks.check_attachment_uploads_expire,
        expected_violation="AttachmentsBucket: no enabled lifecycle rule expires uploads/ within 1 day",
    ),
    PlantedMistake(
        name="plain_http_streams_listener",
        correct="      Protocol: HTTPS\n      Port: 443\n",
        mistaken="      Protocol: HTTP\n      Port: 80\n",
        check=checks.check_stream_host,
        expected_violation="StreamHostListener: listener protocol HTTP is not HTTPS",
    ),
]
