"""The ``QueueStarter`` port on AWS: an asynchronous invocation of the background-run function
(functions/background_run), which drains the thread's queue, or runs a run's next slice, in its own invocation.

Lambda's asynchronous invocation is the queue: ``Invoke`` with ``InvocationType=Event`` returns once Lambda has
stored the event; Lambda retries a failed invocation twice and then sends the event to the function's on-failure
destination (the async dead-letter queue). No SQS queue or event source mapping of our own: a drain may wait up to
the function's timeout for a busy thread, and an SQS message would have to stay invisible that long between tries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.migrations.ports import FunctionInvoker


def drain_event(tenant_id: str, thread_id: str) -> dict[str, str]:
    """The event the background-run function receives: the thread whose queue to drain (nothing else: the runs'
    bodies stay in the queue, on the table)."""
    return {"tenantId": tenant_id, "threadId": thread_id}


class LambdaQueueStarter:
    def __init__(self, invoker: FunctionInvoker, function: str) -> None:
        self._invoker = invoker
        self._function = function

    async def start_queue(self, tenant_id: str, thread_id: str) -> None:
        await self._invoker.invoke_async(self._function, drain_event(tenant_id, thread_id))

    async def continue_run(self, ticket: Mapping[str, Any]) -> None:
        await self._invoker.invoke_async(self._function, {"continue": dict(ticket)})
