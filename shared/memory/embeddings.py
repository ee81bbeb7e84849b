"""Embeddings: vectors for memory texts, used to find near duplicates across phrasing and language.

Token-set Jaccard (:mod:`shared.memory.text`) misses "Likes oolong tea" / "Enjoys drinking oolong" and the same
fact in English and in Chinese. An embedder (the port :class:`~shared.memory.ports.Embedder`) maps each text to a
unit vector; the gate merges a proposal into an active memory whose cosine similarity reaches the embedder's
``duplicate_similarity`` (and whose numbers are the same, as for the lexical rule).

Two implementations:

- ``shared.adapters.openai_embeddings.OpenAIEmbedder``: an OpenAI-compatible ``POST /embeddings`` (the model id is
  set per deployment, ``EMBEDDINGS_MODEL_ID``, as chat model ids are);
- :class:`LexiconEmbedder`: deterministic and offline (``make dev``, the tests, the scripted evaluation, and any
  deployment without an embeddings model). It maps words and phrases of a small bilingual lexicon of the facts
  memories hold (food and drink, allergies, places, jobs, family, pets, sports, tools, preferences) to shared
  concept ids, drops filler ("user", "enjoys", "drinking", "是", "喜欢"...), keeps every other word (and CJK
  bigram) as itself, and hashes that bag into a fixed-size vector. Two texts are similar when they name the same
  concepts. It knows only its lexicon: a paraphrase outside it is not caught (see docs/memory.md).
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

from shared.memory.text import tokens


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


# Concept -> surface forms (English words/phrases match on word boundaries, Chinese as substrings). A form mapped
# to "" is filler: removed, never a feature. Longer forms are matched first.
LEXICON: dict[str, tuple[str, ...]] = {
    "": (
        "the user",
        "user",
        "users",
        "is",
        "are",
        "am",
        "be",
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "at",
        "as",
        "and",
        "has",
        "have",
        "really",
        "very",
        "also",
        "always",
        "usually",
        "enjoys",
        "enjoy",
        "likes",
        "like",
        "loves",
        "love",
        "is fond of",
        "fond of",
        "is into",
        "into",
        "drinking",
        "drinks",
        "drink",
        "eating",
        "eats",
        "works as",
        "work as",
        "working as",
        "by profession",
        "professionally",
        "currently",
        "now",
        "named",
        "called",
        "who",
        "prefers",
        "prefer",
        "wants",
        "want",
        "answers",
        "formatted",
        "format",
        "in the",
        "用户",
        "该用户",
        "是一名",
        "是一位",
        "是个",
        "是",
        "一名",
        "一位",
        "喜欢",
        "爱喝",
        "爱吃",
        "爱",
        "热爱",
        "喝",
        "吃",
        "在",
        "的",
        "了",
        "很",
        "非常",
        "也",
        "都",
        "平时",
        "经常",
        "做",
        "当",
        "职业",
        "名叫",
        "叫",
        "对",
        "偏好",
        "希望",
        "想要",
    ),
    "live": (
        "lives",
        "live",
        "living",
        "resides",
        "reside",
        "based",
        "home is",
        "moved to",
        "relocated to",
        "住在",
        "住",
        "居住在",
        "居住",
        "生活在",
        "搬到",
    ),
    "work": ("works", "work", "working", "job", "office", "employed", "工作", "上班", "就职"),
    "allergy": ("allergic to", "allergic", "allergy to", "allergy", "allergies", "过敏"),
    "peanut": ("peanuts", "peanut", "花生"),
    "tree_nut": ("tree nuts", "nuts", "坚果"),
    "shellfish": ("shellfish", "seafood", "海鲜", "贝类"),
    "penicillin": ("penicillin", "青霉素"),
    "lactose": ("lactose intolerant", "lactose", "乳糖不耐受", "乳糖"),
    "oolong": ("oolong tea", "oolong", "乌龙茶", "乌龙"),
    "green_tea": ("green tea", "绿茶"),
    "tea": ("tea", "茶"),
    "coffee": ("coffee", "咖啡"),
    "vegetarian": ("vegetarian", "veggie", "吃素", "素食者", "素食"),
    "vegan": ("vegan", "纯素"),
    "spicy": ("spicy food", "spicy", "辣的", "吃辣", "辣"),
    "beijing": ("beijing", "北京市", "北京"),
    "shanghai": ("shanghai", "上海市", "上海"),
    "hangzhou": ("hangzhou", "杭州市", "杭州"),
    "shenzhen": ("shenzhen", "深圳市", "深圳"),
    "chengdu": ("chengdu", "成都市", "成都"),
    "berlin": ("berlin", "柏林"),
    "tokyo": ("tokyo", "东京"),
    "london": ("london", "伦敦"),
    "toronto": ("toronto", "多伦多"),
    "nurse": ("nurse", "护士"),
    "doctor": ("doctor", "physician", "医生", "大夫"),
    "teacher": ("teacher", "teaches", "教师", "老师"),
    "engineer": (
        "software engineer",
        "software developer",
        "programmer",
        "developer",
        "coder",
        "程序员",
        "软件工程师",
        "码农",
    ),
    "lawyer": ("lawyer", "attorney", "律师"),
    "pilot": ("pilot", "飞行员"),
    "daughter": ("daughter", "daughters", "女儿"),
    "son": ("son", "sons", "儿子"),
    "child": ("kids", "kid", "children", "child", "孩子"),
    "wife": ("wife", "妻子", "老婆", "太太"),
    "husband": ("husband", "丈夫", "老公"),
    "cat": ("cats", "cat", "猫"),
    "dog": ("dogs", "dog", "狗"),
    "running": ("running", "runs", "run", "jogging", "跑步"),
    "marathon": ("marathons", "marathon", "马拉松"),
    "swimming": ("swimming", "swims", "swim", "游泳"),
    "piano": ("piano", "钢琴"),
    "guitar": ("guitar", "吉他"),
    "cello": ("cello", "大提琴"),
    "dark_mode": ("dark mode", "dark theme", "深色模式", "暗色模式", "夜间模式"),
    "bullet_points": ("bullet points", "bullet point", "bulleted lists", "bullets", "要点", "列表形式", "分点"),
    "python": ("python",),
    "rust": ("rust",),
    "morning": ("every morning", "mornings", "morning", "每天早上", "早上"),
    "early": ("early", "早"),
}

_DIMENSIONS = 512
_EN_FORM = re.compile(r"^[a-z0-9 '\-]+$")


def _compile() -> list[tuple[re.Pattern[str], str]]:
    forms = [(form, concept) for concept, surface in LEXICON.items() for form in surface]
    forms.sort(key=lambda fc: len(fc[0]), reverse=True)
    out: list[tuple[re.Pattern[str], str]] = []
    for form, concept in forms:
        if _EN_FORM.match(form):
            out.append((re.compile(rf"(?<![\w]){re.escape(form)}(?![\w])"), concept))
        else:
            out.append((re.compile(re.escape(form)), concept))
    return out


_PATTERNS = _compile()


def features(text: str) -> Counter[str]:
    """The concept ids and leftover tokens of ``text`` (filler removed)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    found: Counter[str] = Counter()
    for pattern, concept in _PATTERNS:
        if concept:
            found.update(f"#{concept}" for _ in pattern.findall(folded))
        folded = pattern.sub(" ", folded)
    found.update(tokens(folded))
    return found


def _bucket(feature: str) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    return value % _DIMENSIONS, 1.0 if (value >> 32) & 1 else -1.0


class LexiconEmbedder:
    """A deterministic, offline embedder over the bilingual concept lexicon (see the module docstring)."""

    model = "lexicon-v1"
    duplicate_similarity = 0.8

    def vector(self, text: str) -> list[float]:
        vec = [0.0] * _DIMENSIONS
        for feature, count in features(text).items():
            index, sign = _bucket(feature)
            vec[index] += sign * count
        norm = math.sqrt(sum(x * x for x in vec))
        return [x / norm for x in vec] if norm else vec

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]
