"""Server tools as plugins (TOOL_PLUGINS): registered at start-up, duplicates and mistakes fail the start with a
clear error; every server tool's arguments are checked against its schema before its handler runs, under its
timeout and output cap. The example plugin, units_convert, lives outside shared/."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.errors import ConfigurationError
from shared.settings import Settings
from shared.tools.plugins import load_plugin, parse_plugin_paths
from shared.tools.registry import ToolContext
from shared.tools.runner import cap_output, run_tool
from shared.wiring import Services
from tests.support import plugins
from tool_plugins.units_convert import TOOL as UNITS

CTX = ToolContext("t", "u", "th", "r")


def services(tool_plugins: str) -> Services:
    return Services(Settings(tool_plugins=tool_plugins))


def test_plugins_named_in_settings_are_registered_next_to_the_built_in_tools() -> None:
    registry = services("tool_plugins.units_convert:TOOL, tests.support.plugins:make_pair").tools
    assert registry.names == {"get_current_time", "units_convert", "echo_a", "echo_b"}
    tool = registry.get("units_convert")
    assert tool is not None and tool.source == "plugin:tool_plugins.units_convert:TOOL"


def test_the_shipped_profiles_may_allow_a_plugin_tool() -> None:
    svc = services("tool_plugins.units_convert:TOOL")
    assert "units_convert" in svc.tools.names
    assert svc.profiles.get("chat_default")  # the catalog loads with the plugin's name known


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("tests.support.plugins:CLOCK_AGAIN", "'get_current_time' is registered twice (by builtin and by plugin:"),
        ("tests.support.plugins:PAIR,tests.support.plugins:make_pair", "'echo_a' is registered twice"),
        ("tests.support.plugins:RESERVED", "reserved for MCP servers"),
        ("tests.support.plugins:NOT_A_TOOL", "expected a ServerTool"),
        ("tests.support.plugins:MISSING", "has no attribute 'MISSING'"),
        ("no_such_package.tools:TOOL", "cannot import 'no_such_package.tools'"),
        ("tests.support.plugins", "use the form 'package.module:attribute'"),
    ],
    ids=[
        "duplicate-of-builtin",
        "duplicate-plugin",
        "reserved-prefix",
        "not-a-tool",
        "missing-attr",
        "no-module",
        "no-attribute",
    ],
)
def test_a_broken_or_duplicate_plugin_fails_the_start_with_a_clear_error(value: str, fragment: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        services(value).tools  # noqa: B018 - the registry is built at init
    assert fragment in str(err.value)


def test_plugin_paths_are_a_comma_separated_list() -> None:
    assert parse_plugin_paths(" a:b , ,c.d:e ") == ("a:b", "c.d:e")
    assert parse_plugin_paths(None) == ()


async def test_arguments_are_checked_against_the_schema_before_the_handler_runs() -> None:
    (echo, _) = load_plugin("tests.support.plugins:PAIR")
    plugins.CALLS.clear()
    result = json.loads(await run_tool(echo, '{"unexpected": 1}', CTX))
    assert result["error"]["code"] == "invalid_arguments"
    assert "unexpected" in result["error"]["message"]
    assert plugins.CALLS == []
    assert await run_tool(echo, "{}", CTX) == "ok" and plugins.CALLS == [{}]


async def test_a_slow_tool_is_stopped_at_its_timeout() -> None:
    (slow,) = load_plugin("tests.support.plugins:SLOW")
    result = json.loads(await run_tool(slow, "{}", CTX))
    assert result["error"]["code"] == "tool_timeout"


async def test_long_output_is_cut_at_the_tools_cap_and_marked() -> None:
    (chatty,) = load_plugin("tests.support.plugins:CHATTY")
    out = await run_tool(chatty, "{}", CTX)
    assert len(out) == 300 and out.endswith("[output truncated: 300 of 5000 characters]")
    assert cap_output("short", 300) == "short"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"value": 1, "from_unit": "km", "to_unit": "m"}, 1000.0),
        ({"value": 100, "from_unit": "C", "to_unit": "F"}, 212.0),
        ({"value": 1, "from_unit": "lb", "to_unit": "kg"}, 0.453592),
        ({"value": 12, "from_unit": "in", "to_unit": "ft"}, 1.0),
    ],
)
async def test_units_convert_converts(arguments: dict[str, Any], expected: float) -> None:
    result = json.loads(await run_tool(UNITS, json.dumps(arguments), CTX))
    assert result["result"] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"value": 1, "from_unit": "km", "to_unit": "kg"}, "tool_failed"),
        ({"value": 1, "from_unit": "km", "to_unit": "parsec"}, "invalid_arguments"),
        ({"value": "1", "from_unit": "km", "to_unit": "m"}, "invalid_arguments"),
        ({"value": 1, "from_unit": "km"}, "invalid_arguments"),
        ({"value": 1, "from_unit": "km", "to_unit": "m", "extra": True}, "invalid_arguments"),
    ],
    ids=["different-kinds", "unknown-unit", "string-value", "missing-field", "extra-field"],
)
async def test_units_convert_refuses_what_its_strict_schema_does_not_allow(
    arguments: dict[str, Any], code: str
) -> None:
    result = json.loads(await run_tool(UNITS, json.dumps(arguments), CTX))
    assert result["error"]["code"] == code


def test_the_app_does_not_start_with_a_duplicate_plugin() -> None:
    from functions.agent_api.app import create_app

    with pytest.raises(ConfigurationError, match="registered twice"):
        create_app(services("tests.support.plugins:CLOCK_AGAIN"))
