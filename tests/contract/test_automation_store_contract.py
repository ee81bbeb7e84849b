"""Contract of the ``AutomationStore`` port: the same cases on the in-memory fake and the DynamoDB adapter (moto).
Tasks live in their owner's partition; ids are unique across tenants; listing pages by id with a cursor bound to
its owner."""

from __future__ import annotations

from typing import Any, cast

import boto3
import pytest

from shared.adapters.aws.automation_store import DynamoDBAutomationStore
from shared.adapters.in_memory.automation import InMemoryAutomationStore
from shared.automation.models import AutomationTask
from shared.automation.ports import AutomationStore
from shared.errors import Conflict, InvalidRequest, NotFound
from tests.support.settings import REGION, TABLE


@pytest.fixture(params=["memory", "dynamodb"])
def tasks(request: pytest.FixtureRequest) -> AutomationStore:
    if request.param == "memory":
        return InMemoryAutomationStore()
    request.getfixturevalue("aws")
    return DynamoDBAutomationStore(TABLE, lambda: cast(Any, boto3.client("dynamodb", region_name=REGION)))


def task(task_id: str = "at_1", tenant: str = "t1", user: str = "u1", **changes: Any) -> AutomationTask:
    base: dict[str, Any] = {
        "task_id": task_id,
        "tenant_id": tenant,
        "owner_user_id": user,
        "name": "briefing",
        "schedule_expression": "cron(0 8 * * ? *)",
        "thread_id": "th-1",
        "tools": ("get_current_time",),
        "prompt": "Summarise my day",
        "task_type": "briefing",
    }
    return AutomationTask(**{**base, **changes})


async def test_a_created_task_comes_back_whole_to_its_owner_and_by_id(tasks: AutomationStore) -> None:
    created = task(timezone="Europe/Paris", hidden_from_user=False, enabled=False)
    await tasks.create(created)
    assert await tasks.get("t1", "u1", "at_1") == created
    assert await tasks.find("at_1") == created


async def test_another_user_or_tenant_does_not_see_the_task(tasks: AutomationStore) -> None:
    await tasks.create(task())
    assert await tasks.get("t1", "u2", "at_1") is None
    assert await tasks.get("t2", "u1", "at_1") is None
    assert await tasks.list("t1", "u2", limit=10, cursor=None) == ([], None)
    assert await tasks.find("at_missing") is None


async def test_a_task_id_is_unique_across_tenants(tasks: AutomationStore) -> None:
    first = task()
    await tasks.create(first)
    with pytest.raises(Conflict):
        await tasks.create(task(tenant="t2", user="someone"))
    with pytest.raises(Conflict):
        await tasks.create(task(name="again"))
    assert (await tasks.find("at_1")) == first


async def test_listing_pages_through_the_owners_tasks_in_id_order(tasks: AutomationStore) -> None:
    for task_id in ("at_c", "at_a", "at_e", "at_b", "at_d"):
        await tasks.create(task(task_id))
    await tasks.create(task("at_0", user="u2"))
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page, cursor = await tasks.list("t1", "u1", limit=2, cursor=cursor)
        seen += [t.task_id for t in page]
        pages += 1
        if cursor is None:
            break
    assert seen == ["at_a", "at_b", "at_c", "at_d", "at_e"]
    assert pages == 3


async def test_a_page_that_ends_exactly_at_the_last_task_has_no_cursor(tasks: AutomationStore) -> None:
    for task_id in ("at_a", "at_b"):
        await tasks.create(task(task_id))
    page, cursor = await tasks.list("t1", "u1", limit=2, cursor=None)
    assert [t.task_id for t in page] == ["at_a", "at_b"] and cursor is None


async def test_a_cursor_of_another_owner_or_made_up_is_refused(tasks: AutomationStore) -> None:
    for task_id in ("at_a", "at_b", "at_c"):
        await tasks.create(task(task_id))
    _, cursor = await tasks.list("t1", "u1", limit=1, cursor=None)
    assert cursor is not None
    with pytest.raises(InvalidRequest):
        await tasks.list("t1", "u2", limit=1, cursor=cursor)
    with pytest.raises(InvalidRequest):
        await tasks.list("t1", "u1", limit=1, cursor="not-a-cursor")


async def test_replace_overwrites_the_owners_task_and_refuses_a_missing_one(tasks: AutomationStore) -> None:
    await tasks.create(task())
    changed = task(name="evening", schedule_expression="rate(1 hour)", enabled=False)
    await tasks.replace(changed)
    assert await tasks.get("t1", "u1", "at_1") == changed
    assert await tasks.find("at_1") == changed
    with pytest.raises(NotFound):
        await tasks.replace(task("at_missing"))
    with pytest.raises(NotFound):
        await tasks.replace(task(user="u2"))  # same id, another owner: not theirs to replace
    assert await tasks.get("t1", "u1", "at_1") == changed


async def test_delete_removes_the_owners_task_once_and_never_anothers(tasks: AutomationStore) -> None:
    await tasks.create(task())
    assert await tasks.delete("t1", "u2", "at_1") is False
    assert await tasks.find("at_1") is not None
    assert await tasks.delete("t1", "u1", "at_1") is True
    assert await tasks.delete("t1", "u1", "at_1") is False
    assert await tasks.find("at_1") is None
    # the id is free again once the task is gone
    await tasks.create(task(tenant="t2", user="u9"))
    assert (await tasks.find("at_1")) is not None
