"""Contract of the embeddings port: the same cases against the offline lexicon embedder and the OpenAI-compatible
adapter talking, with the real ``openai`` client over real HTTP, to an ``/v1/embeddings`` server on loopback.

The server here computes its vectors with the lexicon (scaled and shuffled, as real servers return unnormalised
vectors and may reorder items), so the adapter's handling of the wire format is what is tested. The cases marked
"wire contract" below run a third time in the real-model tier (``tests/real_model/test_embeddings_contract.py``),
against llama.cpp's server computing embeddings with a GGUF model; the cases about meaning (paraphrases, languages)
hold only for an embedder made for it, which the small chat model of that tier is not.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shared.adapters.openai_embeddings import OpenAIEmbedder
from shared.errors import ModelError
from shared.memory.embeddings import LexiconEmbedder, cosine
from shared.memory.ports import Embedder
from shared.wiring import Services
from tests.support.embedder_wire_cases import (  # the wire-contract cases, run here with this module's fixtures
    test_one_unit_vector_per_text_in_order_and_deterministic,
    test_the_dimension_is_the_same_for_every_text_and_a_blank_text_is_embedded,
)
from tests.support.settings import make_settings

__all__ = [
    "test_one_unit_vector_per_text_in_order_and_deterministic",
    "test_the_dimension_is_the_same_for_every_text_and_a_blank_text_is_embedded",
]


class EmbeddingsServer:
    """``POST /v1/embeddings`` on loopback; vectors from the lexicon, scaled by 3, items in reverse order."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail_with: int | None = None
        self.per_token = False
        """Answer one vector per token (a list of lists), as llama.cpp does for a model without pooling."""
        self._lexicon = LexiconEmbedder()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    async def _embeddings(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        if self.fail_with is not None:
            return JSONResponse({"error": {"message": "scripted failure"}}, status_code=self.fail_with)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [
            {"object": "embedding", "index": i, "embedding": [3 * x for x in self._lexicon.vector(text)]}
            for i, text in enumerate(inputs)
        ]
        if self.per_token:
            data = [{**item, "embedding": [item["embedding"]] * 2} for item in data]
        return JSONResponse(
            {
                "object": "list",
                "data": list(reversed(data)),
                "model": body["model"],
                "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)},
            }
        )

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        app = Starlette(routes=[Route("/v1/embeddings", self._embeddings, methods=["POST"])])
        config = uvicorn.Config(app, log_config=None, log_level="critical", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("embeddings server did not start")
            time.sleep(0.01)
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddingsServer]:
    s = EmbeddingsServer()
    s.start()
    yield s
    s.stop()


@pytest.fixture(params=["lexicon", "openai-http"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    if request.param == "lexicon":
        return LexiconEmbedder()
    server: EmbeddingsServer = request.getfixturevalue("server")
    server.fail_with = None
    return OpenAIEmbedder(server.base_url, "test-key", "bge-m3-test", duplicate_similarity=0.8, max_retries=0)


@pytest.fixture
def same_vector_tolerance() -> float:
    """How far from 1 the cosine of two vectors of the same text may be (a batch against one text alone)."""
    return 1e-6


# ---- wire contract: every embedder, the real-model tier's too ----------------------------------------------------


# ---- meaning: the lexicon and an embeddings model, not any model -------------------------------------------------


async def test_paraphrases_and_translations_reach_the_duplicate_similarity_and_different_facts_do_not(
    embedder: Embedder,
) -> None:
    same, different = (
        await embedder.embed(["Is allergic to peanuts", "对花生过敏"]),
        await embedder.embed(["对花生过敏", "对海鲜过敏"]),
    )
    assert cosine(*same) >= embedder.duplicate_similarity
    assert cosine(*different) < embedder.duplicate_similarity


async def test_the_adapter_sends_the_deployments_model_id_and_splits_large_batches(server: EmbeddingsServer) -> None:
    server.fail_with = None
    before = len(server.requests)
    embedder = OpenAIEmbedder(server.base_url, "test-key", "text-embedding-v4", batch_size=2, max_retries=0)
    vectors = await embedder.embed([f"fact {i}" for i in range(5)])
    assert len(vectors) == 5
    sent = server.requests[before:]
    assert [len(r["input"]) for r in sent] == [2, 2, 1]
    assert {r["model"] for r in sent} == {"text-embedding-v4"}
    await embedder.close()


async def test_a_server_error_is_a_model_error_the_gate_can_fall_back_from(server: EmbeddingsServer) -> None:
    server.fail_with = 503
    embedder = OpenAIEmbedder(server.base_url, "test-key", "bge-m3-test", max_retries=0)
    with pytest.raises(ModelError) as caught:
        await embedder.embed(["Likes tea"])
    assert caught.value.code == "embeddings_unavailable"
    server.fail_with = None


async def test_per_token_vectors_are_an_invalid_answer_not_a_crash(server: EmbeddingsServer) -> None:
    # GIVEN a server that answers a list of vectors per text (llama.cpp serving a chat model without pooling)
    server.per_token = True
    embedder = OpenAIEmbedder(server.base_url, "test-key", "bge-m3-test", max_retries=0)
    try:
        # WHEN the adapter embeds  THEN a ModelError the gate falls back from, not a TypeError
        with pytest.raises(ModelError) as caught:
            await embedder.embed(["Likes tea"])
    finally:
        server.per_token = False
        await embedder.close()
    assert caught.value.code == "embeddings_invalid"


def test_the_deployment_chooses_the_embedder_by_setting() -> None:
    assert isinstance(Services(make_settings()).embedder, LexiconEmbedder)
    chosen = (
        Services(
            make_settings(
                llm_base_url="http://127.0.0.1:9/v1",
                llm_api_key="k",
                embeddings_model_id="text-embedding-v4",
                memory_duplicate_similarity=0.87,
            )
        )
    ).embedder
    assert isinstance(chosen, OpenAIEmbedder)
    assert (chosen.model, chosen.duplicate_similarity, chosen.base_url) == (
        "text-embedding-v4",
        0.87,
        "http://127.0.0.1:9/v1",
    )
