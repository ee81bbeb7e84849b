"""The first context window of a chat run costs no store request when admission's own read reached the thread's
start (``KnownHistory``). That its window equals the store's is behaviour, tested in
tests/unit/test_known_history.py."""

from __future__ import annotations

import asyncio

from shared.context_window import ReadThrough, resolve_window
from shared.models import Role
from tests.support.histories import NOW, POLICIES, TENANT, THREAD, ListReader, Thread, known_after_admission


def test_a_short_thread_is_served_whole_without_a_store_request() -> None:
    thread = Thread()
    for _ in range(3):
        thread.user()
        thread.add(Role.ASSISTANT)
    thread.user()
    known = known_after_admission(thread.messages, stored=1, read_limit=50)
    assert known is not None and known.reaches_start
    reader = ListReader(thread.messages)
    window = asyncio.run(resolve_window(ReadThrough(reader, known), TENANT, THREAD, POLICIES[1], now=NOW))
    assert [m.id for m in window.messages] == [m.id for m in thread.messages] and reader.requests == 0
