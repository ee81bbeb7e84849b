"""The cache-friendly window: ``last_n_user_messages`` with ``block_size`` drops old messages in blocks.

The property that matters for the provider's prompt cache: consecutive requests start at the same message for
as long as the N-th user message stays in one block of sequence numbers, so their prefixes match.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from shared.context_window import WindowResult, resolve_window
from shared.errors import ConfigurationError
from shared.models import Message, Role, ToolCall
from shared.profiles import PROFILES_DIR, HistoryPolicy, default_known_tools, load_catalog
from tests.support.histories import BIG, NOW, TENANT, THREAD, ListReader


def build_thread(turn_shapes: list[int]) -> list[Message]:
    """One turn per entry: 0 = user + answer, 1 = user + tool call + result + answer, 2 = user only."""
    messages: list[Message] = []

    def add(role: Role, **fields: Any) -> None:
        seq = len(messages) + 1
        messages.append(
            Message(id=f"m{seq}", thread_id=THREAD, role=role, content=f"{role.value} {seq}", seq=seq, **fields)
        )

    for index, shape in enumerate(turn_shapes):
        add(Role.USER)
        if shape == 1:
            add(Role.ASSISTANT, tool_calls=(ToolCall(id=f"c{index}", name="get_current_time"),))
            add(Role.TOOL, tool_call_id=f"c{index}")
        if shape != 2:
            add(Role.ASSISTANT)
    return messages


def blocked(n: int, block_size: int, **changes: Any) -> HistoryPolicy:
    return HistoryPolicy(n=n, block_size=block_size, max_input_tokens=BIG, **changes)


def window(messages: list[Message], pol: HistoryPolicy, *, page_size: int = 50) -> WindowResult:
    return asyncio.run(resolve_window(ListReader(messages), TENANT, THREAD, pol, now=NOW, page_size=page_size))


def reference(messages: list[Message], n: int, block_size: int) -> list[Message]:
    """The rule stated over the whole list: find the N-th user message back, take its block's first seq, start
    at the first user message at or after it (or at the thread's start when the block is the first one)."""
    users = [m for m in messages if m.role is Role.USER]
    if len(users) < n:
        return list(messages)
    nth = users[-n]
    start = (nth.seq - 1) // block_size * block_size + 1
    if start == 1:
        return list(messages)
    first_user = next(m for m in messages if m.role is Role.USER and m.seq >= start)
    return [m for m in messages if m.seq >= first_user.seq]


def test_consecutive_requests_share_their_start_until_the_nth_user_message_leaves_the_block() -> None:
    # GIVEN a thread of simple turns (two messages each) and N=3 with blocks of 8 messages
    thread = build_thread([0] * 20)
    pol = blocked(3, 8)
    # WHEN the window is built after each new turn
    starts = [window(thread[: 2 * turns], pol).messages[0].seq for turns in range(4, 21)]
    # THEN the start stays put for several turns, then jumps forward by whole blocks, never back
    assert starts == sorted(starts)
    assert len(set(starts)) < len(starts) / 2
    assert all((start - 1) % 8 == 0 for start in starts)


def test_the_window_holds_at_least_n_user_messages_and_fewer_than_one_block_more() -> None:
    thread = build_thread([0, 1, 0, 0, 1, 2, 0, 1] * 6)
    for n, block_size in [(3, 10), (5, 7), (4, 40)]:
        for end in range(10, len(thread) + 1):
            history = thread[:end]
            got = window(history, blocked(n, block_size)).messages
            plain = window(history, HistoryPolicy(n=n, max_input_tokens=BIG)).messages
            assert sum(m.role is Role.USER for m in got) >= min(n, sum(m.role is Role.USER for m in history))
            assert [m.id for m in got[-len(plain) :]] == [m.id for m in plain]  # a superset of the last-N window
            assert len(got) - len(plain) < block_size


def test_the_window_starts_on_a_user_message_so_tool_pairs_are_never_split() -> None:
    thread = build_thread([1, 1, 0, 1] * 10)
    for end in range(8, len(thread) + 1):
        if thread[end - 1].tool_calls:
            continue  # a call whose result is not stored yet is the current turn, not a split
        result = window(thread[:end], blocked(4, 6))
        if result.messages[0].seq > 1:
            assert result.messages[0].role is Role.USER
        assert result.repairs == []


def test_block_size_one_is_the_plain_sliding_window() -> None:
    thread = build_thread([0, 1, 2, 0] * 8)
    for end in range(1, len(thread) + 1):
        got = window(thread[:end], blocked(5, 1)).messages
        plain = window(thread[:end], HistoryPolicy(n=5, max_input_tokens=BIG)).messages
        assert [m.id for m in got] == [m.id for m in plain]


def test_fewer_than_n_user_messages_is_the_whole_thread() -> None:
    thread = build_thread([0, 1, 0])
    assert [m.id for m in window(thread, blocked(20, 40)).messages] == [m.id for m in thread]


def test_store_requests_do_not_grow_with_the_thread() -> None:
    short = build_thread([0, 1, 0] * 40)
    long = build_thread([0, 1, 0] * 4000)
    counts = {len(t): window(t, blocked(20, 40), page_size=50).store_requests for t in (short, long)}
    assert len(set(counts.values())) == 1, counts


@settings(max_examples=150, deadline=None)
@given(
    shapes=st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=60),
    n=st.integers(min_value=1, max_value=12),
    block_size=st.integers(min_value=1, max_value=30),
    page_size=st.integers(min_value=1, max_value=20),
)
def test_matches_the_rule_stated_over_the_whole_thread(
    shapes: list[int], n: int, block_size: int, page_size: int
) -> None:
    thread = build_thread(shapes)
    got = window(thread, blocked(n, block_size), page_size=page_size).messages
    assert [m.id for m in got] == [m.id for m in reference(thread, n, block_size)]


def test_block_size_is_refused_for_today_yesterday() -> None:
    with pytest.raises(ValidationError, match="block_size applies only"):
        HistoryPolicy(mode="today_yesterday", block_size=40)


def test_a_profile_with_block_size_on_the_wrong_mode_names_the_field_and_the_fix(tmp_path: Path) -> None:
    raw = json.loads((PROFILES_DIR / "chat_default.json").read_text(encoding="utf-8"))
    raw["history_policy"] = {"mode": "today_yesterday", "block_size": 40}
    (tmp_path / "chat_default.json").write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(ConfigurationError) as caught:
        load_catalog(tmp_path, known_tools=default_known_tools())
    assert "field 'history_policy'" in caught.value.message
    assert "Fix: remove block_size, or set mode to 'last_n_user_messages'" in caught.value.message


def test_the_emergency_n_override_widens_a_blocked_window_and_keeps_its_blocks(tmp_path: Path) -> None:
    raw = json.loads((PROFILES_DIR / "chat_default.json").read_text(encoding="utf-8"))
    raw["history_policy"] = {"mode": "last_n_user_messages", "n": 20, "block_size": 40}
    (tmp_path / "chat_default.json").write_text(json.dumps(raw), encoding="utf-8")
    catalog = load_catalog(tmp_path, known_tools=default_known_tools(), window_n_override=30)
    policy = catalog.resolve("chat_default", tenant_id="t").history_policy
    assert (policy.n, policy.block_size) == (30, 40)
