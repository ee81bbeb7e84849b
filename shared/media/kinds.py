"""What a part's bytes are, from their first bytes (magic numbers), and an image's width and height from its header.

The declared ``mimeType`` of a part is a claim; the bytes decide. Reading the dimensions of PNG, GIF, JPEG and WebP
needs only their headers, so no imaging library ships in the functions.
"""

from __future__ import annotations

import struct

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})
PDF = "application/pdf"
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/csv", "application/json"})
DOCUMENT_TYPES = frozenset({PDF, *TEXT_TYPES})


def sniff(data: bytes) -> str | None:
    """The MIME type the bytes are, by their magic number; None when they are none of the binary types known here."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"%PDF-"):
        return PDF
    return None


def matches(declared: str, data: bytes) -> bool:
    """Whether ``data`` is what ``declared`` says: binary types by magic number, text types by decoding as UTF-8."""
    if declared in TEXT_TYPES:
        if sniff(data) is not None:
            return False
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True
    return sniff(data) == declared


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` read from the image's header; None when the header cannot be read."""
    kind = sniff(data)
    try:
        if kind == "image/png" and len(data) >= 24 and data[12:16] == b"IHDR":
            width, height = struct.unpack(">II", data[16:24])
            return int(width), int(height)
        if kind == "image/gif" and len(data) >= 10:
            width, height = struct.unpack("<HH", data[6:10])
            return int(width), int(height)
        if kind == "image/webp":
            return _webp_size(data)
        if kind == "image/jpeg":
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return width, height
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Walk the JPEG's segments to its start-of-frame marker, which holds the height and the width."""
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return int(width), int(height)
        pos += 2 + int(length)
    return None
