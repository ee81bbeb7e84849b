"""The in-memory side of feedback (as ``shared/adapters/aws/thread_feedback.py``): the export's entry made when
feedback is given, and the tenant's entries of a time range in position order, a page at a time."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from shared.feedback_export import position, time_key
from shared.models import Feedback, FeedbackEntry, Message, Run, answering_model


def entry_for(message: Message, feedback: Feedback, run: Run | None) -> FeedbackEntry:
    """The export's entry of ``feedback`` on ``message``, whose run record is ``run``."""
    return FeedbackEntry(
        thread_id=message.thread_id,
        message_id=message.id,
        feedback=feedback,
        run_id=message.run_id,
        execution_profile_name=message.meta.execution_profile_name,
        model=answering_model(run),
    )


def page_of(
    threads: Iterable[Iterable[FeedbackEntry]], *, since: datetime, until: datetime, limit: int, after: str | None
) -> tuple[list[FeedbackEntry], str | None]:
    """As the DynamoDB adapter's Query, over the entries of a tenant's threads: those between ``since`` and
    ``until`` after ``after``, at most ``limit``; the last one's position when the page is full (more may follow,
    as a Query's ``Limit`` says)."""
    low, high = time_key(since), time_key(until)
    inside = sorted((position(e), e) for entries in threads for e in entries if low <= position(e) <= high)
    page = [(key, e) for key, e in inside if after is None or key > after][:limit]
    return [e for _, e in page], page[-1][0] if len(page) == limit else None
