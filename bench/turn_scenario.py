"""The user turns the capacity benchmarks replay: the token benchmark's traffic shrunk to a repeating cycle.

Every figure comes from the seeded traffic of :mod:`bench.traffic` (seed 7, 14,357 runs; measured with the
commands in docs/benchmarks.md §7):

- **The mix.** 62.7 % of runs answer at once, 24.8 % call the clock (``get_current_time``) first, 12.5 % call the
  clock and a document search (``search_documents``) in one assistant message. :data:`CYCLE` is 8 turns with 5,
  2 and 1 of them (62.5 / 25 / 12.5 %).
- **Sizes.** A user message is 162 bytes on average (34 words: :data:`USER_WORDS`), an answer 931 bytes
  (:data:`ANSWER_BYTES`) and 256 tokens (``bench.bill``'s worker output per turn), a search result 3,687
  characters (5,243 bytes) once cut to the tools' 16,000-character cap.
- **The model streams one token per chunk** (vLLM does; DashScope sends a few tokens per chunk, which would mean
  fewer events and Redis writes than counted here): the answer goes out in :data:`ANSWER_TOKENS` chunks.

The scripted model answers as the traffic's model did: the worker's model calls the turn's tools, then answers
with the turn's text; the memory model proposes one ``memory_write`` per new user message it is shown, quoting it,
then says "done" (a memory run that writes: the dearer case). The turn's kind travels in its user message as a
``[k:<kind>]`` tag, so the model server needs no state.

``DOCUMENT_TOOL`` is a server tool plugin (``TOOL_PLUGINS=bench.turn_scenario:DOCUMENT_TOOL``) returning a document
of the traffic's mean size; :func:`catalog_with_documents` lets ``chat_default`` call it, since its allowlist
names only the clock.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.traffic import _Text
from shared.llm.types import ToolSpec
from shared.profiles import ProfileCatalog, default_catalog
from shared.tools.registry import ServerTool, ToolContext
from tests.support.model_server import ScriptedToolCall, ScriptedTurn

PLAIN, CLOCK, DOC = "plain", "clock", "doc"
CYCLE = (PLAIN, PLAIN, CLOCK, PLAIN, DOC, PLAIN, CLOCK, PLAIN)
"""One thread's turns, repeated: 5 plain, 2 clock, 1 clock + document (the traffic's mix)."""
TRAFFIC_MIX = {PLAIN: 0.627, CLOCK: 0.248, DOC: 0.125}
"""The share of each kind of run in the seeded traffic (the weights the capacity model uses)."""
USER_WORDS = 34
ANSWER_TOKENS = 256
ANSWER_BYTES = 931
DOCUMENT_CHARS = 3_687
SEED_MESSAGES = 60
"""Messages stored in a thread before it is measured, so every window read is a full page, as for a returning user."""
CLIENT_HISTORY = 20
"""User messages a client sends back with each new one (AG-UI clients resend the conversation they hold; a client
that loaded the newest page of history holds about this many)."""
SEARCH_TOOL = "search_documents"
_KIND = re.compile(r"\[k:(\w+)\]")
_NEW_USER = re.compile(r'<message id="([^"]+)" role="user" new="true">(.*?)</message>', re.S)


def chunks(text: str, count: int = ANSWER_TOKENS) -> list[str]:
    """``text`` in ``count`` pieces of nearly equal length: the deltas of a model streaming one token each."""
    count = max(1, min(count, len(text)))
    bounds = [round(i * len(text) / count) for i in range(count + 1)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def _cut(text: str, size: int) -> str:
    """The longest prefix of ``text`` of at most ``size`` UTF-8 bytes."""
    while len(text.encode()) > size:
        text = text[: max(1, len(text) - max(1, (len(text.encode()) - size) // 3))]
    return text


@dataclass(frozen=True)
class Texts:
    """The fixed texts of the scenario, the same on every run (so counts repeat exactly)."""

    users: tuple[str, ...]
    answer: str
    document: str
    seed_user: str
    seed_answer: str


def texts(seed: int = 11) -> Texts:
    text = _Text(random.Random(seed))
    users = tuple(text.sentence(USER_WORDS) for _ in CYCLE)
    answer = _cut(text.paragraph(2 * ANSWER_TOKENS), ANSWER_BYTES)
    document = text.paragraph(DOCUMENT_CHARS)[:DOCUMENT_CHARS]
    return Texts(users, answer, document, text.sentence(USER_WORDS), answer)


TEXTS = texts()


async def _search(arguments: dict[str, Any], _ctx: ToolContext) -> str:
    return TEXTS.document


DOCUMENT_TOOL = ServerTool(
    spec=ToolSpec(
        name=SEARCH_TOOL,
        description="Search the user's documents; returns the best matching document.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    handler=_search,
    source="plugin:bench.turn_scenario",
)


def catalog_with_documents(known_tools: Iterable[str]) -> ProfileCatalog:
    """The shipped profiles, ``chat_default`` also allowed to call :data:`DOCUMENT_TOOL`."""
    catalog = default_catalog(known_tools)
    profiles = {}
    for profile in catalog:
        if profile.name == "chat_default" and profile.tool_policy is not None:
            allowed = profile.tool_policy.allowlist or []
            policy = profile.tool_policy.model_copy(update={"allowlist": [*allowed, SEARCH_TOOL]})
            profile = profile.model_copy(update={"tool_policy": policy})
        profiles[profile.name] = profile
    return ProfileCatalog(profiles)


def user_text(index: int, kind: str) -> str:
    return f"{TEXTS.users[index % len(TEXTS.users)]} [k:{kind}]"


@dataclass
class ModelScript:
    """The scripted model's behaviour; its :meth:`respond` is a ``ModelServer`` responder."""

    first_chunk_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    on_worker_request: Callable[[], None] | None = None
    """Called as each worker model request arrives (the CPU benchmark reads the app's CPU then)."""
    answers: int = field(default=0, init=False)

    def respond(self, body: dict[str, Any]) -> ScriptedTurn:
        messages: list[dict[str, Any]] = body.get("messages", [])
        if "flash" in str(body.get("model", "")):
            return self._memory(messages)
        if self.on_worker_request is not None:
            self.on_worker_request()
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return self._answer()
        user = next((str(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        tags = _KIND.findall(user)  # the last one: the memory note put before the text may quote older messages
        kind = tags[-1] if tags else PLAIN
        if kind == PLAIN:
            return self._answer()
        calls = [ScriptedToolCall("get_current_time", json.dumps({"timezone": "Asia/Shanghai"}))]
        if kind == DOC:
            calls.append(ScriptedToolCall(SEARCH_TOOL, json.dumps({"query": "quarterly report delivery plan"})))
        return ScriptedTurn(tool_calls=calls, first_chunk_delay_s=self.first_chunk_delay_s)

    def _answer(self) -> ScriptedTurn:
        self.answers += 1
        return ScriptedTurn(
            text=chunks(TEXTS.answer),
            first_chunk_delay_s=self.first_chunk_delay_s,
            chunk_delay_s=self.chunk_delay_s,
        )

    def _memory(self, messages: list[dict[str, Any]]) -> ScriptedTurn:
        if any(m.get("role") == "tool" for m in messages):
            return ScriptedTurn(text=["done"], first_chunk_delay_s=self.first_chunk_delay_s)
        prompt = str(messages[-1].get("content") or "") if messages else ""
        found = _NEW_USER.findall(prompt)[-1:]
        calls = [
            ScriptedToolCall(
                "memory_write",
                json.dumps(
                    {
                        "kind": "profile",
                        "content": f"The user said: {text[:120]}",
                        "confidence": 0.9,
                        "evidence_quote": text[:120],
                        "source_message_ids": [mid],
                    }
                ),
            )
            for mid, text in found
        ]
        if not calls:
            return ScriptedTurn(text=["none"], first_chunk_delay_s=self.first_chunk_delay_s)
        return ScriptedTurn(tool_calls=calls, first_chunk_delay_s=self.first_chunk_delay_s)


def run_body(thread_id: str, run_id: str, held: list[dict[str, str]], message: dict[str, str]) -> dict[str, Any]:
    """A ``RunAgentInput``: the client's last :data:`CLIENT_HISTORY` user messages, then the new one."""
    return {
        "threadId": thread_id,
        "runId": run_id,
        "messages": [*held[-CLIENT_HISTORY:], message],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
