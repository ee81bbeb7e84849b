"""A tenant's feedback as an administrator exports it (``GET /api/v1/admin/feedback``): the time range asked for, the
position a page ends at (the store's sort key, opaque to the client as a cursor), and the rows as JSON lines or CSV.

A feedback's position is ``{given at, UTC, fixed width}#{thread}#{message}``: it orders the tenant's feedback by time
(ids never hold ``#``: ``shared.runs.intake``), and both stores page by it (docs/storage.md "Feedback").
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from shared.errors import InvalidRequest
from shared.models import FeedbackEntry

EXPORT_COLUMNS = (
    "threadId",
    "messageId",
    "userId",
    "score",
    "comment",
    "tags",
    "createdAt",
    "runId",
    "executionProfileName",
    "model",
)
DEFAULT_DAYS = 30
"""Without ``from``: the last 30 days before ``to``."""
MAX_PAGE = 5000
DEFAULT_PAGE = 1000


def time_key(at: datetime) -> str:
    """``at`` in UTC at a fixed width, so keys sort as times do (``isoformat`` drops a zero fraction)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def position(entry: FeedbackEntry) -> str:
    return f"{time_key(entry.feedback.created_at)}#{entry.thread_id}#{entry.message_id}"


def split_position(value: str) -> tuple[str, str, str]:
    """``(time key, thread id, message id)`` of a position; ``InvalidRequest`` (``invalid_cursor``) if it is none."""
    parts = value.split("#")
    if len(parts) != 3 or not all(parts):
        raise InvalidRequest("the cursor is not one of this export's", code="invalid_cursor")
    return parts[0], parts[1], parts[2]


@dataclass(frozen=True)
class ExportRange:
    since: datetime
    until: datetime


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _instant(value: str, name: str, *, end: bool) -> datetime:
    try:
        if _DATE.match(value):
            day = date.fromisoformat(value)
            start = datetime.combine(day, time(), tzinfo=UTC)
            return start + timedelta(days=1) if end else start  # a date ``to`` includes its day
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidRequest(f"{name} must be a date (YYYY-MM-DD) or an ISO 8601 time", code="invalid_request") from exc
    if at.tzinfo is None:
        raise InvalidRequest(f"{name} needs a UTC offset (for example Z)", code="invalid_request")
    return at.astimezone(UTC)


def export_range(since: str | None, until: str | None, now: datetime) -> ExportRange:
    """The range ``from``/``to`` name: ``to`` (exclusive; a date includes its day) defaults to now, ``from``
    (inclusive) to ``DEFAULT_DAYS`` before ``to``; ``from`` after ``to`` is ``invalid_request``."""
    end = _instant(until, "to", end=True) if until else now.astimezone(UTC)
    start = _instant(since, "from", end=False) if since else end - timedelta(days=DEFAULT_DAYS)
    if start > end:
        raise InvalidRequest("from is after to", code="invalid_request")
    return ExportRange(start, end)


def encode_cursor(after: str) -> str:
    return base64.urlsafe_b64encode(after.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        after = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequest("the cursor is not one of this export's", code="invalid_cursor") from exc
    split_position(after)
    return after


def row(entry: FeedbackEntry) -> dict[str, Any]:
    """An export row (camelCase, optional fields omitted as everywhere in the API)."""
    fb = entry.feedback
    out: dict[str, Any] = {
        "threadId": entry.thread_id,
        "messageId": entry.message_id,
        "userId": fb.user_id,
        "score": fb.score,
        "createdAt": fb.created_at.isoformat(),
        "executionProfileName": entry.execution_profile_name,
    }
    optional = {"comment": fb.comment, "tags": list(fb.tags) or None, "runId": entry.run_id, "model": entry.model}
    out.update({key: value for key, value in optional.items() if value is not None})
    return {key: out[key] for key in EXPORT_COLUMNS if key in out}


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _inert(text: str) -> str:
    """A user's text as a spreadsheet shows it, never runs it: a cell starting like a formula gets a leading ``'``
    (OWASP "CSV injection"); only the free-text cells, so a score of ``-1`` stays a number."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def render(entries: list[FeedbackEntry], fmt: str) -> tuple[str, str]:
    """``(body, media type)``: JSON lines, or CSV with a header row, fields quoted by the ``csv`` module when they
    hold a comma, a quote or a line break; ``tags`` is a JSON array there (a tag may hold any character)."""
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(EXPORT_COLUMNS)
        for entry in entries:
            values = row(entry)
            values["comment"] = _inert(values.get("comment", ""))
            tags = values.get("tags")
            values["tags"] = json.dumps(tags, ensure_ascii=False) if tags else ""
            writer.writerow([values.get(column, "") for column in EXPORT_COLUMNS])
        return out.getvalue(), "text/csv"
    lines = (json.dumps(row(entry), separators=(",", ":"), ensure_ascii=False) for entry in entries)
    return "".join(line + "\n" for line in lines), "application/x-ndjson"
