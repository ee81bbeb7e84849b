"""Each function's settings: only the groups it reads, read once from the environment, its JSON settings parsed at
load; a wrong value is one start-up error that names the variable (shared/settings.py, shared/wiring/settings.py)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.errors import ConfigurationError
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
)
from shared.wiring import LambdaFunction, ServiceOverrides, Services
from shared.wiring.settings import (
    FUNCTION_SETTINGS,
    ApiSettings,
    AutomationFunctionSettings,
    MemoryFunctionSettings,
    MigrateSettings,
    SweeperSettings,
    WebhookFunctionSettings,
    load_settings,
)

COMMON = (ProcessSettings, TracingSettings, TableSettings)
RUN_PATH = (*COMMON, StreamSettings, ModelSettings, CatalogSettings, RunSettings)
GROUPS: dict[type[SettingsGroup], tuple[type[SettingsGroup], ...]] = {
    ApiSettings: (
        *RUN_PATH,
        AuthSettings,
        TenancySettings,
        HttpSettings,
        SchedulerSettings,
        AttachmentSettings,
        WebhookSettings,
    ),
    MemoryFunctionSettings: (*RUN_PATH, MemorySettings, TenancySettings),
    AutomationFunctionSettings: (*RUN_PATH, MemorySettings, AttachmentSettings, TenancySettings),
    SweeperSettings: (*COMMON, StreamSettings, RunSettings),
    MigrateSettings: (*COMMON, MigrationSettings),
    WebhookFunctionSettings: (*COMMON, WebhookSettings),
}

WRONG_JSON = {
    "LIMITS": '{"user": ',
    "MODEL_PRICES": "[1, 2]",
    "MODEL_ID_MAP": '{"worker": 3}',
    "MCP_SERVERS": "{not json",
    "PROFILE_ROLLOUT": '{"ramps": "all"}',
    "WINDOW_N_OVERRIDE": "0",
}
"""A wrong value of each structured setting."""

HOLDERS = {
    "LIMITS": (ApiSettings, MemoryFunctionSettings, AutomationFunctionSettings, SweeperSettings),
    "MODEL_PRICES": (ApiSettings,),
    "MODEL_ID_MAP": (ApiSettings, MemoryFunctionSettings, AutomationFunctionSettings),
    "MCP_SERVERS": (ApiSettings, MemoryFunctionSettings, AutomationFunctionSettings),
    "PROFILE_ROLLOUT": (ApiSettings, MemoryFunctionSettings, AutomationFunctionSettings),
    "WINDOW_N_OVERRIDE": (ApiSettings, MemoryFunctionSettings, AutomationFunctionSettings),
}
"""The functions whose settings hold each structured setting."""


@pytest.mark.parametrize("model", list(GROUPS), ids=lambda model: model.__name__)
def test_each_functions_model_holds_only_the_fields_of_its_groups(model: type[SettingsGroup]) -> None:
    # GIVEN the groups a function reads
    expected = {name for group in GROUPS[model] for name in group.model_fields}
    # THEN its model has exactly their fields, and fewer than every setting (except none: each leaves some out)
    assert set(model.model_fields) == expected
    assert set(model.model_fields) < set(Settings.model_fields)


@pytest.mark.parametrize(
    ("variable", "model"),
    [(variable, model) for variable, models in HOLDERS.items() for model in models],
    ids=lambda value: value if isinstance(value, str) else value.__name__,
)
def test_a_wrong_json_setting_is_one_start_up_error_naming_it(variable: str, model: type[SettingsGroup]) -> None:
    # WHEN a function's settings load with a wrong value of one structured setting
    with pytest.raises(ConfigurationError) as raised:
        load_settings(model, {variable: WRONG_JSON[variable]})
    # THEN one ConfigurationError names the variable
    assert variable in str(raised.value)


@pytest.mark.parametrize("variable", list(WRONG_JSON))
def test_a_setting_a_function_does_not_read_cannot_stop_it(variable: str) -> None:
    # GIVEN the migration function, which reads none of the structured settings
    assert variable.lower() not in MigrateSettings.model_fields
    # WHEN its settings load with a wrong value of one of them, THEN it starts
    settings, structured = load_settings(MigrateSettings, {variable: WRONG_JSON[variable], "MIGRATION_SEGMENTS": "8"})
    assert settings.migration_segments == 8
    assert (structured.limits, structured.mcp_servers, structured.window_n_override) == (None, {}, None)


def test_a_wrong_plain_value_names_each_variable_in_one_error() -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_settings(ApiSettings, {"RUN_LEASE_S": "-1", "MAX_BODY_BYTES": "big", "AUTH_MODE": "none"})
    message = str(raised.value)
    assert "RUN_LEASE_S" in message
    assert "MAX_BODY_BYTES" in message
    assert "AUTH_MODE" in message


def test_settings_are_read_by_the_variable_names_of_the_template() -> None:
    settings, structured = load_settings(
        ApiSettings,
        {
            "TABLE_NAME": "t",
            "AWS_DEFAULT_REGION": "eu-west-1",
            "CORS_ALLOWED_ORIGINS": "https://a.example, https://b.example",
            "REDIS_CLUSTER_MODE": "true",
            "WINDOW_N_OVERRIDE": "25",
            "LIMITS": '{"user": {"concurrentRuns": 5}}',
            "AWS_LAMBDA_FUNCTION_NAME": "api",
            "LLM_TIMEOUT_S": " ",
        },
    )
    assert (settings.table_name, settings.aws_region, settings.redis_cluster_mode) == ("t", "eu-west-1", True)
    assert settings.cors_allowed_origins == ("https://a.example", "https://b.example")
    assert (settings.window_n_override, settings.lambda_function_name) == (25, "api")
    assert settings.limits == '{"user": {"concurrentRuns": 5}}'
    assert structured.limits is not None and structured.limits.user.concurrent_runs == 5
    assert structured.window_n_override == 25
    assert settings.llm_timeout_s == 60.0  # blank is unset


def test_aws_region_wins_over_the_default_region() -> None:
    env = {"AWS_REGION": "eu-central-1", "AWS_DEFAULT_REGION": "us-west-2"}
    assert load_settings(ApiSettings, env).settings.aws_region == "eu-central-1"


@pytest.mark.parametrize("function", list(FUNCTION_SETTINGS))
def test_a_functions_start_up_reads_only_the_settings_of_its_own_model(function: LambdaFunction) -> None:
    # GIVEN every setting, recording each read of one that the function's own model does not hold (and so is
    # only ever at its default in that function)
    own = set(FUNCTION_SETTINGS[function].model_fields)
    foreign: set[str] = set()

    class Recording(Settings):
        def __getattribute__(self, name: str) -> Any:
            if name in Settings.model_fields and name not in own:
                foreign.add(name)
            return super().__getattribute__(name)

    overrides = ServiceOverrides(store=InMemoryStore(), stream=InMemoryEventStream())
    structured = load_settings(FUNCTION_SETTINGS[function], {}).structured
    services = Services(Recording(), overrides=overrides, structured=structured)
    # WHEN the function's services are built as its INIT builds them
    built = services.warm_up(function)
    # THEN the run path was built, and no provider read a setting of another function's groups
    assert {"profiles", "runs", "worker"} <= set(built)
    assert foreign == set()
