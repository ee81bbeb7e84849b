"""Tool authorization: ``effective = declared ∩ profile_allowlist ∩ system_allowlist`` (docs/design.md §4.3).

The three layers:

- **system**: the tools that exist and that the system allows at all: the :class:`ToolRegistry`, plus the
  tools an executor implements itself (the memory executor passes ``memory_write`` / ``memory_forget`` as
  ``executor_tools``). Nothing outside it can ever run.
- **profile**: ``tool_policy.allowlist`` of the run's execution profile (``None``: this layer does not
  narrow).
- **declared**: the tools this particular run declares. A chat run declares the server tools of its executor
  (``None``: every tool of the system layer); an automation task declares its ``tools`` list.

Front-end tools are a separate, narrower path: the tools a client lists in the AG-UI ``RunAgentInput.tools``
are offered only when the profile's ``tool_policy.frontend_allowlist`` matches them, never when they shadow or
resemble a server tool (built-in, plugin, executor or MCP) or use the ``mcp__`` namespace. The server never runs
them: an allowed call to one is handed to the client (docs/policy.md §3). Each refused client tool gets an audit
record too (:meth:`ToolGate.offer_audit`).

Names match exactly, byte for byte. A name that differs from a tool only by case, Unicode compatibility forms,
look-alike letters, padding or invisible characters is refused and never normalised into the tool it
resembles. Every decision, allowed or refused, yields an :class:`~shared.models.AuditRecord` of kind
``tool_decision``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from shared.llm.types import ToolSpec
from shared.models import AuditRecord, digest
from shared.profiles import MEMORY_TOOL_NAMES, ExecutionProfile
from shared.tools.registry import MCP_PREFIX, ToolContext, ToolRegistry

__all__ = [
    "MEMORY_TOOL_NAMES",
    "GateContext",
    "GateDecision",
    "Layer",
    "ToolGate",
    "ToolKind",
    "summarize_request",
]

Layer = Literal["declared", "profile", "system"]
ToolKind = Literal["server", "mcp", "executor", "frontend"]

AUDIT_KIND = "tool_decision"
_WELL_FORMED_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MAX_AUDITED_NAME = 200
_MAX_SUMMARY = 200

# Latin look-alikes from other scripts (a small slice of Unicode's confusables table: the letters that occur
# in tool names). Only used to *explain* a refusal; matching itself is exact.
_CONFUSABLES = str.maketrans(
    {
        "а": "a",
        "е": "e",
        "о": "o",
        "р": "p",
        "с": "c",
        "х": "x",
        "у": "y",
        "і": "i",
        "ј": "j",
        "ѕ": "s",
        "ԁ": "d",
        "ɡ": "g",
        "һ": "h",
        "ӏ": "l",
        "ո": "n",
        "ս": "u",
        "ԝ": "w",
        "ᴠ": "v",
        "ʏ": "y",
        "ᴍ": "m",
        "Α": "A",
        "Β": "B",
        "Ε": "E",
        "Η": "H",
        "Ι": "I",
        "Κ": "K",
        "Μ": "M",
        "Ν": "N",
        "Ο": "O",
        "Ρ": "P",
        "Τ": "T",
        "Χ": "X",
        "Υ": "Y",
        "Ζ": "Z",
        "ο": "o",
        "ν": "v",
        "α": "a",
        "ι": "i",
        "κ": "k",
        "τ": "t",
        "А": "A",
        "В": "B",
        "Е": "E",
        "К": "K",
        "М": "M",
        "Н": "H",
        "О": "O",
        "Р": "P",
        "С": "C",
        "Т": "T",
        "Х": "X",
    }
)


def summarize_request(text: str, limit: int = 160) -> str:
    """A one-line summary of the request for audit records: whitespace collapsed, cut at ``limit`` chars."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class GateContext(NamedTuple):
    """Who and what a decision is about, for the audit record."""

    tenant_id: str
    user_id: str
    thread_id: str
    run_id: str
    summary: str
    """A short summary of the request context (e.g. :func:`summarize_request` of the user's message)."""

    @classmethod
    def for_tool_context(cls, ctx: ToolContext, summary: str) -> GateContext:
        return cls(ctx.tenant_id, ctx.user_id, ctx.thread_id, ctx.run_id, summary)


