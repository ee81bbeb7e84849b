"""Threads for context-window tests: a thread built message by message, a store reader over it that counts its
requests, and random histories (hypothesis), well formed or not. Shared by the window's tests and those of the window
served from what admission read."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

from shared.context_window import KnownHistory
from shared.models import ExecutionMeta, Message, Role, ToolCall
from shared.profiles import HistoryPolicy

TENANT, THREAD = "t1", "th1"
NOW = datetime(2025, 3, 10, 1, 0, tzinfo=UTC)
BIG = 10**9


class ListReader:
    """An in-memory MessageHistoryReader over a list ordered by seq; counts its requests."""

    def __init__(self, messages: list[Message]) -> None:
        self._messages = messages
        self._seqs = [m.seq for m in messages]
        self.requests = 0

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        self.requests += 1
        end = len(self._messages) if before_seq is None else bisect.bisect_left(self._seqs, before_seq)
        return list(reversed(self._messages[max(end - limit, 0) : end]))


class Thread:
    """Builds a thread message by message, assigning ids and seq numbers."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def add(self, role: Role, content: str = "", **fields: Any) -> Message:
        seq = len(self.messages) + 1
        msg = Message(
            id=f"m{seq}", thread_id=THREAD, role=role, content=content or f"{role.value} {seq}", seq=seq, **fields
        )
        self.messages.append(msg)
        return msg

    def user(self, hidden: bool = False, **fields: Any) -> Message:
        return self.add(Role.USER, meta=ExecutionMeta(hidden_from_user=hidden), **fields)

    def calls(self, *call_ids: str, **fields: Any) -> Message:
        return self.add(
            Role.ASSISTANT, tool_calls=tuple(ToolCall(id=c, name="get_current_time") for c in call_ids), **fields
        )

    def result(self, call_id: str, **fields: Any) -> Message:
        return self.add(Role.TOOL, tool_call_id=call_id, **fields)


@dataclass
class History:
    messages: list[Message]
    well_formed: bool
    """Every call answered once, directly after it, in call order: the shape the executors store."""


BLOCKS = st.one_of(
    st.tuples(st.just("user"), st.booleans()),
    st.tuples(st.just("system"), st.booleans()),
    st.tuples(st.just("text"), st.booleans()),
    st.tuples(st.just("tools"), st.integers(1, 3)),
    st.tuples(st.just("shuffled"), st.integers(2, 3), st.randoms(use_true_random=False)),
    st.tuples(st.just("dangling"), st.integers(1, 3), st.integers(0, 2)),
    st.tuples(st.just("orphan"), st.booleans()),
    st.tuples(st.just("duplicate"), st.booleans()),
)


@st.composite
def histories(draw: st.DrawFn, *, well_formed: bool | None = None) -> History:
    blocks = draw(st.lists(BLOCKS, max_size=40))
    if well_formed:
        blocks = [b for b in blocks if b[0] not in {"dangling", "orphan", "duplicate", "shuffled"}]
    thread = Thread()
    malformed = False
    counter = 0
    for block in blocks:
        kind = block[0]
        if kind == "user":
            thread.user(hidden=bool(block[1]))
        elif kind == "system":
            thread.add(Role.SYSTEM, meta=ExecutionMeta(hidden_from_user=bool(block[1])))
        elif kind == "text":
            thread.add(Role.ASSISTANT)
        elif kind in {"tools", "shuffled"}:
            call_ids = [f"c{counter + k}" for k in range(block[1])]
            counter += block[1]
            thread.calls(*call_ids)
            order = list(call_ids)
            if kind == "shuffled":  # parallel results stored in completion order
                block[2].shuffle(order)
                malformed = malformed or order != call_ids
            for call_id in order:
                thread.result(call_id)
        elif kind == "dangling":
            call_ids = [f"c{counter + k}" for k in range(block[1])]
            counter += block[1]
            thread.calls(*call_ids)
            for call_id in call_ids[: min(block[2], block[1] - 1)]:
                thread.result(call_id)
            malformed = True
        elif kind == "orphan":
            thread.result(f"c{max(counter - 1, 0)}" if block[1] else "ghost")
            malformed = True
        elif kind == "duplicate":
            thread.calls(f"c{counter}")
            thread.result(f"c{counter}")
            thread.result(f"c{counter}")
            counter += 1
            malformed = True
    # the message being handled: usually a user message, sometimes an automation system prompt
    if draw(st.integers(0, 4)):
        thread.user()
    else:
        thread.add(Role.SYSTEM, meta=ExecutionMeta(hidden_from_user=True))
    return History(thread.messages, well_formed=not malformed)


POLICIES = [
    HistoryPolicy(n=3, max_input_tokens=BIG),
    HistoryPolicy(n=20, max_input_tokens=BIG),
    HistoryPolicy(n=2, max_input_tokens=BIG, include_current_user_message=False),
    HistoryPolicy(n=3, max_input_tokens=BIG, block_size=4),
    HistoryPolicy(n=20, max_input_tokens=BIG, block_size=20),
    HistoryPolicy(mode="today_yesterday", max_input_tokens=BIG),
]


def known_after_admission(messages: list[Message], stored: int, read_limit: int) -> KnownHistory | None:
    """What admission knows when the last ``stored`` messages are the run's own: the newest ``read_limit`` messages
    before them (read beside the claim), then those it stored."""
    before = messages[: len(messages) - stored]
    read = list(reversed(before[-read_limit:])) if read_limit else []
    last_seq = before[-1].seq if before else 0
    return KnownHistory.after_admission(read, read_limit=read_limit, last_seq=last_seq or 0, stored=messages[-stored:])
