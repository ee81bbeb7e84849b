"""Keeping model "thinking" out of answers: the per-provider switch and a ``<think>`` stripper.

Qwen3.5/3.6 models think by default. The switch that turns thinking off is not standard, so it is mapped per
provider and always sent explicitly (never rely on a server default):

    dashscope           {"enable_thinking": false}                         (DashScope compatible mode)
    vllm, sglang        {"chat_template_kwargs": {"enable_thinking": false}}
    openai-compatible   both of the above (the generic default)

Even with thinking off, some servers still leak a ``<think>...</think>`` block into ``content``;
``ThinkStripper`` removes it incrementally from streamed text and hands the hidden part back so the caller
can count it.
"""

from __future__ import annotations

from typing import Any, Final, Literal, cast, get_args
from urllib.parse import urlsplit

from shared.errors import ConfigurationError

Provider = Literal["dashscope", "vllm", "sglang", "openai-compatible"]
PROVIDERS: Final[tuple[str, ...]] = get_args(Provider)

OPEN_TAG: Final = "<think>"
CLOSE_TAG: Final = "</think>"


def parse_provider(value: str) -> Provider:
    """Validate a provider label from configuration.

    Raises:
        ConfigurationError: the label is not one of ``PROVIDERS``.
    """
    if value in PROVIDERS:
        return cast(Provider, value)
    raise ConfigurationError(f"unknown model provider {value!r}; expected one of {', '.join(PROVIDERS)}")


def detect_provider(base_url: str) -> Provider:
    """Guess the provider from the endpoint's base URL.

    Only DashScope can be recognised by host (``dashscope.aliyuncs.com``, ``dashscope-intl.aliyuncs.com``,
    ...). vLLM and SGLang run on arbitrary hosts, so everything else is ``openai-compatible``, whose switch
    covers both.
    """
    host = (urlsplit(base_url).hostname or "").lower()
    if host.endswith(".aliyuncs.com") and host.startswith("dashscope"):
        return "dashscope"
    return "openai-compatible"


def thinking_extra_body(provider: Provider, *, enabled: bool) -> dict[str, Any]:
    """The request-body keys that switch thinking on or off for ``provider`` (the client's ``extra_body``).

    The generic ``openai-compatible`` mapping sends both keys because DashScope, vLLM and SGLang ignore body
    keys they do not know, and an unknown server is most likely one of them. OpenAI's own API is the exception
    we know of: it rejects unrecognised body arguments with HTTP 400, so it must not be addressed through this
    mapping.
    """
    dashscope_key: dict[str, Any] = {"enable_thinking": enabled}
    template_key: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": enabled}}
    if provider == "dashscope":
        return dashscope_key
    if provider in ("vllm", "sglang"):
        return template_key
    return {**dashscope_key, **template_key}


def _partial_tag_suffix(text: str, tags: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``tags``."""
    longest = 0
    for tag in tags:
        for size in range(min(len(tag) - 1, len(text)), longest, -1):
            if text.endswith(tag[:size]):
                longest = size
                break
    return longest


class ThinkStripper:
    """Remove ``<think>...</think>`` blocks from text that arrives in arbitrary chunks.

    ``feed`` returns ``(visible, hidden)`` for each chunk; a tag split across chunks is held back until it
    can be decided, so visible text lags by at most ``len("</think>") - 1`` characters. Call ``flush`` at the
    end to release held-back text. A block that never closes (a truncated answer) stays hidden. Whitespace
    right after a closing tag is dropped, so ``"<think>x</think>\\n\\nHi"`` shows as ``"Hi"``.

    A stray ``</think>`` outside a block (a chat template that opened the block in the prompt) is dropped,
    but text streamed before it was already shown: that is what ``starts_inside=True`` is for, with servers
    known to open the block in the prompt.
    """

    def __init__(self, *, starts_inside: bool = False) -> None:
        self._inside = starts_inside
        self._pending = ""
        self._trim_leading = False

    def feed(self, text: str) -> tuple[str, str]:
        """Consume a chunk; return the visible and the hidden text that can be decided so far."""
        buffer = self._pending + text
        self._pending = ""
        visible: list[str] = []
        hidden: list[str] = []
        while buffer:
            tags = (CLOSE_TAG,) if self._inside else (OPEN_TAG, CLOSE_TAG)
            found = [(pos, tag) for tag in tags if (pos := buffer.find(tag)) >= 0]
            if found:
                pos, tag = min(found)
                self._emit(buffer[:pos], visible, hidden)
                buffer = buffer[pos + len(tag) :]
                if tag == OPEN_TAG:
                    self._inside = True
                else:
                    self._inside = False
                    self._trim_leading = True
                continue
            keep = _partial_tag_suffix(buffer, tags)
            self._emit(buffer[: len(buffer) - keep], visible, hidden)
            self._pending = buffer[len(buffer) - keep :]
            break
        return "".join(visible), "".join(hidden)

    def flush(self) -> tuple[str, str]:
        """Release held-back text at the end of the stream (an incomplete tag is plain text)."""
        visible: list[str] = []
        hidden: list[str] = []
        self._emit(self._pending, visible, hidden)
        self._pending = ""
        return "".join(visible), "".join(hidden)

    def _emit(self, part: str, visible: list[str], hidden: list[str]) -> None:
        if not part:
            return
        if self._inside:
            hidden.append(part)
            return
        if self._trim_leading:
            part = part.lstrip()
            if not part:
                return
            self._trim_leading = False
        visible.append(part)


def strip_think(text: str) -> tuple[str, str]:
    """Split a complete text into ``(visible, hidden)``.

    Unlike the incremental stripper, a whole text can be judged at once: if a ``</think>`` comes before any
    ``<think>``, the text before it is a block whose opening tag was in the prompt, and it is hidden too.
    """
    close_at = text.find(CLOSE_TAG)
    open_at = text.find(OPEN_TAG)
    starts_inside = close_at >= 0 and (open_at < 0 or close_at < open_at)
    stripper = ThinkStripper(starts_inside=starts_inside)
    visible, hidden = stripper.feed(text)
    tail_visible, tail_hidden = stripper.flush()
    return visible + tail_visible, hidden + tail_hidden
