"""Profile catalogs for tests that need a tool policy the shipped profiles do not have."""

from __future__ import annotations

from typing import Any

from shared.profiles import ProfileCatalog, default_catalog


def chat_catalog(known_tools: Any = None, **tool_policy: Any) -> ProfileCatalog:
    """The shipped catalog with ``chat_default``'s ``tool_policy`` updated by ``tool_policy``."""
    catalog = default_catalog(known_tools)
    profiles = {p.name: p for p in catalog}
    chat = profiles["chat_default"]
    profiles["chat_default"] = chat.model_copy(
        update={"tool_policy": chat.tool_policy.model_copy(update=tool_policy)}
    )
    return ProfileCatalog(profiles)
