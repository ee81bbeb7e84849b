"""Least privilege that is least: every IAM action a role of the template grants is needed by a call in the code.

``GRANTS`` is the table the issue asks for: per role, each granted ``(action, resource)`` maps to the calls that
need it, either a boto3 call in our adapters (or in the Powertools utility the code uses), checked here to be in
that function's source, or a call the AWS service makes with the role (an event source mapping polling the queue, an
on-failure destination), checked here to exist in the expanded template. The template and the table must agree
exactly: a grant with no row is an action no code path uses; a row with no grant is a call that would be denied.

Notes that decide the rows:

- DynamoDB authorises a ``TransactWriteItems`` per item (``Put`` -> ``PutItem``, ``Update`` -> ``UpdateItem``,
  ``Delete`` -> ``DeleteItem``); there is no transaction action to grant.
- Which function reaches which adapter call follows its entry point: the streaming API and the automation function
  run chat/task runs (``RunService`` + ``WorkerExecutor``), the background-run function runs chat runs as the
  streaming API does, the memory function runs a hidden memory run, the buffered API serves the JSON routes, the
  sweeper ends stale runs. Only the buffered API deletes data (a memory, a task, a thread and its runs, a user's
  data); the roles that run chat runs delete only a started run's entry in its thread's run queue. Only the
  buffered API manages schedules, and only task schedules (``task-*``).
- The runtime configuration is read by the AppConfig Lambda extension (a layer, only when its parameter is set), with
  the function's role: the two ``appconfig`` calls are the layer's, granted by a conditional ``AWS::IAM::Policy``
  attached to the four roles whose functions choose profiles; the code reads the extension on localhost. A grant
  of such a policy counts as the role's.
- The streams service on Fargate (``StreamHost``, off by default) runs the streaming function's app: its task role
  has exactly the streaming role's rows but the AppConfig extension's (the task has no extension); its execution role
  is what ECS itself does to start the task (pull the image from its one repository, write the container's log).
"""

from __future__ import annotations

import copy
import importlib
import inspect
from dataclasses import dataclass
from typing import Any

import pytest

from . import template_checks as checks
from .iam_grants import BACKGROUND_RUNS, MIGRATE_SELF, WEBHOOK_SECRETS, Grant, granted

Template = dict[str, Any]


@dataclass(frozen=True)
class Code:
    """A call in our code (or a library it uses): ``call`` must appear in the source of ``target``."""

    target: str  # "package.module:Class.method"
    call: str

    def problem(self) -> str | None:
        module_name, _, qualname = self.target.partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                return f"{self.target} does not exist"
        if self.call not in inspect.getsource(obj):
            return f"{self.target} no longer calls {self.call!r}"
        return None


@dataclass(frozen=True)
class Service:
    """A call AWS makes with the role on the project's behalf; ``resource`` (expanded template) is what makes it."""

    what: str
    resource: str
    resource_type: str

    def problem(self, template: Template) -> str | None:
        found = template.get("Resources", {}).get(self.resource, {}).get("Type")
        if found != self.resource_type:
            return f"{self.what}: {self.resource} ({self.resource_type}) is not in the template"
        return None


Need = Code | Service

