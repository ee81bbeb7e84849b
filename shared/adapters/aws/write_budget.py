"""The migration runner's write throttle: write capacity units per second, spent by item size.

A migration shares the table with the app. On an on-demand table an unthrottled scan-and-rewrite would be billed
at once and can push a partition past its write limit, throttling the app's own writes; on a provisioned table it
would eat the app's capacity. So the runner spends a budget: every conditional write costs what DynamoDB bills
for it, ``ceil(max(old size, new size) / 1 KB)`` write units (a refused conditional write is billed too), and
every checkpoint one unit; the budget refills at ``rate_wcu`` per second with one second of burst, shared by the
runner's segment threads. Sizes follow DynamoDB's rules (docs: "Item sizes and formats").
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

WRITE_UNIT_BYTES = 1024


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one attribute value in DynamoDB's wire form (``{"S": ...}``, ``{"N": ...}``, ``{"M": ...}``...)."""
    ((kind, body),) = value.items()
    if kind == "S":
        return len(str(body).encode("utf-8"))
    if kind == "N":
        digits = str(body).lstrip("-").replace(".", "").strip("0") or "0"
        return min(21, math.ceil(len(digits) / 2) + 1)
    if kind == "B":
        return len(body)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode("utf-8")) + value_size(v) + 1 for k, v in body.items())
    if kind == "L":
        return 3 + sum(value_size(v) + 1 for v in body)
    if kind in ("SS", "NS", "BS"):
        return sum(value_size({kind[0]: v}) for v in body)
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes of an item in wire form: each attribute's name and value."""
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in item.items())


def write_units(*items: Mapping[str, Mapping[str, Any]]) -> int:
    """Write units of replacing one item by another: the larger of the two, in 1 KB units (at least 1)."""
    return max(1, math.ceil(max(item_size(item) for item in items) / WRITE_UNIT_BYTES))


class WriteBudget:
    """A token bucket of write units, safe to share between threads. ``spend`` blocks until the units are
    available; the total time spent waiting is kept for the run's report."""

    def __init__(
        self,
        rate_wcu: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate_wcu <= 0:
            raise ValueError("rate_wcu must be positive")
        self.rate_wcu = rate_wcu
        self._clock, self._sleep = clock, sleep
        self._tokens = rate_wcu
        self._last = clock()
        self._lock = threading.Lock()
        self.spent = 0
        self.waited_s = 0.0

    def spend(self, units: int) -> None:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.rate_wcu, self._tokens + (now - self._last) * self.rate_wcu)
            self._last = now
            self._tokens -= units  # reserve now (may go below zero); the wait pays the debt back
            self.spent += units
            wait = max(0.0, -self._tokens / self.rate_wcu)
            self.waited_s += wait
        if wait > 0:
            self._sleep(wait)
