"""The scheduler of the local runner: fires the schedules stored in (moto's) EventBridge Scheduler, as AWS would.

Every ``tick_s`` it lists the group's schedules, decides which are due (``rate(...)`` by interval since start or
last fire; ``cron(...)`` with the six AWS fields, minute resolution, UTC), fills in the ``<aws.scheduler.*>``
keywords of the schedule's input and hands it to the same code the automation Lambda runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

logger = logging.getLogger(__name__)

_RATE = re.compile(r"^rate\((\d+)\s+(minute|minutes|hour|hours|day|days)\)$")
_UNIT = {"minute": 60, "hour": 3600, "day": 86400}
_DOW = {"SUN": 1, "MON": 2, "TUE": 3, "WED": 4, "THU": 5, "FRI": 6, "SAT": 7}


def _field_matches(spec: str, value: int, *, names: Mapping[str, int] | None = None) -> bool:
    if spec in ("*", "?"):
        return True
    for part in spec.split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            step = int(step_text)
        if names:
            for name, number in names.items():
                part = part.replace(name, str(number))
        if part in ("*", ""):
            low, high = 0, 10_000
        elif "-" in part:
            low, high = (int(x) for x in part.split("-", 1))
        else:
            low = high = int(part)
            if step > 1:
                high = 10_000
        if low <= value <= high and (value - low) % step == 0:
            return True
    return False


def cron_matches(expression: str, moment: datetime) -> bool:
    """Whether the AWS ``cron(min hour day-of-month month day-of-week year)`` fires in ``moment``'s minute (UTC)."""
    fields = expression.removeprefix("cron(").removesuffix(")").split()
    if len(fields) != 6:
        return False
    minute, hour, dom, month, dow, year = fields
    aws_dow = moment.isoweekday() % 7 + 1  # AWS: 1 = Sunday
    return (
        _field_matches(minute, moment.minute)
        and _field_matches(hour, moment.hour)
        and _field_matches(dom, moment.day)
        and _field_matches(month, moment.month)
        and _field_matches(dow, aws_dow, names=_DOW)
        and _field_matches(year, moment.year)
    )


def is_due(expression: str, now: datetime, last: datetime) -> bool:
    rate = _RATE.match(expression.strip())
    if rate:
        unit = rate.group(2).rstrip("s")
        return now - last >= timedelta(seconds=int(rate.group(1)) * _UNIT[unit])
    if expression.startswith("cron("):
        minute = now.replace(second=0, microsecond=0)
        return minute > last.replace(second=0, microsecond=0) and cron_matches(expression, minute)
    return False


def fill_keywords(input_json: str, now: datetime) -> dict[str, Any]:
    text = (
        input_json.replace("<aws.scheduler.scheduled-time>", now.replace(second=0, microsecond=0).isoformat())
        .replace("<aws.scheduler.execution-id>", uuid.uuid4().hex)
        .replace("<aws.scheduler.attempt-number>", "1")
    )
    value: dict[str, Any] = json.loads(text)
    return value


class LocalScheduler:
    def __init__(
        self,
        client: Any,
        group_name: str,
        fire: Callable[[dict[str, Any]], Awaitable[Any]],
        *,
        tick_s: float = 15.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._client = client
        self._group = group_name
        self._fire = fire
        self._tick_s = tick_s
        self._clock = clock
        self._last: dict[str, datetime] = {}
        self._started = clock()

    async def tick(self) -> int:
        """Fire every due schedule once; returns how many fired."""
        now = self._clock()
        fired = 0
        listing = await asyncio.to_thread(self._client.list_schedules, GroupName=self._group)
        for item in listing.get("Schedules", []):
            name = item["Name"]
            schedule = await asyncio.to_thread(self._client.get_schedule, Name=name, GroupName=self._group)
            if schedule.get("State") == "DISABLED":
                continue
            if not is_due(schedule["ScheduleExpression"], now, self._last.get(name, self._started)):
                continue
            self._last[name] = now
            try:
                await self._fire(fill_keywords(schedule["Target"].get("Input", "{}"), now))
                fired += 1
            except Exception:
                logger.exception("local schedule fire failed", extra={"schedule": name})
        return fired

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self._tick_s)
            try:
                await self.tick()
            except Exception:
                logger.exception("local scheduler tick failed")