THREADS = "shared.adapters.aws.threads:DynamoDBThreads"
READS = "shared.adapters.aws.message_reads"
APPENDS = "shared.adapters.aws.thread_appends:MessageAppends"
RUNS = "shared.adapters.aws.runs:DynamoDBRunLedger"
AUDIT = "shared.adapters.aws.audit:DynamoDBAuditLog"
MEMORIES = "shared.adapters.aws.memory_store:DynamoDBMemoryStore"
TASKS = "shared.adapters.aws.automation_store:DynamoDBAutomationStore"
SCHEDULER = "shared.adapters.aws.scheduler:EventBridgeTaskScheduler"
PENDING = "shared.adapters.aws.memory_pending:DynamoDBPendingExtractions"
DUE_QUEUE = "shared.adapters.aws.sqs_due_queue:SqsDueQueue"
MIGRATION_LOG = "shared.adapters.aws.migration_state:DynamoDBMigrationLog"
MIGRATION_STATE = "shared.adapters.aws.migration_state:MigrationStateTable"
SEGMENT = "shared.adapters.aws.migration_segment:SegmentWorker"
IDEMPOTENCY = "aws_lambda_powertools.utilities.idempotency.persistence.dynamodb:DynamoDBPersistenceLayer"
TABLE = "AgentTable"
GSI1 = "AgentTable/index/GSI1"
GSI2 = "AgentTable/index/GSI2"
GSI3 = "AgentTable/index/GSI3"
THREAD_LIST = "shared.adapters.aws.thread_list:ThreadList"
DLQ = "AsyncDeadLetterQueue"
S3 = "shared.adapters.aws.attachments:S3Attachments"
BUCKET = "AttachmentsBucket"
OBJECTS = "AttachmentsBucket/*"
# A stored image read for the model: its bytes, or a presigned GET, which S3 authorises as the signer's GetObject.
READ_IMAGES: tuple[Need, ...] = (
    Code(f"{S3}.get", "get_object("),
    Code(f"{S3}.presigned_get", '"get_object"'),
    Code("shared.executors.images:image_urls", "store.presigned_get("),
)
REGISTRY = "shared.adapters.aws.webhook_registry:DynamoDBWebhookRegistry"
SECRETS = "shared.adapters.aws.webhook_secrets:SecretsManagerWebhookSecrets"
BACKOFF = "shared.adapters.aws.queue_backoff:SqsBackoff"
WEBHOOK_HANDLER = "functions.webhook_delivery.handler:WebhookHandler"

ENVIRONMENT = "RuntimeConfigEnvironment"
APPCONFIG = "shared.adapters.appconfig_extension:AppConfigExtensionSource.fetch"
RUNTIME_CONFIG: dict[Grant, tuple[Need, ...]] = {
    (action, "appconfig/RuntimeConfigApplication/RuntimeConfigEnvironment/RuntimeConfigProfile"): (
        Code(APPCONFIG, "_OPENER.open("),
        Service(
            "the AppConfig Lambda extension reads the configuration with the function's role",
            "RuntimeConfigProfile",
            "AWS::AppConfig::ConfigurationProfile",
        ),
    )
    for action in ("appconfig:StartConfigurationSession", "appconfig:GetLatestConfiguration")
}

LLM_KEY: dict[Grant, tuple[Need, ...]] = {
    ("secretsmanager:GetSecretValue", "LlmApiKeySecret"): (
        Code("shared.wiring.secrets:read_secret", "parameters.get_secret("),
        Code("aws_lambda_powertools.utilities.parameters.secrets:SecretsProvider._get", "get_secret_value("),
    ),
}

# A run as RunService and the worker drive it: admission, the transactional append, heartbeat, end, audit,
# the user's memories in the prompt, and "run completed" for memory extraction.
RUN: dict[Grant, tuple[Need, ...]] = {
    ("dynamodb:GetItem", TABLE): (
        Code(f"{THREADS}._thread_item", "get_item("),
        Code(f"{RUNS}.get_run", "get_item("),
        # which migrations completed: the memory store's choice of reader (and /healthz)
        Code(f"{MIGRATION_LOG}.completed", "get_item("),
    ),
    ("dynamodb:PutItem", TABLE): (
        Code(f"{THREADS}.open_thread", "put_item("),
        Code(f"{RUNS}.put_run_item", "put_item("),
        Code(f"{AUDIT}.record", "put_item("),
        Code(f"{APPENDS}._append_items", '"Put": {'),
    ),
    ("dynamodb:UpdateItem", TABLE): (
        Code(f"{THREADS}.claim_thread", "update_item("),
        Code(f"{THREADS}.release_thread", "update_item("),
        Code(f"{RUNS}._update_run", "update_item("),
        Code(f"{APPENDS}._append_items", '"Update": {'),
    ),
    ("dynamodb:Query", TABLE): (Code(f"{READS}:read_back", "query("), Code(f"{MEMORIES}.list_memories", "query(")),
    ("dynamodb:BatchGetItem", TABLE): (Code(f"{READS}:_batch_get", "batch_get_item("),),
    ("dynamodb:Query", GSI1): (Code(f"{MEMORIES}.list_active", 'IndexName="GSI1"'),),
    ("events:PutEvents", "AgentEventBus"): (
        Code("shared.adapters.aws.eventbridge:EventBridgePublisher.publish", "put_events("),
    ),
    ("s3:GetObject", OBJECTS): READ_IMAGES,
    **LLM_KEY,
    **RUNTIME_CONFIG,
}