class GateDecision(NamedTuple):
    """The gate's verdict on one tool call, with the audit record that explains it."""

    allowed: bool
    layer: Layer | None
    """The layer that refused the call (``None`` when allowed)."""
    reason: str
    canonical_name: str | None
    """The tool to execute: set only when allowed, and then equal to the name the model wrote."""
    audit: AuditRecord
    kind: ToolKind | None = None
    """What kind of tool was allowed: ``frontend`` ones are handed to the client, never executed here."""

    def model_error(self) -> str:
        """The tool error fed back to the model for a refused call, in the shape of every tool error.

        It names the tools the model may use instead, never the layer that refused the call: that stays in the
        audit trail (a client sees this text as ``TOOL_CALL_RESULT.content``).
        """
        name = str(self.audit.details["tool_name"])
        return json.dumps(
            {
                "error": {
                    "code": "tool_not_allowed",
                    "message": f"tool {name!r} is not available in this conversation",
                    "availableTools": self.audit.details["effective_tools"],
                }
            },
            ensure_ascii=False,
        )


def _has_invisible(text: str) -> bool:
    return any(unicodedata.category(ch) in {"Cc", "Cf", "Zs", "Zl", "Zp"} for ch in text)


def _skeleton(text: str) -> str:
    """What a name looks like to a reader: compatibility forms folded, look-alikes mapped, no invisibles."""
    folded = unicodedata.normalize("NFKC", text).translate(_CONFUSABLES)
    visible = "".join(ch for ch in folded if unicodedata.category(ch) not in {"Cc", "Cf", "Zs", "Zl", "Zp"})
    return visible.casefold()


def frontend_allowed(name: str, patterns: Sequence[str]) -> bool:
    """Whether a profile's ``frontend_allowlist`` admits ``name``.

    An entry without ``*`` matches that exact name, byte for byte. In an entry with ``*``, each ``*`` matches any
    run (possibly empty) of tool-name characters (letters, digits, ``_``, ``-``) and everything else matches
    itself exactly; the whole name must match. There is no other wildcard, no case folding and no normalisation.
    """
    for pattern in patterns:
        if "*" not in pattern:
            if name == pattern:
                return True
        elif re.fullmatch("[A-Za-z0-9_-]*".join(re.escape(part) for part in pattern.split("*")), name):
            return True
    return False


# A refused client tool: its name, the refusing layer, the reason code, the explanation, the server tool it resembles.
_FrontendRefusal = tuple[str, Layer, str, str, str | None]


def _server_and_executor_tools(
    system: ToolRegistry, executor_tools: Sequence[ToolSpec]
) -> tuple[dict[str, ToolSpec], dict[str, ToolKind]]:
    """The specs of the registry's tools and the executor's own tools, and the kind of each."""
    specs: dict[str, ToolSpec] = {}
    kinds: dict[str, ToolKind] = {}
    for name in system.names:
        tool = system.get(name)
        if tool is not None:
            specs[name] = tool.spec
            kinds[name] = "mcp" if name.startswith(MCP_PREFIX) else "server"
    for spec in executor_tools:
        specs[spec.name] = spec
        kinds[spec.name] = "executor"
    return specs, kinds


def _frontend_refusal(
    name: str, specs: Mapping[str, ToolSpec], server_skeletons: Mapping[str, str], profile: ExecutionProfile
) -> _FrontendRefusal | None:
    """Why a client-declared tool is not offered (``None``: it is): it shadows or looks like a server tool, or the
    profile's ``frontend_allowlist`` does not admit it."""
    if name in specs or name.startswith(MCP_PREFIX):
        return (name, "system", "shadows_server_tool", f"client tool {name!r} shadows a server tool", None)
    resembles = server_skeletons.get(_skeleton(name))
    if resembles is not None:
        why = f"client tool {name!r} looks like server tool {resembles!r}"
        return (name, "system", "lookalike_of_server_tool", why, resembles)
    if not frontend_allowed(name, profile.tool_policy.frontend_allowlist):
        why = f"client tool {name!r} is not allowed by execution profile {profile.name!r}"
        return (name, "profile", "not_in_frontend_allowlist", why, None)
    return None


