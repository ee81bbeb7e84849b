"""Shared by the tool-gate tests: the tool pools, a gate's building blocks, the complete-audit check, and the
look-alike name generators (hypothesis strategies and their seeded twins' tables)."""

from __future__ import annotations

import unicodedata
from typing import Any

from hypothesis import strategies as st

from shared.llm.types import ToolSpec
from shared.models import ExecutorKind, digest
from shared.profiles import ExecutionProfile, ModelConfig, ToolPolicy
from shared.tool_gate import GateContext, GateDecision
from shared.tools.registry import ServerTool, ToolContext, ToolRegistry

POOL = (
    "get_current_time",
    "web_search",
    "send_email",
    "memory_write",
    "memory_forget",
    "calc",
    "read_file",
    "mcp__files__read",
    "mcp__crm__get_current_time",
)
# Client-declared (front-end) tool names: the client's own, and ones that shadow or mimic server and MCP tools.
CLIENT_POOL = (
    "confirm_booking",
    "confirm_payment",
    "pick_date",
    "show_map",
    "get_current_time",
    "Get_Current_Time",
    "mcp__files__read",
    "mcp__other__x",
    "web_search",
    "calc",
)
FRONTEND_PATTERNS = ("confirm_*", "pick_date", "*", "show_*", "get_current_time", "mcp__files__read")
CTX = GateContext(tenant_id="t1", user_id="u1", thread_id="th1", run_id="r1", summary="user asked: what time is it")
REQUIRED_DETAILS = ("decision", "reason", "reason_text", "layer", "tool_name", "arguments_digest", "context_summary")


async def _noop(_arguments: dict[str, Any], _ctx: ToolContext) -> str:
    return "ok"


def registry(names: frozenset[str] | set[str]) -> ToolRegistry:
    return ToolRegistry(
        {
            name: ServerTool(
                spec=ToolSpec(name=name, description=f"{name} tool", parameters={"type": "object"}), handler=_noop
            )
            for name in names
        }
    )


def profile(
    allowlist: list[str] | None,
    executor: ExecutorKind = ExecutorKind.WORKER,
    frontend_allowlist: list[str] | None = None,
) -> ExecutionProfile:
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
    kind = draw(
        st.sampled_from(["upper", "title", "homoglyph", "invisible", "pad", "control", "fullwidth", "combining", "nfd"])
    )
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
