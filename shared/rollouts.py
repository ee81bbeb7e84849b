"""Roll-out rules: which profile a run that asks for one profile gets instead (docs/policy.md §1.4).

Three kinds of rule; the first that matches decides, and rules never chain (the target of a rule is used as it is):

1. **tenant pins** (``tenants``): every run of a tenant asking for profile A gets profile B;
2. **task-type pins** (``task_types``): the same for automation tasks of one task type;
3. **ramps** (``ramps``): a percentage of the users, of all tenants or of the tenants listed, get B instead of A.
   A ramp that lists the run's tenant wins over one for every tenant; two ramps of the same profile may not cover
   the same tenant.

A ramp puts a user on its new side when ``bucket(tenant, user, ramp id) < percent x 100``, where the bucket is
the first 8 bytes of ``sha256("<tenant>/<user>/<ramp id>")`` modulo 10,000. So, with no state anywhere:

- a user stays on one side on every call, in every process and every function, for as long as the ramp's id and
  percentage stay the same;
- raising the percentage only moves users from the base side to the new side (each user's bucket is fixed), and
  lowering it moves them back: going 10 % -> 30 % -> 10 % puts exactly the first 10 % back where they were;
- two ramps are independent (the id is hashed), so the users of one ramp's 10 % are not those of another's.

Nothing here reads the environment or knows where the rules came from (``PROFILE_ROLLOUT`` or the runtime
configuration document, ``shared.runtime_config``).
"""

import hashlib
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.models import ExecutorKind, RolloutSide
from shared.profile_problems import ProfileProblem, fail, loc, raise_if_any

BUCKETS = 10_000
"""Buckets of the ramp hash: a percentage has two decimals of resolution (0.01 % of users)."""

ROLLOUT_SHAPE = (
    'use {"tenants": {"<tenant>": {"<profile>": "<override>"}}, "task_types": {...}, '
    '"ramps": [{"id": "<id>", "from": "<profile>", "to": "<profile>", "percent": 10}]}'
)


class Ramp(BaseModel):
    """A percentage of users moved from one profile to another (per tenant or for every tenant)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    """Names the ramp in run metadata and metrics, and seeds its hash: a new id reshuffles who is on which side."""
    from_profile: str = Field(alias="from", min_length=1)
    to_profile: str = Field(alias="to", min_length=1)
    percent: float = Field(ge=0, le=100)
    """Share of the users on the new side, 0-100, two decimals (finer is rounded to 0.01 %)."""
    tenants: list[str] | None = Field(default=None, min_length=1)
    """Only these tenants' users; absent: the users of every tenant."""

    def threshold(self) -> int:
        return round(self.percent * BUCKETS / 100)


class RolloutRules(BaseModel):
    """Profile overrides by tenant and by automation task type, and percentage ramps.

    Shape: ``{"tenants": {tenant: {profile: override}}, "task_types": {task_type: {profile: override}},
    "ramps": [{"id", "from", "to", "percent", "tenants"?}]}``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenants: dict[str, dict[str, str]] = Field(default_factory=dict)
    task_types: dict[str, dict[str, str]] = Field(default_factory=dict)
    ramps: list[Ramp] = []

    def choose(
        self, name: str, *, tenant_id: str, user_id: str | None = None, task_type: str | None = None
    ) -> "RolloutChoice":
        """The profile a run of ``tenant_id`` / ``user_id`` (and automation ``task_type``) asking for ``name`` gets.

        Without a user no ramp applies (a ramp splits users)."""
        pinned = self.tenants.get(tenant_id, {}).get(name)
        if pinned is None and task_type is not None:
            pinned = self.task_types.get(task_type, {}).get(name)
        if pinned is not None:
            return RolloutChoice(pinned)
        ramp = self.ramp_for(name, tenant_id) if user_id is not None else None
        if ramp is None or user_id is None:
            return RolloutChoice(name)
        if bucket(tenant_id, user_id, ramp.id) < ramp.threshold():
            return RolloutChoice(ramp.to_profile, ramp.id, "new")
        return RolloutChoice(name, ramp.id, "base")

    def ramp_for(self, name: str, tenant_id: str) -> Ramp | None:
        """The ramp of profile ``name`` that covers ``tenant_id``: one naming the tenant, else one for everyone."""
        everyone: Ramp | None = None
        for ramp in self.ramps:
            if ramp.from_profile != name:
                continue
            if ramp.tenants is None:
                everyone = everyone or ramp
            elif tenant_id in ramp.tenants:
                return ramp
        return everyone


class RolloutChoice(NamedTuple):
    """What the rules chose: the profile's name, and the ramp and side when a ramp covered the run."""

    profile_name: str
    rollout_id: str | None = None
    side: RolloutSide | None = None


