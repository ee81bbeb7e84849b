"""A message part as a short line of text, for readers that must know a part is there but never read its bytes
(the memory executor): ``[image: screenshot.png, 640x480]``, ``[document: report.pdf]``.

The file name is the client's: brackets and line breaks are taken out, and it is cut, so it can neither close the
placeholder nor pass for other text around it.
"""

from __future__ import annotations

import re

from shared.models import MessagePart

MAX_NAME_CHARS = 80
_UNSAFE_NAME = re.compile(r"[\[\]\r\n\t<>]+")


def placeholder(part: MessagePart) -> str:
    """``[kind: name, WxH]``, with what is known of the part: its name and, for an image, its size."""
    details: list[str] = []
    name = _UNSAFE_NAME.sub(" ", part.filename or "").strip()[:MAX_NAME_CHARS]
    if name:
        details.append(name)
    if part.width and part.height:
        details.append(f"{part.width}x{part.height}")
    return f"[{part.kind}: {', '.join(details)}]" if details else f"[{part.kind}]"


def with_placeholders(text: str, parts: tuple[MessagePart, ...]) -> str:
    """``text`` followed by one placeholder line per part (``text`` alone when there are none)."""
    lines = [placeholder(part) for part in parts]
    return "\n".join([text, *lines]) if text and lines else text or "\n".join(lines)
