"""The two memory tools as offered to the model. They are implemented by the memory executor (through the gate),
never by the tool registry, and only memory profiles allow them (``shared.profiles.MEMORY_TOOL_NAMES``)."""

from __future__ import annotations

from shared.llm.types import ToolSpec
from shared.memory.models import MAX_CONTENT_CHARS, MAX_QUOTE_CHARS, MAX_SOURCE_IDS, MemoryKind

MEMORY_WRITE = "memory_write"
MEMORY_FORGET = "memory_forget"

_PROVENANCE = {
    "confidence": {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
        "description": "How sure you are that the user really stated this about themselves (0-1).",
    },
    "evidence_quote": {
        "type": "string",
        "maxLength": MAX_QUOTE_CHARS,
        "description": "The user's own words, copied verbatim from one of the cited user messages.",
    },
    "source_message_ids": {
        "type": "array",
        "items": {"type": "string"},
        "minItems": 1,
        "maxItems": MAX_SOURCE_IDS,
        "description": "Ids of the NEW user messages the evidence comes from.",
    },
}

MEMORY_WRITE_SPEC = ToolSpec(
    name=MEMORY_WRITE,
    description=(
        "Propose one durable memory about the user, stated by the user themselves. To update an existing "
        "memory, write the new fact and name the old memory in 'supersedes'."
    ),
    parameters={
        "type": "object",
        "properties": {
            "kind": {
                "type": "string",
                "enum": [k.value for k in MemoryKind],
                "description": "profile: stable facts; preference: likes and habits; goal: ongoing plans; "
                "instruction: how the user wants to be helped; other.",
            },
            "content": {
                "type": "string",
                "maxLength": MAX_CONTENT_CHARS,
                "description": "One self-contained fact in the user's language, third person, no dates relative "
                "to today.",
            },
            **_PROVENANCE,
            "supersedes": {
                "type": "string",
                "description": "Optional: the id of an existing memory this new fact replaces.",
            },
        },
        "required": ["kind", "content", "confidence", "evidence_quote", "source_message_ids"],
        "additionalProperties": False,
    },
)

MEMORY_FORGET_SPEC = ToolSpec(
    name=MEMORY_FORGET,
    description=(
        "Mark an existing memory as no longer valid because the user retracted or corrected it, or asked to "
        "forget it. The memory is kept for audit, never deleted."
    ),
    parameters={
        "type": "object",
        "properties": {
            "memory_id": {"type": "string", "description": "The id of an existing memory shown to you."},
            "reason": {"type": "string", "maxLength": 300, "description": "Why it is no longer valid."},
            "mode": {
                "type": "string",
                "enum": ["retracted", "superseded"],
                "description": "retracted: wrong or to be forgotten; superseded: outdated by a change.",
            },
            **_PROVENANCE,
        },
        "required": ["memory_id", "reason", "confidence", "evidence_quote", "source_message_ids"],
        "additionalProperties": False,
    },
)

MEMORY_TOOL_SPECS: tuple[ToolSpec, ...] = (MEMORY_FORGET_SPEC, MEMORY_WRITE_SPEC)
