"""The real-model tier: llama.cpp's OpenAI-compatible server (llama-cpp-python, SmolLM2-135M) on loopback, one per
test session, with a pass-through proxy per test that forces the tool calls a tiny model never makes itself.

The server is built once per machine by ``make llama-server`` (``make test`` runs it). Without it the tier is
skipped on a developer's machine and fails in CI, where a skipped tier would hide a missing build step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from shared.wiring import ServiceOverrides, Services
from tests.support.ci import running_in_ci
from tests.support.live_app import serve_app
from tests.support.llama_server import LlamaServer, LlamaServerMissing, built_env, llama_server
from tests.support.model_proxy import ModelProxy

from .model_settings import real_settings, text_only_profiles

pytestmark = pytest.mark.real_model

"""The deployment's map: the profiles' logical ids to the id this server serves (it accepts any id anyway)."""


@pytest.fixture(scope="session")
def llama() -> Iterator[LlamaServer]:
    try:
        built_env()
    except LlamaServerMissing as exc:
        if running_in_ci():
            raise
        pytest.skip(str(exc))
    with llama_server() as server:
        yield server


EMBEDDINGS_ARGS = ("--embedding", "true", "--kv_overrides", "llama.pooling_type=int:1")
"""A second server of the same GGUF that answers ``/v1/embeddings``: ``embedding`` is the server's setting; a chat
model's GGUF declares no pooling, so llama.cpp would answer one vector per token: the GGUF key override
``llama.pooling_type = 1`` (mean) makes it one vector per text, as an embeddings endpoint answers."""


@pytest.fixture(scope="session")
def llama_embeddings() -> Iterator[LlamaServer]:
    """llama.cpp serving embeddings, started once per session (only when a test asks for it)."""
    try:
        built_env()
    except LlamaServerMissing as exc:
        if running_in_ci():
            raise
        pytest.skip(str(exc))
    with llama_server(n_ctx=512, extra_args=EMBEDDINGS_ARGS) as server:
        yield server


@pytest.fixture
def proxy(llama: LlamaServer) -> Iterator[ModelProxy]:
    with ModelProxy(upstream=llama.base_url) as running:
        yield running


@pytest.fixture
def live(store: Any, redis_url: str, proxy: ModelProxy) -> Iterator[str]:
    """The app under uvicorn, its model adapter talking to llama.cpp through the proxy; its profiles text only."""
    overrides = ServiceOverrides(store=store, profiles=text_only_profiles())
    with serve_app(Services(real_settings(proxy, redis_url=redis_url), overrides=overrides)) as url:
        yield url
