"""Memory-model input tokens and memory runs per user turn, before and after coalescing.

``python -m bench.memory_tokens`` replays the seeded traffic of :mod:`bench.traffic` (light, daily-burst and
power users) and compares two ways of triggering memory extraction:

- **before** (per run): every finished worker run starts a memory run, and that run reads the memory profile's
  history window again (the last 20 user messages up to the newest message, each whole) with the new messages
  marked, as the executor did before coalescing (reproduced here by :func:`window_input`);
- **after** (coalesced): the rule of :class:`~shared.memory.coalescing.ExtractionCoalescer`, replayed on the
  turns' end times by :func:`coalesced` (no queue, no store: extraction is taken as instantaneous): one
  extraction when a thread has been quiet for ``idle_s`` (120 s) or when ``max_pending_user_messages`` (6) user
  messages wait, whichever comes first; each extraction runs the real
  :class:`~shared.memory.executor.MemoryExecutor` (new messages plus two cut turns of context) against a model
  that records its request and answers "none".

Both sides count the same prompt: the memory system prompt, the two tool specifications and the user message
(existing memories plus the conversation), with the real Qwen tokenizer when ``dashscope`` is installed. Both
show the same :data:`SHOWN_MEMORIES` existing memories (the executor shows up to 10 related ones), so the
difference is the conversation part and the number of runs. Only the first model turn of a run is counted (the
closing turn after tool results, equal in both, is left out). The worker's input per user turn comes from
:mod:`bench.input_tokens` (``chat_default``'s policy, prefix + window, summed over the run's model calls).

``--smoke`` runs a tiny traffic in a few seconds (what ``make test`` runs).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.input_tokens import Prefix, ThreadReader, message_token_counter, windows_for
from bench.stats import machine, markdown_table, mean, percentile
from bench.traffic import Traffic, TrafficConfig, UserThread, describe, generate
from devtools.memory_evaluation import ListAuditLog, ListStream
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.context_window import resolve_window
from shared.executors.context import RunContext
from shared.llm.types import ChatChunk, ChatRequest, Finished, TextDelta
from shared.memory.executor import SYSTEM_PROMPT, MemoryExecutor, is_human_message
from shared.memory.job import MEMORY_PROFILE
from shared.memory.models import Memory, MemoryKind
from shared.memory.tools import MEMORY_TOOL_SPECS
from shared.models import ExecutionMeta, ExecutorKind, Identity, Message, Origin, Usage
from shared.profiles import ExecutionProfile, MemoryPolicy, default_catalog
from shared.run_events.emitter import RunEmitter
from shared.tokens import count_tokens, tokenizer_name

SHOWN_MEMORIES = 10
TENANT = "tenant"


@functools.cache
def _profile(name: str) -> ExecutionProfile:
    return default_catalog().get(name)


def _memories(user_id: str) -> list[Memory]:
    at = datetime(2025, 1, 1, tzinfo=UTC)
    return [
        Memory(
            id=f"mem_{user_id}_{i}",
            tenant_id=TENANT,
            user_id=user_id,
            kind=MemoryKind.PREFERENCE,
            content=f"Prefers option {i} for the weekly planning meeting and answers in short bullet points",
            confidence=0.9,
            evidence_quote="x",
            created_at=at,
            updated_at=at,
        )
        for i in range(SHOWN_MEMORIES)
    ]


class _Tokens:
    """Tokens of a prompt, counted per line with a cache (the same lines recur across runs)."""

    def __init__(self) -> None:
        self._cache: dict[str, int] = {}
        specs = [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in MEMORY_TOOL_SPECS
        ]
        self.fixed = count_tokens(SYSTEM_PROMPT) + count_tokens(json.dumps(specs, ensure_ascii=False))

    def of(self, text: str) -> int:
        total = 0
        for line in text.split("\n"):
            value = self._cache.get(line)
            if value is None:
                value = self._cache[line] = count_tokens(line) + 1
            total += value
        return total


class _Upto(ThreadReader):
    """The thread as it was when a message with ``upto`` was the newest (later messages did not exist yet)."""

    def __init__(self, messages: list[Message], upto: int) -> None:
        super().__init__(messages[:upto])

    async def read_forward(self, tenant_id: str, thread_id: str, *, after_seq: int, limit: int) -> list[Message]:
        self.requests += 1
        return self._messages[after_seq : after_seq + limit]


class _RecordingModel:
    provider = "bench"

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def list_models(self) -> list[str]:
        return ["bench"]

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        self.requests.append(request)
        yield TextDelta("none")
        yield Finished("stop", Usage(provider="bench", model=request.model, input_tokens=0, output_tokens=0))


@dataclass(frozen=True)
class Turn:
    """A finished worker run: when it ended and the seq of its last message."""

    at: datetime
    upto: int


def turns_of(thread: UserThread) -> list[Turn]:
    """Each run's end (the run-completed event): the last message before the next user message."""
    out: list[Turn] = []
    for message in thread.messages:
        if is_human_message(message) and message.seq > 1:
            previous = thread.messages[message.seq - 2]
            out.append(Turn(previous.created_at, previous.seq))
    if thread.messages:
        out.append(Turn(thread.messages[-1].created_at, thread.messages[-1].seq))
    return out


