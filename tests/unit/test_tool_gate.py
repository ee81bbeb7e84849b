"""Tool authorization: effective = declared ∩ profile ∩ system, exact names only, an audit record per decision."""

from __future__ import annotations

import json
import random
import unicodedata
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.llm.types import ToolSpec
from shared.models import ExecutorKind, digest
from shared.profiles import ExecutionProfile, ModelConfig, ToolPolicy
from shared.tool_gate import GateContext, GateDecision, ToolGate, frontend_allowed, summarize_request
from shared.tools.registry import ServerTool, ToolContext, ToolRegistry

POOL = ("get_current_time", "web_search", "send_email", "memory_write", "memory_forget", "calc", "read_file",
        "mcp__files__read", "mcp__crm__get_current_time")
# Client-declared (front-end) tool names: the client's own, and ones that shadow or mimic server and MCP tools.
CLIENT_POOL = ("confirm_booking", "confirm_payment", "pick_date", "show_map", "get_current_time", "Get_Current_Time",
               "mcp__files__read", "mcp__other__x", "web_search", "calc")
FRONTEND_PATTERNS = ("confirm_*", "pick_date", "*", "show_*", "get_current_time", "mcp__files__read")
CTX = GateContext(tenant_id="t1", user_id="u1", thread_id="th1", run_id="r1", summary="user asked: what time is it")
REQUIRED_DETAILS = ("decision", "reason", "reason_text", "layer", "tool_name", "arguments_digest", "context_summary")


async def _noop(_arguments: dict[str, Any], _ctx: ToolContext) -> str:
    return "ok"


def registry(names: frozenset[str] | set[str]) -> ToolRegistry:
    return ToolRegistry({
        name: ServerTool(spec=ToolSpec(name=name, description=f"{name} tool", parameters={"type": "object"}),
                         handler=_noop)
        for name in names
    })


def profile(allowlist: list[str] | None, executor: ExecutorKind = ExecutorKind.WORKER,
            frontend_allowlist: list[str] | None = None) -> ExecutionProfile:
    # ToolPolicy refuses mcp__ patterns in frontend_allowlist; model_construct lets the generator try them anyway.
    policy = ToolPolicy(allowlist=allowlist).model_copy(update={"frontend_allowlist": frontend_allowlist or []})
    return ExecutionProfile(name="p", executor=executor, model=ModelConfig(name="qwen3.5-flash"), tool_policy=policy)


def client_specs(names: frozenset[str] | set[str]) -> list[ToolSpec]:
    return [ToolSpec(name=name, description="client tool", parameters={"type": "object"}) for name in sorted(names)]


def assert_complete_audit(decision: GateDecision, raw_name: str, arguments: str) -> None:
    record = decision.audit
    assert record.kind == "tool_decision"
    assert (record.tenant_id, record.user_id, record.thread_id, record.run_id) == ("t1", "u1", "th1", "r1")
    details = record.details
    for key in REQUIRED_DETAILS:
        assert key in details, key
    assert details["decision"] == ("allowed" if decision.allowed else "refused")
    assert details["reason"] == decision.reason and decision.reason
    assert details["reason_text"]
    assert details["layer"] == decision.layer
    assert details["tool_name"] == raw_name[:200]
    assert details["arguments_digest"] == digest(arguments)
    assert details["context_summary"] == CTX.summary
    if not decision.allowed:
        assert decision.layer in {"declared", "profile", "system"}


# ----------------------------------------------------------------------------------------------------------
# Look-alike names
# ----------------------------------------------------------------------------------------------------------

HOMOGLYPHS = {"a": "а", "e": "е", "o": "о", "c": "с", "p": "р", "i": "і", "s": "ѕ", "m": "ᴍ"}
INVISIBLES = ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad")
PADDING = (" ", "\t", "\u00a0", "\u3000", "\n")
CONTROLS = ("\x00", "\x1b", "\x7f", "\r")


def fullwidth(text: str) -> str:
    return "".join(chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch for ch in text)


