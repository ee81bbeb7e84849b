"""Asynchronous Lambda invocation (``InvocationType=Event``): Lambda queues the event and answers 202 at once; its
own retries and the function's on-failure destination take over from there."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any


class LambdaInvoker:
    """The ``FunctionInvoker`` port on the Lambda API (client created on first use)."""

    def __init__(self, client_factory: Callable[[], Any]) -> None:
        self._client_factory = client_factory
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    async def invoke_async(self, function: str, payload: Mapping[str, Any]) -> None:
        body = json.dumps(payload).encode("utf-8")
        client = self.client
        await asyncio.to_thread(lambda: client.invoke(FunctionName=function, InvocationType="Event", Payload=body))
