"""Profiles and roll-outs as runtime configuration: a document deployed with AWS AppConfig, read while the functions
run, with the packaged profile files and the environment as the fallback and the defaults (docs/policy.md §1.5).

The document (its JSON Schema is generated from :class:`RuntimeConfigDocument`, ``infra/runtime-config.schema.json``,
and AppConfig checks every deployment against it)::

    {
      "profiles": [{...}, ...],             profiles added to the packaged ones (a packaged name cannot be redefined)
      "rollout": {"tenants": ..., "task_types": ..., "ramps": [...]},    replaces PROFILE_ROLLOUT when present
      "window_n_override": 25               replaces WINDOW_N_OVERRIDE when present (null: no override)
    }

Every key is optional, and ``{}`` is exactly the behaviour without runtime configuration.

:class:`LiveProfiles` is the profiles the services use when runtime configuration is on. It reads the document
from a :class:`~shared.ports.config.ConfigSource` at most once per poll interval, from inside the call that asks
for a profile (never in the background: Lambda freezes the environment between invocations), checks it with the
same checks as the packaged files, and only then swaps its catalog. A document that fails a check never replaces
a good one: the last good catalog stays, one structured error is logged and ``RuntimeConfigRejected`` counted per
bad document; a source that cannot be read keeps it too (``RuntimeConfigUnavailable``).
"""

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import ConfigurationError, RuntimeConfigUnavailable
from shared.observability import RUNTIME_CONFIG_REJECTED, RUNTIME_CONFIG_UNAVAILABLE, emit_runtime_config_problem
from shared.ports.config import ConfigSource
from shared.profile_problems import ProfileProblem, fail, raise_if_any
from shared.profiles import (
    ExecutionProfile,
    ProfileCatalog,
    ProfileChecks,
    ProfileChoice,
    build_catalog,
    parse_profiles,
)
from shared.rollouts import RolloutRules

logger = logging.getLogger(__name__)

SOURCE = "runtime configuration"
"""How problems of the document are named (``runtime configuration: profiles[0]: field 'model.name': ...``)."""

Refresh = Literal["applied", "unchanged", "rejected", "unavailable"]


class RuntimeConfigDocument(BaseModel):
    """The shape of the runtime configuration (the source of its JSON Schema; the checks are :func:`parse_document`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="Agent backend runtime configuration")

    profiles: list[ExecutionProfile] = []
    """Profiles added to the packaged ones, each as a profile file would hold it."""
    rollout: RolloutRules | None = None
    """Replaces ``PROFILE_ROLLOUT`` when present."""
    window_n_override: int | None = Field(default=None, ge=1)
    """Replaces ``WINDOW_N_OVERRIDE`` when present; ``null`` turns the override off."""


class CatalogBase(NamedTuple):
    """What every runtime configuration builds on: the packaged profiles, what they are checked against, and the
    environment's ``PROFILE_ROLLOUT`` and ``WINDOW_N_OVERRIDE``, used when the document has no value of its own."""

    profiles: Mapping[str, ExecutionProfile]
    checks: ProfileChecks
    rollout: RolloutRules | str | None = None
    """``PROFILE_ROLLOUT``'s rules (parsed when the settings loaded), or its JSON text."""
    window_n_override: int | None = None


def parse_document(content: bytes, base: CatalogBase) -> ProfileCatalog:
    """The catalog a runtime configuration document makes: the packaged profiles plus the document's, with the
    document's roll-out rules and window override where it has them and the environment's where it has not.

    Raises:
        ConfigurationError: listing every problem, each named ``runtime configuration: <field>``.
    """
    raw = _json_object(content)
    problems = [
        ProfileProblem(SOURCE, key, "unknown key", "use only: " + ", ".join(RuntimeConfigDocument.model_fields))
        for key in raw
        if key not in RuntimeConfigDocument.model_fields
    ]
    entries = raw.get("profiles", [])
    if not isinstance(entries, list):
        problems.append(ProfileProblem(SOURCE, "profiles", "not a list", "give the profiles as a JSON list"))
        entries = []
    added, found = parse_profiles(entries, source=f"{SOURCE}: profiles", checks=base.checks)
    problems += found
    problems += [
        ProfileProblem(
            f"{SOURCE}: profiles",
            name,
            "a packaged profile cannot be redefined",
            "give the changed profile a new name and move runs to it with a rollout rule or ramp",
        )
        for name in added
        if name in base.profiles
    ]
    window = raw.get("window_n_override") if "window_n_override" in raw else base.window_n_override
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)):
        problems.append(ProfileProblem(SOURCE, "window_n_override", f"{window!r} is not an integer", "use 25, or null"))
        window = None
    try:
        catalog = build_catalog(
            {**base.profiles, **added},
            rollout=raw["rollout"] if "rollout" in raw else base.rollout,
            window_n_override=window,
            rollout_source=f"{SOURCE}: rollout" if "rollout" in raw else "PROFILE_ROLLOUT",
            window_source=f"{SOURCE}: window_n_override" if "window_n_override" in raw else "WINDOW_N_OVERRIDE",
        )
    except ConfigurationError as exc:  # reported with the profiles' problems, all at once
        problems += [ProfileProblem(**problem) for problem in exc.details]
    raise_if_any(problems)
    return catalog


