"""Token counting with the Qwen tokenizer; an estimate only for models it does not fit, and logged when used.

The vocabulary (``shared/tokenizer/qwen.tiktoken``) is package data, read by ``tiktoken`` (a runtime dependency),
so the deployed functions count the tokens Qwen bills, not an estimate that over-counts them (by about 1.26× on
mixed Chinese/English traffic, 2× on English): the context window's input-token cap means what it says.
:func:`estimate_tokens` stays as the fallback for models that are not Qwen (:func:`counter_for`) and for an
environment without ``tiktoken``; either use is logged once.
"""

from __future__ import annotations

import base64
import functools
import logging
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from shared.media.image_tokens import image_tokens
from shared.models import Message

if TYPE_CHECKING:
    import tiktoken

logger = logging.getLogger(__name__)

TokenizerName = Literal["qwen", "estimate"]

# Per-message framing of the chat template (role markers and separators); Qwen's ChatML uses about this many.
MESSAGE_OVERHEAD_TOKENS = 4

QWEN_VOCAB = Path(__file__).resolve().parent / "tokenizer" / "qwen.tiktoken"
# Qwen's pre-tokenizer split and special tokens (as in Qwen's tokenization_qwen.py and the dashscope SDK).
_QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
_QWEN_SPECIAL_START = 151_643
_QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *(f"<|extra_{i}|>" for i in range(205)))
# tiktoken merges recursively; very long inputs are encoded in pieces of at most this many characters.
_CHUNK_CHARS = 100_000


@functools.cache
def _qwen_encoding() -> tiktoken.Encoding | None:
    try:
        import tiktoken
    except ImportError:
        logger.warning("tiktoken is not installed; token counts are estimates")
        return None
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in QWEN_VOCAB.read_bytes().splitlines() if line)
    }
    specials = {token: i for i, token in enumerate(_QWEN_SPECIALS, start=_QWEN_SPECIAL_START)}
    return tiktoken.Encoding("qwen", pat_str=_QWEN_PATTERN, mergeable_ranks=ranks, special_tokens=specials)


def _qwen_encoder() -> Callable[[str], list[int]] | None:
    encoding = _qwen_encoding()
    if encoding is None:
        return None

    def encode(text: str) -> list[int]:
        # Special-token look-alikes in user text are counted as text (they are text to the provider).
        text = unicodedata.normalize("NFC", text)
        if len(text) <= _CHUNK_CHARS:
            return encoding.encode_ordinary(text)
        out: list[int] = []
        for start in range(0, len(text), _CHUNK_CHARS):
            out.extend(encoding.encode_ordinary(text[start : start + _CHUNK_CHARS]))
        return out

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
    """Qwen tokens of ``text`` (:func:`estimate_tokens` only where ``tiktoken`` is missing)."""
    if _qwen_encoder() is None:
        return estimate_tokens(text)
    return _qwen_count(text)


@functools.lru_cache(maxsize=256)
def _qwen_count(text: str) -> int:
    """Counts are remembered: every run of a profile counts the same system prompt and tool schemas, and every
    run of a thread the same older messages, each of them twice when the first model request was sent ahead
    (``HeadStart``) and is checked against the one built from the store.

    What it buys (docs/benchmarks.md §8): on a returning user's next turn (20 user turns and their answers in the
    thread), 90 texts to encode per run without it and 2 with it, about 6 ms of CPU, and 2.5 % of the time to first
    text at concurrency 1 (store 5 ms, first token 300 ms); 0.3 % on a new thread."""
    encode = _qwen_encoder()
    assert encode is not None  # count_tokens checked
    return len(encode(text))


def count_message_tokens(message: Message) -> int:
    """Tokens a stored message costs as model input: content, tool calls and the template framing."""
    total = MESSAGE_OVERHEAD_TOKENS + count_tokens(message.content)
    for call in message.tool_calls:
        total += count_tokens(call.name) + count_tokens(call.arguments) + MESSAGE_OVERHEAD_TOKENS
    return total


def is_qwen_model(model: str) -> bool:
    """Whether ``model`` (a provider's model id) is billed in Qwen tokens."""
    return "qwen" in model.lower() or "qwq" in model.lower()


@functools.cache
def _log_estimate(model: str) -> None:
    logger.warning("no tokenizer for this model; counting tokens with the estimate", extra={"model": model})


def counter_for(model: str) -> Callable[[str], int]:
    """How to count the tokens of ``model``: Qwen's tokenizer for Qwen models, else the (logged) estimate."""
    if is_qwen_model(model):
        return count_tokens
    _log_estimate(model)
    return estimate_tokens


def message_counter_for(model: str) -> Callable[[Message], int]:
    """:func:`count_message_tokens` with ``model``'s counter."""
    count = counter_for(model)

    def counted(message: Message) -> int:
        total = MESSAGE_OVERHEAD_TOKENS + count(message.content)
        for call in message.tool_calls:
            total += count(call.name) + count(call.arguments) + MESSAGE_OVERHEAD_TOKENS
        for part in message.parts:
            if part.kind == "image":
                # Qwen's rule (shared.media.image_tokens); a URL source's size is not known: the 1024x768 guess.
                total += image_tokens(part.width or 1024, part.height or 768)
            elif part.text:
                total += count(part.text) + count(part.filename or "")
        return total

    return counted