QUEUE = "shared.adapters.aws.run_queue:DynamoDBRunQueue"
# A thread's run queue (shared.runs.queueing): queued runs (the enqueue strategy, background runs) read, appended
# (a transaction: the counter, the entry, its marker) and taken out when they start (a transaction of two deletes).
RUN_QUEUE: dict[Grant, tuple[Need, ...]] = {
    ("dynamodb:Query", TABLE): (Code(f"{QUEUE}._read", "client.query("),),
    ("dynamodb:GetItem", TABLE): (Code(f"{QUEUE}.find", "get_item("),),
    ("dynamodb:PutItem", TABLE): (Code(f"{QUEUE}._write", '"Put": {'),),
    ("dynamodb:UpdateItem", TABLE): (Code(f"{QUEUE}._write", '"Update": {'),),
    ("dynamodb:DeleteItem", TABLE): (Code(f"{QUEUE}.remove", '"Delete": {'),),
}


def merged(*tables: dict[Grant, tuple[Need, ...]]) -> dict[Grant, tuple[Need, ...]]:
    """The rows of ``tables`` together: a grant two tables need lists the calls of both."""
    out: dict[Grant, tuple[Need, ...]] = {}
    for table in tables:
        for grant, needs in table.items():
            out[grant] = out.get(grant, ()) + needs
    return out