def coalesced(turns: Sequence[Turn], policy: MemoryPolicy, human_upto: Sequence[int]) -> list[Turn]:
    """When the coalescer extracts, and up to which message: at the K-th pending user message, or ``idle_s``
    after a turn that no other turn followed within ``idle_s``. ``human_upto[i]``: user messages up to turn i."""
    extractions: list[Turn] = []
    done_users = 0
    for index, turn in enumerate(turns):
        pending = human_upto[index] - done_users
        if pending >= policy.max_pending_user_messages:
            extractions.append(turn)
            done_users = human_upto[index]
            continue
        following = turns[index + 1] if index + 1 < len(turns) else None
        due = turn.at + timedelta(seconds=policy.idle_s)
        if following is None or following.at > due:
            extractions.append(Turn(due, turn.upto))
            done_users = human_upto[index]
    return extractions


async def window_input(thread: UserThread, turn: Turn, cursor: int, tokens: _Tokens) -> int:
    """The per-run input before coalescing: the memory profile's window (each message whole) + the new ones."""
    policy = _profile(MEMORY_PROFILE).history_policy
    reader = _Upto(thread.messages, turn.upto)
    window = await resolve_window(reader, TENANT, "thread", policy, now=turn.at, upto_seq=turn.upto)
    new = thread.messages[cursor : turn.upto]
    shown = sorted({m.id: m for m in [*window.messages, *new]}.values(), key=lambda m: m.seq)
    text = _render_whole(shown, frozenset(m.id for m in new), _memories(thread.user_id))
    return tokens.fixed + tokens.of(text)


def _render_whole(messages: Sequence[Message], new_ids: frozenset[str], memories: Sequence[Memory]) -> str:
    """The pre-coalescing rendering: every message up to 4,000 characters, tool output up to 300."""
    lines = [
        "<existing_memories>",
        *(f'<memory id="{m.id}" kind="{m.kind.value}">{m.content}</memory>' for m in memories),
    ]
    lines += ["</existing_memories>", "<conversation>"]
    for m in messages:
        limit = 300 if m.role.value == "tool" else 4_000
        flag = ' new="true"' if m.id in new_ids and is_human_message(m) else ""
        lines.append(f'<message id="{m.id}" role="{m.role.value}"{flag}>{m.content[:limit]}</message>')
    lines.append("</conversation>")
    return "\n".join(lines)


async def executor_input(thread: UserThread, extraction: Turn, store: InMemoryMemoryStore, tokens: _Tokens) -> int:
    """The input of one coalesced extraction, as the real executor builds it (0 when it calls no model)."""
    model = _RecordingModel()
    executor = MemoryExecutor(
        model,
        _Upto(thread.messages, extraction.upto),
        store,
        ListAuditLog(),
        confidence_threshold=0.7,
        clock=lambda: extraction.at,
    )
    profile = _profile(MEMORY_PROFILE)
    ctx = RunContext(
        identity=Identity(tenant_id=TENANT, user_id=thread.user_id),
        thread_id="thread",
        run_id="bench",
        profile=profile,
        meta=ExecutionMeta(origin=Origin.AUTOMATION, executor=ExecutorKind.MEMORY, hidden_from_user=True),
    )
    await executor.execute(ctx, RunEmitter(ListStream(), "run:bench"))
    if not model.requests:
        return 0
    return tokens.fixed + tokens.of(model.requests[0].messages[-1].content or "")


