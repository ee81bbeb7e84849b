"""Loading the profiles: every ``*.json`` file of a folder (or the runtime configuration's list of profile
objects), parsed against the schema and checked, every mistake collected into one
:class:`~shared.errors.ConfigurationError` that names the file, the field and the fix, so a bad profile stops the
deploy instead of the first user message. Settings are passed in explicitly; nothing here reads the environment."""

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shared.llm.model_traits import KNOWN_MODELS, ModelTraits
from shared.profile_problems import ProfileProblem, fail, loc, raise_if_any
from shared.profiles.catalog import ProfileCatalog
from shared.profiles.checks import ProfileChecks, check_profile
from shared.profiles.fixes import fix_for
from shared.profiles.schema import MEMORY_TOOL_NAMES, ExecutionProfile
from shared.rollouts import RolloutRules, check_rollout, parse_rollout, parse_window_override

logger = logging.getLogger(__name__)

PROFILES_DIR = Path(__file__).parent.parent / "profiles_data"
"""The profiles that ship with the code."""


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
            ProfileProblem(source, loc(err["loc"]), f"{err['msg']} (got {err.get('input')!r})", fix_for(err))
            for err in exc.errors()
        ]
        return None, raw, problems


def load_catalog(
    directory: Path,
    *,
    known_tools: Iterable[str],
    rollout_json: str | RolloutRules | None = None,
    window_n_override: int | str | None = None,
    known_models: Mapping[str, ModelTraits] = KNOWN_MODELS,
    known_mcp_servers: Iterable[str] = (),
) -> ProfileCatalog:
    """Load and validate every ``*.json`` profile in ``directory``.

    Args:
        directory: the folder of profile files (one profile per file, named ``<name>.json``).
        known_tools: every tool name that exists: the system registry's tools and the memory tools.
        rollout_json: the ``PROFILE_ROLLOUT`` document (JSON text), or its rules already parsed, if any.
        window_n_override: the ``WINDOW_N_OVERRIDE`` value (text, or an integer), if any; widens N, never narrows it.
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
    (against ``profiles``) and reported under ``rollout_source`` / ``window_source``. Rules given as
    :class:`RolloutRules` (the settings parsed them when they loaded) are only checked against the profiles, and a
    whole number override only for being positive: neither is parsed again.

    Raises:
        ConfigurationError: listing every problem of the rules and the override.
    """
    executors = {name: profile.executor for name, profile in profiles.items()}
    if isinstance(rollout, RolloutRules):
        rules = check_rollout(rollout, executors, source=rollout_source)
    else:
        rules = parse_rollout(rollout, executors, source=rollout_source)
    return ProfileCatalog(profiles, rollout=rules, window_n_override=_window(window_n_override, window_source))


def _window(value: int | str | None, source: str) -> int | None:
    """``value`` as the window override: a positive whole number, or None. Text is parsed; a number only checked."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    return parse_window_override(value, source=source)


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
        problems += check_profile(where, profile, stem=profile.name, checks=checks)
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
        problems += check_profile(path.name, profile, stem=path.stem, checks=checks)
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
    return load_catalog(PROFILES_DIR, known_tools=default_known_tools() if known_tools is None else known_tools)
