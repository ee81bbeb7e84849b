"""The memory function is sized to its worst batch, computed from template.yaml and the settings defaults.

Worst case of one batch: every record's memory run takes every model turn it may take, each turn every attempt the
client makes, each attempt the whole LLM timeout, and every record's title call (``shared.titles``) takes its whole
bound. The function's timeout must cover that plus the margin a run
keeps before its deadline and the store's overhead; the queue's visibility timeout must stay at least 6x the
function timeout plus the batching window, so SQS never redelivers a batch that is still being processed.
Reads the raw template (no SAM tools needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from shared.memory.executor import MAX_MODEL_TURNS
from shared.runs.execution import RUN_DEADLINE_MARGIN_S
from shared.settings import Settings
from shared.titles.job import TITLE_TIMEOUT_S

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
STORE_OVERHEAD_PER_RECORD_S = 10.0
"""Reads, writes and the idempotency record of one record, generously (each DynamoDB call is milliseconds)."""


class _CfnLoader(yaml.SafeLoader):
    """A YAML loader that keeps CloudFormation's short-form tags (``!Ref``, ``!GetAtt``, ...) as plain values."""


def _any_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node)}
    return {suffix: loader.construct_mapping(node)}  # type: ignore[arg-type]


_CfnLoader.add_multi_constructor("!", _any_tag)


def template() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(TEMPLATE.read_text(encoding="utf-8"), Loader=_CfnLoader)
    return loaded


def memory_function_settings(tpl: dict[str, Any]) -> Settings:
    """The settings the memory function runs with: Globals' variables, its own on top, the defaults beneath."""
    env: dict[str, str] = {}
    globals_env = tpl.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    own_env = tpl["Resources"]["MemoryFunction"]["Properties"].get("Environment", {}).get("Variables", {})
    for name, value in {**globals_env, **own_env}.items():
        if isinstance(value, str | int | float):
            env[name] = str(value)
    return Settings.from_env(env)


def test_the_memory_function_timeout_covers_its_worst_batch() -> None:
    tpl = template()
    function = tpl["Resources"]["MemoryFunction"]["Properties"]
    source = function["Events"]["RunCompleted"]["Properties"]
    settings = memory_function_settings(tpl)
    attempts = 1 + settings.llm_max_retries
    worst_run_s = MAX_MODEL_TURNS * attempts * settings.llm_timeout_s
    worst_record_s = worst_run_s + TITLE_TIMEOUT_S + STORE_OVERHEAD_PER_RECORD_S
    worst_batch_s = source["BatchSize"] * worst_record_s + RUN_DEADLINE_MARGIN_S
    assert worst_batch_s <= function["Timeout"], (worst_batch_s, function["Timeout"])
    # AND the timeout is not wildly larger than the work (a stuck batch would hold its records that long)
    assert function["Timeout"] <= 2 * worst_batch_s


def test_the_memory_queue_visibility_is_at_least_six_times_the_function_timeout() -> None:
    tpl = template()
    function = tpl["Resources"]["MemoryFunction"]["Properties"]
    source = function["Events"]["RunCompleted"]["Properties"]
    window = source.get("MaximumBatchingWindowInSeconds", 0)
    visibility = tpl["Resources"]["MemoryQueue"]["Properties"]["VisibilityTimeout"]
    assert visibility >= 6 * function["Timeout"] + window


def test_the_memory_function_settings_are_read_from_the_template() -> None:
    # The LLM settings the sizing relies on are the function's own, not only the defaults.
    settings = memory_function_settings(template())
    assert (settings.llm_timeout_s, settings.llm_max_retries) == (30.0, 1)


def test_the_memory_rule_routes_every_event_the_memory_handler_reads() -> None:
    """A detail type published for memory (run completed, branch switched) and missing from the rule would be
    dropped by EventBridge without a word: the rule's pattern is the publisher's list."""
    from shared.memory.trigger import EVENT_SOURCE, MEMORY_DETAIL_TYPES

    pattern = template()["Resources"]["RunCompletedRule"]["Properties"]["EventPattern"]
    assert pattern["source"] == [EVENT_SOURCE]
    assert tuple(pattern["detail-type"]) == MEMORY_DETAIL_TYPES