def bucket(tenant_id: str, user_id: str, rollout_id: str) -> int:
    """The user's fixed bucket, 0-9999, for one ramp."""
    digest = hashlib.sha256(f"{tenant_id}/{user_id}/{rollout_id}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


# ----------------------------------------------------------------------------------------------------------
# Parsing and validation against the profiles that exist
# ----------------------------------------------------------------------------------------------------------


def parse_rollout_shape(value: str | Mapping[str, Any] | None, *, source: str = "PROFILE_ROLLOUT") -> RolloutRules:
    """The rules of a ``PROFILE_ROLLOUT`` document, checked for their JSON and shape only (not yet against the
    profiles: :func:`parse_rollout` does both).

    Raises:
        ConfigurationError: listing every problem, each with its source, field and fix.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return RolloutRules()
    try:
        raw = json.loads(value) if isinstance(value, str) else value
        return RolloutRules.model_validate(raw)
    except ValidationError as exc:
        fail([ProfileProblem(source, loc(err["loc"]), err["msg"], ROLLOUT_SHAPE) for err in exc.errors()])
    except json.JSONDecodeError as exc:
        fail([ProfileProblem(source, "(document)", f"invalid JSON: {exc.msg}", "fix the JSON syntax")])


def parse_rollout(
    value: str | Mapping[str, Any] | None, executors: Mapping[str, ExecutorKind], *, source: str = "PROFILE_ROLLOUT"
) -> RolloutRules:
    """The rules of a ``PROFILE_ROLLOUT`` document (JSON text) or of an already parsed object, checked against
    ``executors`` (every profile's name and executor).

    Raises:
        ConfigurationError: listing every problem, each with its source, field and fix.
    """
    return check_rollout(parse_rollout_shape(value, source=source), executors, source=source)


def check_rollout(
    rules: RolloutRules, executors: Mapping[str, ExecutorKind], *, source: str = "PROFILE_ROLLOUT"
) -> RolloutRules:
    """``rules`` (already parsed) checked against ``executors`` (every profile's name and executor).

    Raises:
        ConfigurationError: listing every problem, each with its source, field and fix.
    """
    raise_if_any(_check_pins(rules, executors, source) + _check_ramps(rules, executors, source))
    return rules


def _check_pair(
    source: str, field: str, base: str, target: str, executors: Mapping[str, ExecutorKind]
) -> ProfileProblem | None:
    missing = [n for n in (base, target) if n not in executors]
    if missing:
        known = ", ".join(sorted(executors))
        return ProfileProblem(source, field, f"unknown profile(s) {missing}", "use one of: " + known)
    if executors[base] is not executors[target]:
        return ProfileProblem(
            source,
            field,
            f"{target!r} runs another executor than {base!r}",
            "override a profile only with one of the same executor",
        )
    return None


def _check_pins(rules: RolloutRules, executors: Mapping[str, ExecutorKind], source: str) -> list[ProfileProblem]:
    problems: list[ProfileProblem] = []
    for section, table in (("tenants", rules.tenants), ("task_types", rules.task_types)):
        for key, mapping in table.items():
            for base, target in mapping.items():
                problem = _check_pair(source, f"{section}.{key}.{base}", base, target, executors)
                if problem is not None:
                    problems.append(problem)
    return problems


def _check_ramps(rules: RolloutRules, executors: Mapping[str, ExecutorKind], source: str) -> list[ProfileProblem]:
    """Each ramp names two profiles of one executor; ids are unique; no two ramps of a profile cover one tenant."""
    problems: list[ProfileProblem] = []
    ids: set[str] = set()
    covered: set[tuple[str, str | None]] = set()
    for index, ramp in enumerate(rules.ramps):
        field = f"ramps[{index}]"
        pair = _check_pair(source, field, ramp.from_profile, ramp.to_profile, executors)
        if pair is not None:
            problems.append(pair)
        if ramp.from_profile == ramp.to_profile:
            problems.append(ProfileProblem(source, f"{field}.to", "a ramp to its own profile", "name another profile"))
        if ramp.id in ids:
            problems.append(ProfileProblem(source, f"{field}.id", f"ramp id {ramp.id!r} is used twice", "rename it"))
        ids.add(ramp.id)
        for tenant in ramp.tenants if ramp.tenants is not None else [None]:
            scope = (ramp.from_profile, tenant)
            if scope in covered:
                who = f"tenant {tenant!r}" if tenant is not None else "every tenant"
                problems.append(
                    ProfileProblem(
                        source,
                        f"{field}.tenants",
                        f"another ramp of {ramp.from_profile!r} already covers {who}",
                        "keep one ramp per profile and tenant (a tenant's own ramp wins over one for every tenant)",
                    )
                )
            covered.add(scope)
    return problems


def parse_window_override(value: int | str | None, *, source: str = "WINDOW_N_OVERRIDE") -> int | None:
    """``WINDOW_N_OVERRIDE`` as a positive integer; None when unset."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        parsed = int(value)
    except ValueError:
        parsed = 0
    if parsed < 1:
        fail(
            [
                ProfileProblem(
                    source,
                    "(value)",
                    f"{value!r} is not a positive integer",
                    "set a whole number of user messages such as 25, or unset it",
                )
            ]
        )
    return parsed
