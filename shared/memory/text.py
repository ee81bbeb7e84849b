"""Deterministic text comparison for the memory gate: evidence matching, duplicate detection, relevance.

Everything here is pure and language-light (English and Chinese are what the cases cover):

- :func:`compact` is the form evidence is matched in: NFKC, case-folded, with every character that is not a
  letter or a digit removed. A quote therefore matches whatever the model did to spacing, punctuation or quote
  marks, but not a single changed word.
- :func:`tokens` is the set a similarity is computed on: words for alphabetic scripts (minus a short stop-word
  list), character bigrams for Chinese / Japanese / Korean runs (which have no spaces), digits as words.
- :func:`near_duplicate` says whether two memory texts say the same thing: equal compact forms, or a token-set
  Jaccard similarity of at least :data:`NEAR_DUPLICATE_JACCARD` **and** the same numbers (``has 2 kids`` and
  ``has 3 kids`` are different facts however similar they look).
"""

from __future__ import annotations

import math
import re
import unicodedata

NEAR_DUPLICATE_JACCARD = 0.8
"""Token-set Jaccard similarity from which two memories count as the same (see docs/memory.md for examples)."""

MIN_QUOTE_CHARS = 3
"""An evidence quote (or each ``...``-separated fragment of it) must keep at least this many letters/digits."""

_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
_WORD = re.compile(r"[^\W_]+")
_DIGITS = re.compile(r"\d+")
_ELLIPSIS = re.compile(r"\.{3,}|…+")
_CJK_STOP = ("该用户", "用户")
_STOP_WORDS = frozenset(
    """a an the and or but of to in on at for with from by as is are was were be been being am i me my mine
    you your he she his her it its they them their we our user user's users this that these those has have had
    do does did will would should can could which who whom very really just also about""".split()
)


def compact(text: str) -> str:
    """Letters and digits only, NFKC-normalised and case-folded."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in folded if ch.isalnum())


def quote_fragments(quote: str) -> list[str]:
    """The compact fragments of a quote; ``...`` / ``…`` separate fragments that must appear in order."""
    return [c for part in _ELLIPSIS.split(quote) if (c := compact(part))]


def quote_appears_in(quote: str, text: str) -> bool:
    """Whether every fragment of ``quote`` appears in ``text``, in order (compact forms)."""
    fragments = quote_fragments(quote)
    if not fragments or any(len(f) < MIN_QUOTE_CHARS for f in fragments):
        return False
    haystack = compact(text)
    position = 0
    for fragment in fragments:
        found = haystack.find(fragment, position)
        if found < 0:
            return False
        position = found + len(fragment)
    return True


def quote_long_enough(quote: str) -> bool:
    fragments = quote_fragments(quote)
    return bool(fragments) and all(len(f) >= MIN_QUOTE_CHARS for f in fragments)


def tokens(text: str) -> frozenset[str]:
    """Words (minus stop words) and CJK character bigrams of ``text``."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    out: set[str] = set()
    for run in _CJK_RUN.findall(folded):
        for stop in _CJK_STOP:
            run = run.replace(stop, " ")
        for piece in run.split():
            if len(piece) == 1:
                out.add(piece)
            out.update(piece[i : i + 2] for i in range(len(piece) - 1))
    for word in _WORD.findall(_CJK_RUN.sub(" ", folded)):
        if word not in _STOP_WORDS:
            out.add(word)
    return frozenset(out)


def numbers(text: str) -> frozenset[str]:
    return frozenset(m.lstrip("0") or "0" for m in _DIGITS.findall(unicodedata.normalize("NFKC", text)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def similarity(a: str, b: str) -> float:
    """1.0 for the same compact text; otherwise the token-set Jaccard similarity."""
    if compact(a) == compact(b):
        return 1.0
    return jaccard(tokens(a), tokens(b))


def near_duplicate(a: str, b: str, *, threshold: float = NEAR_DUPLICATE_JACCARD) -> tuple[bool, float]:
    """(same fact?, similarity). Differing numbers are never the same fact."""
    score = similarity(a, b)
    if score >= 1.0:
        return True, score
    return score >= threshold and numbers(a) == numbers(b), score


def relevance(query_tokens: frozenset[str], text: str) -> float:
    """Lexical relevance of ``text`` to a query: shared tokens, damped by the text's length."""
    mine = tokens(text)
    if not mine or not query_tokens:
        return 0.0
    return len(mine & query_tokens) / math.sqrt(len(mine))
