"""Each function's settings: a typed model of only the groups it reads (shared.settings), read from the environment
once, its JSON settings parsed and checked when it loads. A wrong value is one ``ConfigurationError`` at start-up that
names the variable, not a failure on the first request that reads it.

template.yaml gives every function the same global variables; a function's model reads only its own, so a setting
that only another function uses cannot stop it from starting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from shared.settings import (
    AuthSettings,
    CatalogSettings,
    HttpSettings,
    MemorySettings,
    MigrationSettings,
    ModelSettings,
    ProcessSettings,
    RunSettings,
    SchedulerSettings,
    Settings,
    SettingsGroup,
    StreamSettings,
    TableSettings,
    TracingSettings,
    read_settings,
)

if TYPE_CHECKING:
    from shared.wiring.warm_up import LambdaFunction


class ApiSettings(
    ProcessSettings,
    TracingSettings,
    TableSettings,
    StreamSettings,
    ModelSettings,
    CatalogSettings,
    RunSettings,
    AuthSettings,
    HttpSettings,
    SchedulerSettings,
):
    """The API (streaming and buffered): runs, threads, tasks' CRUD, token checks, HTTP."""


class MemoryFunctionSettings(
    ProcessSettings, TracingSettings, TableSettings, StreamSettings, ModelSettings, CatalogSettings, RunSettings,
    MemorySettings,
):  # fmt: skip
    """The memory function: extraction runs on the memory executor, coalesced by thread."""


class AutomationFunctionSettings(
    ProcessSettings, TracingSettings, TableSettings, StreamSettings, ModelSettings, CatalogSettings, RunSettings,
    MemorySettings,
):  # fmt: skip
    """The automation function: a fired task runs on the worker or the memory executor."""


class SweeperSettings(ProcessSettings, TracingSettings, TableSettings, StreamSettings, RunSettings):
    """The sweeper: ends runs whose heartbeat stopped, on the table and the stream."""


class MigrateSettings(ProcessSettings, TracingSettings, TableSettings, MigrationSettings):
    """The migration function (and its command line): the table's migrations."""


FUNCTION_SETTINGS: dict[LambdaFunction, type[SettingsGroup]] = {
    "api": ApiSettings,
    "memory": MemoryFunctionSettings,
    "automation": AutomationFunctionSettings,
}
"""The settings model of each function that warms up during its INIT (shared.container)."""


def _json_checks() -> dict[str, Callable[[str], object]]:
    """The parser of each JSON (or otherwise structured) setting; each raises a ``ConfigurationError`` naming it."""
    from shared.limits.config import parse_limits
    from shared.limits.usage import parse_prices
    from shared.llm.model_ids import parse_model_id_map
    from shared.rollouts import parse_rollout_shape
    from shared.tools.mcp_servers import parse_mcp_servers
    from shared.tools.plugins import parse_plugin_paths

    return {
        "limits": parse_limits,
        "model_prices": parse_prices,
        "model_id_map": parse_model_id_map,
        "mcp_servers": parse_mcp_servers,
        "profile_rollout": parse_rollout_shape,
        "tool_plugins": parse_plugin_paths,
    }


def check_structured_settings(settings: SettingsGroup) -> None:
    """Parse each JSON setting ``settings`` holds, and ``WINDOW_N_OVERRIDE`` (its one check).

    Raises:
        ConfigurationError: the first wrong one, naming its variable.
    """
    from shared.rollouts import parse_window_override

    fields = type(settings).model_fields
    for name, parse in _json_checks().items():
        value = getattr(settings, name, None) if name in fields else None
        if value is not None:
            parse(value)
    if isinstance(settings, CatalogSettings):
        parse_window_override(settings.window_n_override)


def load_settings(model: type[SettingsGroup], env: Mapping[str, str] | None = None) -> Settings:
    """A function's settings: ``model``'s groups read from ``env`` (default: the process environment) and checked,
    the other groups at their defaults.

    Raises:
        ConfigurationError: one, naming the variable whose value is wrong.
    """
    own = read_settings(model, env)
    check_structured_settings(own)
    return Settings.model_validate(own.model_dump())
