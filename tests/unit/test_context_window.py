"""The context window: last-N user messages exactly as docs/design.md §5, tool-pair repairs, the token cap,
today_yesterday, and store requests that do not grow with the thread."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.context_window import SYNTHETIC_RESULT_TEXT, RepairKind, WindowResult, resolve_window
from shared.models import Message, Role
from shared.profiles import HistoryPolicy
from tests.support.histories import BIG, NOW, TENANT, THREAD, History, ListReader, Thread, histories


def policy(n: int = 20, **changes: Any) -> HistoryPolicy:
    return HistoryPolicy(n=n, max_input_tokens=changes.pop("max_input_tokens", BIG), **changes)


def window(messages: list[Message], pol: HistoryPolicy, *, page_size: int = 50, **kwargs: Any) -> WindowResult:
    return asyncio.run(
        resolve_window(ListReader(messages), TENANT, THREAD, pol, now=NOW, page_size=page_size, **kwargs)
    )


def reference_collect(messages: list[Message], n: int, include_current: bool = True) -> list[Message]:
    """The original pseudo-code, verbatim, over the whole list (plus the include_current flag)."""
    included: list[Message] = []
    user_count = 0
    for index, msg in enumerate(reversed(messages)):
        included.append(msg)
        if msg.role is Role.USER and (include_current or index > 0):
            user_count += 1
        if user_count >= n:
            break
    return list(reversed(included))


def assert_tool_pairs_whole(messages: list[Message]) -> None:
    """The provider's rule: each tool_calls message is followed directly by one result per call, and no other tool
    message exists."""
    i = 0
    while i < len(messages):
        msg = messages[i]
        assert msg.role is not Role.TOOL, f"orphan tool message {msg.id}"
        i += 1
        if msg.role is Role.ASSISTANT and msg.tool_calls:
            got: list[str | None] = []
            while i < len(messages) and messages[i].role is Role.TOOL:
                got.append(messages[i].tool_call_id)
                i += 1
            assert sorted(c or "" for c in got) == sorted({c.id for c in msg.tool_calls}), f"broken block {msg.id}"


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


# ----------------------------------------------------------------------------------------------------------
# Random histories
# ----------------------------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(history=histories(), n=st.integers(1, 8), include_current=st.booleans(), page_size=st.integers(1, 30))
def test_random_histories_hold_exactly_min_n_available_users_and_whole_tool_pairs(
    history: History, n: int, include_current: bool, page_size: int
) -> None:
    # GIVEN any history, well formed or not
    messages = history.messages
    current = messages[-1]
    # WHEN the window is resolved
    result = window(messages, policy(n, include_current_user_message=include_current), page_size=page_size)
    got = result.messages
    # THEN it holds exactly min(N, available) counted user messages
    users = [m for m in messages if m.role is Role.USER]
    counted_current = current.role is Role.USER and not include_current
    available = len(users) - (1 if counted_current else 0)
    expected_users = min(n, available) + (1 if counted_current else 0)
    assert sum(m.role is Role.USER for m in got) == expected_users
    # AND it ends at the current message
    assert got[-1].id == current.id
    # AND no tool message is orphan or dangling
    assert_tool_pairs_whole(got)
    # AND the repairs touched only tool messages: everything else is exactly the pseudo-code's window
    reference = reference_collect(messages, n, include_current)
    assert ids([m for m in got if m.role is not Role.TOOL]) == ids([m for m in reference if m.role is not Role.TOOL])
    # AND hidden messages are part of the model's context
    assert {m.id for m in reference if m.meta.hidden_from_user} <= set(ids(got))


@settings(max_examples=400, deadline=None)
@given(
    history=histories(well_formed=True),
    n=st.integers(1, 8),
    include_current=st.booleans(),
    page_size=st.integers(1, 30),
)
def test_well_formed_histories_equal_the_reference_pseudo_code(
    history: History, n: int, include_current: bool, page_size: int
) -> None:
    result = window(history.messages, policy(n, include_current_user_message=include_current), page_size=page_size)
    assert ids(result.messages) == ids(reference_collect(history.messages, n, include_current))
    assert result.repairs == []


# ----------------------------------------------------------------------------------------------------------
# The rules one by one
# ----------------------------------------------------------------------------------------------------------


def test_walks_back_to_the_nth_user_message_keeping_everything_in_between() -> None:
    thread = Thread()
    thread.user()  # m1: outside the window
    thread.add(Role.SYSTEM)  # m2: before the 3rd user message counted from the end: outside
    thread.user()  # m3
    thread.calls("a")  # m4
    thread.result("a")  # m5
    thread.add(Role.ASSISTANT)  # m6
    thread.user(hidden=True)  # m7
    thread.add(Role.SYSTEM)  # m8
    thread.user()  # m9: current
    result = window(thread.messages, policy(3))
    assert ids(result.messages) == ["m3", "m4", "m5", "m6", "m7", "m8", "m9"]


def test_fewer_than_n_user_messages_returns_the_whole_history() -> None:
    thread = Thread()
    thread.add(Role.SYSTEM)
    thread.user()
    thread.add(Role.ASSISTANT)
    thread.user()
    assert ids(window(thread.messages, policy(20)).messages) == ["m1", "m2", "m3", "m4"]


def test_current_message_not_counted_is_still_included() -> None:
    thread = Thread()
    for _ in range(4):
        thread.user()
        thread.add(Role.ASSISTANT)
    thread.user()  # m9, current
    counted = window(thread.messages, policy(2))
    uncounted = window(thread.messages, policy(2, include_current_user_message=False))
    assert ids(counted.messages) == ["m7", "m8", "m9"]
    assert ids(uncounted.messages) == ["m5", "m6", "m7", "m8", "m9"]


def test_dangling_call_gets_a_synthetic_cancelled_result_before_the_model_sees_it() -> None:
    # GIVEN a run cancelled mid-tool: two parallel calls, one result, then the user writes again
    thread = Thread()
    thread.user()
    call = thread.calls("a", "b")
    thread.result("a")
    thread.user()
    # WHEN the window is resolved
    result = window(thread.messages, policy())
    # THEN the missing result is synthesised right inside the block, and the repair is recorded
    synthetic = result.messages[3]
    assert (synthetic.role, synthetic.tool_call_id, synthetic.content) == (Role.TOOL, "b", SYNTHETIC_RESULT_TEXT)
    assert synthetic.flags == {"synthetic": True}
    assert ids(result.messages) == ["m1", "m2", "m3", synthetic.id, "m4"]
    assert result.repairs == [
        {"kind": RepairKind.DANGLING_TOOL_CALL.value, "message_ids": [call.id], "tool_call_ids": ["b"]}
    ]


def test_parallel_results_stored_out_of_order_are_given_in_call_order() -> None:
    thread = Thread()
    thread.user()
    thread.calls("a", "b", "c")
    thread.result("c")
    thread.result("a")
    thread.result("b")
    result = window(thread.messages, policy())
    assert [m.tool_call_id for m in result.messages[2:]] == ["a", "b", "c"]
    assert result.repairs == []


def test_orphan_tool_result_is_dropped_and_recorded() -> None:
    # GIVEN a late result stored after the user's next message (its call's block already ended)
    thread = Thread()
    thread.user()
    thread.calls("a")
    thread.user()
    late = thread.result("a")
    thread.user()
    result = window(thread.messages, policy())
    assert late.id not in ids(result.messages)
    assert_tool_pairs_whole(result.messages)
    kinds = [r["kind"] for r in result.repairs]
    assert kinds == [RepairKind.DANGLING_TOOL_CALL.value, RepairKind.ORPHAN_TOOL_RESULT.value]
    assert result.repairs[1]["message_ids"] == [late.id]


def test_second_result_for_the_same_call_is_dropped() -> None:
    thread = Thread()
    thread.user()
    thread.calls("a")
    thread.result("a")
    duplicate = thread.result("a")
    result = window(thread.messages, policy())
    assert ids(result.messages) == ["m1", "m2", "m3"]
    assert result.repairs[0] == {
        "kind": RepairKind.DUPLICATE_TOOL_RESULT.value,
        "message_ids": [duplicate.id],
        "tool_call_ids": ["a"],
    }


def test_token_cap_drops_whole_oldest_turns_and_records_it() -> None:
    # GIVEN three turns of 10 "tokens" per message (3 messages per turn) and a cap of 65
    thread = Thread()
    for _ in range(3):
        thread.user()
        thread.calls(f"c{len(thread.messages)}")
        thread.result(f"c{len(thread.messages) - 1}")
    result = window(thread.messages, policy(max_input_tokens=65), count_tokens=lambda _m: 10)
    # THEN the oldest turn goes as a whole: the window starts at a user message, pairs intact
    assert ids(result.messages) == ["m4", "m5", "m6", "m7", "m8", "m9"]
    assert result.input_tokens == 60
    assert result.repairs == [
        {
            "kind": RepairKind.TOKEN_CAP_DROPPED_TURNS.value,
            "message_ids": ["m1", "m2", "m3"],
            "turns": 1,
            "tokens_before": 90,
            "tokens_after": 60,
            "limit": 65,
        }
    ]


def test_token_cap_never_drops_the_current_turn_and_says_so() -> None:
    thread = Thread()
    thread.user()
    thread.user()
    result = window(thread.messages, policy(max_input_tokens=5), count_tokens=lambda _m: 10)
    assert ids(result.messages) == ["m2"]
    assert [r["kind"] for r in result.repairs] == [
        RepairKind.TOKEN_CAP_DROPPED_TURNS.value,
        RepairKind.TOKEN_CAP_EXCEEDED.value,
    ]


def test_reserved_tokens_are_taken_off_the_cap() -> None:
    thread = Thread()
    thread.user()
    thread.user()
    result = window(thread.messages, policy(max_input_tokens=25), count_tokens=lambda _m: 10, reserve_tokens=10)
    assert ids(result.messages) == ["m2"]


def test_upto_seq_makes_an_earlier_message_the_current_one() -> None:
    thread = Thread()
    for _ in range(5):
        thread.user()
    assert ids(window(thread.messages, policy(2), upto_seq=3).messages) == ["m2", "m3"]


# ----------------------------------------------------------------------------------------------------------
# Store requests
# ----------------------------------------------------------------------------------------------------------


def long_thread(length: int) -> list[Message]:
    thread = Thread()
    while len(thread.messages) < length - 4:
        thread.user()
        call_id = f"c{len(thread.messages)}"
        thread.calls(call_id)
        thread.result(call_id)
        thread.add(Role.ASSISTANT)
    while len(thread.messages) < length - 1:
        thread.add(Role.ASSISTANT)
    thread.user()
    return thread.messages


def test_store_requests_for_a_20_user_window_do_not_grow_with_the_thread() -> None:
    # GIVEN threads of 100 and 10,000 messages with the same recent shape
    short, long = long_thread(100), long_thread(10_000)
    # WHEN a 20-user-message window is built from each
    small = asyncio.run(resolve_window(ListReader(short), TENANT, THREAD, policy(20), now=NOW, page_size=50))
    big = asyncio.run(resolve_window(ListReader(long), TENANT, THREAD, policy(20), now=NOW, page_size=50))
    # THEN both windows hold 20 user messages and took the same, small number of requests
    assert sum(m.role is Role.USER for m in small.messages) == 20
    assert sum(m.role is Role.USER for m in big.messages) == 20
    assert small.store_requests == big.store_requests
    assert big.store_requests <= -(-len(big.messages) // 50) + 1


def test_store_requests_match_the_reader_calls() -> None:
    reader = ListReader(long_thread(1_000))
    result = asyncio.run(resolve_window(reader, TENANT, THREAD, policy(20), now=NOW, page_size=7))
    assert result.store_requests == reader.requests


# ----------------------------------------------------------------------------------------------------------
# Legacy today_yesterday
# ----------------------------------------------------------------------------------------------------------

# NOW is 2025-03-10 09:00 in Shanghai, so "yesterday" starts at 2025-03-09 00:00 +08:00 = 2025-03-08 16:00 UTC.
YESTERDAY_START_UTC = datetime(2025, 3, 8, 16, 0, tzinfo=UTC)


def test_today_yesterday_keeps_the_two_calendar_days_of_the_configured_timezone() -> None:
    thread = Thread()
    thread.user(created_at=YESTERDAY_START_UTC - timedelta(days=3))
    thread.user(created_at=YESTERDAY_START_UTC - timedelta(seconds=1))  # day before yesterday, 23:59:59
    thread.user(created_at=YESTERDAY_START_UTC)  # yesterday, 00:00:00
    thread.user(created_at=NOW - timedelta(minutes=1))
    result = window(thread.messages, policy(mode="today_yesterday", timezone="Asia/Shanghai"))
    assert ids(result.messages) == ["m3", "m4"]


def test_today_yesterday_depends_on_the_timezone() -> None:
    thread = Thread()
    thread.user(created_at=datetime(2025, 3, 8, 12, 0, tzinfo=UTC))  # 2025-03-08 in both zones
    thread.user(created_at=datetime(2025, 3, 9, 1, 0, tzinfo=UTC))  # 2025-03-09 in both zones
    thread.user(created_at=NOW)
    shanghai = window(thread.messages, policy(mode="today_yesterday", timezone="Asia/Shanghai"))
    new_york = window(thread.messages, policy(mode="today_yesterday", timezone="America/New_York"))
    # in New York NOW is 2025-03-09 21:00, so yesterday is 2025-03-08
    assert ids(shanghai.messages) == ["m2", "m3"]
    assert ids(new_york.messages) == ["m1", "m2", "m3"]


def test_today_yesterday_stops_reading_at_the_first_older_message() -> None:
    thread = Thread()
    for _ in range(5_000):
        thread.user(created_at=YESTERDAY_START_UTC - timedelta(days=30))
    for _ in range(30):
        thread.user(created_at=NOW)
    reader = ListReader(thread.messages)
    pol = policy(mode="today_yesterday", timezone="Asia/Shanghai")
    result = asyncio.run(resolve_window(reader, TENANT, THREAD, pol, now=NOW, page_size=20))
    assert len(result.messages) == 30
    assert result.store_requests == reader.requests == 2


def test_today_yesterday_drops_a_result_whose_call_is_older_than_yesterday() -> None:
    thread = Thread()
    thread.user(created_at=YESTERDAY_START_UTC - timedelta(seconds=2))
    thread.calls("a", created_at=YESTERDAY_START_UTC - timedelta(seconds=1))
    orphan = thread.result("a", created_at=YESTERDAY_START_UTC + timedelta(seconds=1))
    thread.user(created_at=NOW)
    result = window(thread.messages, policy(mode="today_yesterday", timezone="Asia/Shanghai"))
    assert ids(result.messages) == ["m4"]
    assert result.repairs[0]["message_ids"] == [orphan.id]


def test_today_yesterday_always_includes_the_current_message() -> None:
    thread = Thread()
    thread.user(created_at=YESTERDAY_START_UTC - timedelta(days=2))
    assert ids(window(thread.messages, policy(mode="today_yesterday")).messages) == ["m1"]


def test_empty_thread_gives_an_empty_window() -> None:
    result = window([], policy())
    assert (result.messages, result.store_requests) == ([], 1)
