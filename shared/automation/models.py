"""Automation tasks: what a user schedules, how its schedule expression is checked, and what a fire carries.

A task runs a profile (worker or memory) on a thread without a user typing, on an EventBridge Scheduler schedule.
The API speaks camelCase; configurations written by the old system (snake_case, with ``enable_router``) are
accepted too: ``enable_router`` is read, logged and ignored, and nothing new ever writes it.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from shared.models import utc_now

logger = logging.getLogger(__name__)

DEFAULT_PROFILE = "chat_default"
"""The profile of a task that names none: a worker profile, as docs/design.md §9 wants for new tasks."""

MAX_PROMPT_CHARS = 8_000
MAX_TOOLS = 32

# ----------------------------------------------------------------------------------------------------------
# Schedule expressions (the EventBridge Scheduler grammar for recurring schedules)
# ----------------------------------------------------------------------------------------------------------

_MONTHS = {m: i + 1 for i, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())}
_DAYS = {d: i + 1 for i, d in enumerate("SUN MON TUE WED THU FRI SAT".split())}
_RATE = re.compile(r"^rate\((?P<value>\d+) (?P<unit>minute|minutes|hour|hours|day|days)\)$")
_CRON = re.compile(r"^cron\((?P<body>[^()]*)\)$")
_NUMBER_OR_NAME = r"(?:\d+|[A-Za-z]{3})"
_RANGE_STEP = re.compile(rf"^(?P<start>\*|{_NUMBER_OR_NAME})(?:-(?P<end>{_NUMBER_OR_NAME}))?(?:/(?P<step>\d+))?$")


class _CronField:
    def __init__(self, name: str, low: int, high: int, names: dict[str, int] | None = None) -> None:
        self.name = name
        self.low = low
        self.high = high
        self.names = names or {}

    def value(self, text: str) -> int:
        number = self.names.get(text.upper()) if not text.isdigit() else int(text)
        if number is None:
            raise ValueError(f"cron {self.name}: {text!r} is not a number or a known name")
        if not self.low <= number <= self.high:
            raise ValueError(f"cron {self.name}: {number} is outside {self.low}-{self.high}")
        return number

    def check_item(self, item: str) -> None:
        match = _RANGE_STEP.match(item)
        if match is None:
            raise ValueError(f"cron {self.name}: {item!r} is not a value, range, list or step")
        start, end, step = match.group("start"), match.group("end"), match.group("step")
        if start == "*" and end is not None:
            raise ValueError(f"cron {self.name}: {item!r} is not a valid range")
        if start != "*":
            first = self.value(start)
            if end is not None and self.value(end) < first:
                raise ValueError(f"cron {self.name}: the range {item!r} runs backwards")
        if step is not None and not 1 <= int(step) <= self.high:
            raise ValueError(f"cron {self.name}: step {step} is outside 1-{self.high}")


_MINUTES = _CronField("minutes", 0, 59)
_HOURS = _CronField("hours", 0, 23)
_DAY_OF_MONTH = _CronField("day-of-month", 1, 31)
_MONTH = _CronField("month", 1, 12, _MONTHS)
_DAY_OF_WEEK = _CronField("day-of-week", 1, 7, _DAYS)
_YEAR = _CronField("year", 1970, 2199)


def _check_list(field: _CronField, text: str) -> None:
    for item in text.split(","):
        field.check_item(item)


def _check_day_of_month(text: str) -> None:
    if text in {"?", "L", "LW"}:
        return
    if text.endswith("W") and text[:-1].isdigit():
        _DAY_OF_MONTH.value(text[:-1])
        return
    _check_list(_DAY_OF_MONTH, text)


def _check_day_of_week(text: str) -> None:
    if text in {"?", "L"}:
        return
    if "#" in text:
        day, _, nth = text.partition("#")
        _DAY_OF_WEEK.value(day)
        if not nth.isdigit() or not 1 <= int(nth) <= 5:
            raise ValueError(f"cron day-of-week: {text!r} needs an occurrence 1-5 after '#'")
        return
    if text.endswith("L") and len(text) > 1:
        _DAY_OF_WEEK.value(text[:-1])
        return
    _check_list(_DAY_OF_WEEK, text)


def _check_cron(body: str) -> None:
    fields = body.split()
    if len(fields) != 6:
        raise ValueError(
            f"cron(...) needs 6 fields (minutes hours day-of-month month day-of-week year), got {len(fields)}"
        )
    minutes, hours, day_of_month, month, day_of_week, year = fields
    _check_list(_MINUTES, minutes)
    _check_list(_HOURS, hours)
    _check_day_of_month(day_of_month)
    _check_list(_MONTH, month)
    _check_day_of_week(day_of_week)
    _check_list(_YEAR, year)
    # The Scheduler refuses a cron that constrains both day fields (or neither): exactly one must be '?'.
    if (day_of_month == "?") == (day_of_week == "?"):
        raise ValueError("cron: exactly one of day-of-month and day-of-week must be '?'")


def validate_schedule_expression(value: str) -> str:
    """Check a recurring EventBridge Scheduler expression: ``cron(...)`` with 6 fields or ``rate(...)``.

    Catching mistakes here gives the caller a 422 naming the field instead of a failure deep in the Scheduler
    call (or, worse, a schedule that never fires). One-time ``at(...)`` schedules are not automation tasks.
    """
    text = value.strip()
    if rate := _RATE.match(text):
        amount, unit = int(rate.group("value")), rate.group("unit")
        if amount < 1:
            raise ValueError("rate(...) needs a positive value")
        if (amount == 1) != (not unit.endswith("s")):
            raise ValueError("rate(...): use a singular unit for 1 and a plural unit above 1, e.g. rate(5 minutes)")
        return text
    if cron := _CRON.match(text):
        _check_cron(cron.group("body"))
        return text
    raise ValueError("use cron(<minutes> <hours> <day-of-month> <month> <day-of-week> <year>) or rate(<n> <unit>)")


def validate_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown IANA timezone {value!r}") from exc
    return value


ScheduleExpression = Annotated[str, AfterValidator(validate_schedule_expression)]
Timezone = Annotated[str, AfterValidator(validate_timezone)]
TaskName = Annotated[str, Field(min_length=1, max_length=200)]
Prompt = Annotated[str, Field(max_length=MAX_PROMPT_CHARS)]
ToolNames = Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(max_length=MAX_TOOLS)]

# ----------------------------------------------------------------------------------------------------------
# What callers send
# ----------------------------------------------------------------------------------------------------------

LEGACY_IGNORED_FIELDS = ("enable_router", "enableRouter")
"""Old-system fields that are read and ignored (the execution path depends only on the profile's executor)."""


def _drop_legacy_fields(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    present = [name for name in LEGACY_IGNORED_FIELDS if name in data]
    if not present:
        return data
    logger.warning(
        "deprecated automation task field ignored",
        extra={
            "field": "enable_router",
            "value": data[present[0]],
            "action": "ignored: the execution path depends only on the profile's executor",
        },
    )
    return {k: v for k, v in data.items() if k not in LEGACY_IGNORED_FIELDS}


def _profile_short_form(data: Any) -> Any:
    """``profile`` is accepted for ``executionProfileName`` (the long name wins when both are sent)."""
    if isinstance(data, dict) and "profile" in data:
        data = dict(data)
        profile = data.pop("profile")
        if "executionProfileName" not in data and "execution_profile_name" not in data:
            data["executionProfileName"] = profile
    return data


class _ApiModel(BaseModel):
    """camelCase on the wire; snake_case accepted too, because that is how the old system wrote task configs."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, extra="forbid", frozen=True
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return _drop_legacy_fields(data)


class AutomationTaskSpec(_ApiModel):
    """The body of ``POST /api/v1/automations``.

    ``execution_profile_name`` is the metadata name of docs/design.md §7.3; ``profile`` is accepted as
    the short form. ``tools`` are the server tools the task may use: a task uses only the tools it declares.
    """

    name: TaskName
    schedule_expression: ScheduleExpression
    timezone: Timezone = "UTC"
    execution_profile_name: str = Field(default=DEFAULT_PROFILE, min_length=1, max_length=64)
    thread_id: str | None = None
    prompt: Prompt = ""
    tools: ToolNames = Field(default_factory=list)
    hidden_from_user: bool = True
    enabled: bool = True
    task_type: str | None = Field(default=None, min_length=1, max_length=64)
    """Selects per-task-type profile roll-out rules (``PROFILE_ROLLOUT``)."""

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        return _profile_short_form(data)


class AutomationTaskPatch(_ApiModel):
    """The body of ``PUT /api/v1/automations/{taskId}``: the fields present replace the task's, the rest stay."""

    name: TaskName | None = None
    schedule_expression: ScheduleExpression | None = None
    timezone: Timezone | None = None
    execution_profile_name: str | None = Field(default=None, min_length=1, max_length=64)
    thread_id: str | None = None
    prompt: Prompt | None = None
    tools: ToolNames | None = None
    hidden_from_user: bool | None = None
    enabled: bool | None = None
    task_type: str | None = Field(default=None, min_length=1, max_length=64)

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        return _profile_short_form(data)

    def changes(self) -> dict[str, Any]:
        """The fields the caller sent, by their Python names (``null`` never clears a field)."""
        return {name: value for name, value in self.model_dump(exclude_unset=True).items() if value is not None}


# ----------------------------------------------------------------------------------------------------------
# What the store keeps
# ----------------------------------------------------------------------------------------------------------


class AutomationTask(BaseModel):
    """A stored task. ``owner_user_id`` and ``tenant_id`` come from the creator's verified identity."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    tenant_id: str
    owner_user_id: str
    name: str
    schedule_expression: str
    timezone: str = "UTC"
    execution_profile_name: str = DEFAULT_PROFILE
    thread_id: str
    prompt: str = ""
    tools: tuple[str, ...] = ()
    hidden_from_user: bool = True
    enabled: bool = True
    task_type: str | None = None
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)

    def view(self) -> dict[str, Any]:
        """The task as the API returns it (camelCase; tenant and owner are the caller's, so not repeated)."""
        body: dict[str, Any] = {
            "taskId": self.task_id,
            "name": self.name,
            "scheduleExpression": self.schedule_expression,
            "timezone": self.timezone,
            "executionProfileName": self.execution_profile_name,
            "threadId": self.thread_id,
            "prompt": self.prompt,
            "tools": list(self.tools),
            "hiddenFromUser": self.hidden_from_user,
            "enabled": self.enabled,
            "createdAt": self.created_at.isoformat(),
            "updatedAt": self.updated_at.isoformat(),
        }
        if self.task_type is not None:
            body["taskType"] = self.task_type
        return body


# ----------------------------------------------------------------------------------------------------------
# What a fire carries
# ----------------------------------------------------------------------------------------------------------

SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"
EXECUTION_ID = "<aws.scheduler.execution-id>"
ATTEMPT_NUMBER = "<aws.scheduler.attempt-number>"


def _is_keyword(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("<aws.scheduler.") and value.endswith(">")


class TaskRef(BaseModel):
    """The schedule's input: which task to run, and the Scheduler's context attributes for this fire.

    The Scheduler substitutes ``<aws.scheduler.*>`` keywords when it invokes the target; a value still holding
    its keyword (an input copied from the schedule and replayed by hand) counts as absent.
    """

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, frozen=True)

    task_id: str = Field(min_length=1, max_length=128)
    tenant_id: str | None = None
    user_id: str | None = None
    scheduled_time: str | None = None
    execution_id: str | None = None
    attempt_number: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _unsubstituted_keywords_are_absent(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if not _is_keyword(v)}

    def input_template(self) -> dict[str, str]:
        """The schedule's ``Input``: the task reference plus the keywords the Scheduler fills in per fire."""
        return {
            "taskId": self.task_id,
            "tenantId": self.tenant_id or "",
            "userId": self.user_id or "",
            "scheduledTime": SCHEDULED_TIME,
            "executionId": EXECUTION_ID,
            "attemptNumber": ATTEMPT_NUMBER,
        }
