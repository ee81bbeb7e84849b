"""Runtime configuration on fakes: a document deployed to an in-memory source, read by LiveProfiles on a fake clock.

What is checked: ``{}`` is the packaged behaviour; a change is read once the poll interval has passed, never
before; a bad document never replaces a good one (structured error, one metric per bad document); an unreadable
source keeps the last good one; the document's switches replace the environment's only where it has them; the
committed JSON Schema is the models' and agrees with the loader; the wiring turns it on only when configured.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from devtools.runtime_config import VALIDATOR_CONTENT_LIMIT, check_document, stale_copies, validator_content
from shared.adapters.in_memory.config import InMemoryConfigSource
from shared.errors import ConfigurationError
from shared.profiles import ProfileCatalog, ProfileChecks, build_catalog, default_catalog, default_known_tools
from shared.runtime_config import CatalogBase, LiveProfiles, document_schema
from shared.wiring import ServiceOverrides, Services
from tests.support.settings import make_settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "infra" / "runtime-config.example.json"
POLL_S = 10.0
USERS = [f"user-{i}" for i in range(200)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def trial_profile(name: str = "chat_trial", **changes: Any) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "name": name,
        "executor": "worker",
        "model": {"name": "qwen3.5-plus", "thinking": "off"},
        "tool_policy": {"allowlist": ["get_current_time"]},
    }
    return {**profile, **changes}


def ramp_to(profile: str, percent: float = 100, rollout_id: str = "trial") -> dict[str, Any]:
    return {"ramps": [{"id": rollout_id, "from": "chat_default", "to": profile, "percent": percent}]}


def base(rollout_json: str | None = None, window: int | None = None) -> CatalogBase:
    packaged = {p.name: p for p in default_catalog()}
    return CatalogBase(packaged, ProfileChecks(default_known_tools()), rollout_json, window)


def live(source: InMemoryConfigSource, clock: Clock, catalog_base: CatalogBase | None = None) -> LiveProfiles:
    catalog_base = catalog_base or base()
    fallback = build_catalog(
        catalog_base.profiles, rollout=catalog_base.rollout, window_n_override=catalog_base.window_n_override
    )
    return LiveProfiles(source, catalog_base, fallback=fallback, poll_interval_s=POLL_S, clock=clock)


def chosen(profiles: Any, user: str = "user-1", tenant: str = "t1") -> str:
    return str(profiles.choose("chat_default", tenant_id=tenant, user_id=user).profile.name)


def emf(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


def test_an_empty_document_is_exactly_the_packaged_profiles() -> None:
    # GIVEN "{}" deployed (what the template deploys first), and the packaged catalog
    packaged = default_catalog()
    profiles = live(InMemoryConfigSource("{}"), Clock())
    # THEN every profile and every choice is the packaged one
    assert profiles.names == packaged.names
    assert list(profiles) == list(packaged)
    for name in packaged.names:
        assert profiles.choose(name, tenant_id="t", user_id="u") == packaged.choose(name, tenant_id="t", user_id="u")
    assert profiles.version == "1"


def test_a_change_is_read_once_the_poll_interval_has_passed_and_not_before() -> None:
    # GIVEN a running process that read a document adding chat_trial and ramping everyone to it
    source, clock = InMemoryConfigSource({"profiles": [trial_profile()], "rollout": ramp_to("chat_trial")}), Clock()
    profiles = live(source, clock)
    assert chosen(profiles) == "chat_trial"
    # WHEN the ramp is taken back to 0 % (the rollback) and many runs ask before the interval has passed
    source.deploy({"profiles": [trial_profile()], "rollout": ramp_to("chat_trial", percent=0)})
    clock.now += POLL_S - 0.1
    assert all(chosen(profiles, user) == "chat_trial" for user in USERS)
    # THEN the source was read once so far, and the first call after the interval reads and applies the change
    assert source.fetches == 1
    clock.now += 0.1
    assert chosen(profiles) == "chat_default"
    assert (source.fetches, profiles.version) == (2, "2")


BAD_DOCUMENTS = {
    "invalid JSON": ('{"rollout": ', "runtime configuration: field '(document)': invalid JSON"),
    "an unknown key": ({"rollouts": {}}, "runtime configuration: field 'rollouts': unknown key"),
    "an unknown tool": (
        {"profiles": [trial_profile(tool_policy={"allowlist": ["send_email"]})]},
        "runtime configuration: profiles[0]: field 'tool_policy.allowlist[0]': no tool named 'send_email'",
    ),
    "a thinking-only model": (
        {"profiles": [trial_profile(model={"name": "deepseek-reasoner"})]},
        "cannot turn thinking off",
    ),
    "a packaged profile redefined": (
        {"profiles": [trial_profile("chat_default")]},
        "field 'chat_default': a packaged profile cannot be redefined",
    ),
    "a ramp to a profile that does not exist": (
        {"rollout": ramp_to("chat_missing")},
        "runtime configuration: rollout: field 'ramps[0]': unknown profile(s) ['chat_missing']",
    ),
    "a window override that is not a number": ({"window_n_override": "25"}, "'25' is not an integer"),
}


@pytest.mark.parametrize("case", BAD_DOCUMENTS, ids=list(BAD_DOCUMENTS))
def test_a_bad_document_never_replaces_the_good_one(
    case: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    document, problem = BAD_DOCUMENTS[case]
    # GIVEN a process running a good document (everyone on chat_trial)
    source, clock = InMemoryConfigSource({"profiles": [trial_profile()], "rollout": ramp_to("chat_trial")}), Clock()
    profiles = live(source, clock)
    assert chosen(profiles) == "chat_trial"
    capsys.readouterr()
    # WHEN a bad document is deployed and read
    source.deploy(document)
    with caplog.at_level(logging.INFO, logger="shared.runtime_config"):
        outcome = profiles.refresh()
    # THEN it is refused, the good one stays in use, and the refusal is one structured error and one metric
    assert outcome == "rejected"
    assert chosen(profiles) == "chat_trial" and profiles.version == "1"
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    fields = vars(record)
    assert record.getMessage() == "runtime configuration refused; the last good one stays"
    assert (fields["version"], fields["in_use"]) == ("2", "1")
    assert any(problem in f"{p['source']}: field '{p['field']}': {p['problem']}" for p in fields["problems"])
    (metric,) = emf(capsys.readouterr().out)
    assert metric["RuntimeConfigRejected"] in (1, [1]) and metric["configuration_version"] == "2"
    # AND reading the same bad document again neither logs nor counts it again
    caplog.clear()
    assert profiles.refresh() == "unchanged"
    assert not caplog.records and not emf(capsys.readouterr().out)


def test_an_unreadable_source_keeps_the_last_good_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a process running a good document
    source, clock = InMemoryConfigSource({"profiles": [trial_profile()], "rollout": ramp_to("chat_trial")}), Clock()
    profiles = live(source, clock)
    assert chosen(profiles) == "chat_trial"
    capsys.readouterr()
    # WHEN the source cannot be read at the next poll
    source.go_down()
    clock.now += POLL_S
    # THEN runs keep the last good configuration, and RuntimeConfigUnavailable is counted
    assert chosen(profiles) == "chat_trial"
    (metric,) = emf(capsys.readouterr().out)
    assert metric["RuntimeConfigUnavailable"] in (1, [1])


def test_a_source_unreadable_from_the_start_leaves_the_packaged_profiles() -> None:
    source = InMemoryConfigSource()
    profiles = live(source, Clock())
    assert chosen(profiles) == "chat_default" and profiles.version == ""


def test_the_documents_switches_replace_the_environments_only_where_it_has_them() -> None:
    # GIVEN the environment pins tenant t1 to chat_legacy_deepseek and widens N to 30
    env_rollout = json.dumps({"tenants": {"t1": {"chat_default": "chat_legacy_deepseek"}}})
    source, clock = InMemoryConfigSource("{}"), Clock()
    profiles = live(source, clock, base(env_rollout, 30))
    packaged_n = default_catalog().get("chat_cache_blocks").history_policy.n
    # THEN a document without those keys keeps both
    assert chosen(profiles) == "chat_legacy_deepseek"
    assert profiles.resolve("chat_cache_blocks", tenant_id="t1").history_policy.n == max(30, packaged_n)
    # AND one whose rollout is empty, with no window override, drops both
    source.deploy({"rollout": {}, "window_n_override": None})
    assert profiles.refresh() == "applied"
    assert chosen(profiles) == "chat_default"
    assert profiles.resolve("chat_cache_blocks", tenant_id="t1").history_policy.n == packaged_n


# ----------------------------------------------------------------------------------------------------------
# The JSON Schema AppConfig checks before a deployment
# ----------------------------------------------------------------------------------------------------------


def test_the_committed_schema_is_the_one_the_models_generate() -> None:
    # the file in infra/ and the validator in template.yaml (python -m devtools.runtime_config schema --write)
    assert stale_copies() == []
    assert len(validator_content()) < VALIDATOR_CONTENT_LIMIT


def test_the_example_document_passes_the_schema_and_every_check_the_functions_make() -> None:
    document = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(document_schema()).validate(document)
    assert check_document(EXAMPLE.read_bytes(), make_settings()) == []


@pytest.mark.parametrize(
    "document",
    [
        {"rollout": ramp_to("chat_trial", percent=101)},
        {"rollout": {"ramps": [{"id": "r", "from": "chat_default", "to": "x", "percent": 5, "extra": 1}]}},
        {"profiles": [trial_profile(executor="router")]},
        {"profiles": [trial_profile(history_policy={"n": 0})]},
        {"window_n_override": 0},
        {"window_n_override": True},
        {"rollouts": {}},
        [],
    ],
)
def test_the_schema_refuses_what_the_loader_refuses_before_anything_is_deployed(document: Any) -> None:
    # GIVEN a document whose shape is wrong WHEN AppConfig validates it THEN it is refused, and so would it be here
    assert list(jsonschema.Draft4Validator(document_schema()).iter_errors(document))
    profiles = live(InMemoryConfigSource(json.dumps(document)), Clock())
    assert profiles.refresh() == "rejected" and profiles.version == ""


# ----------------------------------------------------------------------------------------------------------
# Wiring: on only when configured
# ----------------------------------------------------------------------------------------------------------


def test_without_appconfig_settings_the_profiles_are_the_packaged_catalog_as_before() -> None:
    services = Services(make_settings())
    assert services.runtime_config is None
    assert isinstance(services.profiles, ProfileCatalog)


def test_with_a_source_the_profiles_follow_the_runtime_configuration() -> None:
    source = InMemoryConfigSource({"profiles": [trial_profile()], "rollout": ramp_to("chat_trial")})
    services = Services(make_settings(), overrides=ServiceOverrides(runtime_config=source))
    assert isinstance(services.profiles, LiveProfiles)
    assert chosen(services.profiles) == "chat_trial"


def test_a_partial_appconfig_setting_stops_the_start() -> None:
    services = Services(make_settings(appconfig_application="app", appconfig_profile="runtime"))
    with pytest.raises(ConfigurationError, match="set together or not at all"):
        _ = services.profiles
