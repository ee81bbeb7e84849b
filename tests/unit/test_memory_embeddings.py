"""The offline embedder: deterministic unit vectors; paraphrases and translations close, different facts apart."""

from __future__ import annotations

import math

import pytest

from shared.memory.embeddings import LexiconEmbedder, cosine


async def test_vectors_are_deterministic_unit_vectors_in_order() -> None:
    embedder = LexiconEmbedder()
    first = await embedder.embed(["Likes oolong tea", "住在杭州", ""])
    again = await LexiconEmbedder().embed(["Likes oolong tea", "住在杭州", ""])
    assert first == again and len(first) == 3
    assert math.isclose(sum(x * x for x in first[0]), 1.0) and math.isclose(sum(x * x for x in first[1]), 1.0)
    assert not any(first[2])


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Likes oolong tea", "Enjoys drinking oolong"),
        ("Has a peanut allergy", "Is allergic to peanuts"),
        ("Is allergic to peanuts", "对花生过敏"),
        ("Lives in Hangzhou", "住在杭州"),
        ("用户住在北京", "住在北京市"),
        ("Works as a lawyer", "是一名律师"),
    ],
)
def test_the_same_fact_in_other_words_or_language_is_similar(a: str, b: str) -> None:
    embedder = LexiconEmbedder()
    assert cosine(embedder.vector(a), embedder.vector(b)) >= embedder.duplicate_similarity


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Likes oolong tea", "Likes green tea"),
        ("对花生过敏", "对海鲜过敏"),
        ("Lives in Hangzhou", "Works in Hangzhou"),
        ("Lives in Shanghai", "Lives in Beijing"),
        ("Has a daughter named Lily", "Has a son named Max"),
        ("Likes tea", "Hates tea"),
    ],
)
def test_similar_but_different_facts_stay_apart(a: str, b: str) -> None:
    embedder = LexiconEmbedder()
    assert cosine(embedder.vector(a), embedder.vector(b)) < embedder.duplicate_similarity
