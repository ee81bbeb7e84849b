"""What the title model is asked, and what is kept of its answer: the prompt, the caps, the clean-up, the fallback.

Pure functions, so the job (:mod:`shared.titles.job`), its tests and the cost bench (``bench/title_cost.py``) share
one prompt. The input is bounded (the question and the answer are cut before they are sent), so a title's cost
does not grow with a long first message; the output is capped twice: ``max_tokens`` on the request, and
:data:`TITLE_MAX_CHARS` on what is stored.
"""

from __future__ import annotations

import re

from shared.llm.types import ChatMessage, ChatRequest
from shared.thread_fields import preview

TITLE_MAX_CHARS = 60
"""The longest title stored (a word-boundary cut with an ellipsis when a title, or the fallback, is longer)."""
TITLE_MAX_WORDS = 6
TITLE_MAX_TOKENS = 32
"""The model's output cap: a title of six words (or 20 CJK characters) is well under it in every language."""
QUESTION_CHARS = 1_000
"""The first user message is shown up to this long (a pasted document needs no more to be named)."""
ANSWER_CHARS = 300
"""The answer's opening, shown as context only (a greeting as the first message is named by what followed)."""

SYSTEM_PROMPT = f"""\
You name conversations for a list of chats. Read the user's first message and the start of the answer, and \
reply with a title only: at most {TITLE_MAX_WORDS} words (at most 20 characters in Chinese, Japanese or Korean), \
no quotes, no final punctuation, no emoji. Write the title in the language of the user's message, whatever the \
language of the answer."""

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
_LABEL = re.compile(r"^(title|titel|título|titre|标题|標題)\s*[:：]\s*", re.I)
_WRAPPERS = "\"'“”„‘’‚«»‹›「」『』《》*_#` "
_TRAILING = ".。!！?？,，;；:：…、"


def title_request(model: str, question: str, answer: str) -> ChatRequest:
    """The title model's request for a first exchange (thinking off; both texts cut to their bounds)."""
    shown = f"<user_message>\n{question.strip()[:QUESTION_CHARS]}\n</user_message>"
    if answer.strip():
        shown += f"\n<answer_start>\n{answer.strip()[:ANSWER_CHARS]}\n</answer_start>"
    return ChatRequest(
        model=model,
        messages=(ChatMessage(role="system", content=SYSTEM_PROMPT), ChatMessage(role="user", content=shown)),
        thinking="off",
        temperature=0.2,
        max_tokens=TITLE_MAX_TOKENS,
    )


def clean_title(text: str) -> str:
    """The title in a model's answer: its first line, without reasoning, a ``Title:`` label, quotes, markdown or
    final punctuation, on one line and cut to :data:`TITLE_MAX_CHARS`; empty when nothing is left."""
    lines = [line for line in _THINK.sub("", text).splitlines() if line.strip()]
    if not lines:
        return ""
    title = _LABEL.sub("", lines[0].strip()).strip(_WRAPPERS).rstrip(_TRAILING).strip(_WRAPPERS)
    return preview(title, TITLE_MAX_CHARS) if title else ""


def fallback_title(question: str) -> str:
    """The title when the model cannot give one (failed, timed out, answered nothing, over a budget): the first
    user message on one line, cut at a word boundary to :data:`TITLE_MAX_CHARS` (no comma before the ellipsis)."""
    title = preview(question, TITLE_MAX_CHARS)
    return title[:-1].rstrip(_TRAILING + " ") + "…" if title.endswith("…") else title
