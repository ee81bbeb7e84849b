"""The models a process calls: the chat model (with its provider id map) and the embedder for memories."""

from __future__ import annotations

import logging
from functools import cached_property
from typing import TYPE_CHECKING

from shared.ports.model import ChatModel
from shared.wiring.base import ProviderBase
from shared.wiring.overrides import overridable
from shared.wiring.secrets import llm_api_key as read_llm_api_key

if TYPE_CHECKING:
    from shared.memory.ports import Embedder

logger = logging.getLogger(__name__)


class ModelProviders(ProviderBase):
    """The chat model and the embedder, on the endpoint and key the settings name."""

    @overridable("model")
    def model(self) -> ChatModel:
        """The OpenAI-compatible model at ``LLM_BASE_URL``; without one, the built-in offline model."""
        if self.settings.llm_base_url:
            from shared.llm.openai_chat import OpenAIChatModel
            from shared.llm.thinking import parse_provider

            return OpenAIChatModel(
                self.settings.llm_base_url,
                self.llm_api_key(),
                provider=parse_provider(self.settings.llm_provider) if self.settings.llm_provider else None,
                timeout_s=self.settings.llm_timeout_s,
                max_retries=self.settings.llm_max_retries,
                model_ids=self.model_ids,
            )
        from shared.llm.offline import OfflineChatModel

        logger.warning("no LLM_BASE_URL: using the built-in offline model")
        return OfflineChatModel()

    def llm_api_key(self) -> str:
        """The key for the model endpoint (and an embeddings endpoint on the same provider)."""
        return read_llm_api_key(self.settings)

    @cached_property
    def model_ids(self) -> dict[str, str]:
        """``MODEL_ID_MAP`` (parsed when the settings loaded); ids that the built-in model table does not know are
        logged, not refused."""
        from shared.profiles import KNOWN_MODELS

        mapping = dict(self.structured.model_ids)
        for logical, provider_id in mapping.items():
            if provider_id not in KNOWN_MODELS:
                logger.warning(
                    "MODEL_ID_MAP names a provider model id the built-in table does not know; sending it as set",
                    extra={"model": logical, "provider_model": provider_id},
                )
        return mapping

    @overridable("embedder")
    def embedder(self) -> Embedder:
        """The OpenAI-compatible embeddings model when ``EMBEDDINGS_MODEL_ID`` is set; else the offline lexicon."""
        settings = self.settings
        base_url = settings.embeddings_base_url or settings.llm_base_url
        if not settings.embeddings_model_id or not base_url:
            from shared.memory.embeddings import LexiconEmbedder

            lexicon = LexiconEmbedder()
            if settings.memory_duplicate_similarity is not None:
                lexicon.duplicate_similarity = settings.memory_duplicate_similarity
            return lexicon
        from shared.adapters.openai_embeddings import DEFAULT_DUPLICATE_SIMILARITY, OpenAIEmbedder

        return OpenAIEmbedder(
            base_url,
            self.llm_api_key(),
            settings.embeddings_model_id,
            duplicate_similarity=settings.memory_duplicate_similarity or DEFAULT_DUPLICATE_SIMILARITY,
        )
