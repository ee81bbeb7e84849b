"""What is known about each logical model id that a profile may name: whether it can answer with thinking off.

A property of the models, not of the profiles: the profile checks (``shared.profiles.checks``) read it, and so
does the preflight (``shared.wiring``). Which id the provider is sent is deployment configuration
(``MODEL_ID_MAP``, ``shared.llm.model_ids``), not this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple


class ModelTraits(NamedTuple):
    """What the loader must know about a model id before a profile may use it."""

    thinking_off: bool
    """True when the model can answer without thinking (it has a switch, or never thinks)."""
    note: str = ""


KNOWN_MODELS: Mapping[str, ModelTraits] = {
    # Qwen3.5 hybrid models think by default and accept enable_thinking=false.
    "qwen3.5-30b-a3b": ModelTraits(
        True, "the design's id (docs/design.md §1); DashScope publishes this model as qwen3.5-35b-a3b"
    ),
    "qwen3.5-35b-a3b": ModelTraits(True),
    "qwen3.5-flash": ModelTraits(True),
    "qwen3.5-plus": ModelTraits(True),
    # Qwen3 hybrid models: same switch.
    "qwen3-30b-a3b": ModelTraits(True),
    "qwen3-32b": ModelTraits(True),
    "qwen3-235b-a22b": ModelTraits(True),
    "qwen-plus": ModelTraits(True),
    "qwen-flash": ModelTraits(True),
    "qwen-turbo": ModelTraits(True),
    # Instruct-only models never think.
    "qwen3-30b-a3b-instruct-2507": ModelTraits(True),
    "qwen3-235b-a22b-instruct-2507": ModelTraits(True),
    "deepseek-chat": ModelTraits(True, "the pre-refactor worker model"),
    # Thinking-only models cannot turn it off.
    "qwen3-30b-a3b-thinking-2507": ModelTraits(False),
    "qwen3-235b-a22b-thinking-2507": ModelTraits(False),
    "qwq-plus": ModelTraits(False),
    "deepseek-reasoner": ModelTraits(False),
}
"""What is known about logical model ids. The loader refuses a model listed here that cannot turn thinking off, and
accepts an id missing from the table with a warning (add a row when adding a model). Which id the provider is sent
is deployment configuration (``MODEL_ID_MAP``, shared.llm.model_ids), not this table."""
