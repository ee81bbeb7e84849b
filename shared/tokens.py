"""Token counting: the real Qwen tokenizer when the ``dashscope`` package is installed, an estimate otherwise.

``dashscope`` bundles ``qwen.tiktoken`` and works offline, but it is a test/tooling extra, not a runtime
dependency of the Lambda functions. Code that only needs a guard (the context window's input-token cap) works
with the estimate; code that reports numbers (the intent prompt sizes in ``docs/policy.md``) says which
counter it used through :func:`tokenizer_name`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Literal

from shared.models import Message

TokenizerName = Literal["qwen", "estimate"]

# Per-message framing of the chat template (role markers and separators); Qwen's ChatML uses about this many.
MESSAGE_OVERHEAD_TOKENS = 4


@functools.cache
def _qwen_encoder() -> Callable[[str], list[int]] | None:
    try:
        from dashscope import get_tokenizer
    except ImportError:
        return None
    tokenizer = get_tokenizer("qwen-turbo")
    encode: Callable[[str], list[int]] = tokenizer.encode
    return encode


def tokenizer_name() -> TokenizerName:
    """Which counter :func:`count_tokens` uses in this environment."""
    return "qwen" if _qwen_encoder() is not None else "estimate"


def estimate_tokens(text: str) -> int:
    """A deliberately pessimistic estimate: one token per non-ASCII character, one per 3 ASCII characters.

    Qwen's tokenizer averages about 4 ASCII characters and 1.3-1.5 CJK characters per token, so this errs on
    the side of counting more, which is the safe side for a cap.
    """
    ascii_chars = sum(1 for ch in text if ord(ch) < 128)
    return (ascii_chars + 2) // 3 + (len(text) - ascii_chars)


def count_tokens(text: str) -> int:
    """Tokens of ``text``: exact for Qwen when ``dashscope`` is installed, else :func:`estimate_tokens`."""
    encode = _qwen_encoder()
    if encode is None:
        return estimate_tokens(text)
    return len(encode(text))


def count_message_tokens(message: Message) -> int:
    """Tokens a stored message costs as model input: content, tool calls and the template framing."""
    total = MESSAGE_OVERHEAD_TOKENS + count_tokens(message.content)
    for call in message.tool_calls:
        total += count_tokens(call.name) + count_tokens(call.arguments) + MESSAGE_OVERHEAD_TOKENS
    return total