GRANTS: dict[str, dict[Grant, tuple[Need, ...]]] = {
    "StreamingApiRole": {
        **merged(RUN, RUN_QUEUE),
        # A user message's images and files, stored at intake (shared.attachments.storage.store_parts).
        ("s3:PutObject", OBJECTS): (Code(f"{S3}.put", "put_object("),),
        # A background run is accepted here and started by the background-run function.
        ("lambda:InvokeFunction", BACKGROUND_RUNS): (
            Code("shared.adapters.aws.function_invoker:LambdaInvoker.invoke_async", 'InvocationType="Event"'),
            Code("shared.adapters.aws.queue_starter:LambdaQueueStarter.start_queue", "invoke_async("),
        ),
    },
    "BackgroundRunRole": {
        **merged(RUN, RUN_QUEUE),
        # A background run's images and files are stored again at its admission (the same keys: a no-op rewrite).
        ("s3:PutObject", OBJECTS): (Code(f"{S3}.put", "put_object("),),
        # A drain that ran out of time hands the rest of the thread's queue to a new invocation.
        ("lambda:InvokeFunction", BACKGROUND_RUNS): (
            Code("shared.adapters.aws.function_invoker:LambdaInvoker.invoke_async", 'InvocationType="Event"'),
            Code("functions.background_run.handler:handle", "start_queue("),
        ),
        ("sqs:SendMessage", DLQ): (
            Service(
                "on-failure destination of a failed drain",
                "BackgroundRunFunctionEventInvokeConfig",
                "AWS::Lambda::EventInvokeConfig",
            ),
        ),
    },
    "AutomationRole": {
        **RUN,
        ("dynamodb:GetItem", TABLE): (*RUN[("dynamodb:GetItem", TABLE)], Code(f"{TASKS}.find", "get_item(")),
        ("sqs:SendMessage", DLQ): (
            Service(
                "on-failure destination of a failed fire",
                "AutomationFunctionEventInvokeConfig",
                "AWS::Lambda::EventInvokeConfig",
            ),
        ),
    },
    "BufferedApiRole": {
        ("dynamodb:GetItem", TABLE): (
            Code(f"{THREADS}._thread_item", "get_item("),
            Code(f"{RUNS}.get_run", "get_item("),
            Code(f"{TASKS}.get", "get_item("),
            Code(f"{PENDING}.get", "get_item("),
            Code(f"{MIGRATION_LOG}.completed", "get_item("),  # /healthz: the pending migrations
            Code(f"{REGISTRY}.targets", ".get_item,"),  # GET /api/v1/admin/webhooks
            Code(f"{QUEUE}.find", "get_item("),  # a queued run's status, and its cancel
        ),
        ("dynamodb:PutItem", TABLE): (
            Code(f"{TASKS}.create", '"Put": {'),
            Code(f"{TASKS}.replace", "put_item("),
            Code(f"{AUDIT}.record", "put_item("),
            Code(f"{PENDING}.cancel_user", "put_item("),
            Code(f"{REGISTRY}.put_targets", "client.put_item,"),  # PUT /api/v1/admin/webhooks
            Code(f"{RUNS}.put_run_item", "put_item("),  # a queued run cancelled is recorded cancelled
        ),
        ("dynamodb:UpdateItem", TABLE): (
            Code(f"{RUNS}.request_cancel", "_update_run("),
            Code(f"{THREADS}.claim_thread", "update_item("),
            Code(f"{THREADS}.release_thread", "update_item("),
        ),
        ("dynamodb:DeleteItem", TABLE): (
            Code(f"{MEMORIES}.delete", "delete_item("),
            Code(f"{TASKS}.delete", '"Delete": {'),
            Code(f"{THREADS}.delete_thread", "delete_item("),
            Code(f"{PENDING}.cancel_thread", "delete_item("),
            Code(f"{REGISTRY}.put_targets", "client.delete_item,"),  # DELETE /api/v1/admin/webhooks
            Code(f"{QUEUE}.remove", '"Delete": {'),  # a queued run cancelled leaves its queue
        ),
        # A thread's erasure deletes its messages and runs 25 keys a request.
        ("dynamodb:BatchWriteItem", TABLE): (Code(f"{THREADS}._batch_delete", "batch_write_item"),),
        # The parts route finds a message by its id (its marker, then its body).
        ("dynamodb:BatchGetItem", TABLE): (
            Code("shared.threads:ThreadService.message_part", "stored_messages("),
            Code(f"{READS}:_batch_get", "client.batch_get_item("),
        ),
        ("dynamodb:Query", TABLE): (
            Code(f"{READS}:read_forward", "query("),
            Code(f"{AUDIT}.list_for_thread", "query("),
            Code(f"{MEMORIES}.list_memories", "query("),
            Code(f"{TASKS}.list", "query("),
            Code(f"{THREADS}._query_all", "query("),
            Code(f"{READS}:run_message_ids", "client.query("),
            Code(f"{QUEUE}._read", "client.query("),  # the queued run to cancel, in its thread's queue
        ),
        ("dynamodb:Query", GSI1): (
            # the listing's old-shape reader (threads of the release before, until migration 2 completes)
            Code(f"{THREAD_LIST}.list_threads", "indexes.append(_OLD_INDEX)"),
            Code(f"{RUNS}.list_runs_for_thread", 'IndexName="GSI1"'),
            Code(f"{RUNS}.page_thread_runs", 'IndexName="GSI1"'),
            Code(f"{THREADS}.delete_thread", '"IndexName": "GSI1"'),
        ),
        ("dynamodb:Query", GSI3): (Code(f"{THREAD_LIST}.list_threads", "indexes = [_INDEX]"),),
        ("scheduler:CreateSchedule", "schedule/task-*"): (Code(f"{SCHEDULER}.create", "create_schedule("),),
        ("scheduler:UpdateSchedule", "schedule/task-*"): (Code(f"{SCHEDULER}.update", "update_schedule("),),
        ("scheduler:DeleteSchedule", "schedule/task-*"): (Code(f"{SCHEDULER}.delete", "delete_schedule("),),
        ("iam:PassRole", "SchedulerInvokeRole"): (Code(f"{SCHEDULER}._definition", '"RoleArn": self._role_arn'),),
        # History's parts: the parts route's bytes, or a presigned GET signed with the role.
        ("s3:GetObject", OBJECTS): (
            Code(f"{S3}.get", "get_object("),
            Code(f"{S3}.presigned_get", '"get_object"'),
        ),
        # A thread's or a user's erasure: list the prefix, delete the keys (DeleteObjects is DeleteObject per key).
        ("s3:ListBucket", BUCKET): (Code(f"{S3}.delete_prefix", "list_objects_v2("),),
        ("s3:DeleteObject", OBJECTS): (Code(f"{S3}.delete_prefix", "delete_objects("),),
        # POST /api/v1/uploads: the presigned PUT S3 authorises as the signer's PutObject.
        ("s3:PutObject", "AttachmentsBucket/uploads/*"): (
            Code(f"{S3}.presigned_put", '"put_object"'),
            Code("shared.attachments.uploads:Uploads.create", "presigned_put("),
        ),
        # PUT /api/v1/threads/{threadId}/branch: a changed branch is published for the memory worker.
        ("events:PutEvents", "AgentEventBus"): (
            Code("shared.threads:ThreadService.switch_branch", "self._on_branch_switched("),
            Code("shared.memory.trigger:RunCompletedPublisher.branch_switched", "branch_switched_event("),
            Code("shared.adapters.aws.eventbridge:EventBridgePublisher.publish", "put_events("),
        ),
        # POST /api/v1/admin/webhooks/secret: a new secret over the old one, or the tenant's first (tags included).
        ("secretsmanager:PutSecretValue", WEBHOOK_SECRETS): (
            Code("shared.webhooks.admin:WebhookAdmin.new_secret", ".rotate("),
            Code(f"{SECRETS}._put", "put_secret_value("),
        ),
        ("secretsmanager:CreateSecret", WEBHOOK_SECRETS): (
            Code(f"{SECRETS}._put", "self._create("),
            Code(f"{SECRETS}._create", "create_secret("),
        ),
        ("secretsmanager:TagResource", WEBHOOK_SECRETS): (Code(f"{SECRETS}._create", "Tags="),),
        **RUNTIME_CONFIG,
    },
    "MemoryRole": {
        ("dynamodb:GetItem", TABLE): (
            Code(f"{THREADS}._thread_item", "get_item("),
            Code(f"{RUNS}.get_run", "get_item("),
            Code(f"{MEMORIES}.get", "get_item("),
            Code(f"{MEMORIES}.get_cursor", "get_item("),
        ),
        ("dynamodb:PutItem", TABLE): (
            Code(f"{THREADS}.open_thread", "put_item("),
            Code(f"{RUNS}.put_run_item", "put_item("),
            Code(f"{AUDIT}.record", "put_item("),
            Code(f"{APPENDS}._append_items", '"Put": {'),
            Code(f"{MEMORIES}.put", "put_item("),
            Code(f"{MEMORIES}.deactivate", "put_item("),
        ),
        ("dynamodb:UpdateItem", TABLE): (
            Code(f"{RUNS}._update_run", "update_item("),
            Code(f"{APPENDS}._append_items", '"Update": {'),
            Code(f"{MEMORIES}.advance_cursor", "update_item("),
        ),
        ("dynamodb:Query", TABLE): (
            Code(f"{READS}:read_forward", "query("),
            Code(f"{READS}:read_back", "query("),
            Code(f"{MEMORIES}.list_memories", "query("),
        ),
        # RunService's last-resort close of a failed run looks up which turns were stored.
        ("dynamodb:BatchGetItem", TABLE): (Code(f"{READS}:_batch_get", "batch_get_item("),),
        ("dynamodb:GetItem", "IdempotencyTable"): (Code(f"{IDEMPOTENCY}._get_record", "get_item("),),
        ("dynamodb:PutItem", "IdempotencyTable"): (Code(f"{IDEMPOTENCY}._put_record", "put_item("),),
        ("dynamodb:UpdateItem", "IdempotencyTable"): (Code(f"{IDEMPOTENCY}._update_record", "update_item("),),
        ("dynamodb:DeleteItem", "IdempotencyTable"): (Code(f"{IDEMPOTENCY}._delete_record", "delete_item("),),
        **{
            (action, "MemoryQueue"): (
                Service(
                    "the SQS event source mapping polls the queue",
                    "MemoryFunctionRunCompleted",
                    "AWS::Lambda::EventSourceMapping",
                ),
            )
            for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
        },
        ("sqs:SendMessage", "MemoryQueue"): (Code(f"{DUE_QUEUE}.send", "send_message("),),
        **LLM_KEY,
        **RUNTIME_CONFIG,
    },
    # The run's ledger record, the tenant's registered targets, an audit record per attempt; the tenant's secret (read,
    # or created on its first webhook); the queue polled by the event source and a failed record's backoff.
    "WebhookRole": {
        ("dynamodb:GetItem", TABLE): (
            Code(f"{RUNS}.get_run", "get_item("),
            Code(f"{REGISTRY}.targets", ".get_item,"),
        ),
        ("dynamodb:PutItem", TABLE): (Code(f"{AUDIT}.record", "put_item("),),
        ("secretsmanager:GetSecretValue", WEBHOOK_SECRETS): (Code(f"{SECRETS}._read_or_create", "get_secret_value("),),
        ("secretsmanager:CreateSecret", WEBHOOK_SECRETS): (
            Code(f"{SECRETS}._read_or_create", "self._create("),
            Code(f"{SECRETS}._create", "create_secret("),
        ),
        ("secretsmanager:TagResource", WEBHOOK_SECRETS): (Code(f"{SECRETS}._create", "Tags="),),
        **{
            (action, "WebhookQueue"): (
                Service(
                    "the SQS event source mapping polls the queue",
                    "WebhookFunctionRunEnded",
                    "AWS::Lambda::EventSourceMapping",
                ),
            )
            for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
        },
        ("sqs:ChangeMessageVisibility", "WebhookQueue"): (
            Code(f"{WEBHOOK_HANDLER}._back_off", ".delay("),
            Code(f"{BACKOFF}.delay", "change_message_visibility"),
        ),
    },
    "SweeperRole": {
        ("dynamodb:GetItem", TABLE): (Code(f"{THREADS}._thread_item", "get_item("),),
        ("dynamodb:PutItem", TABLE): (
            Code(f"{AUDIT}.record", "put_item("),
            Code(f"{APPENDS}._append_items", '"Put": {'),
        ),
        ("dynamodb:UpdateItem", TABLE): (
            Code(f"{RUNS}.abandon_run", "update_item("),
            Code(f"{THREADS}.release_thread", "update_item("),
            Code(f"{APPENDS}._append_items", '"Update": {'),
        ),
        ("dynamodb:Query", TABLE): (Code(f"{READS}:read_back", "query("),),
        ("dynamodb:Query", GSI2): (Code(f"{RUNS}.list_stale_runs", '"IndexName": RUNNING_INDEX'),),
        ("dynamodb:BatchGetItem", TABLE): (
            Code(f"{RUNS}.list_stale_runs", "batch_get_item("),
            Code(f"{READS}:_batch_get", "batch_get_item("),
        ),
        ("sqs:SendMessage", DLQ): (
            Service(
                "on-failure destination of a failed sweep",
                "SweeperFunctionEventInvokeConfig",
                "AWS::Lambda::EventInvokeConfig",
            ),
        ),
    },
    "MigrationRole": {
        ("dynamodb:Scan", TABLE): (Code(f"{SEGMENT}._scan", "self._client.scan("),),
        ("dynamodb:GetItem", TABLE): (
            Code(f"{MIGRATION_STATE}.completed", "get_item("),
            Code(f"{MIGRATION_STATE}.load", "get_item("),
            Code(f"{SEGMENT}._read", "get_item("),
        ),
        ("dynamodb:PutItem", TABLE): (Code(f"{SEGMENT}._put", "put_item("),),
        ("dynamodb:UpdateItem", TABLE): (
            Code(f"{MIGRATION_STATE}.begin", "update_item("),
            Code(f"{MIGRATION_STATE}._owned_update", "update_item("),
            Code(f"{MIGRATION_STATE}.record_completed", "update_item("),
        ),
        ("lambda:InvokeFunction", MIGRATE_SELF): (
            Code("shared.adapters.aws.function_invoker:LambdaInvoker.invoke_async", 'InvocationType="Event"'),
            Code("functions.migrate.handler:_continue", "context.invoked_function_arn"),
        ),
        ("sqs:SendMessage", DLQ): (
            Service(
                "on-failure destination of a failed migration invocation",
                "MigrationFunctionEventInvokeConfig",
                "AWS::Lambda::EventInvokeConfig",
            ),
        ),
    },
    "SchedulerInvokeRole": {
        ("lambda:InvokeFunction", "AutomationFunction"): (
            Code(f"{SCHEDULER}._definition", '"Arn": self._target_arn'),
            Service("the canary schedule", "AutomationFunctionSchedulerCanary", "AWS::Scheduler::Schedule"),
        ),
        ("sqs:SendMessage", DLQ): (
            Code(f"{SCHEDULER}._definition", '"DeadLetterConfig"'),
            Service("the canary's dead letters", "AutomationFunctionSchedulerCanary", "AWS::Scheduler::Schedule"),
        ),
    },
    "RuntimeConfigMonitorRole": {
        ("cloudwatch:DescribeAlarms", alarm): (
            Service("AppConfig watches the alarm during a deployment", ENVIRONMENT, "AWS::AppConfig::Environment"),
        )
        for alarm in ("RunErrorsAlarm", "Api5xxAlarm")
    },
    "SweeperInvokeRole": {
        ("lambda:InvokeFunction", "SweeperFunction"): (
            Service("the sweeper's schedule", "SweeperFunctionEvery5Minutes", "AWS::Scheduler::Schedule"),
        ),
        ("sqs:SendMessage", DLQ): (
            Service("the sweeper schedule's dead letters", "SweeperFunctionEvery5Minutes", "AWS::Scheduler::Schedule"),
        ),
    },
}

