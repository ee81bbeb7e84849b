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

**Edits of messages older than the page.** A user message placed by order is never compared with the page, so a
client that re-sent an old message with other text (an edit under the same id) would see it silently dropped. The
thread keeps the digest of the user messages (ids and texts, in order) of the last chat request it admitted
(``ThreadClaim.user_digest``, written with that request's messages). A client that appends sends those same user
messages again, so its digest of the stored part matches and nothing is read. When it does not match (an edit under
the same id, a second device, a client that trims its list, a branch switch since, or a thread admitted before the
digest existed), the user messages placed by order are read (:func:`needs_reading`, the store's
``stored_messages``: two batch reads) and compared like the page's: other text is ``409 message_edit_conflict``; an
id the store lacks after all is new. The digest then written is the request's, so the next turn of the same client
matches again. Only a request that sends user messages older than the page writes it (a client whose list fits
in the page needs none, and the thread item is written no larger for it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

from shared.models import Message, Role


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


def user_digest(messages: Sequence[Message]) -> str:
    """The digest of ``messages``' user messages, in order: their ids and texts (the module docstring)."""
    digest = hashlib.sha256()
    for msg in messages:
        if msg.role is Role.USER:
            digest.update(json.dumps([msg.id, msg.content], ensure_ascii=False).encode())
            digest.update(b"\n")
    return digest.hexdigest()[:32]


def placed_by_order(
    new_messages: Sequence[Message], recent: Sequence[Message], fresh: Sequence[Message]
) -> list[Message]:
    """The user messages :func:`sort_by_page` took as stored by order alone: not in the page, not new."""
    in_page = {m.id for m in recent}
    new_ids = {m.id for m in fresh}
    return [m for m in new_messages if m.id not in in_page and m.id not in new_ids and m.role is Role.USER]


def needs_reading(
    new_messages: Sequence[Message], recent: Sequence[Message], fresh: Sequence[Message], kept: str | None
) -> list[str]:
    """The ids of the messages :func:`placed_by_order`, when the digest the thread kept (``kept``) is not the
    request's digest of its stored part; none otherwise."""
    placed = placed_by_order(new_messages, recent, fresh)
    new_ids = {m.id for m in fresh}
    if not placed or kept == user_digest([m for m in new_messages if m.id not in new_ids]):
        return []
    return list(dict.fromkeys(m.id for m in placed))


class Placed(NamedTuple):
    """``fresh``: the messages to store; ``older``: stored messages read to compare the client's with (beside the
    page); ``digest``: the request's digest to keep on the thread (None: keep what it has)."""

    fresh: list[Message]
    older: list[Message]
    digest: str | None


async def place_messages(
    new_messages: Sequence[Message],
    recent: Sequence[Message],
    kept: str | None,
    *,
    read_limit: int,
    read: Callable[[Sequence[str]], Awaitable[list[Message]]],
) -> Placed:
    """Admission's placing of the client's messages (the module docstring): by the page ``recent`` (read with
    ``read_limit``), by order, vouched for by the digest the thread ``kept``, or read with ``read`` (the store's
    ``stored_messages``) when neither tells."""
    fresh, check = sort_by_page(new_messages, recent, read_limit=read_limit)
    digest = None
    if not check and placed_by_order(new_messages, recent, fresh):
        check = needs_reading(new_messages, recent, fresh, kept)
        digest = user_digest(new_messages)
    if not check:
        return Placed(fresh, [], digest)
    older = await read(check)
    held = {m.id for m in recent} | {m.id for m in older}
    return Placed([m for m in new_messages if m.id not in held], older, digest)
