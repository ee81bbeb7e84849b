"""Profiles for tests: catalogs with a tool policy the shipped profiles do not have, and profile files written to a
directory for the loader to read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shared.profiles import MEMORY_TOOL_NAMES, ProfileCatalog, default_catalog


def chat_catalog(known_tools: Any = None, **tool_policy: Any) -> ProfileCatalog:
    """The shipped catalog with ``chat_default``'s ``tool_policy`` updated by ``tool_policy``."""
    catalog = default_catalog(known_tools)
    profiles = {p.name: p for p in catalog}
    chat = profiles["chat_default"]
    profiles["chat_default"] = chat.model_copy(update={"tool_policy": chat.tool_policy.model_copy(update=tool_policy)})
    return ProfileCatalog(profiles)


KNOWN_TOOLS = frozenset({"get_current_time", "web_search"}) | MEMORY_TOOL_NAMES


def chat_profile(name: str = "chat_default", **changes: Any) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "name": name,
        "executor": "worker",
        "model": {"name": "qwen3.5-30b-a3b", "thinking": "off"},
        "history_policy": {"mode": "last_n_user_messages", "n": 20, "include_current_user_message": True},
        "tool_policy": {"mode": "intersection", "allowlist": ["get_current_time"]},
    }
    profile.update(changes)
    return profile


def memory_profile(name: str = "automation_memory_default", **changes: Any) -> dict[str, Any]:
    profile = chat_profile(name, executor="memory", model={"name": "qwen3.5-flash", "thinking": "off"})
    profile["tool_policy"] = {"mode": "intersection", "allowlist": ["memory_write", "memory_forget"]}
    profile.update(changes)
    return profile


def write(directory: Path, *profiles: dict[str, Any]) -> Path:
    for profile in profiles:
        (directory / f"{profile['name']}.json").write_text(json.dumps(profile), encoding="utf-8")
    return directory
