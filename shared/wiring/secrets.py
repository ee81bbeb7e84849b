"""The secrets a process reads (the model endpoint's key, MCP servers' auth headers): apart from the building, so
what reads Secrets Manager is in one place (tests/infra/test_iam_least_privilege.py names it)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from shared.settings import Settings

if TYPE_CHECKING:
    from shared.tools.mcp_servers import McpServerConfig

SECRET_MAX_AGE_S = 300
"""How long a secret read from Secrets Manager is reused (Powertools Parameters' cache)."""


def read_secret(name: str) -> str:
    """The value of the secret ``name`` (Powertools Parameters, cached for :data:`SECRET_MAX_AGE_S`)."""
    from aws_lambda_powertools.utilities import parameters

    value = parameters.get_secret(name, max_age=SECRET_MAX_AGE_S)
    return value if isinstance(value, str) else str(value)


def llm_api_key(settings: Settings) -> str:
    """LLM_API_KEY if set; else the secret named by LLM_API_KEY_SECRET_NAME (Powertools Parameters, cached)."""
    if settings.llm_api_key:
        return settings.llm_api_key
    if settings.llm_api_key_secret_name:
        return read_secret(settings.llm_api_key_secret_name)
    return "none"


def mcp_header_value(config: McpServerConfig) -> str | None:
    """An MCP server's auth header value: from the environment variable it names, else from Secrets Manager."""
    if config.auth_env:
        return os.environ.get(config.auth_env) or None
    if config.auth_secret_name:
        return read_secret(config.auth_secret_name)
    return None
