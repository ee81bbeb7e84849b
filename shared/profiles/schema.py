"""The schema of an execution profile (docs/design.md §7.1): which executor, which model, what history and which
tools a run gets. One profile is one JSON file of ``shared/profiles_data/``, validated against these models.

The validators raise ``ValueError`` subclasses of their own, so ``shared.profiles.fixes`` can name the fix for
each by its type, never by its message text.

Annotations are not postponed here: pydantic then reads each field's type directly instead of evaluating a string
(docs/architecture.md, "What a module costs at import").
"""

import re
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.models import ExecutorKind

MEMORY_TOOL_NAMES: frozenset[str] = frozenset({"memory_write", "memory_forget"})
"""Tools implemented by the memory executor itself; memory profiles may allow only these."""


class UnknownTimezone(ValueError):
    """A ``timezone`` that is no IANA timezone name."""


class BlockSizeNeedsLastN(ValueError):
    """``block_size`` on a history mode other than ``last_n_user_messages``."""


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    thinking: Literal["off", "on"] = "off"
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_output_tokens: int | None = Field(default=None, ge=1)
    input_modalities: tuple[Literal["text", "image", "audio", "video"], ...] = ("text",)
    """What the model reads besides text (docs/protocols/agent/run-agent-input.md §3.4): a part of a modality not
    listed is refused with ``422 unsupported_modality`` before anything is stored. Documents are read as text."""
    url_sources: bool = False
    """Whether a client's https URL source may be passed to the provider as it is (never fetched by the server)."""


class HistoryPolicy(BaseModel):
    """What part of the thread the model sees (docs/design.md §5)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["last_n_user_messages", "today_yesterday"] = "last_n_user_messages"
    n: int = Field(default=20, ge=1)
    include_current_user_message: bool = True
    timezone: str = "Asia/Shanghai"
    """For ``today_yesterday``: the timezone whose calendar days are meant."""
    max_input_tokens: int = Field(default=24_000, ge=1)
    """Last guard on the window's size: whole oldest turns are dropped above it."""
    block_size: int | None = Field(default=None, ge=1)
    """``last_n_user_messages`` only: drop old messages in blocks of this many stored messages (by ``seq``)
    instead of one turn at a time, so the window's start, and with it the provider's prompt-prefix cache,
    stays put for many turns. The window then holds at least N user messages plus up to ``block_size - 1``
    older messages. ``None`` (the default) is the plain sliding window. See docs/policy.md §2.6."""

    @model_validator(mode="after")
    def _block_size_needs_last_n(self) -> "HistoryPolicy":
        if self.block_size is not None and self.mode != "last_n_user_messages":
            raise BlockSizeNeedsLastN("block_size applies only to mode 'last_n_user_messages'")
        return self

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise UnknownTimezone(f"unknown IANA timezone {value!r}") from exc
        return value


FRONTEND_PATTERN = r"^[A-Za-z0-9_*-]{1,64}$"


class ToolPolicy(BaseModel):
    """Which tools a run of this profile may be offered (docs/policy.md §3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["intersection"] = "intersection"
    allowlist: list[str] | None = None
    """The profile layer of ``declared ∩ profile ∩ system``; ``None`` means this layer does not narrow."""
    # `= []` rather than `default_factory=list`: pydantic copies it per instance, and it is cheaper to build
    # (docs/benchmarks.md, section 4).
    frontend_allowlist: list[str] = []
    """Client-declared (AG-UI front-end) tools this profile offers to the model: exact names, or patterns where
    ``*`` stands for any run of name characters (``confirm_*``). Empty (the default): none."""
    mcp_servers: list[str] = []
    """MCP tool servers (names from the ``MCP_SERVERS`` setting) whose allowed tools join the system layer."""
    require_approval: list[str] = []
    """Server, plugin and MCP tools whose calls wait for a person's approval (AG-UI interrupt/resume; docs/policy.md
    §3.7): exact names or ``*`` patterns as in ``frontend_allowlist`` (``mcp__`` names allowed here). It narrows
    only: a tool the gate refuses stays refused. Empty (the default): no call waits."""
    approval_ttl_s: int = Field(default=86_400, ge=60, le=30 * 86_400)
    """How long an approval request stays answerable (its ``expiresAt``); 24 h by default."""

    @field_validator("frontend_allowlist")
    @classmethod
    def _frontend_patterns(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not re.match(FRONTEND_PATTERN, entry):
                raise ValueError(f"{entry!r} is not a tool name or pattern (letters, digits, '_', '-', '*')")
            if entry.startswith("mcp__"):
                raise ValueError(f"{entry!r}: names under 'mcp__' belong to MCP servers")
        return value

    @field_validator("require_approval")
    @classmethod
    def _approval_patterns(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not re.match(FRONTEND_PATTERN, entry):
                raise ValueError(f"{entry!r} is not a tool name or pattern (letters, digits, '_', '-', '*')")
        return value


class MemoryPolicy(BaseModel):
    """When a thread's memory extraction fires (memory profiles; see docs/memory.md "Coalesced extraction").

    One extraction per thread per quiet period: it fires when the thread has been idle for ``idle_s`` or as
    soon as ``max_pending_user_messages`` user messages wait after the extraction cursor, whichever comes first.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    idle_s: int = Field(default=120, ge=1, le=900)
    """Quiet period before extraction. At most 900 s: the delay is an SQS ``DelaySeconds``, whose limit that is."""
    max_pending_user_messages: int = Field(default=6, ge=1, le=100)
    """Extract at once when this many user messages are pending (at most 100: one run reads at most 100)."""


MultitaskStrategy = Literal["reject", "interrupt", "enqueue"]
"""As ``shared.runs.multitask.MULTITASK_STRATEGIES``."""


class RunPolicy(BaseModel):
    """What a new message does while a run is active on its thread (``shared.runs.multitask``; docs/policy.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    multitask_strategy: MultitaskStrategy = "reject"
    """The default when the request's ``forwardedProps.multitaskStrategy`` does not say."""
    queue_depth: int = Field(default=3, ge=1, le=10)
    """``enqueue``: how many runs may wait on one thread; one more is refused with ``409 queue_full``."""
    max_run_s: float = Field(default=3600.0, gt=0, le=8 * 3600)
    """The longest a run may take in all, across its slices (``shared.runs.slices``): past it the run ends with
    ``RUN_ERROR`` ``run_time_limit`` at its next step."""


class ExecutionProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    version: int = Field(default=1, ge=1)
    """Bumped on every change of a shipped profile; recorded nowhere else, read it in the file."""
    description: str = ""
    executor: ExecutorKind
    model: ModelConfig
    history_policy: HistoryPolicy = Field(default_factory=HistoryPolicy)
    tool_policy: ToolPolicy = Field(default_factory=ToolPolicy)
    memory_policy: MemoryPolicy = Field(default_factory=MemoryPolicy)
    """Only memory profiles use it (when their thread's extraction fires)."""
    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    """Chat profiles: the multitask strategy when a message arrives while a run is active."""
    intent_variant: Literal["A", "B"] = "B"
    """Which intent-recognition prompt the worker uses (``shared.intent``)."""
    enable_router: bool | None = Field(default=None, exclude=True)
    """Legacy (pre-refactor) field: read for compatibility, ignored for execution, never written back."""
