"""Which of a chat run's messages the thread has already: from the newest page admission reads, not from a read of
every id the client resends.

Clients resend the conversation they hold on every run (shared/runs/intake.py), so a plain turn carries twenty or
more stored ids and one new one. Checking each id against its id marker cost one strongly consistent read unit per
id (21 of a plain turn's 40 in docs/benchmarks.md §7), and grew with the thread. Admission already reads the
thread's newest page beside the claim (``read_recent``); that page answers for the ids in it, and the order the
client lists its messages in answers for the rest:

- an id in the page is stored;
- when the page holds the whole thread (it read fewer messages than it asked for, or reached the first one), an id
  not in it is new;
- otherwise, an id the client lists *before* the first of its messages the page holds is older than the page:
  stored (clients append; the page holds the newest messages, so a message the client placed before one of them
  was stored before it). An id listed after it and not in the page is new: the append's id markers
  (``attribute_not_exists``, shared/adapters/aws/thread_appends.py) still drop a duplicate, and the worker checks
  a first model request sent ahead against what admission stored (shared/executors/head_start.py), so a client
  that reorders its history costs a retried write, never a duplicate;
- when none of the client's messages is in the page (a client that sends only its new message on a long thread,
  or one far behind), the page says nothing: the ids are checked as before, after the page (:attr:`Sorted.check`).

So a plain turn reads no id at all, and the ids checked never grow with the thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from shared.models import Message


class Sorted(NamedTuple):
    """``fresh``: the messages to store as far as the page tells; ``check``: ids it cannot place, to be checked
    against the store (their messages are in neither list until then)."""

    fresh: list[Message]
    check: list[str]


def sort_by_page(new_messages: Sequence[Message], recent: Sequence[Message], *, read_limit: int) -> Sorted:
    """Sort the caller's messages by the thread's newest page ``recent`` (newest first, as read with ``read_limit``);
    the module docstring gives the rules."""
    in_page = {m.id for m in recent}
    unknown = [m for m in new_messages if m.id not in in_page]
    whole_thread = len(recent) < read_limit or (bool(recent) and recent[-1].seq == 1)
    if whole_thread or not unknown:
        return Sorted(unknown, [])
    first_held = next((i for i, m in enumerate(new_messages) if m.id in in_page), None)
    if first_held is None:
        return Sorted([], list(dict.fromkeys(m.id for m in unknown)))
    return Sorted([m for m in new_messages[first_held:] if m.id not in in_page], [])


async def no_messages() -> list[Message]:
    """The newest page of a run that reads none (admission's placeholder beside its claim)."""
    return []


def recent_is_stale(recent: Sequence[Message], last_seq: int) -> bool:
    """Whether the newest messages read beside the claim miss some: the counter the claim saw is further on."""
    newest = recent[0].seq if recent else 0
    return (newest or 0) < last_seq
