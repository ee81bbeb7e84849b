"""Percentage ramps: a stable share of users moved to another profile, and how they combine with the pins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.errors import ConfigurationError
from shared.profiles import ProfileCatalog, load_catalog
from shared.rollouts import BUCKETS, bucket
from tests.support.profiles import KNOWN_TOOLS, chat_profile, memory_profile, write

USERS = [f"user-{i}" for i in range(1000)]


@pytest.fixture
def profiles_dir(tmp_path: Path) -> Path:
    trial = chat_profile("chat_trial", model={"name": "qwen3.5-flash"})
    other = chat_profile("chat_other", model={"name": "qwen3.5-plus"})
    return write(tmp_path, chat_profile(), trial, other, memory_profile())


def catalog_with(directory: Path, **rollout: Any) -> ProfileCatalog:
    return load_catalog(directory, known_tools=KNOWN_TOOLS, rollout_json=json.dumps(rollout))


def ramp(percent: float, rollout_id: str = "trial-1", to: str = "chat_trial", **more: Any) -> dict[str, Any]:
    return {"id": rollout_id, "from": "chat_default", "to": to, "percent": percent, **more}


def on_new_side(catalog: ProfileCatalog, tenant: str = "t1") -> set[str]:
    chosen = {user: catalog.choose("chat_default", tenant_id=tenant, user_id=user) for user in USERS}
    return {user for user, choice in chosen.items() if choice.rollout_side == "new"}


def test_a_30_percent_ramp_moves_about_30_percent_of_users_and_each_stays_on_one_side(profiles_dir: Path) -> None:
    # GIVEN a ramp of 30 % of every tenant's users from chat_default to chat_trial
    catalog = catalog_with(profiles_dir, ramps=[ramp(30)])
    # WHEN 1,000 users ask for chat_default, three times, the third time from a catalog built again
    first, second = on_new_side(catalog), on_new_side(catalog)
    third = on_new_side(catalog_with(profiles_dir, ramps=[ramp(30)]))
    # THEN between 25 % and 35 % of them get chat_trial, the same users every time
    assert 250 <= len(first) <= 350
    assert first == second == third
    # AND every run says which ramp and side served it, and the profile matches the side
    moved = catalog.choose("chat_default", tenant_id="t1", user_id=next(iter(first)))
    kept = catalog.choose("chat_default", tenant_id="t1", user_id=next(u for u in USERS if u not in first))
    assert (moved.profile.name, moved.rollout_id, moved.rollout_side) == ("chat_trial", "trial-1", "new")
    assert (kept.profile.name, kept.rollout_id, kept.rollout_side) == ("chat_default", "trial-1", "base")


def test_raising_the_percentage_only_adds_users_and_lowering_it_sends_exactly_them_back(profiles_dir: Path) -> None:
    # GIVEN the same ramp at 10 %, then 30 %, then 10 % again
    at_10, at_30 = (
        on_new_side(catalog_with(profiles_dir, ramps=[ramp(10)])),
        on_new_side(catalog_with(profiles_dir, ramps=[ramp(30)])),
    )
    back_to_10 = on_new_side(catalog_with(profiles_dir, ramps=[ramp(10)]))
    # THEN the users of the 10 % are among the 30 %, and going back restores exactly the first 10 %
    assert at_10 < at_30
    assert back_to_10 == at_10


def test_zero_and_hundred_percent_put_everyone_on_one_side_and_still_record_the_ramp(profiles_dir: Path) -> None:
    assert on_new_side(catalog_with(profiles_dir, ramps=[ramp(0)])) == set()
    assert on_new_side(catalog_with(profiles_dir, ramps=[ramp(100)])) == set(USERS)
    choice = catalog_with(profiles_dir, ramps=[ramp(0)]).choose("chat_default", tenant_id="t", user_id="u")
    assert (choice.profile.name, choice.rollout_id, choice.rollout_side) == ("chat_default", "trial-1", "base")


def test_two_ramps_split_users_independently(profiles_dir: Path) -> None:
    # GIVEN two 50 % ramps with different ids (for two tenants' users, so both can ramp chat_default)
    catalog = catalog_with(profiles_dir, ramps=[ramp(50, "ramp-a", tenants=["ta"]), ramp(50, "ramp-b", tenants=["tb"])])
    # WHEN the same user ids ask in each tenant
    a, b = on_new_side(catalog, "ta"), on_new_side(catalog, "tb")
    # THEN being moved by one ramp says nothing about the other: about a quarter are moved by both
    assert 180 <= len(a & b) <= 320


def test_a_tenants_own_ramp_wins_over_the_ramp_for_every_tenant(profiles_dir: Path) -> None:
    # GIVEN 100 % of acme's users to chat_other, and 0 % of everyone's to chat_trial
    catalog = catalog_with(
        profiles_dir, ramps=[ramp(0, "everyone"), ramp(100, "acme-only", to="chat_other", tenants=["acme"])]
    )
    # THEN acme's users follow acme's ramp, the other tenants' the general one
    acme = catalog.choose("chat_default", tenant_id="acme", user_id="u1")
    other = catalog.choose("chat_default", tenant_id="globex", user_id="u1")
    assert (acme.profile.name, acme.rollout_id) == ("chat_other", "acme-only")
    assert (other.profile.name, other.rollout_id) == ("chat_default", "everyone")


def test_a_tenant_pin_wins_over_a_ramp_and_records_no_ramp(profiles_dir: Path) -> None:
    # GIVEN everyone ramped to chat_trial, and tenant t-back pinned to chat_other
    catalog = catalog_with(profiles_dir, tenants={"t-back": {"chat_default": "chat_other"}}, ramps=[ramp(100)])
    # THEN t-back's users get the pinned profile, outside the ramp
    choice = catalog.choose("chat_default", tenant_id="t-back", user_id="u1")
    assert (choice.profile.name, choice.rollout_id, choice.rollout_side) == ("chat_other", None, None)


def test_without_a_user_no_ramp_applies(profiles_dir: Path) -> None:
    catalog = catalog_with(profiles_dir, ramps=[ramp(100)])
    assert catalog.choose("chat_default", tenant_id="t1").profile.name == "chat_default"
    assert catalog.resolve("chat_default", tenant_id="t1", user_id="u1").name == "chat_trial"


def test_the_window_override_applies_to_the_ramped_profile(profiles_dir: Path) -> None:
    catalog = load_catalog(
        profiles_dir, known_tools=KNOWN_TOOLS, rollout_json=json.dumps({"ramps": [ramp(100)]}), window_n_override=25
    )
    chosen = catalog.resolve("chat_default", tenant_id="t1", user_id="u1")
    assert (chosen.name, chosen.history_policy.n) == ("chat_trial", 25)


def test_the_bucket_is_the_documented_hash() -> None:
    import hashlib

    digest = hashlib.sha256(b"tenant/user/ramp").digest()
    assert bucket("tenant", "user", "ramp") == int.from_bytes(digest[:8], "big") % BUCKETS


MEMORY = "automation_memory_default"


@pytest.mark.parametrize(
    ("ramps", "expected"),
    [
        ([ramp(10, to="chat_missing")], "field 'ramps[0]': unknown profile(s) ['chat_missing']"),
        ([ramp(10, to=MEMORY)], f"field 'ramps[0]': '{MEMORY}' runs another executor than 'chat_default'"),
        ([ramp(10, to="chat_default")], "field 'ramps[0].to': a ramp to its own profile"),
        (
            [ramp(10), ramp(20, to="chat_other")],
            "field 'ramps[1].tenants': another ramp of 'chat_default' already covers every tenant",
        ),
        (
            [ramp(10, "a", tenants=["acme"]), ramp(20, "b", tenants=["acme"])],
            "field 'ramps[1].tenants': another ramp of 'chat_default' already covers tenant 'acme'",
        ),
        (
            [ramp(10, "same", tenants=["a"]), ramp(20, "same", tenants=["b"])],
            "field 'ramps[1].id': ramp id 'same' is used twice",
        ),
        ([ramp(100.5)], "field 'ramps[0].percent'"),
        ([ramp(10, "Not An Id")], "field 'ramps[0].id'"),
    ],
)
def test_a_ramp_that_cannot_work_is_a_configuration_error(
    profiles_dir: Path, ramps: list[dict[str, Any]], expected: str
) -> None:
    # WHEN the rules hold a ramp that names the wrong profiles, overlaps another or is malformed
    with pytest.raises(ConfigurationError) as caught:
        catalog_with(profiles_dir, ramps=ramps)
    # THEN the start fails, naming PROFILE_ROLLOUT and the field
    assert caught.value.code == "invalid_profile"
    assert f"PROFILE_ROLLOUT: {expected}" in caught.value.message
