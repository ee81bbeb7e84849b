"""A scripted model server that counts the chat requests it is serving at once (the limits' concurrency tests:
a user with ``concurrentRuns: 2`` must never have more than two model requests in flight)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from tests.support.model_server import ModelServer


class CountingModelServer(ModelServer):
    """``ModelServer`` that records the most chat requests it served at the same time (``max_in_flight``): a
    request counts from its arrival until its stream's last frame was produced."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._count_lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0

    def _enter(self) -> None:
        with self._count_lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._count_lock:
            self.in_flight -= 1

    async def _chat_completions(self, request: Request) -> Response:
        self._enter()
        try:
            response = await super()._chat_completions(request)
        except BaseException:
            self._leave()
            raise
        if not isinstance(response, StreamingResponse):
            self._leave()
            return response
        inner = response.body_iterator

        async def counted() -> AsyncIterator[Any]:
            try:
                async for chunk in inner:
                    yield chunk
            finally:
                self._leave()

        response.body_iterator = counted()
        return response
