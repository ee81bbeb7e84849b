"""The checks a well-formed profile must pass against what exists: its model can answer with thinking off, every
tool it allows exists and belongs to its executor, every MCP server it names is defined. Each mistake is one
:class:`~shared.profile_problems.ProfileProblem`."""

import logging
from collections.abc import Mapping
from typing import NamedTuple

from shared.llm.model_traits import KNOWN_MODELS, ModelTraits
from shared.models import ExecutorKind
from shared.profile_problems import ProfileProblem
from shared.profiles.schema import MEMORY_TOOL_NAMES, ExecutionProfile
from shared.thread_state.tool import WORKER_TOOL_NAMES

logger = logging.getLogger(__name__)


class ProfileChecks(NamedTuple):
    """What every profile is checked against: the tools, models and MCP servers that exist."""

    known_tools: frozenset[str]
    known_models: Mapping[str, ModelTraits] = KNOWN_MODELS
    known_mcp_servers: frozenset[str] = frozenset()


def check_profile(
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
                "fix": "add a row to KNOWN_MODELS (shared/llm/model_traits.py) if the model can turn thinking off",
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
    known_tools = known_tools | WORKER_TOOL_NAMES  # the worker's own tools exist in every deployment
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