class ToolGate:
    """Decides, for one run, which tools the model is offered and whether a call it makes may execute."""

    def __init__(
        self,
        system: ToolRegistry,
        profile: ExecutionProfile,
        declared: frozenset[str] | None = None,
        *,
        executor_tools: Sequence[ToolSpec] = (),
        frontend: Sequence[ToolSpec] = (),
    ) -> None:
        specs, kinds = _server_and_executor_tools(system, executor_tools)
        self._specs = specs
        self._profile = profile
        allowlist = profile.tool_policy.allowlist
        self._profile_names = None if allowlist is None else frozenset(allowlist)
        self._declared = declared
        effective = set(specs)
        if self._profile_names is not None:
            effective &= self._profile_names
        if declared is not None:
            effective &= declared
        server_skeletons = {_skeleton(name): name for name in sorted(specs)}
        self._frontend: dict[str, ToolSpec] = {}
        self._frontend_refused: list[_FrontendRefusal] = []
        for spec in frontend:
            if spec.name in self._frontend:
                continue
            refusal = _frontend_refusal(spec.name, specs, server_skeletons, profile)
            if refusal is not None:
                self._frontend_refused.append(refusal)
            else:
                self._frontend[spec.name] = spec
                kinds[spec.name] = "frontend"
        self._kinds = kinds
        self._effective = frozenset(effective) | frozenset(self._frontend)
        self._skeletons = {_skeleton(name): name for name in sorted(set(specs) | set(self._frontend))}

    @property
    def frontend_names(self) -> frozenset[str]:
        """The client-declared tools offered to the model (never executed by the server)."""
        return frozenset(self._frontend)

    def kind_of(self, name: str) -> ToolKind | None:
        """The kind of an offered tool (``None`` for anything not offered)."""
        return self._kinds.get(name) if name in self._effective else None

    def effective_tools(self) -> list[ToolSpec]:
        """What the model is offered, sorted by name (a stable order keeps the prompt cache warm)."""
        return [self._specs.get(name) or self._frontend[name] for name in sorted(self._effective)]

    def offer_audit(self, ctx: GateContext) -> list[AuditRecord]:
        """One ``tool_decision`` record (``phase: offer``) per client-declared tool that is not offered."""
        return [
            self._record(
                ctx,
                name,
                "",
                allowed=False,
                layer=layer,
                reason=reason,
                reason_text=text,
                resembles=resembles,
                phase="offer",
                kind=None,
            )
            for name, layer, reason, text, resembles in self._frontend_refused
        ]

    def authorize(self, raw_name: str, arguments: str, ctx: GateContext) -> GateDecision:
        """Decide on one tool call exactly as the model wrote it, and produce its audit record."""
        layer, reason, reason_text, resembles = self._judge(raw_name)
        allowed = layer is None
        kind = self._kinds.get(raw_name) if allowed else None
        record = self._record(
            ctx,
            raw_name,
            arguments,
            allowed=allowed,
            layer=layer,
            reason=reason,
            reason_text=reason_text,
            resembles=resembles,
            phase="call",
            kind=kind,
        )
        return GateDecision(
            allowed=allowed,
            layer=layer,
            reason=reason,
            canonical_name=raw_name if allowed else None,
            audit=record,
            kind=kind,
        )

    def _record(
        self,
        ctx: GateContext,
        raw_name: str,
        arguments: str,
        *,
        allowed: bool,
        layer: Layer | None,
        reason: str,
        reason_text: str,
        resembles: str | None,
        phase: str,
        kind: ToolKind | None,
    ) -> AuditRecord:
        audited_name = raw_name[:_MAX_AUDITED_NAME]
        return AuditRecord(
            kind=AUDIT_KIND,
            tenant_id=ctx.tenant_id,
            thread_id=ctx.thread_id,
            run_id=ctx.run_id,
            user_id=ctx.user_id,
            details={
                "decision": "allowed" if allowed else "refused",
                "reason": reason,
                "reason_text": reason_text,
                "layer": layer,
                "tool_name": audited_name,
                "tool_name_escaped": ascii(audited_name),
                "tool_name_truncated": len(raw_name) > _MAX_AUDITED_NAME,
                "resembles": resembles,
                "arguments_digest": digest(arguments),
                "arguments_chars": len(arguments),
                "context_summary": summarize_request(ctx.summary, _MAX_SUMMARY) or "(no summary given)",
                "profile": self._profile.name,
                "profile_version": self._profile.version,
                "executor": self._profile.executor.value,
                "effective_tools": sorted(self._effective),
                "tool_kind": kind,
                "phase": phase,
            },
        )

    def _judge(self, raw_name: str) -> tuple[Layer | None, str, str, str | None]:
        """(refusing layer, reason code, reason text, look-alike of). Outermost layer first."""
        if raw_name in self._frontend:
            return None, "allowed", f"client tool {raw_name!r} is offered; the client runs it", None
        if raw_name not in self._specs:
            resembles = self._skeletons.get(_skeleton(raw_name))
            if resembles is not None:
                return (
                    "system",
                    "lookalike_name",
                    f"{raw_name!r} is not a tool; it only looks like {resembles!r}; never rewritten",
                    resembles,
                )
            if not _WELL_FORMED_NAME.match(raw_name) or _has_invisible(raw_name):
                return "system", "malformed_name", f"{raw_name!r} is not a valid tool name", None
            return "system", "unknown_tool", f"there is no tool named {raw_name!r}", None
        if self._profile_names is not None and raw_name not in self._profile_names:
            return (
                "profile",
                "not_in_profile_allowlist",
                f"tool {raw_name!r} is not allowed by execution profile {self._profile.name!r}",
                None,
            )
        if self._declared is not None and raw_name not in self._declared:
            return "declared", "not_declared", f"tool {raw_name!r} was not declared for this run", None
        return None, "allowed", f"tool {raw_name!r} is effective for this run", None