ECR_REPOSITORY = "arn:${AWS::Partition}:ecr:${AWS::Region}:${AWS::AccountId}:repository/${StreamHostImageRepository}"
STARTS_THE_TASK = Service(
    "ECS starts the task with its execution role", "StreamHostTaskDefinition", "AWS::ECS::TaskDefinition"
)
GRANTS["StreamHostTaskRole"] = {
    grant: needs for grant, needs in GRANTS["StreamingApiRole"].items() if grant not in RUNTIME_CONFIG
}
GRANTS["StreamHostExecutionRole"] = {
    # The registry's login token belongs to no repository: IAM takes only "*" for it.
    ("ecr:GetAuthorizationToken", "*"): (STARTS_THE_TASK,),
    ("ecr:BatchGetImage", ECR_REPOSITORY): (STARTS_THE_TASK,),
    ("ecr:GetDownloadUrlForLayer", ECR_REPOSITORY): (STARTS_THE_TASK,),
    ("logs:CreateLogStream", "StreamHostLogGroup"): (
        Service("the awslogs driver writes the container's output", "StreamHostLogGroup", "AWS::Logs::LogGroup"),
    ),
    ("logs:PutLogEvents", "StreamHostLogGroup"): (
        Service("the awslogs driver writes the container's output", "StreamHostLogGroup", "AWS::Logs::LogGroup"),
    ),
}