@st.composite
def lookalike(draw: st.DrawFn, name: str) -> str:
    kind = draw(st.sampled_from(["upper", "title", "homoglyph", "invisible", "pad", "control", "fullwidth",
                                 "combining", "nfd"]))
    position = draw(st.integers(0, len(name)))
    if kind == "upper":
        return name.upper()
    if kind == "title":
        return name[:position] + name[position:].capitalize()
    if kind == "homoglyph":
        candidates = [i for i, ch in enumerate(name) if ch in HOMOGLYPHS]
        if not candidates:
            return name.upper()
        i = draw(st.sampled_from(candidates))
        return name[:i] + HOMOGLYPHS[name[i]] + name[i + 1 :]
    if kind == "invisible":
        return name[:position] + draw(st.sampled_from(INVISIBLES)) + name[position:]
    if kind == "pad":
        pad = draw(st.sampled_from(PADDING))
        return draw(st.sampled_from([pad + name, name + pad, pad + name + pad]))
    if kind == "control":
        return name[:position] + draw(st.sampled_from(CONTROLS)) + name[position:]
    if kind == "fullwidth":
        return fullwidth(name)
    if kind == "combining":
        return name[:position] + "\u0301" + name[position:]
    return unicodedata.normalize("NFD", name.replace("e", "é", 1))


NAMES = st.one_of(
    st.sampled_from(POOL),
    st.sampled_from(POOL).flatmap(lookalike),
    st.text(max_size=24),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=24),
)
SETS = st.frozensets(st.sampled_from(POOL))


# ----------------------------------------------------------------------------------------------------------
# Property: over 10,000 generated cases nothing outside the intersection is allowed, and every refusal is audited
# ----------------------------------------------------------------------------------------------------------


def check_case(system: frozenset[str], allowlist: list[str] | None, declared: frozenset[str] | None,
               calls: list[tuple[str, str]], seen: dict[str, int], client: frozenset[str] = frozenset(),
               patterns: list[str] | None = None) -> None:
    """One generated case: the offered tools are the intersection plus the allowed client tools that shadow no
    server tool, and each call is decided and audited. "Escapes" counts allowed calls outside that set."""
    gate = ToolGate(registry(system), profile(allowlist, frontend_allowlist=patterns), declared,
                    frontend=client_specs(client))
    intersection = set(system)
    if allowlist is not None:
        intersection &= set(allowlist)
    if declared is not None:
        intersection &= declared
    # The front-end layer, stated independently of the gate: declared by the client, admitted by a pattern, not a
    # server tool's name, not in the MCP namespace, and not a case/look-alike variant of a server tool.
    frontend = {
        name for name in client
        if frontend_allowed(name, patterns or []) and name not in system and not name.startswith("mcp__")
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
            assert decision.kind == ("frontend" if raw_name in frontend else
                                     "mcp" if raw_name.startswith("mcp__") else "server")
            seen["frontend_allowed"] += decision.kind == "frontend"
            executed.append(decision.canonical_name)
            continue
        seen["refusals"] += 1
        seen["lookalikes"] += decision.reason == "lookalike_name"
        assert decision.canonical_name is None
        expected_layer = (
            "system" if raw_name not in system
            else "profile" if allowlist is not None and raw_name not in allowlist
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
    system: frozenset[str], allowlist: list[str] | None, declared: frozenset[str] | None, calls: list[tuple[str, str]],
    client: frozenset[str], patterns: list[str]
) -> None:
    # the same property with hypothesis's generation and shrinking, on fewer cases, front-end and MCP names included
    seen = {"refusals": 0, "lookalikes": 0, "escapes": 0, "frontend_allowed": 0}
    check_case(system, allowlist, declared, calls, seen, client, patterns)
    assert seen["escapes"] == 0


# ----------------------------------------------------------------------------------------------------------
# One named test per refusal layer
# ----------------------------------------------------------------------------------------------------------


def test_refused_by_the_system_layer_when_no_such_tool_exists() -> None:
    # GIVEN a profile and a run that both name a tool the system does not have
    gate = ToolGate(registry({"get_current_time"}), profile(["get_current_time", "delete_account"]),
                    frozenset({"delete_account", "get_current_time"}))
    # WHEN the model calls it
    decision = gate.authorize("delete_account", '{"user": "everyone"}', CTX)
    # THEN the system layer refuses it, with a complete audit record
    assert (decision.allowed, decision.layer, decision.reason) == (False, "system", "unknown_tool")
    assert_complete_audit(decision, "delete_account", '{"user": "everyone"}')


def test_refused_by_the_profile_layer_when_the_allowlist_omits_the_tool() -> None:
    gate = ToolGate(registry({"get_current_time", "send_email"}), profile(["get_current_time"]), None)
    decision = gate.authorize("send_email", "{}", CTX)
    assert (decision.allowed, decision.layer, decision.reason) == (False, "profile", "not_in_profile_allowlist")
    assert_complete_audit(decision, "send_email", "{}")
    assert "send_email" not in {spec.name for spec in gate.effective_tools()}


def test_refused_by_the_declared_layer_when_the_run_did_not_declare_the_tool() -> None:
    # GIVEN an automation task that declares only the clock
    gate = ToolGate(registry({"get_current_time", "web_search"}), profile(None), frozenset({"get_current_time"}))
    decision = gate.authorize("web_search", '{"q": "x"}', CTX)
    assert (decision.allowed, decision.layer, decision.reason) == (False, "declared", "not_declared")
    assert_complete_audit(decision, "web_search", '{"q": "x"}')


def test_allowed_call_is_audited_too() -> None:
    gate = ToolGate(registry({"get_current_time"}), profile(["get_current_time"]), None)
    decision = gate.authorize("get_current_time", '{"timezone": "UTC"}', CTX)
    assert (decision.allowed, decision.layer, decision.canonical_name) == (True, None, "get_current_time")
    assert decision.audit.details["decision"] == "allowed"
    assert_complete_audit(decision, "get_current_time", '{"timezone": "UTC"}')


# ----------------------------------------------------------------------------------------------------------
# Exact names only
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw_name",
    [
        "Get_Current_Time",
        "GET_CURRENT_TIME",
        "get_current_tіme",  # Cyrillic і
        "gеt_current_time",  # Cyrillic е
        fullwidth("get_current_time"),
        "get_current\u200b_time",
        "\ufeffget_current_time",
        " get_current_time",
        "get_current_time ",
        "get_current_time\n",
        "get_current_time\x00",
        "get_current_time\u00a0",
    ],
    ids=["title", "upper", "cyrillic-i", "cyrillic-e", "fullwidth", "zero-width", "bom", "lead-space",
         "trail-space", "newline", "nul", "nbsp"],
)
def test_lookalike_names_are_refused_and_never_normalised(raw_name: str) -> None:
    gate = ToolGate(registry({"get_current_time"}), profile(["get_current_time"]), None)
    decision = gate.authorize(raw_name, "{}", CTX)
    assert decision.allowed is False
    assert decision.canonical_name is None
    assert (decision.layer, decision.reason) == ("system", "lookalike_name")
    assert decision.audit.details["resembles"] == "get_current_time"
    assert decision.audit.details["tool_name"] == raw_name
    assert decision.audit.details["tool_name_escaped"] == ascii(raw_name)


