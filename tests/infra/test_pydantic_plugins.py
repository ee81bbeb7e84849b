"""Every function runs with pydantic's plugins disabled, and disabling them loses nothing: none is installed.

Without ``PYDANTIC_DISABLE_PLUGINS`` pydantic reads the entry points of every installed distribution when the first
model class is built, i.e. during every cold start (docs/benchmarks.md, section 4). Reads the raw template (no SAM
tools needed).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from bench.cold_start import template_environment


def test_every_function_runs_with_pydantic_plugins_disabled() -> None:
    assert template_environment()["PYDANTIC_DISABLE_PLUGINS"] == "__all__"


def test_no_installed_distribution_provides_a_pydantic_plugin() -> None:
    assert list(entry_points(group="pydantic")) == []
