"""The embeddings port's wire contract against a model-serving process: ``OpenAIEmbedder`` and the real ``openai``
client over HTTP to llama.cpp's OpenAI-compatible server (llama-cpp-python) computing embeddings with the GGUF model
of this tier (SmolLM2-135M, from a PyPI package).

The wire-contract cases of ``tests/support/embedder_wire_cases.py`` (the contract suite runs them too) run here
unchanged, with this module's ``embedder`` (imported test functions take the fixtures of the module that collects
them). The tiny chat model is no embeddings model, so nothing here judges what its vectors mean: only what any
embeddings server must give the adapter (one vector per text, one dimension, in order, the same for the same text,
errors as ``ModelError``).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest

from shared.adapters.openai_embeddings import OpenAIEmbedder
from shared.errors import ModelError
from shared.memory.embeddings import cosine
from tests.support.embedder_wire_cases import (  # the shared wire-contract cases, collected here too
    test_one_unit_vector_per_text_in_order_and_deterministic,
    test_the_dimension_is_the_same_for_every_text_and_a_blank_text_is_embedded,
)
from tests.support.llama_server import SERVED_MODEL, LlamaServer
from tests.support.redis_server import free_port

pytestmark = pytest.mark.real_model

__all__ = [
    "test_one_unit_vector_per_text_in_order_and_deterministic",
    "test_the_dimension_is_the_same_for_every_text_and_a_blank_text_is_embedded",
]

SMOLLM2_DIMENSION = 576
"""SmolLM2-135M's hidden size: the server answers the model's embedding width, not a fixed one."""


def adapter(base_url: str, *, batch_size: int = 64, timeout_s: float = 120) -> OpenAIEmbedder:
    return OpenAIEmbedder(base_url, "test-key", SERVED_MODEL, batch_size=batch_size, timeout_s=timeout_s, max_retries=0)


@pytest.fixture
async def embedder(llama_embeddings: LlamaServer) -> AsyncIterator[OpenAIEmbedder]:
    made = adapter(llama_embeddings.base_url)
    yield made
    await made.close()


@pytest.fixture
def same_vector_tolerance() -> float:
    """A text embedded alone or in a batch goes through different matrix shapes on the CPU: float noise."""
    return 1e-4


async def test_the_vectors_have_the_models_width(embedder: OpenAIEmbedder) -> None:
    vectors = await embedder.embed(["Likes oolong tea", "住在杭州"])
    assert [len(v) for v in vectors] == [SMOLLM2_DIMENSION, SMOLLM2_DIMENSION]
    assert cosine(*vectors) < 0.9999  # two texts are two vectors, not one repeated


async def test_a_batch_split_over_requests_keeps_each_texts_vector_in_place(llama_embeddings: LlamaServer) -> None:
    words = ["tea", "杭州", "a son", "cycling", "nurse"]
    texts = [f"The user's fact number {i}: {word}" for i, word in enumerate(words)]
    whole = adapter(llama_embeddings.base_url)
    split = adapter(llama_embeddings.base_url, batch_size=2)
    try:
        one_request, three_requests = await whole.embed(texts), await split.embed(texts)
    finally:
        await whole.close()
        await split.close()
    assert len(three_requests) == 5
    for a, b in zip(one_request, three_requests, strict=True):
        assert math.isclose(cosine(a, b), 1.0, rel_tol=1e-4)


async def test_a_server_that_serves_no_embeddings_is_a_model_error(llama: LlamaServer) -> None:
    # GIVEN the tier's chat server (started without embeddings: llama-cpp-python answers 500)
    chat_only = adapter(llama.base_url)
    try:
        with pytest.raises(ModelError) as caught:
            await chat_only.embed(["Likes tea"])
    finally:
        await chat_only.close()
    assert caught.value.code == "embeddings_unavailable"


async def test_no_server_at_the_address_is_a_model_error() -> None:
    nowhere = adapter(f"http://127.0.0.1:{free_port()}/v1", timeout_s=5)
    with pytest.raises(ModelError) as caught:
        await nowhere.embed(["Likes tea"])
    assert caught.value.code == "embeddings_unavailable"
