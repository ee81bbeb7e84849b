"""What an executor sends to a chat model and what it gets back, in our own types (never SDK types)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from shared.models import Usage

RUN_NOTES_BEGIN = "[run notes: written by the server for this run, not by the user]"
RUN_NOTES_END = "[/run notes]"
"""The marked block of per-run notes (memories, client context) that the worker puts at the start of the newest
user message (``shared.executors.transcript.with_run_notes``)."""


def without_run_notes(text: str) -> str:
    """A user message's own words: ``text`` without the run-notes block it may open with."""
    if not text.startswith(RUN_NOTES_BEGIN):
        return text
    end = text.find(RUN_NOTES_END)
    return text if end < 0 else text[end + len(RUN_NOTES_END) :].lstrip("\n")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as offered to the model: name, description and JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """A message in the OpenAI chat shape, already cut to the window."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[tuple[str, str, str], ...] = ()  # (id, name, arguments json)
    tool_call_id: str | None = None
    images: tuple[str, ...] = ()
    """A user message's images, each a URL the provider reads (a ``data:`` URL of the stored bytes by default)."""

    def to_openai(self) -> dict[str, Any]:
        """The message in the shape every server we target accepts (docs/providers.md, "Message shapes").

        ``content`` is always a string, ``""`` when there is no text: OpenAI, DashScope and vLLM also take
        ``null`` on an assistant tool-call message, but llama.cpp's server rejects it (HTTP 500, "Input should
        be a valid string"), and the empty string means the same to all of them. Tool-call arguments are never
        empty: ``"{}"`` stands for "no arguments", because servers that render tool calls through a chat
        template parse them as JSON. Histories stored before this rule (no text, or ``None``) come out the
        same way, since the shape is decided here and not in the store.
        """
        data: dict[str, Any] = {"role": self.role, "content": self.content or ""}
        if self.images:
            # OpenAI's content parts, which vLLM, llama.cpp's server and DashScope take alike.
            data["content"] = [
                *([{"type": "text", "text": self.content}] if self.content else []),
                *({"type": "image_url", "image_url": {"url": url}} for url in self.images),
            ]
        if self.role == "assistant" and self.tool_calls:
            data["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args or "{}"}}
                for cid, name, args in self.tool_calls
            ]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        return data


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One call to a chat model: the model id, the window of messages, the tools offered and the options."""

    model: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    thinking: Literal["off", "on"] = "off"
    temperature: float | None = None
    max_tokens: int | None = None
    tool_choice: str | None = None
    """Force a call of this tool (the preflight's check); None lets the model decide."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A fragment of the answer text, as streamed."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Reasoning text the provider sent although thinking was off; never shown to users, only counted."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a streamed tool call; fragments with the same ``index`` belong to one call."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Finished:
    """The end of a model response: the finish reason and the usage of the call."""

    reason: str
    usage: Usage | None = None


ChatChunk = TextDelta | ReasoningDelta | ToolCallDelta | Finished


@dataclass
class ChatTurn:
    """One model turn, accumulated from its chunks."""

    text: str = ""
    reasoning: str = ""
    tool_calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage | None = None
