"""The function invoker in memory: records each asynchronous invocation instead of starting it (the fake of
``shared.migrations.ports.FunctionInvoker``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class RecordingInvoker:
    """``invocations`` holds ``(function, payload)`` pairs in order; the payload as the function would receive it
    (a JSON round trip, so what cannot be sent cannot be recorded either)."""

    def __init__(self) -> None:
        self.invocations: list[tuple[str, dict[str, Any]]] = []

    async def invoke_async(self, function: str, payload: Mapping[str, Any]) -> None:
        self.invocations.append((function, json.loads(json.dumps(payload))))
