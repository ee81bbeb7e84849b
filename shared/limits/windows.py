"""The UTC windows the counters count in: the minute (runs per minute), the day and the month (tokens).

Each window has a key (part of a counter's attribute name, so a new window starts from zero without a reset write)
and a reset time (the ``resetAt`` of a refusal, and its ``Retry-After``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

SLOT_RETRY_AFTER_S = 5
"""``Retry-After`` of a ``too_many_runs`` refusal: a slot frees when a run ends, which nothing predicts; a client
that waits this long and retries finds one soon after it does."""


@dataclass(frozen=True)
class Windows:
    """The windows that contain one instant."""

    now: datetime

    @classmethod
    def at(cls, now: datetime) -> Windows:
        return cls(now.astimezone(UTC))

    @property
    def minute(self) -> str:
        return self.now.strftime("%Y%m%d%H%M")

    @property
    def day(self) -> str:
        return self.now.strftime("%Y%m%d")

    @property
    def month(self) -> str:
        return self.now.strftime("%Y%m")

    @property
    def month_label(self) -> str:
        """``YYYY-MM``, as the usage API spells a month."""
        return self.now.strftime("%Y-%m")

    @property
    def minute_resets_at(self) -> datetime:
        return self.now.replace(second=0, microsecond=0) + timedelta(minutes=1)

    @property
    def day_resets_at(self) -> datetime:
        return self.now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)

    @property
    def month_resets_at(self) -> datetime:
        start = self.now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        return (start + timedelta(days=32)).replace(day=1)

    def seconds_until(self, moment: datetime) -> int:
        """Whole seconds from now until ``moment`` (at least 1), for ``Retry-After``."""
        return max(1, math.ceil((moment - self.now).total_seconds()))
