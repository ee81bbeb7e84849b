"""The DynamoDB store on moto with the project's DynamoDB meter (``bench/dynamo_meter.py``) on its client, and a
turn driven at the store's level: what the unit tests of read and write units per turn count with.

The meter computes read and write units from item sizes as DynamoDB bills them (moto answers
``ReturnConsumedCapacity`` with a constant); it is installed on a session of its own, so only the store's calls are
metered, and it reads the items a write touches through the ``aws`` fixture's client (never metered).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import boto3

from bench.dynamo_meter import DynamoMeter, DynamoTally, describe
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.executors.context import RunContext
from shared.models import ExecutionMeta, ExecutorKind, Identity, Message, Origin, Role
from shared.profiles import default_catalog
from shared.runs.admission import Admitter
from shared.runs.claims import Claim
from tests.support.moto_lock import OneRequestAtATime
from tests.support.settings import REGION, TABLE

USER = Identity(tenant_id="tenant-a", user_id="alice")
META = ExecutionMeta(origin=Origin.CHAT, executor=ExecutorKind.WORKER)


def metered_store(aws: Any) -> tuple[DynamoDBStore, DynamoMeter]:
    """A store on the ``aws`` fixture's moto whose every call is metered."""
    session = boto3.session.Session(region_name=REGION)
    meter = DynamoMeter(aws, [describe(aws, TABLE)])
    meter.install(session.events)
    client = OneRequestAtATime(session.client("dynamodb"))
    return DynamoDBStore(TABLE, lambda: cast(Any, client)), meter


def message(mid: str, role: Role = Role.USER, thread_id: str = "th") -> Message:
    return Message(id=mid, thread_id=thread_id, role=role, content=f"text of {mid} " * 8, meta=META)


def a_context(run_id: str, thread_id: str = "th") -> RunContext:
    profile = default_catalog().get("chat_default")
    return RunContext(identity=USER, thread_id=thread_id, run_id=run_id, profile=profile, meta=META)


async def seed(store: Any, turns: int, thread_id: str = "th") -> list[Message]:
    """``turns`` plain turns (a user message and an answer each) stored on the thread; the user messages."""
    users = [message(f"u{i}", thread_id=thread_id) for i in range(turns)]
    batch: list[Message] = []
    for i, user in enumerate(users):
        batch += [user, message(f"a{i}", Role.ASSISTANT, thread_id)]
    await store.threads.open_thread(USER, thread_id)
    await store.threads.append_messages(USER, thread_id, batch)
    return users


async def plain_turn(store: Any, run_id: str, resent: list[Message], new: Message) -> list[str]:
    """One plain turn at the store's level, as the run path makes it: admission's claim (with the newest page) and
    its store, the answer appended, the thread released. The ids admission stored."""
    admitter = Admitter(store.threads, store.runs, store.audit, InMemoryEventStream(), lease=timedelta(seconds=30))
    ctx = a_context(run_id, new.thread_id)
    claim = await admitter.claim(ctx, body_digest=run_id, new_messages=[*resent, new], read_recent=True)
    assert isinstance(claim, Claim)
    admission = await admitter.store(claim)
    assert admission.created
    answer = message(f"answer-{run_id}", Role.ASSISTANT, new.thread_id)
    await store.threads.append_messages(USER, new.thread_id, [answer])
    await store.threads.release_thread(USER.tenant_id, new.thread_id, run_id)
    return [m.id for m in claim.fresh]


def units_on(tally: DynamoTally, where: str) -> float:
    """Read plus write units on partitions whose kind starts with ``where`` (``agent-test/GSI1:T#*#U#*#THREADS``)."""
    return sum(units for kind, units in tally.units_by_pattern.items() if kind.startswith(where))
