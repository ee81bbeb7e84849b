"""OpenAI-compatible ``POST /embeddings`` adapter for the :class:`~shared.memory.ports.Embedder` port.

Works with any server that speaks the OpenAI embeddings API (DashScope's compatible mode, vLLM, llama.cpp's
server with an embedding model, OpenAI). The model id is set per deployment (``EMBEDDINGS_MODEL_ID``); the
similarity from which two memories are the same fact depends on the model, so it is a setting too
(``MEMORY_DUPLICATE_SIMILARITY``). Vectors are returned in input order (the ``index`` of each item) and scaled
to unit length, so cosine similarity is a dot product whatever the server does.

The ``AsyncOpenAI`` client is created on first use (cheap cold starts; tests may inject their own).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from openai import AsyncOpenAI

from shared.errors import ModelError

DEFAULT_DUPLICATE_SIMILARITY = 0.9
MAX_BATCH = 64
"""Texts per request (servers cap a batch; DashScope's compatible mode accepts 10, most others more)."""


class OpenAIEmbedder:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        *,
        duplicate_similarity: float = DEFAULT_DUPLICATE_SIMILARITY,
        batch_size: int = MAX_BATCH,
        timeout_s: float = 10.0,
        max_retries: int = 2,
        client: AsyncOpenAI | None = None,
    ) -> None:
        self.model = model
        self.duplicate_similarity = duplicate_similarity
        self.base_url = base_url
        self._api_key = api_key
        self._batch = max(1, batch_size)
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._client = client

    @property
    def client(self) -> AsyncOpenAI:
        if self._client is None:
            self._client = AsyncOpenAI(
                base_url=self.base_url, api_key=self._api_key, timeout=self._timeout_s, max_retries=self._max_retries
            )
        return self._client

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch):
            chunk = [t if t.strip() else " " for t in texts[start : start + self._batch]]
            try:
                response = await self.client.embeddings.create(model=self.model, input=chunk, encoding_format="float")
            except Exception as exc:
                raise ModelError(
                    f"embeddings request failed: {type(exc).__name__}", code="embeddings_unavailable"
                ) from exc
            items = sorted(response.data, key=lambda item: item.index)
            if len(items) != len(chunk):
                raise ModelError(
                    f"embeddings server returned {len(items)} vectors for {len(chunk)} texts",
                    code="embeddings_invalid",
                )
            out += [_unit(_flat(item.embedding)) for item in items]
        if len({len(v) for v in out}) > 1:
            raise ModelError("embeddings server returned vectors of different sizes", code="embeddings_invalid")
        return out

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def _flat(embedding: object) -> list[float]:
    """The item's vector, checked: a server without pooling (llama.cpp serving a chat model's GGUF) answers one
    vector per token, a list of lists, which is no text embedding."""
    if (
        not isinstance(embedding, list)
        or not embedding
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in embedding)
    ):
        raise ModelError("embeddings server returned no flat vector of numbers", code="embeddings_invalid")
    return [float(x) for x in embedding]


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else vector
