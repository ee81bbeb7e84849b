"""The settings of the real-model tier: every profile's model id mapped to the tiny model llama.cpp serves, the app
pointed at the model proxy in front of it, and the profiles declaring what that model reads: text only."""

from __future__ import annotations

from typing import Any

from shared.profiles import ProfileCatalog, default_catalog
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


def text_only_profiles() -> ProfileCatalog:
    """The shipped profiles as a deployment on SmolLM2-135M declares them: the model reads text only (it has no
    vision encoder, and the server loads no multimodal projector), so an image part is refused with ``422
    unsupported_modality`` before anything is stored or the model is called (run-agent-input.md §3.4)."""
    return ProfileCatalog(
        {
            profile.name: profile.model_copy(
                update={"model": profile.model.model_copy(update={"input_modalities": ("text",)})}
            )
            for profile in default_catalog()
        }
    )
