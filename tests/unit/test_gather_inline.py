"""``gather_inline``: ``gather(..., return_exceptions=True)`` with the first awaitable in the caller's task."""

from __future__ import annotations

import asyncio

import pytest

from shared.gather_inline import gather_inline


async def test_the_first_runs_in_the_callers_task_and_the_others_beside_it() -> None:
    caller = asyncio.current_task()
    tasks: list[asyncio.Task[object] | None] = []
    started: list[str] = []
    all_started = asyncio.Event()

    async def together(name: str) -> str:
        """Ends only once all three have started: run one after the other, the first would wait forever."""
        started.append(name)
        tasks.append(asyncio.current_task())
        if len(started) == 3:
            all_started.set()
        await all_started.wait()
        return name

    async with asyncio.timeout(10):  # turns a hang into a failure; nothing here measures time
        results = await gather_inline(together("a"), together("b"), together("c"))
    assert results == ["a", "b", "c"]
    assert started == ["a", "b", "c"]
    assert tasks[0] is caller
    assert caller not in tasks[1:]


async def test_exceptions_take_the_place_of_results_and_nothing_is_left_running() -> None:
    ended: list[str] = []

    async def fails() -> None:
        raise ValueError("first")

    async def slow() -> str:
        await asyncio.sleep(0.02)
        ended.append("slow")
        return "slow"

    async def also_fails() -> None:
        await asyncio.sleep(0)
        raise KeyError("other")

    first, second, third = await gather_inline(fails(), slow(), also_fails())
    assert isinstance(first, ValueError) and second == "slow" and isinstance(third, KeyError)
    assert ended == ["slow"]  # the first's failure did not abandon the others


async def test_cancelling_the_caller_cancels_the_others_and_waits_for_them() -> None:
    cleaned: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.append(name)

    task = asyncio.ensure_future(gather_inline(forever("first"), forever("other")))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cleaned) == ["first", "other"]
