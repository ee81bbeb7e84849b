"""A tool call's result: stored as a tool message of the thread, then sent as TOOL_CALL_RESULT with the same id.

Every place that answers a tool call (the worker after running or refusing it, the salvage on cancel or failure,
the run service's last-resort close) goes through here, so the stored message and the event can never disagree.
"""

from __future__ import annotations

import json
from typing import Protocol

from ag_ui.core import ToolCallResultEvent

from shared.models import ExecutionMeta, Identity, Message, Role, new_id
from shared.ports import ConversationStore
from shared.run_events.emitter import RunEmitter

FRONTEND_CALLS_FLAG = "frontend_tool_calls"
"""Flag on a stored assistant message: the ids of its tool calls handed to the client (front-end tools), whose
results arrive with the client's next run (shared.runs.pending_calls)."""


# A role, not a port: RunContext implements it (see the docstring); no adapter does.
class RunRef(Protocol):
    """The part of a run's context a tool result needs (``shared.executors.context.RunContext`` has it); a protocol
    so that this module stays below the executors."""

    @property
    def identity(self) -> Identity: ...
    @property
    def thread_id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def meta(self) -> ExecutionMeta: ...


def synthetic_error(code: str, message: str) -> str:
    return json.dumps({"error": {"code": code, "message": message}})


def tool_message(ctx: RunRef, call_id: str, content: str, *, synthetic: bool = False) -> Message:
    return Message(
        id=new_id("msg"),
        thread_id=ctx.thread_id,
        role=Role.TOOL,
        content=content,
        tool_call_id=call_id,
        run_id=ctx.run_id,
        meta=ctx.meta,
        flags={"synthetic": True} if synthetic else {},
    )


async def store_and_emit(
    store: ConversationStore,
    emitter: RunEmitter,
    ctx: RunRef,
    call_id: str,
    content: str,
    *,
    synthetic: bool = False,
) -> None:
    message = tool_message(ctx, call_id, content, synthetic=synthetic)
    await store.append_messages(ctx.identity, ctx.thread_id, [message])
    await emit_result(emitter, message)


async def emit_result(emitter: RunEmitter, message: Message) -> None:
    await emitter.emit(
        ToolCallResultEvent(
            message_id=message.id, tool_call_id=message.tool_call_id or "", content=message.content, role="tool"
        )
    )
