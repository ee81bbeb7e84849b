"""Tool authorization: effective = declared ∩ profile ∩ system, exact names only, an audit record per decision.
The same rules over 10,000+ generated cases: tests/reliability/test_tool_gate_properties.py."""

from __future__ import annotations

import json

import pytest

from shared.llm.types import ToolSpec
from shared.models import ExecutorKind
from shared.tool_gate import GateContext, ToolGate, frontend_allowed, summarize_request
from shared.tools.registry import ToolContext
from tests.support.gate_cases import CTX, assert_complete_audit, client_specs, fullwidth, profile, registry

# ----------------------------------------------------------------------------------------------------------
# One named test per refusal layer
# ----------------------------------------------------------------------------------------------------------


def test_refused_by_the_system_layer_when_no_such_tool_exists() -> None:
    # GIVEN a profile and a run that both name a tool the system does not have
    gate = ToolGate(
        registry({"get_current_time"}),
        profile(["get_current_time", "delete_account"]),
        frozenset({"delete_account", "get_current_time"}),
    )
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
    ids=[
        "title",
        "upper",
        "cyrillic-i",
        "cyrillic-e",
        "fullwidth",
        "zero-width",
        "bom",
        "lead-space",
        "trail-space",
        "newline",
        "nul",
        "nbsp",
    ],
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
    gate = ToolGate(
        registry({"get_current_time"}),
        profile(["memory_write", "memory_forget"], ExecutorKind.MEMORY),
        None,
        executor_tools=MEMORY_SPECS,
    )
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
    gate = ToolGate(
        registry({"get_current_time"}),
        profile(["get_current_time"], frontend_allowlist=["confirm_*"]),
        None,
        frontend=client_specs({"confirm_booking", "delete_all"}),
    )
    assert [spec.name for spec in gate.effective_tools()] == ["confirm_booking", "get_current_time"]
    decision = gate.authorize("confirm_booking", "{}", CTX)
    assert (decision.allowed, decision.kind) == (True, "frontend")
    assert decision.audit.details["tool_kind"] == "frontend"
    assert gate.authorize("delete_all", "{}", CTX).allowed is False
    assert gate.authorize("Confirm_booking", "{}", CTX).reason == "lookalike_name"
    (refused,) = gate.offer_audit(CTX)
    assert (refused.details["tool_name"], refused.details["reason"], refused.details["layer"]) == (
        "delete_all",
        "not_in_frontend_allowlist",
        "profile",
    )


def test_a_client_tool_never_shadows_a_server_or_mcp_tool_even_when_allowlisted() -> None:
    # GIVEN a careless profile that allows every client tool, and a client declaring server and MCP names
    gate = ToolGate(
        registry({"get_current_time", "mcp__files__read"}),
        profile(None, frontend_allowlist=["*"]),
        None,
        frontend=client_specs({"get_current_time", "mcp__files__read", "GET_CURRENT_TIME"}),
    )
    # THEN none of them is a front-end tool: calls go to the server tools, and the shadows are audited
    assert gate.frontend_names == frozenset()
    assert gate.authorize("get_current_time", "{}", CTX).kind == "server"
    assert gate.authorize("mcp__files__read", "{}", CTX).kind == "mcp"
    reasons = {r.details["tool_name"]: r.details["reason"] for r in gate.offer_audit(CTX)}
    assert reasons == {
        "get_current_time": "shadows_server_tool",
        "mcp__files__read": "shadows_server_tool",
        "GET_CURRENT_TIME": "lookalike_of_server_tool",
    }