def _json_object(content: bytes) -> dict[str, Any]:
    try:
        raw = json.loads(content or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        fail([ProfileProblem(SOURCE, "(document)", f"invalid JSON: {exc}", "fix the JSON syntax")])
    if not isinstance(raw, dict):
        fail([ProfileProblem(SOURCE, "(document)", "not a JSON object", 'write one object, e.g. {"rollout": {...}}')])
    return raw


class LiveProfiles:
    """The profiles of the runtime configuration, as :class:`~shared.profiles.Profiles`: every call answers from
    the current catalog, read again from ``source`` when ``poll_interval_s`` has passed since the last read."""

    def __init__(
        self,
        source: ConfigSource,
        base: CatalogBase,
        *,
        fallback: ProfileCatalog,
        poll_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._base = base
        self._catalog = fallback
        self._poll_interval_s = poll_interval_s
        self._clock = clock
        self._next_poll = clock()
        self._seen: tuple[str, str] | None = None
        self._lock = threading.Lock()
        self.version = ""
        """The version of the configuration in use; empty while the packaged fallback is."""

    def catalog(self) -> ProfileCatalog:
        """The current catalog, read again first when the poll interval has passed (by one caller at a time)."""
        if self._clock() >= self._next_poll and self._lock.acquire(blocking=False):
            try:
                self.refresh()
            finally:
                self._lock.release()
        return self._catalog

    def refresh(self) -> Refresh:
        """Read the configuration now; apply it if it is new and passes every check."""
        self._next_poll = self._clock() + self._poll_interval_s
        try:
            document = self._source.fetch()
        except RuntimeConfigUnavailable as exc:
            logger.warning(
                "runtime configuration unavailable; the last good one stays",
                extra={"code": exc.code, "details": exc.details, "in_use": self.version or "packaged"},
            )
            emit_runtime_config_problem(RUNTIME_CONFIG_UNAVAILABLE, version=self.version)
            return "unavailable"
        seen = (document.version, hashlib.sha256(document.content).hexdigest())
        if seen == self._seen:
            return "unchanged"
        self._seen = seen
        try:
            catalog = parse_document(document.content, self._base)
        except ConfigurationError as exc:
            logger.error(
                "runtime configuration refused; the last good one stays",
                extra={"version": document.version, "in_use": self.version or "packaged", "problems": exc.details},
            )
            emit_runtime_config_problem(RUNTIME_CONFIG_REJECTED, version=document.version)
            return "rejected"
        self._catalog, self.version = catalog, document.version
        logger.info(
            "runtime configuration applied", extra={"version": document.version, "profiles": len(catalog.names)}
        )
        return "applied"

    # ---- Profiles ------------------------------------------------------------------------------------------

    @property
    def names(self) -> frozenset[str]:
        return self.catalog().names

    def __iter__(self) -> Iterator[ExecutionProfile]:
        return iter(self.catalog())

    def get(self, name: str) -> ExecutionProfile:
        return self.catalog().get(name)

    def choose(
        self, name: str, *, tenant_id: str, user_id: str | None = None, task_type: str | None = None
    ) -> ProfileChoice:
        return self.catalog().choose(name, tenant_id=tenant_id, user_id=user_id, task_type=task_type)

    def resolve(
        self, name: str, *, tenant_id: str, user_id: str | None = None, task_type: str | None = None
    ) -> ExecutionProfile:
        return self.choose(name, tenant_id=tenant_id, user_id=user_id, task_type=task_type).profile


def document_schema() -> dict[str, Any]:
    """The JSON Schema AppConfig checks every deployment against (draft-04, the draft AppConfig's validators use):
    pydantic's schema of :class:`RuntimeConfigDocument`, with the few newer keywords it writes spelled in draft-04."""
    schema = RuntimeConfigDocument.model_json_schema(by_alias=True)
    definitions = schema.pop("$defs", {})
    converted = _draft4(schema)
    converted["definitions"] = {name: _draft4(body) for name, body in sorted(definitions.items())}
    return {"$schema": "http://json-schema.org/draft-04/schema#", **converted}


def _draft4(node: Any) -> Any:
    """``$defs`` refs as ``definitions`` refs, ``const`` as a one-value ``enum``, a numeric exclusive bound as
    draft-04's boolean one, titles dropped (size)."""
    if isinstance(node, list):
        return [_draft4(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "$ref":
            out[key] = value.replace("#/$defs/", "#/definitions/")
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key in ("properties", "patternProperties"):
            out[key] = {name: _draft4(body) for name, body in value.items()}
        else:
            out[key] = _draft4(value)
    return out
