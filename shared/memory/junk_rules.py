"""Junk the gate can see: what the sentence around a correctly quoted evidence says about it.

A quote can be the user's own words and still not be a fact about the user. The gate
(:class:`~shared.memory.gate.MemoryGate`) finds the quote in the cited message, reads its sentence and clause, and
rejects a write when one of these holds (English and Chinese markers):

- **hypothetical** (``hypothetical_context``): a conditional or imagined situation governs the quote: a marker in
  the quote's clause or in an earlier clause of the same sentence ("Hypothetically, if I moved to Japan, ...",
  "If I were a millionaire, I'd buy a boat", "假如我是老板，我会……", "如果我去留学的话"). Hedges about the
  user's own memory are not hypotheticals and are removed first: "If I remember right, I'm allergic to nuts" is
  a fact, as are "if I recall correctly", "if I'm not mistaken", "如果我没记错的话";
- **question** (``question_context``): the quote's clause asks rather than states: it starts with an interrogative
  or an inverted auxiliary ("Am I allergic ...", "Should I move ..."), ends with a Chinese question particle
  (吗 / 么 / 呢), holds an A-not-A question (是不是, 有没有 ...), or is the only clause of a sentence that ends
  with a question mark (a request to the assistant, "Can you always answer me in bullet points?", is not a
  question about the user). A fact stated next to a question stays a fact: "My daughter Lily just turned 5, any
  party ideas?";
- **third party** (``third_party_context``): the quote's clause is about someone else: it starts with he / she /
  they or "my friend / colleague / boss / neighbour ..." (我朋友 / 我同事 / 他 / 她 ...). The user's own family
  relationships are the user's facts ("My daughter Lily just turned 5", "我女儿今年五岁"), so family words are not
  third-party markers.

Each rule is a pure function of the message text and the quote; each is tested with a junk example and a
counter-example that must still be written (``tests/unit/test_memory_junk_rules.py``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from shared.memory.text import quote_fragments

_SENTENCE_END = re.compile(r"[.!?。！？\n]+")
_CLAUSE_BREAK = re.compile(r"[,;:，；：、—–]+|\s-\s|\b(?:since|because)\b|因为|既然")

_MEMORY_HEDGES = re.compile(
    r"\bif (?:i|I) (?:remember|recall)(?: (?:right|rightly|correctly))?\b|\bif (?:i|I)'?m not mistaken\b"
    r"|\bif (?:i|I) am not mistaken\b|如果我没记错(?:的话)?|要是我没记错(?:的话)?|如果没记错(?:的话)?|没记错的话",
    re.IGNORECASE,
)
_HYPOTHETICAL = re.compile(
    r"\b(?:if|suppose|supposing|imagine|hypothetically|pretend|what if|let's say|lets say|in theory|were i)\b"
    r"|如果|假如|假设|要是|万一|倘若|假若|想象一下|设想",
    re.IGNORECASE,
)
_EN_QUESTION_START = re.compile(
    r"^(?:so |and |but |hmm,? |well,? |also )*(?:am|is|are|was|were|do|does|did|should|shall|have|has|may|might|"
    r"what|why|how|where|when|who|whom|which|whether|(?:can|could|would|will)(?! you\b))\b",
    re.IGNORECASE,
)
_REQUEST_START = re.compile(r"^(?:please |pls )?(?:can|could|would|will) you\b|^please\b|^请|^麻烦", re.IGNORECASE)
_ZH_QUESTION = re.compile(r"[吗么呢][？?]?$|是不是|有没有|要不要|会不会|能不能|可不可以|是否|对不对")
_THIRD_PARTY_START = re.compile(
    r"^(?:so |and |but |also |well,? )*(?:he|she|they|he's|she's|they're|"
    r"my (?:best |close |old )?(?:friend|friends|colleague|colleagues|coworker|co-worker|coworkers|boss|manager|"
    r"neighbou?r|neighbou?rs|roommate|flatmate|classmate|classmates|teammate|client|customer|teacher|student|"
    r"boyfriend's|girlfriend's|friend's|colleague's))\b"
    r"|^(?:我的?(?:好)?(?:朋友|同事|老板|领导|上司|邻居|室友|同学|客户|队友|老师|学生)|他们|她们|他|她)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ContextFinding:
    reason: str
    """``hypothetical_context``, ``question_context`` or ``third_party_context``."""
    why: str
    marker: str


@dataclass(frozen=True)
class _Span:
    start: int
    end: int


def locate(quote: str, text: str) -> _Span | None:
    """Where the quote's fragments sit in ``text`` (original indices), matched letters-and-digits only."""
    folded: list[str] = []
    origin: list[int] = []
    for index, ch in enumerate(text):
        for c in unicodedata.normalize("NFKC", ch).casefold():
            if c.isalnum():
                folded.append(c)
                origin.append(index)
    haystack = "".join(folded)
    fragments = quote_fragments(quote)
    if not fragments:
        return None
    position, first = 0, -1
    for fragment in fragments:
        found = haystack.find(fragment, position)
        if found < 0:
            return None
        if first < 0:
            first = found
        position = found + len(fragment)
    return _Span(origin[first], origin[position - 1] + 1)


def _sentence_around(text: str, span: _Span) -> tuple[str, int, bool]:
    """(the sentence holding the quote's start, the quote's offset in it, whether it ends with a question mark)."""
    start = 0
    for match in _SENTENCE_END.finditer(text):
        if match.end() <= span.start:
            start = match.end()
            continue
        if match.start() >= span.start:
            return text[start : match.start()], span.start - start, "?" in match.group() or "？" in match.group()
    return text[start:], span.start - start, False


def _clauses(sentence: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    position = 0
    for match in _CLAUSE_BREAK.finditer(sentence):
        out.append((position, sentence[position : match.start()]))
        position = match.end()
    out.append((position, sentence[position:]))
    return out


def judge(text: str, quote: str) -> ContextFinding | None:
    """The first junk marker around ``quote`` in ``text`` (None: the quote reads as a statement by the user)."""
    span = locate(quote, text)
    if span is None:
        return None
    sentence, offset, asks = _sentence_around(text, span)
    sentence = _MEMORY_HEDGES.sub(lambda m: " " * len(m.group()), sentence)
    clauses = _clauses(sentence)
    index = max(i for i, (begin, _) in enumerate(clauses) if begin <= offset)
    clause = clauses[index][1].strip()
    for _, earlier in clauses[: index + 1]:
        if marker := _HYPOTHETICAL.search(earlier):
            return ContextFinding(
                "hypothetical_context",
                f"the quote is part of a hypothetical ({marker.group()!r}), not a statement of fact",
                marker.group(),
            )
    question = _EN_QUESTION_START.search(clause) or _ZH_QUESTION.search(clause)
    if question is None and asks and len(clauses) == 1 and not _REQUEST_START.search(clause):
        question = re.search(r".$", clause)
    if question is not None:
        return ContextFinding(
            "question_context",
            "the quote is part of a question, not a statement of fact",
            question.group() if question.group() else "?",
        )
    if third := _THIRD_PARTY_START.search(clause):
        return ContextFinding(
            "third_party_context",
            f"the quote is about someone else ({third.group().strip()!r}), not about the user",
            third.group().strip(),
        )
    return None