def test_malformed_and_huge_names_are_refused_with_a_bounded_audit_entry() -> None:
    gate = ToolGate(registry({"calc"}), profile(None), None)
    huge = "x" * 5_000 + "\u200b"
    decision = gate.authorize(huge, "{}", CTX)
    assert (decision.allowed, decision.reason) == (False, "malformed_name")
    assert len(decision.audit.details["tool_name"]) == 200
    assert decision.audit.details["tool_name_truncated"] is True


def test_refusal_is_answered_to_the_model_as_a_tool_error_naming_what_it_may_use() -> None:
    gate = ToolGate(registry({"get_current_time", "web_search"}), profile(["get_current_time"]), None)
    decision = gate.authorize("web_search", "{}", CTX)
    error = json.loads(decision.model_error())["error"]
    assert error["code"] == "tool_not_allowed"
    assert error["availableTools"] == ["get_current_time"]
    assert decision.layer is not None
    assert decision.layer not in error["message"] and "profile" not in error["message"]


# ----------------------------------------------------------------------------------------------------------
# Executors' own tools, and what the model is offered
# ----------------------------------------------------------------------------------------------------------

MEMORY_SPECS = (
    ToolSpec(name="memory_write", description="Propose a memory.", parameters={"type": "object"}),
    ToolSpec(name="memory_forget", description="Retract a memory.", parameters={"type": "object"}),
)


