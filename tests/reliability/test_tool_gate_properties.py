"""The tool gate's property over many generated cases: nothing outside the intersection (plus the admitted
front-end tools) is ever allowed, and every decision is audited. 10,000 seeded cases and 1,000 hypothesis cases
take seconds, so they live here and the unit tier keeps one named test per rule (tests/unit/test_tool_gate.py)."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.tool_gate import ToolGate, frontend_allowed
from tests.support.gate_cases import (
    CLIENT_POOL,
    CONTROLS,
    CTX,
    FRONTEND_PATTERNS,
    HOMOGLYPHS,
    INVISIBLES,
    NAMES,
    PADDING,
    POOL,
    SETS,
    assert_complete_audit,
    client_specs,
    fullwidth,
    lookalike,
    profile,
    registry,
)

# ----------------------------------------------------------------------------------------------------------
# Property: over 10,000 generated cases nothing outside the intersection is allowed, and every refusal is audited
# ----------------------------------------------------------------------------------------------------------


def check_case(
    system: frozenset[str],
    allowlist: list[str] | None,
    declared: frozenset[str] | None,
    calls: list[tuple[str, str]],
    seen: dict[str, int],
    client: frozenset[str] = frozenset(),
    patterns: list[str] | None = None,
) -> None:
    """One generated case: the offered tools are the intersection plus the allowed client tools that shadow no
    server tool, and each call is decided and audited. "Escapes" counts allowed calls outside that set."""
    gate = ToolGate(
        registry(system), profile(allowlist, frontend_allowlist=patterns), declared, frontend=client_specs(client)
    )
    intersection = set(system)
    if allowlist is not None:
        intersection &= set(allowlist)
    if declared is not None:
        intersection &= declared
    # The front-end layer, stated independently of the gate: declared by the client, admitted by a pattern, not a
    # server tool's name, not in the MCP namespace, and not a case/look-alike variant of a server tool.
    frontend = {
        name
        for name in client
        if frontend_allowed(name, patterns or [])
        and name not in system
        and not name.startswith("mcp__")
        and name.casefold() not in {s.casefold() for s in system}
    }
    offered = {spec.name for spec in gate.effective_tools()}
    assert offered == intersection | frontend
    assert gate.frontend_names == frontend and not (gate.frontend_names & system)
    executed: list[str] = []
    for raw_name, arguments in calls:
        decision = gate.authorize(raw_name, arguments, CTX)
        assert_complete_audit(decision, raw_name, arguments)
        if decision.allowed:
            assert decision.canonical_name == raw_name
            if raw_name not in intersection | frontend:
                seen["escapes"] += 1
            assert decision.kind == (
                "frontend" if raw_name in frontend else "mcp" if raw_name.startswith("mcp__") else "server"
            )
            seen["frontend_allowed"] += decision.kind == "frontend"
            executed.append(decision.canonical_name)
            continue
        seen["refusals"] += 1
        seen["lookalikes"] += decision.reason == "lookalike_name"
        assert decision.canonical_name is None
        expected_layer = (
            "system"
            if raw_name not in system
            else "profile"
            if allowlist is not None and raw_name not in allowlist
            else "declared"
        )
        assert decision.layer == expected_layer
    assert set(executed) <= intersection | frontend
    for record in gate.offer_audit(CTX):
        assert record.details["decision"] == "refused" and record.details["tool_name"] in client - frontend


def random_lookalike(rng: random.Random, name: str) -> str:
    """The same transformations as the ``lookalike`` strategy, from a seeded generator (hypothesis draws are
    too slow for 10,000 cases in a few seconds)."""
    position = rng.randint(0, len(name))
    kind = rng.choice(["upper", "title", "homoglyph", "invisible", "pad", "control", "fullwidth", "combining"])
    if kind == "upper":
        return name.upper()
    if kind == "title":
        return name[:position] + name[position:].capitalize()
    if kind == "homoglyph":
        candidates = [i for i, ch in enumerate(name) if ch in HOMOGLYPHS]
        i = rng.choice(candidates) if candidates else 0
        return name[:i] + HOMOGLYPHS.get(name[i], name[i].upper()) + name[i + 1 :]
    if kind == "invisible":
        return name[:position] + rng.choice(INVISIBLES) + name[position:]
    if kind == "pad":
        return rng.choice(PADDING) + name if rng.random() < 0.5 else name + rng.choice(PADDING)
    if kind == "control":
        return name[:position] + rng.choice(CONTROLS) + name[position:]
    if kind == "fullwidth":
        return fullwidth(name)
    return name[:position] + "\u0301" + name[position:]


def random_name(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.3:
        return rng.choice(POOL)
    if roll < 0.4:
        return rng.choice(CLIENT_POOL)
    if roll < 0.8:
        return random_lookalike(rng, rng.choice(POOL + CLIENT_POOL))
    alphabet = "abcdefghijklmnopqrstuvwxyz_ \u200bАЕ\x00é-" if roll < 0.9 else "abcdefghijklmnopqrstuvwxyz_"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))


def random_subset(rng: random.Random, pool: tuple[str, ...] = POOL) -> frozenset[str]:
    return frozenset(name for name in pool if rng.random() < 0.5)


def test_no_tool_outside_the_intersection_is_ever_allowed_over_10000_cases() -> None:
    # GIVEN 10,000 seeded random cases: system, profile and declared sets, and tool-call sequences whose names are
    # real, look-alike (case, homoglyph, full-width, invisible, padded, control) or random
    # AND client-declared (front-end) tools, some shadowing server or MCP tools, under random frontend_allowlists
    rng = random.Random(20250310)
    seen = {"refusals": 0, "lookalikes": 0, "escapes": 0, "frontend_allowed": 0}
    for _ in range(10_000):
        allowlist = None if rng.random() < 0.25 else sorted(random_subset(rng))
        declared = None if rng.random() < 0.25 else random_subset(rng)
        client = random_subset(rng, CLIENT_POOL) if rng.random() < 0.7 else frozenset()
        patterns = sorted(random_subset(rng, FRONTEND_PATTERNS)) if rng.random() < 0.7 else []
        calls = [(random_name(rng), rng.choice(["{}", '{"a": 1}', "not json", ""])) for _ in range(rng.randint(1, 6))]
        # WHEN the gate decides THEN only the offered set is allowed and every refusal is audited
        check_case(random_subset(rng), allowlist, declared, calls, seen, client, patterns)
    assert seen["escapes"] == 0
    assert seen["lookalikes"] > 5_000, "the generator must produce many look-alike names"
    assert seen["frontend_allowed"] > 500, "the generator must exercise allowed front-end calls"


@settings(max_examples=1_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    system=SETS,
    allowlist=st.none() | st.lists(st.sampled_from(POOL), unique=True),
    declared=st.none() | SETS,
    calls=st.lists(st.tuples(NAMES | st.sampled_from(CLIENT_POOL), st.text(max_size=40)), min_size=1, max_size=6),
    client=st.frozensets(st.sampled_from(CLIENT_POOL) | st.sampled_from(POOL).flatmap(lookalike)),
    patterns=st.lists(st.sampled_from(FRONTEND_PATTERNS), unique=True),
)
def test_no_tool_outside_the_intersection_is_allowed_for_hypothesis_cases(
    system: frozenset[str],
    allowlist: list[str] | None,
    declared: frozenset[str] | None,
    calls: list[tuple[str, str]],
    client: frozenset[str],
    patterns: list[str],
) -> None:
    # the same property with hypothesis's generation and shrinking, on fewer cases, front-end and MCP names included
    seen = {"refusals": 0, "lookalikes": 0, "escapes": 0, "frontend_allowed": 0}
    check_case(system, allowlist, declared, calls, seen, client, patterns)
    assert seen["escapes"] == 0
