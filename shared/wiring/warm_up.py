"""Building and connecting ahead of the first invocation, while a Lambda function initialises.

What to build is each process's own table of named steps (:class:`Warmable`); running them is here, the same for
every function: a part that cannot be built (a setting missing in a test) is skipped, logged, and built on first use
as before."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Literal, Protocol

from shared.ports import EventStream, RunLedger

logger = logging.getLogger(__name__)

LambdaFunction = Literal["api", "automation", "memory"]
"""Which function a process runs, for :func:`warm_up`."""

WarmStep = Callable[[], object]


class Warmable(Protocol):
    """Something that can say what an invocation of ``function`` would otherwise build first."""

    def warm_steps(self, function: LambdaFunction) -> Mapping[str, WarmStep]: ...


def warm_up(parts: Warmable, function: LambdaFunction) -> list[str]:
    """Run each of ``parts``' warm steps for ``function`` on its own; returns the names of the parts built."""
    built: list[str] = []
    for name, step in parts.warm_steps(function).items():
        try:
            step()
        except Exception as exc:
            logger.info("warm-up skipped a part", extra={"part": name, "reason": type(exc).__name__})
            continue
        built.append(name)
    return built


async def open_connections(runs: RunLedger, stream: EventStream) -> None:
    """Open connections during init, so the first request does not: the stream's (Redis, TLS on ElastiCache),
    the main table's (the run ledger's GetItem of a run that does not exist; the table's three adapters share one
    client), and the worker threads the store's calls and the app's sync dependencies run on. Each part is tried
    on its own."""
    import anyio.to_thread

    async def store_connection() -> None:
        await runs.get_run("warm-up", "warm-up")

    async def stream_connection() -> None:
        ping = getattr(stream, "ping", None)
        if ping is not None:
            await ping()

    parts = {
        "stream": stream_connection(),
        "store": store_connection(),
        "threads": asyncio.to_thread(lambda: None),
        "anyio threads": anyio.to_thread.run_sync(lambda: None),
    }
    results = await asyncio.gather(*parts.values(), return_exceptions=True)
    for name, outcome in zip(parts, results, strict=True):
        if isinstance(outcome, BaseException):
            logger.info("warm-up could not connect a part", extra={"part": name, "reason": type(outcome).__name__})
