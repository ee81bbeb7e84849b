"""What the automation function receives: the schedule's input as EventBridge Scheduler delivers it, and the Lambda
context. Shared by the handler's integration tests and the IAM check of the calls it makes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from shared.adapters.aws.scheduler import schedule_name

GROUP = "agent-automation"


SCHEDULER_SETTINGS = {
    "scheduler_group_name": GROUP,
    "scheduler_role_arn": "arn:aws:iam::123456789012:role/agent-scheduler",
    "automation_function_arn": "arn:aws:lambda:us-east-1:123456789012:function:agent-automation",
}


PROMPT = "Summarise what is planned for today."


@dataclass
class LambdaContext:
    """What the Lambda runtime passes as ``context`` (Powertools has no test helper for it)."""

    aws_request_id: str = "5f0b8e3c-2d7a-4f7e-9a51-3c1d2b6f0e11"
    function_name: str = "agent-automation"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = SCHEDULER_SETTINGS["automation_function_arn"]

    def get_remaining_time_in_millis(self) -> int:
        return 600_000


def as_delivered(schedule_input: str, *, scheduled_time: str, execution_id: str, attempt: int = 1) -> dict[str, Any]:
    """The event Lambda receives: the schedule's Input with the Scheduler's context keywords substituted."""
    rendered = (
        schedule_input.replace("<aws.scheduler.scheduled-time>", scheduled_time)
        .replace("<aws.scheduler.execution-id>", execution_id)
        .replace("<aws.scheduler.attempt-number>", str(attempt))
    )
    event: dict[str, Any] = json.loads(rendered)
    return event


def stored_input(scheduler: Any, task_id: str) -> str:
    target = scheduler.get_schedule(Name=schedule_name(task_id), GroupName=GROUP)["Target"]
    text: str = target["Input"]
    return text
