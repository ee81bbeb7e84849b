"""Real image and document bytes for tests of message parts (issue 43), built here so no fixture file ships."""

from __future__ import annotations

import random
import struct
import zlib


def png(width: int, height: int, *, noise: bool = False) -> bytes:
    """A real PNG of ``width`` x ``height`` grey pixels; ``noise``: random greys (seeded), so the file does not
    compress and its base64 is as long as a photo's."""
    rows = random.Random(width * 7919 + height) if noise else None

    def row() -> bytes:
        return rows.randbytes(width) if rows is not None else b"\x80" * width

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + row() for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