def test_memory_executor_gets_only_its_memory_tools() -> None:
    # GIVEN the system registry (the clock) plus the memory executor's own tools and a memory profile
    gate = ToolGate(registry({"get_current_time"}), profile(["memory_write", "memory_forget"], ExecutorKind.MEMORY),
                    None, executor_tools=MEMORY_SPECS)
    # THEN only the memory tools are offered, and the clock is refused by the profile layer
    assert [spec.name for spec in gate.effective_tools()] == ["memory_forget", "memory_write"]
    assert gate.authorize("memory_write", "{}", CTX).allowed
    assert gate.authorize("get_current_time", "{}", CTX).layer == "profile"


def test_worker_without_executor_tools_never_has_memory_tools() -> None:
    gate = ToolGate(registry({"get_current_time"}), profile(None), None)
    decision = gate.authorize("memory_write", "{}", CTX)
    assert (decision.allowed, decision.layer) == (False, "system")


def test_effective_tools_come_in_a_stable_order() -> None:
    names = {"web_search", "calc", "get_current_time"}
    first = [s.name for s in ToolGate(registry(names), profile(None), None).effective_tools()]
    assert first == ["calc", "get_current_time", "web_search"]


def test_gate_context_from_a_tool_context_and_a_bounded_summary() -> None:
    ctx = GateContext.for_tool_context(ToolContext("t", "u", "th", "r"), summarize_request("a\n  b " * 100, 20))
    assert (ctx.tenant_id, ctx.user_id, ctx.thread_id, ctx.run_id) == ("t", "u", "th", "r")
    assert ctx.summary == "a b a b a b a b a b…"


# ----------------------------------------------------------------------------------------------------------
# Front-end (client-declared) tools
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "patterns", "allowed"),
    [
        ("confirm_booking", ["confirm_booking"], True),
        ("confirm_booking", ["confirm_*"], True),
        ("confirm_", ["confirm_*"], True),
        ("Confirm_booking", ["confirm_*"], False),
        ("xconfirm_booking", ["confirm_*"], False),
        ("confirm_booking", ["*_booking"], True),
        ("confirm.booking", ["confirm?booking"], False),
        ("confirm_booking", ["confirm"], False),
        ("confirm_booking", [], False),
        ("anything-goes_1", ["*"], True),
        ("confirm booking", ["*"], False),
    ],
)
def test_frontend_allowlist_semantics(name: str, patterns: list[str], allowed: bool) -> None:
    assert frontend_allowed(name, patterns) is allowed


def test_a_frontend_tool_is_offered_allowed_and_marked_as_such() -> None:
    gate = ToolGate(registry({"get_current_time"}), profile(["get_current_time"], frontend_allowlist=["confirm_*"]),
                    None, frontend=client_specs({"confirm_booking", "delete_all"}))
    assert [spec.name for spec in gate.effective_tools()] == ["confirm_booking", "get_current_time"]
    decision = gate.authorize("confirm_booking", "{}", CTX)
    assert (decision.allowed, decision.kind) == (True, "frontend")
    assert decision.audit.details["tool_kind"] == "frontend"
    assert gate.authorize("delete_all", "{}", CTX).allowed is False
    assert gate.authorize("Confirm_booking", "{}", CTX).reason == "lookalike_name"
    (refused,) = gate.offer_audit(CTX)
    assert (refused.details["tool_name"], refused.details["reason"], refused.details["layer"]) == (
        "delete_all", "not_in_frontend_allowlist", "profile")


def test_a_client_tool_never_shadows_a_server_or_mcp_tool_even_when_allowlisted() -> None:
    # GIVEN a careless profile that allows every client tool, and a client declaring server and MCP names
    gate = ToolGate(registry({"get_current_time", "mcp__files__read"}), profile(None, frontend_allowlist=["*"]), None,
                    frontend=client_specs({"get_current_time", "mcp__files__read", "GET_CURRENT_TIME"}))
    # THEN none of them is a front-end tool: calls go to the server tools, and the shadows are audited
    assert gate.frontend_names == frozenset()
    assert gate.authorize("get_current_time", "{}", CTX).kind == "server"
    assert gate.authorize("mcp__files__read", "{}", CTX).kind == "mcp"
    reasons = {r.details["tool_name"]: r.details["reason"] for r in gate.offer_audit(CTX)}
    assert reasons == {"get_current_time": "shadows_server_tool", "mcp__files__read": "shadows_server_tool",
                       "GET_CURRENT_TIME": "lookalike_of_server_tool"}
