"""The first context window of a chat run is served from what admission read and stored (``KnownHistory``): it must
be exactly the window a read of the store gives, for every history policy, and never cost more store requests."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.context_window import KnownHistory, ReadThrough, resolve_window
from tests.support.histories import (
    NOW,
    POLICIES,
    TENANT,
    THREAD,
    History,
    ListReader,
    Thread,
    histories,
    known_after_admission,
)


@settings(max_examples=300, deadline=None)
@given(
    history=histories(),
    stored=st.integers(1, 3),
    read_limit=st.integers(1, 60),
    page_size=st.integers(1, 60),
    policy_index=st.integers(0, len(POLICIES) - 1),
)
def test_the_window_from_what_admission_knows_is_the_window_read_from_the_store(
    history: History, stored: int, read_limit: int, page_size: int, policy_index: int
) -> None:
    messages = history.messages
    stored = min(stored, len(messages))
    known = known_after_admission(messages, stored, read_limit)
    assert known is not None
    policy = POLICIES[policy_index]
    direct_reader, through_reader = ListReader(messages), ListReader(messages)
    direct = asyncio.run(resolve_window(direct_reader, TENANT, THREAD, policy, now=NOW, page_size=page_size))
    through = ReadThrough(through_reader, known)
    served = asyncio.run(resolve_window(through, TENANT, THREAD, policy, now=NOW, page_size=page_size))
    assert [m.id for m in served.messages] == [m.id for m in direct.messages]
    assert served.messages == direct.messages and served.repairs == direct.repairs
    assert through_reader.requests <= direct_reader.requests
    if page_size <= read_limit + stored or known.reaches_start:
        assert through.served >= 1 and through_reader.requests <= direct_reader.requests - 1


def test_a_gap_between_what_was_read_and_what_was_stored_is_not_trusted() -> None:
    thread = Thread()
    for _ in range(6):
        thread.user()
    messages = thread.messages
    # the read saw messages up to seq 4, but the store numbered the run's message 6: seq 5 came from elsewhere
    read = list(reversed(messages[:4]))
    assert KnownHistory.after_admission(read, read_limit=50, last_seq=4, stored=[messages[5]]) is None
    # a read that stops short of the counter the claim returned is not trusted either
    assert KnownHistory.after_admission(read[1:], read_limit=50, last_seq=4, stored=[messages[4]]) is None


def test_a_read_past_what_admission_knows_goes_to_the_store() -> None:
    thread = Thread()
    for _ in range(10):
        thread.user()
    known = known_after_admission(thread.messages, stored=1, read_limit=3)  # seqs 7..10 known, 1..6 not
    assert known is not None and not known.reaches_start
    assert known.page(None, 4) == list(reversed(thread.messages[6:]))
    assert known.page(None, 5) is None  # would need seq 6
    assert known.page(9, 2) == [thread.messages[7], thread.messages[6]]
    assert known.page(7, 1) is None
    assert known.page(12, 1) is None  # newer than anything admission stored
