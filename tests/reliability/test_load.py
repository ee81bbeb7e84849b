"""The load test in its short configuration (the full one is a documented command, see ``tests/reliability/load``).

It asserts counts only (lost, duplicated, reordered events); the p95 time to first event is printed, not asserted:
timings belong in benchmarks, and on a shared 2-core machine a wall-clock bound fails for reasons unrelated to the code.
"""

from __future__ import annotations

import pytest

from tests.reliability.load import run_load

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.serial]


def test_concurrent_runs_lose_duplicate_and_reorder_no_event(redis_url: str) -> None:
    # GIVEN 8 clients posting runs back to back for 4 seconds against the app on loopback
    report = run_load(concurrency=8, seconds=4, redis_url=redis_url)
    print(report.summary())
    # THEN every run streamed every event exactly once, in order, and ended with one terminal event
    assert report.runs >= 8, report.summary()
    assert (report.lost, report.duplicated, report.out_of_order, report.errors) == (0, 0, 0, 0), report.summary()
