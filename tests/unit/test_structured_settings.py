"""The structured settings (LIMITS, MODEL_PRICES, MODEL_ID_MAP, MCP_SERVERS, PROFILE_ROLLOUT, TOOL_PLUGINS,
WINDOW_N_OVERRIDE) are parsed once, when the settings load, and the providers build from those parsed values: none
parses a setting again (shared/wiring/settings.py, shared/wiring/base.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import shared.limits.config
import shared.limits.usage
import shared.llm.model_ids
import shared.profiles.loading
import shared.rollouts
import shared.tools.mcp_servers
import shared.tools.plugins
from shared.errors import ConfigurationError
from shared.settings import Settings
from shared.wiring import Services
from shared.wiring.settings import ApiSettings, LoadedSettings, load_settings

ENV = {
    "LIMITS": '{"user": {"concurrentRuns": 3}}',
    "MODEL_PRICES": '{"qwen3.5-plus": {"input": 1, "cachedInput": 0.1, "output": 2}}',
    "MODEL_ID_MAP": '{"qwen3.5-plus": "qwen3.5-plus-2026"}',
    "MCP_SERVERS": '{"demo": {"url": "https://tools.example.com/mcp", "tools": ["lookup"]}}',
    "PROFILE_ROLLOUT": json.dumps({"tenants": {"t1": {"chat_default": "chat_default_b"}}}),
    "TOOL_PLUGINS": "tool_plugins.units_convert:TOOL",
    "WINDOW_N_OVERRIDE": "77",
}
"""A right value of each structured setting."""

PARSERS = [
    (shared.limits.config, "parse_limits"),
    (shared.limits.usage, "parse_prices"),
    (shared.llm.model_ids, "parse_model_id_map"),
    (shared.tools.mcp_servers, "parse_mcp_servers"),
    (shared.tools.plugins, "parse_plugin_paths"),
    (shared.rollouts, "parse_rollout_shape"),
    (shared.rollouts, "parse_rollout"),
    (shared.rollouts, "parse_window_override"),
    (shared.profiles.loading, "parse_rollout"),
    (shared.profiles.loading, "parse_window_override"),
]
"""Every parser of a structured setting, where it is defined and where a provider's path reaches it by name."""


def forbid_parsing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, a call of any parser of a structured setting is recorded and fails."""
    calls: list[str] = []

    def refuse(name: str) -> Any:
        def parse(*args: object, **kwargs: object) -> None:
            calls.append(name)
            raise AssertionError(f"{name} called after the settings loaded")

        return parse

    for module, name in PARSERS:
        monkeypatch.setattr(module, name, refuse(name))
    return calls


def build_every_provider_of_a_structured_setting(services: Services) -> None:
    for name in ("limits", "usage_reports", "model_ids", "mcp", "tools", "profiles"):
        getattr(services, name)


@pytest.fixture
def loaded() -> LoadedSettings:
    return load_settings(ApiSettings, ENV)


def test_the_settings_load_with_each_structured_setting_parsed(loaded: LoadedSettings) -> None:
    structured = loaded.structured
    assert structured.limits is not None and structured.limits.user.concurrent_runs == 3
    assert structured.prices.as_of == "MODEL_PRICES" and set(structured.prices.prices) == {"qwen3.5-plus"}
    assert structured.model_ids == {"qwen3.5-plus": "qwen3.5-plus-2026"}
    assert list(structured.mcp_servers) == ["demo"] and structured.mcp_servers["demo"].tools == ["lookup"]
    assert structured.rollout.tenants == {"t1": {"chat_default": "chat_default_b"}}
    assert structured.tool_plugins == ("tool_plugins.units_convert:TOOL",)
    assert structured.window_n_override == 77


def test_the_providers_build_from_the_parsed_values_and_parse_nothing(
    loaded: LoadedSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN services made from the loaded settings, and every parser of a structured setting refusing to run
    services = Services.loaded(loaded)
    calls = forbid_parsing(monkeypatch)
    # WHEN every provider that reads a structured setting is built
    build_every_provider_of_a_structured_setting(services)
    # THEN none parsed a setting again, and each holds the value parsed at load
    assert calls == []
    assert services.limits is not None and services.limits.config is loaded.structured.limits
    assert services.model_ids == loaded.structured.model_ids
    assert services.mcp is not None and services.mcp.server_names == {"demo"}
    assert "units_convert" in services.tools.names
    choice = services.profiles.choose("chat_default", tenant_id="t1", user_id="u1")
    assert choice.profile.name == "chat_default_b"  # PROFILE_ROLLOUT's pin
    assert choice.profile.history_policy.n == 77  # WINDOW_N_OVERRIDE widens the window


def test_services_given_settings_alone_parse_them_once_when_made(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN settings made in code (tests, tools), with the text of each structured setting
    settings = Settings.from_env(ENV)
    # WHEN services are made from them, THEN they are parsed there, and building the providers parses nothing
    services = Services(settings)
    assert services.structured == load_settings(ApiSettings, ENV).structured
    calls = forbid_parsing(monkeypatch)
    build_every_provider_of_a_structured_setting(services)
    assert calls == []


WRONG = {"LIMITS": "{", "MODEL_PRICES": "[1]", "MCP_SERVERS": "{", "PROFILE_ROLLOUT": "[]", "WINDOW_N_OVERRIDE": "0"}


@pytest.mark.parametrize("variable", list(WRONG))
def test_services_given_a_wrong_setting_fail_when_made_not_on_first_use(variable: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Services(Settings.from_env({variable: WRONG[variable]}))
    assert variable in str(raised.value)
