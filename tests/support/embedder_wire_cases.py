"""The embeddings port's wire contract: what any embeddings server must give the adapter (one unit vector per text, in
order, the same for the same text; one dimension; a blank text embedded). Test modules import these cases, and each
runs them with its own ``embedder`` fixture (an imported test function takes the fixtures of the module that
collects it): the contract suite against the lexicon and a scripted server, the real_model tier against llama.cpp."""

from __future__ import annotations

import math

from shared.memory.embeddings import cosine
from shared.memory.ports import Embedder


async def test_one_unit_vector_per_text_in_order_and_deterministic(
    embedder: Embedder, same_vector_tolerance: float
) -> None:
    texts = ["Likes oolong tea", "住在杭州", "Has a son named Max"]
    first = await embedder.embed(texts)
    assert len(first) == 3 and len({len(v) for v in first}) == 1
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-6) for v in first)
    assert first == await embedder.embed(texts)
    singles = [(await embedder.embed([t]))[0] for t in texts]
    assert all(
        math.isclose(cosine(a, b), 1.0, rel_tol=same_vector_tolerance) for a, b in zip(first, singles, strict=True)
    )
    # the order is the input's: each vector is closest to its own text's
    for i, single in enumerate(singles):
        assert max(range(3), key=lambda j: cosine(first[j], single)) == i


async def test_the_dimension_is_the_same_for_every_text_and_a_blank_text_is_embedded(embedder: Embedder) -> None:
    vectors = await embedder.embed(["x", "A much longer sentence about where the user lives and works.", " ", ""])
    assert len(vectors) == 4 and len({len(v) for v in vectors}) == 1
    assert await embedder.embed([]) == []