# The only AWS managed policies: ENIs for the VPC and X-Ray for active tracing (no data access).
MANAGED = {"AWSLambdaVPCAccessExecutionRole", "AWSXRayDaemonWriteAccess"}


def unexplained(template: Template) -> list[str]:
    """Grants without a row (an action no code path uses) and rows without a grant (a call that would be denied)."""
    problems = []
    actual = granted(template)
    for role_id in sorted(set(actual) | set(GRANTS)):
        have, want = actual.get(role_id, set()), set(GRANTS.get(role_id, {}))
        problems += [
            f"{role_id}: {action} on {res} is granted but no code path uses it" for action, res in sorted(have - want)
        ]
        problems += [f"{role_id}: {action} on {res} is needed but not granted" for action, res in sorted(want - have)]
    return problems


def test_every_granted_action_is_needed_by_a_call_and_every_needed_one_is_granted(
    expanded_template: Template,
) -> None:
    assert unexplained(expanded_template) == []


def test_every_call_in_the_table_exists(expanded_template: Template) -> None:
    problems = []
    for role_id, rows in GRANTS.items():
        for (action, resource), needs in rows.items():
            assert needs, f"{role_id}: {action} on {resource} has no reason"
            for need in needs:
                problem = need.problem() if isinstance(need, Code) else need.problem(expanded_template)
                if problem:
                    problems.append(f"{role_id} {action}: {problem}")
    assert problems == []


