"""The chat model port. Its request and chunk types are ``shared.llm.types`` (ours, never an SDK's)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from shared.llm.types import ChatChunk, ChatRequest


class ChatModel(Protocol):
    """The model port. ``stream`` yields chunks and ends with exactly one ``Finished``.

    Fakes: ``ScriptedModel`` (tests/support/scripted_model.py) and ``OfflineChatModel`` (shared/llm/offline.py,
    also the model of a deployment without credentials); adapter: ``OpenAIChatModel`` (shared/llm/openai_chat.py);
    contract: tests/contract/test_chat_model_contract.py (the adapter alone in depth:
    tests/contract/test_openai_chat_adapter.py)."""

    provider: str

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]: ...

    async def list_models(self) -> list[str]: ...
