"""A strict Server-Sent Events parser for tests.

Strict on purpose: frames are separated by ``\\n\\n`` only, exactly as ``@ag-ui/client`` splits
them. A stream framed with ``\\r\\n\\r\\n`` (sse-starlette's default) therefore yields no complete
frame here either, so a test using this parser fails the same way the real client does instead of
passing on a more lenient reading of the SSE specification.

Comment lines (``: ping``) are kept on the frame, so tests can see keep-alives, and ``id:`` lines
are kept so tests can resume with ``Last-Event-ID``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

FRAME_SEPARATOR = "\n\n"


class SseFormatError(ValueError):
    """The body is not a well-framed ``text/event-stream`` (e.g. it ends inside a frame)."""


@dataclass(frozen=True)
class SseFrame:
    """One frame (the text between two separators), with its fields decoded per the SSE spec."""

    id: str | None
    event: str | None
    data: str | None
    comments: tuple[str, ...]
    retry: int | None
    raw: str

    @property
    def is_comment_only(self) -> bool:
        """True for keep-alive frames such as ``: ping`` that carry no field at all."""
        return self.id is None and self.event is None and self.data is None and self.retry is None

    def json(self) -> Any:
        """The ``data`` payload decoded as JSON."""
        if self.data is None:
            raise SseFormatError(f"frame has no data line: {self.raw!r}")
        return json.loads(self.data)


def parse_frame(raw: str) -> SseFrame:
    """Decode the lines of one frame (the separator already removed)."""
    frame_id: str | None = None
    event: str | None = None
    data_lines: list[str] = []
    comments: list[str] = []
    retry: int | None = None
    for line in raw.split("\n"):
        if line == "":
            continue
        if line.startswith(":"):
            comments.append(_strip_one_space(line[1:]))
            continue
        name, _, value = line.partition(":")
        value = _strip_one_space(value)
        if name == "data":
            data_lines.append(value)
        elif name == "id":
            frame_id = value
        elif name == "event":
            event = value
        elif name == "retry" and value.isdigit():
            retry = int(value)
    return SseFrame(
        id=frame_id,
        event=event,
        data="\n".join(data_lines) if data_lines else None,
        comments=tuple(comments),
        retry=retry,
        raw=raw,
    )


def _strip_one_space(value: str) -> str:
    return value[1:] if value.startswith(" ") else value


class SseParser:
    """Incremental parser: feed text as it arrives, get back the frames it completed."""

    def __init__(self) -> None:
        self._buffer = ""

    @property
    def pending(self) -> str:
        """Text received after the last separator (an incomplete frame, or ``""``)."""
        return self._buffer

    def feed(self, text: str) -> list[SseFrame]:
        self._buffer += text
        *complete, self._buffer = self._buffer.split(FRAME_SEPARATOR)
        return [parse_frame(raw) for raw in complete if raw.strip("\n") != ""]

    def close(self) -> None:
        """Declare the end of the stream; raise if it ended inside a frame."""
        if self._buffer.strip() != "":
            crlf = "\r\n" in self._buffer
            hint = " (it contains \\r\\n: frames must be separated by \\n\\n)" if crlf else ""
            raise SseFormatError(f"stream ended inside a frame{hint}: {self._buffer[:200]!r}")


def parse_sse(body: str) -> list[SseFrame]:
    """Parse a complete ``text/event-stream`` body; raise `SseFormatError` if it ends mid-frame."""
    parser = SseParser()
    frames = parser.feed(body)
    parser.close()
    return frames


def data_frames_json(frames: list[SseFrame]) -> list[Any]:
    """The JSON payloads of the frames that carry data, in order (keep-alives skipped)."""
    return [frame.json() for frame in frames if frame.data is not None]


async def iter_sse_frames(response: httpx.Response, *, strict_eof: bool = True) -> AsyncIterator[SseFrame]:
    """Yield frames from a streaming httpx response as soon as each one is complete.

    Use with ``client.stream(...)``; each frame is yielded when its separator arrives, so a test
    can prove incremental delivery (a frame seen before the server sends the next one) or stop
    after a given ``id`` and reconnect with ``Last-Event-ID``. With ``strict_eof`` the iterator
    raises `SseFormatError` when the body ends inside a frame.
    """
    parser = SseParser()
    async for text in response.aiter_text():
        for frame in parser.feed(text):
            yield frame
    if strict_eof:
        parser.close()


def format_frame(data: str, *, frame_id: str | int | None = None, event: str | None = None) -> str:
    """Encode one frame the way the backend does: optional ``id:``/``event:``, then ``data:``."""
    lines: list[str] = []
    if frame_id is not None:
        lines.append(f"id: {frame_id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.extend(f"data: {line}" for line in data.split("\n"))
    return "\n".join(lines) + FRAME_SEPARATOR