def test_only_the_buffered_api_deletes_only_the_migration_role_scans_and_no_role_has_unused_actions(
    expanded_template: Template,
) -> None:
    grants = granted(expanded_template)
    # The roles that run chat runs delete only a started run's queue entry (DynamoDBRunQueue.remove); erasure's
    # batch deletes are the buffered API's alone.
    expected = {
        "dynamodb:DeleteItem": {"BufferedApiRole", "StreamingApiRole", "BackgroundRunRole", "StreamHostTaskRole"},
        "dynamodb:BatchWriteItem": {"BufferedApiRole"},
    }
    for delete, roles in expected.items():
        deleters = {role for role, pairs in grants.items() if (delete, TABLE) in pairs}
        assert deleters == roles, delete
    scanners = {role for role, pairs in grants.items() if ("dynamodb:Scan", TABLE) in pairs}
    assert scanners == {"MigrationRole"}
    never_used = {
        "dynamodb:ConditionCheckItem",
        "dynamodb:DescribeTable",
        "secretsmanager:DescribeSecret",
        "scheduler:GetSchedule",
    }
    assert not {action for pairs in grants.values() for action, _ in pairs} & never_used
    # Only the webhook function moves a record's visibility (its backoff), and only on its own queue.
    movers = {
        (role, res)
        for role, pairs in grants.items()
        for action, res in pairs
        if action == "sqs:ChangeMessageVisibility"
    }
    assert movers == {("WebhookRole", "WebhookQueue")}
    # Secrets are written only under the webhook prefix: created by the webhook function and the admin route,
    # replaced by the admin route alone.
    writers = {
        (role, action, res)
        for role, pairs in grants.items()
        for action, res in pairs
        if action in ("secretsmanager:CreateSecret", "secretsmanager:PutSecretValue", "secretsmanager:TagResource")
    }
    assert {res for _, _, res in writers} == {WEBHOOK_SECRETS}
    assert {role for role, action, _ in writers if action == "secretsmanager:PutSecretValue"} == {"BufferedApiRole"}
    assert {role for role, _, _ in writers} == {"BufferedApiRole", "WebhookRole"}
    assert not any(
        res == "IdempotencyTable" for role, pairs in grants.items() if role != "MemoryRole" for _, res in pairs
    )


