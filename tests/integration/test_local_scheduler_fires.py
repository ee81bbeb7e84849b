"""The local runner's scheduler fires a schedule stored in moto's EventBridge Scheduler once, keywords filled."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from devtools.local.scheduler import LocalScheduler

START = datetime(2026, 11, 30, 6, 0, 30, tzinfo=UTC)  # a Monday


async def test_a_due_schedule_fires_once_with_its_keywords_filled(aws: Any) -> None:
    client = boto3.client("scheduler", region_name="us-east-1")
    client.create_schedule_group(Name="local")
    client.create_schedule(
        Name="task-1",
        GroupName="local",
        ScheduleExpression="rate(1 minute)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": "arn:aws:lambda:us-east-1:123456789012:function:automation",
            "RoleArn": "arn:aws:iam::123456789012:role/scheduler",
            "Input": json.dumps({"taskId": "t1", "scheduledTime": "<aws.scheduler.scheduled-time>"}),
        },
    )
    now = [START]
    fired: list[dict[str, Any]] = []

    async def fire(event: dict[str, Any]) -> None:
        fired.append(event)

    scheduler = LocalScheduler(client, "local", fire, clock=lambda: now[0])
    assert await scheduler.tick() == 0
    now[0] = START + timedelta(minutes=1)
    assert await scheduler.tick() == 1
    assert await scheduler.tick() == 0
    assert fired == [{"taskId": "t1", "scheduledTime": "2026-11-30T06:01:00+00:00"}]
