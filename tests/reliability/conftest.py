"""The reliability suite's app: uvicorn on loopback with a real redis-server, moto, and the real ``openai`` client
talking HTTP to the scripted model server, with short timeouts and retries so that faults resolve quickly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from shared.wiring import ServiceOverrides, Services
from tests.support.live_app import serve_app
from tests.support.model_server import ModelServer
from tests.support.settings import make_settings

FAULT_SETTINGS: dict[str, Any] = {"llm_max_retries": 1, "llm_timeout_s": 1.0}


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer() as server:
        yield server


@pytest.fixture
def live_services(store: Any, redis_url: str, model_server: ModelServer) -> Services:
    settings = make_settings(
        redis_url=redis_url, llm_base_url=model_server.base_url, llm_api_key="test-key", **FAULT_SETTINGS
    )
    return Services(settings, overrides=ServiceOverrides(store=store))


@pytest.fixture
def live(live_services: Services) -> Iterator[str]:
    with serve_app(live_services) as url:
        yield url