def test_managed_policies_are_only_networking_and_tracing(expanded_template: Template) -> None:
    for role_id, role in checks.resources(expanded_template, "AWS::IAM::Role"):
        names = {checks.flatten(arn).rsplit("/", 1)[-1] for arn in role["Properties"].get("ManagedPolicyArns", [])}
        assert names <= MANAGED, role_id


@pytest.mark.parametrize(
    ("role_id", "extra", "expected"),
    [
        ("StreamingApiRole", ("dynamodb:BatchWriteItem", TABLE), "is granted but no code path uses it"),
        ("SweeperRole", ("dynamodb:DeleteItem", TABLE), "is granted but no code path uses it"),
        ("MemoryRole", ("secretsmanager:DescribeSecret", "LlmApiKeySecret"), "is granted but no code path uses it"),
    ],
)
def test_an_unused_grant_is_reported(expanded_template: Template, role_id: str, extra: Grant, expected: str) -> None:
    # GIVEN the template with one more action on one role (the kind of grant the issue found)
    planted = copy.deepcopy(expanded_template)
    action, resource = extra
    arn = {"Fn::GetAtt": [resource, "Arn"]} if resource != "LlmApiKeySecret" else {"Ref": resource}
    statements = planted["Resources"][role_id]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    statements.append({"Effect": "Allow", "Action": action, "Resource": arn})
    # THEN the table check names it
    assert unexplained(planted) == [f"{role_id}: {action} on {resource} {expected}"]


def test_a_missing_grant_is_reported(expanded_template: Template) -> None:
    planted = copy.deepcopy(expanded_template)
    statements = planted["Resources"]["SweeperRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    table = next(s for s in statements if s.get("Sid") == "AgentTable")
    table["Action"] = [a for a in table["Action"] if a != "dynamodb:BatchGetItem"]
    assert unexplained(planted) == ["SweeperRole: dynamodb:BatchGetItem on AgentTable is needed but not granted"]
