"""The settings of the real-model tier: every profile's model id mapped to the tiny model llama.cpp serves, and the app
pointed at the model proxy in front of it."""

from __future__ import annotations

from typing import Any

from tests.support.model_proxy import ModelProxy
from tests.support.settings import make_settings

PROVIDER_MODEL = "smollm2-135m"
MODEL_ID_MAP = '{"qwen3.5-30b-a3b": "smollm2-135m", "qwen3.5-flash": "smollm2-135m"}'


def real_settings(proxy: ModelProxy, **overrides: Any) -> Any:
    return make_settings(
        llm_base_url=proxy.base_url,
        llm_api_key="test-key",
        llm_timeout_s=120.0,
        model_id_map=MODEL_ID_MAP,
        **overrides,
    )
