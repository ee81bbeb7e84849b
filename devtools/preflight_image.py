"""The image the preflight sends to a model whose profiles say it reads images: an 8x8 red PNG, built here (a few
dozen bytes), sent as the worker sends a stored image, an OpenAI ``image_url`` part holding a ``data:`` URL."""

from __future__ import annotations

import base64
import struct
import zlib

IMAGE_PROMPT = "What colour is this image? Answer in one word."


def tiny_png(width: int = 8, height: int = 8) -> bytes:
    """A valid ``width`` x ``height`` PNG of red pixels (8-bit RGB, no filter)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def tiny_png_data_url() -> str:
    """The preflight's image as the ``data:`` URL the worker would send (``LLM_IMAGE_URLS=data``)."""
    return "data:image/png;base64," + base64.b64encode(tiny_png()).decode("ascii")
