"""A run left as a dying process leaves it (running, heartbeat stopped, thread busy, no terminal event, a tool call
without a result), written exactly as the run service and the worker leave it. Shared by the sweeper's tests and the
IAM check of the calls the sweeper makes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ag_ui.core import (
    RunStartedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)

from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.redis_stream import RedisEventStream, run_stream_key, thread_stream_key
from shared.models import Identity, Message, Role, Run, ToolCall, utc_now
from shared.run_events.emitter import RunEmitter

USER = Identity(tenant_id="tenant-1", user_id="user-1")


@dataclass
class DeadRun:
    thread_id: str
    run_id: str
    assistant_id: str = "msg-a1"
    call_id: str = "call-stuck"


async def leave_a_dead_run(
    store: DynamoDBStore, stream: RedisEventStream, dead: DeadRun, *, died_while: str, minutes_ago: int = 30
) -> None:
    """What a process leaves when it dies ``minutes_ago``: during a tool call, or in the middle of its text."""
    then = utc_now() - timedelta(minutes=minutes_ago)
    await store.threads.open_thread(USER, dead.thread_id)
    assert await store.threads.claim_thread(USER, dead.thread_id, dead.run_id, stale_before=then - timedelta(minutes=1))
    user_msg = Message(
        id="u-1", thread_id=dead.thread_id, role=Role.USER, content="what time is it?", run_id=dead.run_id
    )
    await store.threads.append_messages(USER, dead.thread_id, [user_msg])
    await store.runs.create_run(
        Run(
            run_id=dead.run_id,
            thread_id=dead.thread_id,
            tenant_id=USER.tenant_id,
            user_id=USER.user_id,
            body_digest="d",
            created_at=then,
            heartbeat_at=then,
        )
    )
    emitter = RunEmitter(
        stream,
        run_stream_key(USER.tenant_id, dead.run_id),
        thread_key=thread_stream_key(USER.tenant_id, dead.thread_id),
        run_id=dead.run_id,
    )
    await emitter.emit(RunStartedEvent(thread_id=dead.thread_id, run_id=dead.run_id, metadata={"origin": "chat"}))
    await emitter.emit(StepStartedEvent(step_name="worker"))
    await emitter.emit(TextMessageStartEvent(message_id=dead.assistant_id, role="assistant"))
    await emitter.emit(TextMessageContentEvent(message_id=dead.assistant_id, delta="Checking the clock"))
    if died_while == "text":
        return  # the turn's text was streamed, never stored
    await emitter.emit(TextMessageEndEvent(message_id=dead.assistant_id))
    args = '{"timezone": "UTC"}'
    await emitter.emit(
        ToolCallStartEvent(
            tool_call_id=dead.call_id, tool_call_name="get_current_time", parent_message_id=dead.assistant_id
        )
    )
    await emitter.emit(ToolCallArgsEvent(tool_call_id=dead.call_id, delta=args))
    await emitter.emit(ToolCallEndEvent(tool_call_id=dead.call_id))
    call = ToolCall(id=dead.call_id, name="get_current_time", arguments=args)
    assistant = Message(
        id=dead.assistant_id,
        thread_id=dead.thread_id,
        role=Role.ASSISTANT,
        content="Checking the clock",
        tool_calls=(call,),
        run_id=dead.run_id,
    )
    # stored; then the tool ran and the process died
    await store.threads.append_messages(USER, dead.thread_id, [assistant])
