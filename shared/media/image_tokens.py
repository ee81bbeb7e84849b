"""What an image costs in the model's context, by Qwen's rule (Qwen2.5-VL / Qwen3.5's image processor).

The processor resizes an image so both sides are multiples of 28 and its area lies within ``[MIN_PIXELS,
MAX_PIXELS]`` (keeping the aspect ratio), then spends one token per 28x28 patch: a 1024x768 screenshot is
``(1036/28) * (756/28)`` = 999 tokens, an 8x8 icon is scaled up to the minimum, 4 tokens. The window's token
estimate and the usage estimates count an image so (docs/protocols/agent/run-agent-input.md §3.4).
"""

from __future__ import annotations

import math

PATCH = 28
MIN_PIXELS = 4 * PATCH * PATCH
MAX_PIXELS = 16_384 * PATCH * PATCH
"""Qwen's processor defaults: 4 to 16,384 patches (``min_pixels`` 3,136 and ``max_pixels`` 12,845,056)."""


def image_tokens(width: int, height: int) -> int:
    """The tokens a ``width`` x ``height`` image takes: one per 28x28 patch after Qwen's resize."""
    width, height = max(width, 1), max(height, 1)
    h_bar = max(PATCH, round(height / PATCH) * PATCH)
    w_bar = max(PATCH, round(width / PATCH) * PATCH)
    if h_bar * w_bar > MAX_PIXELS:
        beta = math.sqrt(height * width / MAX_PIXELS)
        h_bar = max(PATCH, math.floor(height / beta / PATCH) * PATCH)
        w_bar = max(PATCH, math.floor(width / beta / PATCH) * PATCH)
    elif h_bar * w_bar < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (height * width))
        h_bar = math.ceil(height * beta / PATCH) * PATCH
        w_bar = math.ceil(width * beta / PATCH) * PATCH
    return (h_bar // PATCH) * (w_bar // PATCH)
