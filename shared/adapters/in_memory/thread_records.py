"""The in-memory threads' record of one thread, and the content cap both stores apply."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime

from shared.models import FeedbackEntry, LastMessage, Message, Thread

# Same cap as the DynamoDB codec (``dynamo_codec.MAX_CONTENT_CHARS``); the contract suite checks both against it.
MAX_CONTENT_CHARS = 100_000


@dataclass
class ThreadRecord:
    """One thread as the fake keeps it: the thread, its messages and what DynamoDB keeps beside them."""

    thread: Thread
    active_run_at: datetime | None = None
    messages: list[Message] = field(default_factory=list)  # index i holds seq i + 1
    seq_by_id: dict[str, int] = field(default_factory=dict)
    listed_last: tuple[LastMessage | None, int] = (None, 0)
    """The preview and count the list shows: the thread's as of the last release (DynamoDB's ``last_message``)."""
    user_digest: str | None = None
    """Admission's digest of the client's user messages (DynamoDB's ``user_digest``; ``ThreadClaim.user_digest``)."""
    feedback: dict[str, FeedbackEntry] = field(default_factory=dict)  # the export's entries (DynamoDB's FB# items)


def capped(msg: Message) -> Message:
    if len(msg.content) <= MAX_CONTENT_CHARS:
        return msg.model_copy(deep=True)
    flags = copy.deepcopy(msg.flags)
    flags["truncated_from_chars"] = len(msg.content)
    return msg.model_copy(update={"content": msg.content[:MAX_CONTENT_CHARS], "flags": flags}, deep=True)
