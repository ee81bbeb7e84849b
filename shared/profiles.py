"""Execution profiles (docs/design.md §7.1): which executor, which model, what history and which tools a run
gets.

Profiles are versioned JSON files in ``shared/profiles_data/`` (inside the package, so they ship with the
Lambda code). :func:`load_catalog` reads and validates all of them at start-up; every mistake becomes a
:class:`~shared.errors.ConfigurationError` that names the file, the field and the fix, so a bad profile stops
the deploy instead of the first user message.

Roll-out and rollback (docs/design.md §11) are applied by :meth:`ProfileCatalog.choose`:

- per-tenant and per-task-type overrides and percentage ramps (``PROFILE_ROLLOUT``, :mod:`shared.rollouts`), e.g.
  send one tenant back to the previous model, or 10 % of every tenant's users to a new one;
- an emergency widening of N (``WINDOW_N_OVERRIDE``) for every ``last_n_user_messages`` profile.

The same switches, and profiles added without a release, can also come from the runtime configuration
(``shared.runtime_config``), which builds its catalogs with :func:`parse_profiles` and :func:`build_catalog`.
Settings are passed in explicitly; nothing here reads the environment.
"""

import json
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from shared.errors import ConfigurationError
from shared.models import ExecutorKind, RolloutSide
from shared.profile_problems import ProfileProblem, fail, loc, raise_if_any
from shared.rollouts import RolloutRules, parse_rollout, parse_window_override

logger = logging.getLogger(__name__)

PROFILES_DIR = Path(__file__).parent / "profiles_data"
"""The profiles that ship with the code."""

MEMORY_TOOL_NAMES: frozenset[str] = frozenset({"memory_write", "memory_forget"})
"""Tools implemented by the memory executor itself; memory profiles may allow only these."""


class ModelTraits(NamedTuple):
    """What the loader must know about a model id before a profile may use it."""

    thinking_off: bool
    """True when the model can answer without thinking (it has a switch, or never thinks)."""
    note: str = ""