@dataclass
class Side:
    name: str
    runs: int = 0
    inputs: list[int] = field(default_factory=list)

    def row(self, user_turns: int, worker_per_turn: float) -> list[object]:
        per_turn = sum(self.inputs) / user_turns if user_turns else 0.0
        return [
            self.name,
            f"{100 * self.runs / user_turns:.1f}" if user_turns else "n/a",
            mean(self.inputs),
            percentile(self.inputs, 95),
            max(self.inputs, default=0),
            per_turn,
            f"{per_turn / worker_per_turn:.2f}x" if worker_per_turn else "n/a",
        ]


HEADER = [
    "trigger",
    "memory runs per 100 user turns",
    "input per run (mean)",
    "p95",
    "max",
    "memory input per user turn",
    "vs worker input per user turn",
]


@dataclass
class MemoryTokensResult:
    traffic: dict[str, int]
    user_turns: int
    worker_per_turn: float
    before: Side
    after: Side
    policy: MemoryPolicy
    seconds: float

    def markdown(self) -> str:
        return "\n".join(
            [
                f"machine: {machine()}; tokenizer: {tokenizer_name()}",
                f"traffic: {self.traffic}",
                f"policy: idle_s {self.policy.idle_s}, max_pending_user_messages "
                f"{self.policy.max_pending_user_messages}; {SHOWN_MEMORIES} existing memories shown on both sides",
                f"worker input per user turn (chat_default, prefix + window, all model calls): "
                f"{self.worker_per_turn:,.0f} tokens",
                "",
                markdown_table(
                    HEADER,
                    [s.row(self.user_turns, self.worker_per_turn) for s in (self.before, self.after)],
                ),
                "",
                f"({self.seconds:.1f} s)",
            ]
        )


async def replay(traffic: Traffic, policy: MemoryPolicy) -> tuple[Side, Side]:
    tokens = _Tokens()
    before, after = Side("per run (before)"), Side("coalesced (after)")
    for thread in traffic.threads.values():
        turns = turns_of(thread)
        human_upto = [sum(1 for m in thread.messages[: t.upto] if is_human_message(m)) for t in turns]
        cursor = 0
        for turn in turns:  # before: one memory run per finished worker run
            if any(is_human_message(m) for m in thread.messages[cursor : turn.upto]):
                before.runs += 1
                before.inputs.append(await window_input(thread, turn, cursor, tokens))
            cursor = turn.upto
        store = InMemoryMemoryStore()
        for memory in _memories(thread.user_id):
            await store.put(memory)
        for extraction in coalesced(turns, policy, human_upto):
            spent = await executor_input(thread, extraction, store, tokens)
            if spent:
                after.runs += 1
                after.inputs.append(spent)
    return before, after


def run(cfg: TrafficConfig, policy: MemoryPolicy | None = None) -> MemoryTokensResult:
    started = time.perf_counter()
    policy = policy or _profile(MEMORY_PROFILE).memory_policy
    traffic = generate(cfg)
    worker_policy = _profile("chat_default").history_policy
    windows = asyncio.run(windows_for(traffic, worker_policy, Prefix(), message_token_counter()))
    user_turns = traffic.runs
    worker_per_turn = sum(w.request.total for w in windows) / user_turns if user_turns else 0.0
    before, after = asyncio.run(replay(traffic, policy))
    return MemoryTokensResult(
        describe(traffic), user_turns, worker_per_turn, before, after, policy, time.perf_counter() - started
    )


def main(argv: Sequence[str] | None = None) -> MemoryTokensResult:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny traffic (a few users, four days)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--idle-s", type=int, default=None, help="override memory_policy.idle_s")
    parser.add_argument("--max-pending", type=int, default=None, help="override max_pending_user_messages")
    parser.add_argument("--json", dest="json_path", help="also write the summary as JSON here")
    args = parser.parse_args(argv)
    cfg = TrafficConfig.smoke() if args.smoke else TrafficConfig()
    cfg = TrafficConfig(**{**cfg.__dict__, "seed": args.seed})
    policy = _profile(MEMORY_PROFILE).memory_policy
    updates: dict[str, Any] = {}
    if args.idle_s is not None:
        updates["idle_s"] = args.idle_s
    if args.max_pending is not None:
        updates["max_pending_user_messages"] = args.max_pending
    result = run(cfg, MemoryPolicy.model_validate({**policy.model_dump(), **updates}))
    print(result.markdown())
    if args.json_path:
        summary = {
            "traffic": result.traffic,
            "worker_per_turn": result.worker_per_turn,
            "rows": {s.name: s.row(result.user_turns, result.worker_per_turn) for s in (result.before, result.after)},
        }
        with open(args.json_path, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=2, default=str)
    return result


if __name__ == "__main__":
    main()
