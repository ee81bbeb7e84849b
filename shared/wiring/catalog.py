"""What profiles are checked against and served from: the tools (built-in, plugins, MCP), the runtime
configuration, and the profiles themselves."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.errors import ConfigurationError
from shared.profiles import MEMORY_TOOL_NAMES, PROFILES_DIR, ProfileChecks, Profiles, load_catalog
from shared.tools.clock import make_clock_tool
from shared.tools.registry import ToolRegistry
from shared.wiring.base import ProviderBase
from shared.wiring.overrides import overridable
from shared.wiring.secrets import mcp_header_value

if TYPE_CHECKING:
    from shared.ports.config import ConfigSource
    from shared.tools.mcp_servers import McpToolbox


class CatalogProviders(ProviderBase):
    """Tools, MCP servers, runtime configuration and profiles."""

    @overridable("tools")
    def tools(self) -> ToolRegistry:
        """Built-in server tools plus the ``TOOL_PLUGINS`` ones; a duplicate or broken plugin fails the start."""
        registry = ToolRegistry()
        registry.register(make_clock_tool())
        paths = self.structured.tool_plugins
        if paths:
            from shared.tools.plugins import register_plugins

            register_plugins(registry, paths)
        return registry

    @overridable("mcp")
    def mcp(self) -> McpToolbox | None:
        """The ``MCP_SERVERS`` of this deployment; None (and no ``mcp`` import) when there are none."""
        servers = self.structured.mcp_servers
        if not servers:
            return None
        from shared.tools.mcp_servers import McpToolbox

        return McpToolbox(servers, header_value=mcp_header_value)

    @overridable("profiles")
    def profiles(self) -> Profiles:
        """The packaged profiles with ``PROFILE_ROLLOUT`` and ``WINDOW_N_OVERRIDE``; with runtime configuration, the
        live profiles that build on them (shared.runtime_config; the packaged ones are the fallback)."""
        checks = self.profile_checks()
        rollout, window_n_override = self.structured.rollout, self.structured.window_n_override
        packaged = load_catalog(
            PROFILES_DIR,
            known_tools=checks.known_tools,
            rollout_json=rollout,
            window_n_override=window_n_override,
            known_mcp_servers=checks.known_mcp_servers,
        )
        source = self.runtime_config
        if source is None:
            return packaged
        from shared.runtime_config import CatalogBase, LiveProfiles

        base = CatalogBase({p.name: p for p in packaged}, checks, rollout, window_n_override)
        return LiveProfiles(source, base, fallback=packaged, poll_interval_s=self.settings.runtime_config_poll_s)

    def profile_checks(self) -> ProfileChecks:
        """What this deployment's profiles are checked against: its tools (built-in, plugins, MCP, memory) and MCP
        servers."""
        mcp = self.mcp
        return ProfileChecks(
            known_tools=self.tools.names | MEMORY_TOOL_NAMES | (mcp.known_tool_names() if mcp else frozenset()),
            known_mcp_servers=frozenset(mcp.server_names if mcp else ()),
        )

    @overridable("runtime_config")
    def runtime_config(self) -> ConfigSource | None:
        """The AppConfig configuration, read through its Lambda extension, when ``APPCONFIG_*`` name one."""
        settings = self.settings
        names = (settings.appconfig_application, settings.appconfig_environment, settings.appconfig_profile)
        if not any(names):
            return None
        application, environment, profile = names
        if not (application and environment and profile):
            raise ConfigurationError(
                "APPCONFIG_APPLICATION, APPCONFIG_ENVIRONMENT and APPCONFIG_PROFILE are set together or not at all",
                code="runtime_config_incomplete",
            )
        from shared.adapters.appconfig_extension import AppConfigExtensionSource

        return AppConfigExtensionSource(
            application,
            environment,
            profile,
            base_url=settings.appconfig_extension_url,
            timeout_s=settings.runtime_config_timeout_s,
        )
