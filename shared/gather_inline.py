"""``asyncio.gather(..., return_exceptions=True)`` with the first awaitable run in the caller's own task.

Why: ``gather`` wraps every coroutine in a task, and each task starts on the event loop's next pass; the caller then
wakes on the pass after the last one ends. On a loop busy with many runs every pass waits behind everything else
that is ready, so on the way to the model request each ``gather`` cost a run several milliseconds at 16 concurrent
runs (docs/benchmarks.md §6). Running the first awaitable inline saves those passes; the others still run beside
it, as tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def gather_inline(first: Awaitable[Any], *others: Awaitable[Any]) -> list[Any]:
    """Await ``first`` here and ``others`` as tasks beside it; the results in order, an exception in place of the
    result of an awaitable that raised one. Returns when all have ended. Cancelling the caller cancels the others
    and waits for them to end, as ``gather`` does (one of them cancelled from elsewhere ends the wait the same
    way)."""
    tasks = [asyncio.ensure_future(other) for other in others]
    results: list[Any] = []
    try:
        try:
            results.append(await first)
        except Exception as exc:
            results.append(exc)
        for task in tasks:
            try:
                results.append(await task)
            except Exception as exc:
                results.append(exc)
    except BaseException:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        raise
    return results
