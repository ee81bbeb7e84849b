"""The catalog of validated profiles, and the roll-out switches applied when a run asks for one (docs/design.md
§11): per-tenant and per-task-type overrides and percentage ramps (``PROFILE_ROLLOUT``, :mod:`shared.rollouts`),
and an emergency widening of N (``WINDOW_N_OVERRIDE``) for every ``last_n_user_messages`` profile."""

from collections.abc import Iterator, Mapping
from typing import NamedTuple, Protocol

from shared.errors import ConfigurationError
from shared.models import RolloutSide
from shared.profiles.schema import ExecutionProfile
from shared.rollouts import RolloutRules


class ProfileChoice(NamedTuple):
    """The profile a run must use, and the ramp and side that chose it (both None when no ramp covered the run)."""

    profile: ExecutionProfile
    rollout_id: str | None = None
    rollout_side: RolloutSide | None = None


class Profiles(Protocol):
    """What the services ask of the profiles: a :class:`ProfileCatalog`, or the runtime configuration's
    (``shared.runtime_config.LiveProfiles``), which swaps its catalog when the configuration changes."""

    @property
    def names(self) -> frozenset[str]: ...

    def __iter__(self) -> Iterator[ExecutionProfile]: ...

    def get(self, name: str) -> ExecutionProfile: ...

    def choose(
        self, name: str, *, tenant_id: str, user_id: str | None = None, task_type: str | None = None
    ) -> ProfileChoice: ...

    def resolve(
        self, name: str, *, tenant_id: str, user_id: str | None = None, task_type: str | None = None
    ) -> ExecutionProfile: ...


class ProfileCatalog:
    """The validated profiles plus the roll-out switches; :meth:`choose` is what a run should use."""

    def __init__(
        self,
        profiles: Mapping[str, ExecutionProfile],
        *,
        rollout: RolloutRules | None = None,
        window_n_override: int | None = None,
    ) -> None:
        self._profiles = dict(profiles)
        self._rollout = rollout or RolloutRules()
        self._window_n_override = window_n_override

    def __iter__(self) -> Iterator[ExecutionProfile]:
        return iter(self._profiles.values())

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._profiles)

    def get(self, name: str) -> ExecutionProfile:
        """The profile exactly as its file defines it, without roll-out switches."""
        try:
            return self._profiles[name]
        except KeyError:
            raise ConfigurationError(
                f"unknown execution profile {name!r}; known: {', '.join(sorted(self._profiles))}",
                code="unknown_profile",
            ) from None

    def choose(
        self, name: str, *, tenant_id: str, user_id: str | None = None, task_type: str | None = None
    ) -> ProfileChoice:
        """The profile a run of ``tenant_id`` / ``user_id`` (and automation ``task_type``) asking for ``name``
        must use, with the roll-out rules and the window override applied, and the ramp that chose it, if any."""
        rule = self._rollout.choose(name, tenant_id=tenant_id, user_id=user_id, task_type=task_type)
        profile = self.get(rule.profile_name)
        widen = self._window_n_override
        policy = profile.history_policy
        if widen is not None and policy.mode == "last_n_user_messages" and widen > policy.n:
            profile = profile.model_copy(update={"history_policy": policy.model_copy(update={"n": widen})})
        return ProfileChoice(profile, rule.rollout_id, rule.side)

    def resolve(
        self, name: str, *, tenant_id: str, user_id: str | None = None, task_type: str | None = None
    ) -> ExecutionProfile:
        """The profile of :meth:`choose`, without saying how it was chosen."""
        return self.choose(name, tenant_id=tenant_id, user_id=user_id, task_type=task_type).profile
