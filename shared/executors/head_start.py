"""A chat run's head start: what the worker does beside admission so its first model request waits for one store
round trip (the thread's claim with its reads), not three. One module, so the run path reads the same without it.

What it buys, measured by ``python -m bench.mechanisms`` (one run at a time, the store at 5 ms, the model's first
token at 300 ms; docs/benchmarks.md §8), as the cost of turning each part off:

- **the memory note (and the thread's stored state) read beside admission** (:meth:`HeadStart.read`): +5.8 % time to
  first text, the model request 19 ms later; without it the model request waits for 3 store round trips (the limit
  is 2, ``tests/integration/test_admission_round_trips.py``);
- **the first model request sent beside admission's write** (:meth:`HeadStart.open`, :class:`OpenedTurn`): +2.8 %,
  12 ms. After the claim and its reads, admission knows the context window the run will have (the history it read
  and the messages it is about to store), so the request need not wait for the write. The model takes hundreds of
  milliseconds to its first token, the write one round trip; by the time a chunk arrives the run is stored, or
  refused and the request closed.

(The third part, the first context window served from admission's read, is ``KnownHistory`` in
``shared/context_window.py``: +5.1 %.)

Correctness never rests on the guess: the worker builds its first request again from what admission actually
stored, and takes the opened stream only when the two requests are equal; otherwise the opened one is closed and a
new one sent, as without it. A note read for another run is never used; a read that failed is done again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from shared.context_window import KnownHistory
from shared.executors.context import RunContext
from shared.executors.run_state import RunState
from shared.llm.types import ChatChunk, ChatRequest
from shared.ports.model import ChatModel

logger = logging.getLogger(__name__)


FirstRequest = Callable[[RunContext, "HeadStart"], Awaitable[ChatRequest | None]]
"""Builds a run's first model request as the executor will (``ctx.known_history`` set); None: it cannot tell yet."""


class HeadStart:
    """One run's head start, a value built for the run (``WorkerExecutor.head_start``) and handed to its ``execute``
    in ``RunContext.head_start``: the note and the thread's state read beside admission, and the first request
    opened beside its write. The executor holds none of it, so one executor serves any number of runs."""

    def __init__(
        self,
        ctx: RunContext,
        model: ChatModel,
        *,
        note: Callable[[], Awaitable[str]] | None = None,
        state: RunState | None = None,
        first_request: FirstRequest | None = None,
    ) -> None:
        self.ctx = ctx
        self.state = state
        """The run's shared state (``update_state``, ``STATE_SNAPSHOT``), when the executor has a state store."""
        self._model = model
        self._read_note_from = note
        self._first_request = first_request
        self._note: str | None = None
        self._read: asyncio.Event | None = None
        """Set when :meth:`read` has ended; None while it has not started."""
        self._opened: OpenedTurn | None = None

    async def read(self) -> None:
        """Beside admission: the memory note and the thread's state. Never raises: what failed is read again when
        the run needs it."""
        self._read = done = asyncio.Event()
        try:
            others = [self.state.prefetch()] if self.state is not None else []
            await asyncio.gather(self._read_note(), *others, return_exceptions=True)
        finally:
            done.set()

    async def _read_note(self) -> None:
        if self._read_note_from is None:
            return
        try:
            self._note = await self._read_note_from()
        except Exception:
            logger.warning(
                "memory note not read beside admission; read again", extra={"run_id": self.ctx.run_id}, exc_info=True
            )

    async def note_when_read(self) -> str | None:
        """The note, once :meth:`read` has ended; None when none was read."""
        if self._read is not None:
            await self._read.wait()
        return self._note

    def take_note(self) -> str | None:
        """The note read beside admission, taken (a later call gets None); None when none was read."""
        note, self._note = self._note, None
        return note

    def open(self, history: KnownHistory) -> None:
        """Between admission's two steps, once ``history`` (the thread as the run will find it) is known: send the
        first request now, once (it does not block); the run's first turn takes it through :meth:`model_for`."""
        if self._opened is None and self._first_request is not None:
            ctx = dataclasses.replace(self.ctx, known_history=history)
            self._opened = OpenedTurn(self._model, self._first_request(ctx, self))

    async def model_for(self, model: ChatModel, request: ChatRequest) -> ChatModel:
        """The opened stream when it was opened for exactly ``request``, else ``model`` (the opened one closed)."""
        opened, self._opened = self._opened, None
        if opened is None:
            return model
        if opened.matches(request):
            return opened
        logger.info("first model request differs from the one opened ahead; sending it again")
        await opened.discard()
        return model

    async def discard(self) -> None:
        """Close the opened request, if no turn took it (the run was refused, attached to, or ended)."""
        opened, self._opened = self._opened, None
        if opened is not None:
            await opened.discard()


class OpenedTurn:
    """One model stream opened ahead of its turn: ``build`` makes the request (None: open nothing); a task of its own
    then reads the stream as it arrives, so the response is consumed at the model's pace (the connection goes back
    to the client's pool when the answer ends, as it would if the turn read it, not when the turn gets to it: a
    connection returned late is more likely to be reused just as the server closes it for idleness)."""

    def __init__(self, model: ChatModel, build: Awaitable[ChatRequest | None]) -> None:
        self.request: ChatRequest | None = None
        self.provider = model.provider
        self._model = model
        self._chunks: asyncio.Queue[ChatChunk | None] = asyncio.Queue()
        """The chunks read so far; None after the last one (or after those that came before a failure)."""
        self._reading = asyncio.ensure_future(self._read(build))

    async def _read(self, build: Awaitable[ChatRequest | None]) -> None:
        request = await build
        if request is None:
            return
        self.request = request
        try:
            async for chunk in self._model.stream(request):
                self._chunks.put_nowait(chunk)
        finally:
            self._chunks.put_nowait(None)

    def matches(self, request: ChatRequest) -> bool:
        """Whether this stream was opened for exactly ``request``."""
        return self.request is not None and self.request == request

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """The opened stream, from its first chunk (``request`` is the one it was opened for: see ``matches``); after
        the chunks it delivered, raises what the model adapter raised. Leaving it early (the turn cancelled) stops
        the reading, which closes the model's response."""
        if not self.matches(request):
            raise ValueError("the opened stream was opened for another request")
        try:
            while (chunk := await self._chunks.get()) is not None:
                yield chunk
            await self._reading
        finally:
            if not self._reading.done():
                self._reading.cancel()

    async def list_models(self) -> list[str]:
        return await self._model.list_models()

    async def discard(self) -> None:
        """Close it, unused: the run was refused or attached to, or its first request turned out different."""
        self._reading.cancel()
        await asyncio.wait([self._reading])
        if not self._reading.cancelled() and self._reading.exception() is not None:
            logger.warning("a model request opened ahead of its turn failed", exc_info=self._reading.exception())
