"""Smoke mode of ``bench.trace_cost``: configuring traces off imports nothing (microseconds), on imports the SDK, and
the traced runs' spans reach the receiver. No timing assertion beyond that order of magnitude (the machine is
shared)."""

from __future__ import annotations

import pytest

from bench import trace_cost

pytestmark = pytest.mark.slow


def test_trace_cost_smoke_off_is_free_and_on_exports_every_runs_spans() -> None:
    figures = trace_cost.main(["--smoke"])
    assert figures["configure_off_ms"] < 5 < figures["configure_on_ms"]
    assert figures["cpu_ms_per_run_off"] > 0 and figures["cpu_ms_per_run_on"] > 0
    assert figures["spans_received"] >= 4 * 10  # 4 runs (one unmeasured), each a tree of more than 10 spans