KNOWN_MODELS: Mapping[str, ModelTraits] = {
    # Qwen3.5 hybrid models think by default and accept enable_thinking=false.
    "qwen3.5-30b-a3b": ModelTraits(
        True, "the design's id (docs/design.md §1); DashScope publishes this model as qwen3.5-35b-a3b"
    ),
    "qwen3.5-35b-a3b": ModelTraits(True),
    "qwen3.5-flash": ModelTraits(True),
    "qwen3.5-plus": ModelTraits(True),
    # Qwen3 hybrid models: same switch.
    "qwen3-30b-a3b": ModelTraits(True),
    "qwen3-32b": ModelTraits(True),
    "qwen3-235b-a22b": ModelTraits(True),
    "qwen-plus": ModelTraits(True),
    "qwen-flash": ModelTraits(True),
    "qwen-turbo": ModelTraits(True),
    # Instruct-only models never think.
    "qwen3-30b-a3b-instruct-2507": ModelTraits(True),
    "qwen3-235b-a22b-instruct-2507": ModelTraits(True),
    "deepseek-chat": ModelTraits(True, "the pre-refactor worker model"),
    # Thinking-only models cannot turn it off.
    "qwen3-30b-a3b-thinking-2507": ModelTraits(False),
    "qwen3-235b-a22b-thinking-2507": ModelTraits(False),
    "qwq-plus": ModelTraits(False),
    "deepseek-reasoner": ModelTraits(False),
}
"""What is known about logical model ids. The loader refuses a model listed here that cannot turn thinking off, and
accepts an id missing from the table with a warning (add a row when adding a model). Which id the provider is sent
is deployment configuration (``MODEL_ID_MAP``, shared.llm.model_ids), not this table."""


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    thinking: Literal["off", "on"] = "off"
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_output_tokens: int | None = Field(default=None, ge=1)


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
            raise ValueError("block_size applies only to mode 'last_n_user_messages'")
        return self

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown IANA timezone {value!r}") from exc
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

    @field_validator("frontend_allowlist")
    @classmethod
    def _frontend_patterns(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not re.match(FRONTEND_PATTERN, entry):
                raise ValueError(f"{entry!r} is not a tool name or pattern (letters, digits, '_', '-', '*')")
            if entry.startswith("mcp__"):
                raise ValueError(f"{entry!r}: names under 'mcp__' belong to MCP servers")
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


MultitaskStrategy = Literal["reject", "interrupt"]
"""As ``shared.runs.multitask.MULTITASK_STRATEGIES``; ``enqueue`` (issue 28) is not built yet."""


class RunPolicy(BaseModel):
    """What a new message does while a run is active on its thread (``shared.runs.multitask``; docs/policy.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    multitask_strategy: MultitaskStrategy = "reject"
    """The default when the request's ``forwardedProps.multitaskStrategy`` does not say."""


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
    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    """Only memory profiles use it (when their thread's extraction fires)."""
    intent_variant: Literal["A", "B"] = "B"
    """Which intent-recognition prompt the worker uses (``shared.intent``)."""
    enable_router: bool | None = Field(default=None, exclude=True)
    """Legacy (pre-refactor) field: read for compatibility, ignored for execution, never written back."""


# ----------------------------------------------------------------------------------------------------------
# The catalog
# ----------------------------------------------------------------------------------------------------------


class ProfileChoice(NamedTuple):
    """The profile a run must use, and the ramp and side that chose it (both None when no ramp covered the run)."""

    profile: ExecutionProfile
    rollout_id: str | None = None
    rollout_side: RolloutSide | None = None


class Profiles(Protocol):
    """What the services ask of the profiles: a :class:`ProfileCatalog`, or the runtime configuration's
    (``shared.runtime_config.LiveProfiles``), which swaps its catalog when the configuration changes."""

    @property
    def names(self) -> frozenset[str]: ...

    def __iter__(self) -> Iterator[ExecutionProfile]: ...

    def get(self, name: str) -> ExecutionProfile: ...

    def choose(
        self, name: str, *, tenant_id: str, user_id: str | None = None, task_type: str | None = None
    ) -> ProfileChoice: ...

    def resolve(
        self, name: str, *, tenant_id: str, user_id: str | None = None, task_type: str | None = None
    ) -> ExecutionProfile: ...


class ProfileCatalog:
    """The validated profiles plus the roll-out switches; :meth:`choose` is what a run should use."""

    def __init__(
        self,
        profiles: Mapping[str, ExecutionProfile],
        *,
        rollout: RolloutRules | None = None,
        window_n_override: int | None = None,
    ) -> None:
        self._profiles = dict(profiles)
        self._rollout = rollout or RolloutRules()
        self._window_n_override = window_n_override

    def __iter__(self) -> Iterator[ExecutionProfile]:
        return iter(self._profiles.values())

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._profiles)

    def get(self, name: str) -> ExecutionProfile:
        """The profile exactly as its file defines it, without roll-out switches."""
        try:
            return self._profiles[name]
        except KeyError:
            raise ConfigurationError(
                f"unknown execution profile {name!r}; known: {', '.join(sorted(self._profiles))}",
                code="unknown_profile",
            ) from None

    def choose(
        self, name: str, *, tenant_id: str, user_id: str | None = None, task_type: str | None = None
    ) -> ProfileChoice:
        """The profile a run of ``tenant_id`` / ``user_id`` (and automation ``task_type``) asking for ``name``
        must use, with the roll-out rules and the window override applied, and the ramp that chose it, if any."""
        rule = self._rollout.choose(name, tenant_id=tenant_id, user_id=user_id, task_type=task_type)
        profile = self.get(rule.profile_name)
        widen = self._window_n_override
        policy = profile.history_policy
        if widen is not None and policy.mode == "last_n_user_messages" and widen > policy.n:
            profile = profile.model_copy(update={"history_policy": policy.model_copy(update={"n": widen})})
        return ProfileChoice(profile, rule.rollout_id, rule.side)

    def resolve(
        self, name: str, *, tenant_id: str, user_id: str | None = None, task_type: str | None = None
    ) -> ExecutionProfile:
        """The profile of :meth:`choose`, without saying how it was chosen."""
        return self.choose(name, tenant_id=tenant_id, user_id=user_id, task_type=task_type).profile


# ----------------------------------------------------------------------------------------------------------
# Loading and validation
# ----------------------------------------------------------------------------------------------------------


