"""Each function's settings: a typed model of only the groups it reads (shared.settings), read from the environment
once, its JSON settings parsed once when it loads, into :class:`StructuredSettings`: the values the providers build
from. A wrong value is one ``ConfigurationError`` at start-up that names the variable, not a failure on the first
request that reads it.

template.yaml gives every function the same global variables; a function's model reads only its own, so a setting
that only another function uses cannot stop it from starting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from shared.settings import (
    AttachmentSettings,
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
    TenancySettings,
    TracingSettings,
    WebhookSettings,
    read_settings,
)

if TYPE_CHECKING:
    from shared.limits.config import LimitsConfig
    from shared.limits.usage import PriceTable
    from shared.rollouts import RolloutRules
    from shared.tools.mcp_servers import McpServerConfig
    from shared.wiring.warm_up import LambdaFunction


class ApiSettings(
    WebhookSettings,
    ProcessSettings,
    TracingSettings,
    TableSettings,
    StreamSettings,
    ModelSettings,
    CatalogSettings,
    RunSettings,
    AuthSettings,
    TenancySettings,
    HttpSettings,
    SchedulerSettings,
    AttachmentSettings,
):
    """The API (streaming and buffered): runs, threads, tasks' CRUD, token checks, HTTP; a run's webhook target is
    checked at admission."""


class MemoryFunctionSettings(
    ProcessSettings, TracingSettings, TableSettings, StreamSettings, ModelSettings, CatalogSettings, RunSettings,
    MemorySettings, TenancySettings,
):  # fmt: skip
    """The memory function: extraction runs on the memory executor, coalesced by thread."""


class AutomationFunctionSettings(
    ProcessSettings, TracingSettings, TableSettings, StreamSettings, ModelSettings, CatalogSettings, RunSettings,
    MemorySettings, AttachmentSettings, TenancySettings,
):  # fmt: skip
    """The automation function: a fired task runs on the worker or the memory executor."""


class SweeperSettings(ProcessSettings, TracingSettings, TableSettings, StreamSettings, RunSettings):
    """The sweeper: ends runs whose heartbeat stopped, on the table and the stream."""


class WebhookFunctionSettings(WebhookSettings, TracingSettings, TableSettings):
    """The webhook function: reads a run from the ledger, signs its event with the tenant's secret and POSTs it."""


class MigrateSettings(ProcessSettings, TracingSettings, TableSettings, MigrationSettings):
    """The migration function (and its command line): the table's migrations."""


FUNCTION_SETTINGS: dict[LambdaFunction, type[SettingsGroup]] = {
    "api": ApiSettings,
    "memory": MemoryFunctionSettings,
    "automation": AutomationFunctionSettings,
}
"""The settings model of each function that warms up during its INIT (shared.container)."""


@dataclass(frozen=True)
class StructuredSettings:
    """The JSON (and otherwise structured) settings, each parsed once, when the settings load, into the value its
    provider builds from (shared.wiring): no provider parses a setting again. A setting the function's model does
    not hold has the value of an unset one."""

    limits: LimitsConfig | None
    """``LIMITS``; None when unset: nothing counted, nothing refused."""
    prices: PriceTable
    """``MODEL_PRICES``; unset: the dated default table."""
    model_ids: Mapping[str, str]
    """``MODEL_ID_MAP``: logical model id to provider id; empty when unset."""
    mcp_servers: Mapping[str, McpServerConfig]
    """``MCP_SERVERS`` by server name; empty when unset."""
    rollout: RolloutRules
    """``PROFILE_ROLLOUT``'s rules, checked for their shape (against the profiles when the catalog is built)."""
    tool_plugins: tuple[str, ...]
    """``TOOL_PLUGINS``' ``module:attribute`` paths (imported when the tools are built)."""
    window_n_override: int | None
    """``WINDOW_N_OVERRIDE``, a positive integer; None when unset."""


def _text(settings: SettingsGroup, name: str) -> str | None:
    """The text of setting ``name`` when ``settings``' model holds it; None (unset) when it does not."""
    value = getattr(settings, name) if name in type(settings).model_fields else None
    return value if isinstance(value, str) else None


def parse_structured_settings(settings: SettingsGroup) -> StructuredSettings:
    """Each JSON setting ``settings`` holds, and ``WINDOW_N_OVERRIDE``, parsed (the parsers are imported here, not
    with this module: importing a function's entry stays cheap).

    Raises:
        ConfigurationError: the first wrong one, naming its variable.
    """
    from shared.limits.config import parse_limits
    from shared.limits.usage import parse_prices
    from shared.llm.model_ids import parse_model_id_map
    from shared.rollouts import parse_rollout_shape, parse_window_override
    from shared.tools.mcp_servers import parse_mcp_servers
    from shared.tools.plugins import parse_plugin_paths

    limits = _text(settings, "limits")
    return StructuredSettings(
        limits=parse_limits(limits) if limits is not None else None,
        prices=parse_prices(_text(settings, "model_prices")),
        model_ids=parse_model_id_map(_text(settings, "model_id_map")),
        mcp_servers=parse_mcp_servers(_text(settings, "mcp_servers")),
        rollout=parse_rollout_shape(_text(settings, "profile_rollout")),
        tool_plugins=parse_plugin_paths(_text(settings, "tool_plugins")),
        window_n_override=parse_window_override(
            settings.window_n_override if isinstance(settings, CatalogSettings) else None
        ),
    )


class LoadedSettings(NamedTuple):
    """A function's settings as they load: every setting (the groups it does not read at their defaults), and its
    structured ones parsed."""

    settings: Settings
    structured: StructuredSettings


def load_settings(model: type[SettingsGroup], env: Mapping[str, str] | None = None) -> LoadedSettings:
    """A function's settings: ``model``'s groups read from ``env`` (default: the process environment), the other
    groups at their defaults, and its structured settings parsed.

    Raises:
        ConfigurationError: one, naming the variable whose value is wrong.
    """
    own = read_settings(model, env)
    structured = parse_structured_settings(own)
    return LoadedSettings(Settings.model_validate(own.model_dump()), structured)
