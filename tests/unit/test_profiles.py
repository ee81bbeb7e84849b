"""Execution profiles: loading, validation errors that name file/field/fix, legacy fields and roll-out switches."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from shared.errors import ConfigurationError
from shared.models import ExecutorKind
from shared.profiles import PROFILES_DIR, default_catalog, load_catalog
from tests.support.profiles import KNOWN_TOOLS, chat_profile, memory_profile, write


def load_error(directory: Path, **kwargs: Any) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as caught:
        load_catalog(directory, known_tools=KNOWN_TOOLS, **kwargs)
    return caught.value


# ----------------------------------------------------------------------------------------------------------
# The shipped profiles
# ----------------------------------------------------------------------------------------------------------


def test_shipped_profiles_load_and_match_the_design_document() -> None:
    catalog = default_catalog()

    chat = catalog.get("chat_default")
    assert chat.executor is ExecutorKind.WORKER
    assert (chat.model.name, chat.model.thinking) == ("qwen3.5-30b-a3b", "off")
    assert chat.history_policy.mode == "last_n_user_messages"
    assert chat.history_policy.n == 20
    assert chat.history_policy.block_size is None  # the design's exact rule (design §10.3)
    assert chat.history_policy.include_current_user_message is True
    assert chat.tool_policy.frontend_allowlist == ["*"]  # what the client declares (docs/policy.md §3.4)
    blocks = catalog.get("chat_cache_blocks")  # the cache-friendly window, chosen per tenant by roll-out
    assert (blocks.history_policy.n, blocks.history_policy.block_size) == (20, 20)
    assert blocks.model == chat.model and blocks.tool_policy == chat.tool_policy

    memory = catalog.get("automation_memory_default")
    assert memory.executor is ExecutorKind.MEMORY
    assert (memory.model.name, memory.model.thinking) == ("qwen3.5-flash", "off")
    assert memory.tool_policy.allowlist == ["memory_write", "memory_forget"]


def test_shipped_profiles_live_inside_the_package_so_they_ship_with_the_code() -> None:
    assert PROFILES_DIR.parent.name == "shared"
    assert {p.stem for p in PROFILES_DIR.glob("*.json")} >= {
        "chat_default",
        "automation_memory_default",
        "chat_legacy_deepseek",
    }


def test_legacy_rollback_profile_uses_the_previous_model_and_today_yesterday() -> None:
    legacy = default_catalog().get("chat_legacy_deepseek")
    assert legacy.model.name == "deepseek-chat"
    assert legacy.history_policy.mode == "today_yesterday"


# ----------------------------------------------------------------------------------------------------------
# One clear error per kind of bad profile
# ----------------------------------------------------------------------------------------------------------


def test_unknown_executor_names_file_field_and_the_allowed_values(tmp_path: Path) -> None:
    # GIVEN a profile asking for the retired router executor
    write(tmp_path, chat_profile(executor="router"))
    # WHEN the catalog loads THEN the error names the file, the field and the fix
    error = load_error(tmp_path)
    assert "chat_default.json: field 'executor'" in error.message
    assert "Fix: use one of: worker, memory" in error.message


def test_n_below_one_is_refused_with_the_field_path(tmp_path: Path) -> None:
    write(tmp_path, chat_profile(history_policy={"mode": "last_n_user_messages", "n": 0}))
    error = load_error(tmp_path)
    assert "chat_default.json: field 'history_policy.n'" in error.message
    assert "Fix: use an integer >= 1" in error.message


def test_memory_policy_values_are_validated_with_field_and_fix(tmp_path: Path) -> None:
    # GIVEN a memory profile whose quiet period is longer than an SQS delay can be, and a zero message limit
    write(tmp_path, memory_profile(memory_policy={"idle_s": 3600, "max_pending_user_messages": 0}))
    # WHEN the catalog loads THEN both fields are named, each with its fix
    error = load_error(tmp_path)
    assert "automation_memory_default.json: field 'memory_policy.idle_s'" in error.message
    assert "Fix: use an integer <= 900 (SQS DelaySeconds cannot exceed 900)" in error.message
    assert "field 'memory_policy.max_pending_user_messages'" in error.message
    assert "Fix: use an integer >= 1" in error.message


def test_memory_policy_misspelt_field_is_refused(tmp_path: Path) -> None:
    write(tmp_path, memory_profile(memory_policy={"idle_seconds": 60}))
    error = load_error(tmp_path)
    assert "field 'memory_policy.idle_seconds'" in error.message


def test_shipped_memory_profile_coalesces_after_120_s_or_6_user_messages() -> None:
    policy = default_catalog().get("automation_memory_default").memory_policy
    assert (policy.idle_s, policy.max_pending_user_messages) == (120, 6)


def test_allowlist_naming_a_tool_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    write(tmp_path, chat_profile(tool_policy={"allowlist": ["get_current_time", "send_email"]}))
    error = load_error(tmp_path)
    assert "chat_default.json: field 'tool_policy.allowlist[1]': no tool named 'send_email'" in error.message
    assert "Fix: remove it or use one of: get_current_time" in error.message


def test_model_that_cannot_turn_thinking_off_is_refused(tmp_path: Path) -> None:
    write(tmp_path, chat_profile(model={"name": "deepseek-reasoner", "thinking": "off"}))
    error = load_error(tmp_path)
    assert "field 'model.name': model 'deepseek-reasoner' cannot turn thinking off" in error.message
    assert "Fix: choose a model that supports thinking off" in error.message


def test_thinking_on_is_refused_for_worker_and_memory(tmp_path: Path) -> None:
    write(tmp_path, memory_profile(model={"name": "qwen3.5-flash", "thinking": "on"}))
    error = load_error(tmp_path)
    assert "automation_memory_default.json: field 'model.thinking'" in error.message
    assert 'Fix: set "thinking": "off"' in error.message


def test_unknown_model_id_is_accepted_with_a_warning_that_says_where_to_add_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a profile naming a model the built-in table has never heard of
    write(tmp_path, chat_profile(model={"name": "gpt-imaginary"}))
    # WHEN the catalog loads
    with caplog.at_level(logging.WARNING, logger="shared.profiles"):
        catalog = load_catalog(tmp_path, known_tools=KNOWN_TOOLS)
    # THEN the profile is there with its model, and one warning names the file, the id and the fix
    assert catalog.get("chat_default").model.name == "gpt-imaginary"
    [record] = [r for r in caplog.records if "does not know" in r.getMessage()]
    assert (record.__dict__["model"], record.__dict__["profile_file"]) == ("gpt-imaginary", "chat_default.json")
    assert "KNOWN_MODELS" in record.__dict__["fix"]


def test_memory_profile_may_only_allow_memory_tools(tmp_path: Path) -> None:
    write(tmp_path, memory_profile(tool_policy={"allowlist": ["memory_write", "get_current_time"]}))
    error = load_error(tmp_path)
    assert "field 'tool_policy.allowlist[1]': memory profiles may not allow 'get_current_time'" in error.message


def test_misspelt_field_is_refused_rather_than_silently_ignored(tmp_path: Path) -> None:
    write(tmp_path, chat_profile(history_polcy={"n": 20}))
    error = load_error(tmp_path)
    assert "field 'history_polcy'" in error.message
    assert "Fix: remove the field or correct its spelling" in error.message


def test_invalid_json_names_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "chat_default.json").write_text('{"name": "chat_default",\n  "executor": }', encoding="utf-8")
    error = load_error(tmp_path)
    assert "chat_default.json: field '(document)': invalid JSON at line 2" in error.message


def test_file_name_must_match_profile_name(tmp_path: Path) -> None:
    (tmp_path / "chat.json").write_text(json.dumps(chat_profile()), encoding="utf-8")
    error = load_error(tmp_path)
    assert "chat.json: field 'name'" in error.message
    assert "rename the file to chat_default.json" in error.message


def test_every_problem_of_every_file_is_reported_at_once(tmp_path: Path) -> None:
    write(tmp_path, chat_profile(executor="router"), memory_profile(history_policy={"n": -1}))
    error = load_error(tmp_path)
    fields = {(d["source"], d["field"]) for d in error.details}
    assert fields == {("chat_default.json", "executor"), ("automation_memory_default.json", "history_policy.n")}
    assert error.code == "invalid_profile"


# ----------------------------------------------------------------------------------------------------------
# Legacy enable_router
# ----------------------------------------------------------------------------------------------------------


def test_enable_router_profiles_load_and_log_one_structured_deprecation_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN two legacy profiles and one new one
    write(tmp_path, chat_profile(enable_router=True), chat_profile("chat_b", enable_router=False), memory_profile())
    # WHEN the catalog loads
    with caplog.at_level(logging.WARNING, logger="shared.profiles"):
        catalog = load_catalog(tmp_path, known_tools=KNOWN_TOOLS)
    # THEN both legacy profiles load, with exactly one structured line each
    assert catalog.get("chat_default").executor is ExecutorKind.WORKER
    records = [r for r in caplog.records if getattr(r, "field", None) == "enable_router"]
    assert sorted(r.__dict__["profile"] for r in records) == ["chat_b", "chat_default"]
    assert all(r.__dict__["profile_file"].endswith(".json") for r in records)


def test_enable_router_is_ignored_for_execution_and_never_written_back(tmp_path: Path) -> None:
    write(tmp_path, chat_profile(enable_router=True), memory_profile())
    profile = load_catalog(tmp_path, known_tools=KNOWN_TOOLS).resolve("chat_default", tenant_id="t1")
    assert profile.executor is ExecutorKind.WORKER
    assert "enable_router" not in profile.model_dump()
    assert "enable_router" not in profile.model_dump_json()


# ----------------------------------------------------------------------------------------------------------
# Roll-out and rollback switches
# ----------------------------------------------------------------------------------------------------------


@pytest.fixture
def rollout_dir(tmp_path: Path) -> Path:
    previous = chat_profile(
        "chat_previous", model={"name": "deepseek-chat"}, history_policy={"mode": "today_yesterday"}
    )
    canary = chat_profile("chat_canary", model={"name": "qwen3.5-35b-a3b"})
    return write(tmp_path, chat_profile(), previous, canary, memory_profile())


def test_tenant_override_sends_one_tenant_back_to_the_previous_model(rollout_dir: Path) -> None:
    rollout = json.dumps({"tenants": {"t-rollback": {"chat_default": "chat_previous"}}})
    catalog = load_catalog(rollout_dir, known_tools=KNOWN_TOOLS, rollout_json=rollout)

    assert catalog.resolve("chat_default", tenant_id="t-rollback").model.name == "deepseek-chat"
    assert catalog.resolve("chat_default", tenant_id="t-other").model.name == "qwen3.5-30b-a3b"


def test_task_type_override_applies_to_that_task_type_only(rollout_dir: Path) -> None:
    rollout = json.dumps({"task_types": {"daily_digest": {"chat_default": "chat_canary"}}})
    catalog = load_catalog(rollout_dir, known_tools=KNOWN_TOOLS, rollout_json=rollout)

    assert catalog.resolve("chat_default", tenant_id="t", task_type="daily_digest").name == "chat_canary"
    assert catalog.resolve("chat_default", tenant_id="t", task_type="other").name == "chat_default"
    assert catalog.resolve("chat_default", tenant_id="t").name == "chat_default"


def test_tenant_override_wins_over_task_type_override(rollout_dir: Path) -> None:
    rollout = json.dumps(
        {
            "tenants": {"t1": {"chat_default": "chat_previous"}},
            "task_types": {"digest": {"chat_default": "chat_canary"}},
        }
    )
    catalog = load_catalog(rollout_dir, known_tools=KNOWN_TOOLS, rollout_json=rollout)
    assert catalog.resolve("chat_default", tenant_id="t1", task_type="digest").name == "chat_previous"


def test_rollout_naming_an_unknown_profile_is_a_configuration_error(rollout_dir: Path) -> None:
    rollout = json.dumps({"tenants": {"t1": {"chat_default": "chat_missing"}}})
    error = load_error(rollout_dir, rollout_json=rollout)
    assert "PROFILE_ROLLOUT: field 'tenants.t1.chat_default': unknown profile(s) ['chat_missing']" in error.message


def test_rollout_may_not_switch_the_executor(rollout_dir: Path) -> None:
    rollout = json.dumps({"tenants": {"t1": {"chat_default": "automation_memory_default"}}})
    error = load_error(rollout_dir, rollout_json=rollout)
    assert "Fix: override a profile only with one of the same executor" in error.message


def test_malformed_rollout_document_is_a_configuration_error(rollout_dir: Path) -> None:
    error = load_error(rollout_dir, rollout_json='{"tenant": {}}')
    assert error.message.startswith("invalid execution profile configuration:\nPROFILE_ROLLOUT")


def test_window_override_widens_n_for_last_n_profiles_only(rollout_dir: Path) -> None:
    catalog = load_catalog(rollout_dir, known_tools=KNOWN_TOOLS, window_n_override="25")

    assert catalog.resolve("chat_default", tenant_id="t").history_policy.n == 25
    assert catalog.get("chat_default").history_policy.n == 20, "get() shows the file as written"
    assert catalog.resolve("chat_previous", tenant_id="t").history_policy.mode == "today_yesterday"


def test_window_override_never_narrows(rollout_dir: Path) -> None:
    catalog = load_catalog(rollout_dir, known_tools=KNOWN_TOOLS, window_n_override=10)
    assert catalog.resolve("chat_default", tenant_id="t").history_policy.n == 20


def test_window_override_applies_after_a_rollout_override(rollout_dir: Path) -> None:
    rollout = json.dumps({"tenants": {"t1": {"chat_default": "chat_canary"}}})
    catalog = load_catalog(rollout_dir, known_tools=KNOWN_TOOLS, rollout_json=rollout, window_n_override=25)
    resolved = catalog.resolve("chat_default", tenant_id="t1")
    assert (resolved.name, resolved.history_policy.n) == ("chat_canary", 25)


@pytest.mark.parametrize("value", ["0", "-3", "twenty"])
def test_invalid_window_override_is_a_configuration_error(rollout_dir: Path, value: str) -> None:
    error = load_error(rollout_dir, window_n_override=value)
    assert "WINDOW_N_OVERRIDE" in error.message
    assert "Fix: set a whole number of user messages" in error.message


def test_unknown_profile_name_at_resolve_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="unknown execution profile 'nope'") as caught:
        default_catalog().resolve("nope", tenant_id="t")
    assert caught.value.code == "unknown_profile"