class ProfileChecks(NamedTuple):
    """What every profile is checked against: the tools, models and MCP servers that exist."""

    known_tools: frozenset[str]
    known_models: Mapping[str, ModelTraits] = KNOWN_MODELS
    known_mcp_servers: frozenset[str] = frozenset()


def _fix_for(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    field = loc(error["loc"])
    if field == "executor":
        return "use one of: " + ", ".join(k.value for k in ExecutorKind)
    if kind in {"enum", "literal_error"}:
        return f"use one of: {ctx.get('expected', 'the documented values')}"
    if kind == "extra_forbidden":
        return "remove the field or correct its spelling (see the models in shared/profiles.py)"
    if kind == "missing":
        return "add the field"
    if kind in {"greater_than_equal", "greater_than"}:
        bound = ctx.get("ge", ctx.get("gt"))
        hint = " (20 is the default)" if field == "history_policy.n" else ""
        return f"use an integer >= {bound}{hint}"
    if kind in {"less_than_equal", "less_than"}:
        bound = ctx.get("le", ctx.get("lt"))
        hint = " (SQS DelaySeconds cannot exceed 900)" if field == "memory_policy.idle_s" else ""
        return f"use an integer <= {bound}{hint}"
    if kind == "string_pattern_mismatch":
        return "use lower-case letters, digits, '_', '-' or '.', starting with a letter or digit"
    if field.endswith("timezone"):
        return "use an IANA timezone name such as 'Asia/Shanghai'"
    if "block_size" in str(error.get("msg", "")):
        return "remove block_size, or set mode to 'last_n_user_messages'"
    return "use a value of the type documented in shared/profiles.py"


def _parse_file(path: Path) -> tuple[ExecutionProfile | None, dict[str, Any], list[ProfileProblem]]:
    source = path.name
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        problem = ProfileProblem(
            source, "(document)", f"invalid JSON at line {exc.lineno}: {exc.msg}", "fix the JSON syntax"
        )
        return None, {}, [problem]
    return _parse_raw(source, raw, not_an_object="write one profile object per file")


def _parse_raw(
    source: str, raw: object, *, not_an_object: str
) -> tuple[ExecutionProfile | None, dict[str, Any], list[ProfileProblem]]:
    if not isinstance(raw, dict):
        return None, {}, [ProfileProblem(source, "(document)", "the profile is not a JSON object", not_an_object)]
    try:
        return ExecutionProfile.model_validate(raw), raw, []
    except ValidationError as exc:
        problems = [
            ProfileProblem(source, loc(err["loc"]), f"{err['msg']} (got {err.get('input')!r})", _fix_for(err))
            for err in exc.errors()
        ]
        return None, raw, problems


def _check_profile(
    source: str,
    profile: ExecutionProfile,
    *,
    stem: str,
    checks: ProfileChecks,
) -> list[ProfileProblem]:
    """Everything wrong with one well-formed profile, in the order its fields appear."""
    problems: list[ProfileProblem] = []
    if profile.name != stem:
        problems.append(
            ProfileProblem(
                source,
                "name",
                f"name {profile.name!r} differs from the file name",
                f"rename the file to {profile.name}.json or set name to {stem!r}",
            )
        )
    problems += _check_model(source, profile, checks.known_models)
    problems += _check_allowlist(source, profile, checks.known_tools)
    problems += _check_mcp_servers(source, profile, checks.known_mcp_servers)
    if profile.executor is ExecutorKind.MEMORY:
        problems += _check_memory_tools(source, profile)
    return problems


def _check_model(
    source: str, profile: ExecutionProfile, known_models: Mapping[str, ModelTraits]
) -> list[ProfileProblem]:
    """The model can turn thinking off, and the profile turns it off."""
    problems: list[ProfileProblem] = []
    traits = known_models.get(profile.model.name)
    if traits is None:
        # Accepted: a deployment may serve models this table has never heard of (docs/providers.md). The thinking
        # switch is sent anyway; a model that cannot turn thinking off shows up in the preflight.
        logger.warning(
            "profile names a model id the built-in table does not know; accepted as it is",
            extra={
                "profile_file": source,
                "model": profile.model.name,
                "fix": "add a row to KNOWN_MODELS (shared/profiles.py) if the model can turn thinking off",
            },
        )
    elif not traits.thinking_off:
        problems.append(
            ProfileProblem(
                source,
                "model.name",
                f"model {profile.model.name!r} cannot turn thinking off",
                "choose a model that supports thinking off (a hybrid or instruct model)",
            )
        )
    if profile.model.thinking != "off":
        problems.append(
            ProfileProblem(
                source,
                "model.thinking",
                f"thinking must be off for the {profile.executor.value} executor",
                'set "thinking": "off"',
            )
        )
    return problems


def _check_allowlist(source: str, profile: ExecutionProfile, known_tools: frozenset[str]) -> list[ProfileProblem]:
    """Every allowed tool exists, and memory tools are allowed in memory profiles only (and nothing else there)."""
    problems: list[ProfileProblem] = []
    for index, tool in enumerate(profile.tool_policy.allowlist or []):
        field = f"tool_policy.allowlist[{index}]"
        if tool not in known_tools:
            fix = "remove it or use one of: " + ", ".join(sorted(known_tools))
            problems.append(ProfileProblem(source, field, f"no tool named {tool!r}", fix))
        elif profile.executor is ExecutorKind.WORKER and tool in MEMORY_TOOL_NAMES:
            problems.append(
                ProfileProblem(
                    source,
                    field,
                    f"{tool!r} runs only in the memory executor",
                    "remove it; memory tools belong to memory profiles",
                )
            )
        elif profile.executor is ExecutorKind.MEMORY and tool not in MEMORY_TOOL_NAMES:
            fix = "allow only " + ", ".join(sorted(MEMORY_TOOL_NAMES))
            problems.append(ProfileProblem(source, field, f"memory profiles may not allow {tool!r}", fix))
    return problems


def _check_mcp_servers(
    source: str, profile: ExecutionProfile, known_mcp_servers: frozenset[str]
) -> list[ProfileProblem]:
    """Every MCP server the profile names is defined in the ``MCP_SERVERS`` setting."""
    known = ", ".join(sorted(known_mcp_servers)) or "(none)"
    return [
        ProfileProblem(
            source,
            f"tool_policy.mcp_servers[{index}]",
            f"no MCP server named {server!r}",
            "define it in the MCP_SERVERS setting or remove it; known: " + known,
        )
        for index, server in enumerate(profile.tool_policy.mcp_servers)
        if server not in known_mcp_servers
    ]


def _check_memory_tools(source: str, profile: ExecutionProfile) -> list[ProfileProblem]:
    """A memory profile names its tools and offers neither front-end nor MCP tools."""
    problems: list[ProfileProblem] = []
    if profile.tool_policy.frontend_allowlist or profile.tool_policy.mcp_servers:
        problems.append(
            ProfileProblem(
                source,
                "tool_policy",
                "a memory profile may not offer front-end or MCP tools",
                "remove frontend_allowlist and mcp_servers",
            )
        )
    if profile.tool_policy.allowlist is None:
        problems.append(
            ProfileProblem(
                source,
                "tool_policy.allowlist",
                "a memory profile must name its tools",
                'set "allowlist": ["memory_write", "memory_forget"]',
            )
        )
    return problems


def load_catalog(
    directory: Path,
    *,
    known_tools: Iterable[str],
    rollout_json: str | None = None,
    window_n_override: int | str | None = None,
    known_models: Mapping[str, ModelTraits] = KNOWN_MODELS,
    known_mcp_servers: Iterable[str] = (),
) -> ProfileCatalog:
    """Load and validate every ``*.json`` profile in ``directory``.

    Args:
        directory: the folder of profile files (one profile per file, named ``<name>.json``).
        known_tools: every tool name that exists: the system registry's tools and the memory tools.
        rollout_json: the ``PROFILE_ROLLOUT`` document, if any.
        window_n_override: the ``WINDOW_N_OVERRIDE`` value, if any; widens N, never narrows it.
        known_models: the model table (defaults to :data:`KNOWN_MODELS`).
        known_mcp_servers: the MCP servers of the ``MCP_SERVERS`` setting (their allowed tools, namespaced
            ``mcp__<server>__<tool>``, belong in ``known_tools``).

    Raises:
        ConfigurationError: listing every problem found, each with its file, field and fix.
    """
    files = sorted(directory.glob("*.json"))
    if not files:
        fail(
            [
                ProfileProblem(
                    str(directory.name),
                    "(directory)",
                    "no profile files found",
                    "add <name>.json profile files to the profiles directory",
                )
            ]
        )
    checks = ProfileChecks(frozenset(known_tools), known_models, frozenset(known_mcp_servers))
    profiles, problems, legacy = _load_files(files, checks)
    raise_if_any(problems)
    for source, profile in legacy:
        logger.warning(
            "deprecated profile field ignored",
            extra={
                "profile": profile.name,
                "profile_file": source,
                "field": "enable_router",
                "value": profile.enable_router,
                "action": "ignored: the execution path depends only on executor and the profile",
            },
        )
    return build_catalog(profiles, rollout=rollout_json, window_n_override=window_n_override)


def build_catalog(
    profiles: Mapping[str, ExecutionProfile],
    *,
    rollout: str | Mapping[str, Any] | RolloutRules | None,
    window_n_override: int | str | None,
    rollout_source: str = "PROFILE_ROLLOUT",
    window_source: str = "WINDOW_N_OVERRIDE",
) -> ProfileCatalog:
    """A catalog of already checked ``profiles`` with the roll-out rules and the window override, both checked
    (against ``profiles``) and reported under ``rollout_source`` / ``window_source``.

    Raises:
        ConfigurationError: listing every problem of the rules and the override.
    """
    executors = {name: profile.executor for name, profile in profiles.items()}
    raw = rollout.model_dump(by_alias=True) if isinstance(rollout, RolloutRules) else rollout
    rules = parse_rollout(raw, executors, source=rollout_source)
    return ProfileCatalog(
        profiles, rollout=rules, window_n_override=parse_window_override(window_n_override, source=window_source)
    )


def parse_profiles(
    entries: Sequence[object], *, source: str, checks: ProfileChecks
) -> tuple[dict[str, ExecutionProfile], list[ProfileProblem]]:
    """Profiles given as JSON objects rather than files (the runtime configuration's ``profiles``), checked as a
    profile file is, each problem named ``<source>[<index>]``."""
    profiles: dict[str, ExecutionProfile] = {}
    problems: list[ProfileProblem] = []
    for index, raw in enumerate(entries):
        where = f"{source}[{index}]"
        profile, _, found = _parse_raw(where, raw, not_an_object="give each profile as one JSON object")
        problems += found
        if profile is None:
            continue
        problems += _check_profile(where, profile, stem=profile.name, checks=checks)
        if profile.name in profiles:
            problems.append(ProfileProblem(where, "name", f"profile {profile.name!r} is defined twice", "remove one"))
        profiles[profile.name] = profile
    return profiles, problems


def _load_files(
    files: Sequence[Path], checks: ProfileChecks
) -> tuple[dict[str, ExecutionProfile], list[ProfileProblem], list[tuple[str, ExecutionProfile]]]:
    """The profiles of ``files`` by name, every problem found in them, and the files that still use the
    deprecated ``enable_router`` field."""
    profiles: dict[str, ExecutionProfile] = {}
    problems: list[ProfileProblem] = []
    legacy: list[tuple[str, ExecutionProfile]] = []
    for path in files:
        profile, raw, file_problems = _parse_file(path)
        problems += file_problems
        if profile is None:
            continue
        problems += _check_profile(path.name, profile, stem=path.stem, checks=checks)
        if profile.name in profiles:
            problems.append(
                ProfileProblem(
                    path.name,
                    "name",
                    f"profile {profile.name!r} is defined twice",
                    "give every profile a unique name",
                )
            )
        profiles[profile.name] = profile
        if "enable_router" in raw:
            legacy.append((path.name, profile))
    return profiles, problems, legacy


def default_known_tools() -> frozenset[str]:
    """The tool names the shipped profiles are validated against: built-in server tools and memory tools."""
    from shared.tools.clock import SPEC as CLOCK_SPEC

    return frozenset({CLOCK_SPEC.name}) | MEMORY_TOOL_NAMES


def default_catalog(known_tools: Iterable[str] | None = None) -> ProfileCatalog:
    """The shipped profiles, without roll-out switches (the app's wiring adds those from its settings)."""
    return load_catalog(
        PROFILES_DIR, known_tools=default_known_tools() if known_tools is None else known_tools
    )
