"""One run's view of its thread's shared state: where it starts, what the model sees, how ``update_state`` changes it.

Where a run's state starts (docs/protocols/agent/run-agent-input.md "state"):

- the client sent a state (``RunAgentInput.state``, a non-empty object): it replaces the stored one as a whole, as
  AG-UI's snapshot semantics say (the client holds the state the last ``STATE_SNAPSHOT``/``STATE_DELTA`` left it
  with, plus its own edits). It is stored beside the model request, never before it;
- the client sent none (absent, ``null`` or ``{}``): the stored state, read beside admission (``prefetch``), so the
  model request waits for no store round trip of its own.

Either way the run's first event after ``RUN_STARTED`` is a ``STATE_SNAPSHOT`` of it. A patch the model sends
through ``update_state`` is applied to a copy; if it applies and stays within the limits it is stored (a write
conditional on the version the run holds) and sent as ``STATE_DELTA``; otherwise the model gets a tool error and
nothing changes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from ag_ui.core import StateDeltaEvent, StateSnapshotEvent

from shared.executors.context import RunContext
from shared.ports.thread_state import ThreadStateStore
from shared.run_events.emitter import RunEmitter
from shared.thread_state.json_patch import PatchError
from shared.thread_state.models import EMPTY_STATE, StoredState
from shared.thread_state.tool import UPDATE_STATE_SPEC, applied_result, state_note, state_update
from shared.tools.arguments import argument_errors
from shared.tools.runner import tool_error

logger = logging.getLogger(__name__)


class RunState:
    """The state of one run's thread, from its snapshot to its last delta."""

    def __init__(self, states: ThreadStateStore, ctx: RunContext) -> None:
        self._states = states
        self._ctx = ctx
        self._current: StoredState | None = None
        if ctx.client_state is not None:
            self._current = StoredState(ctx.client_state, 0)
        self._client_write: asyncio.Task[StoredState] | None = None

    @property
    def known(self) -> StoredState | None:
        """The run's starting state once it is known without a store request (None: not yet read)."""
        return self._current

    async def prefetch(self) -> None:
        """Beside admission: the stored state, when the client sent none. Never raises: a failed read is read again
        by :meth:`begin`."""
        if self._current is not None:
            return
        try:
            self._current = await self._read()
        except Exception:
            logger.warning(
                "thread state not read beside admission; read again", extra={"run_id": self._ctx.run_id}, exc_info=True
            )

    async def _read(self) -> StoredState:
        stored = await self._states.read(self._ctx.identity, self._ctx.thread_id)
        return stored if stored is not None else EMPTY_STATE

    async def begin(self, emitter: RunEmitter) -> None:
        """The run's start: the client's state stored in the background, or the stored one read if ``prefetch``
        could not; then ``STATE_SNAPSHOT`` queued for the run's first write (``defer``)."""
        ctx = self._ctx
        if ctx.client_state is not None and self._client_write is None:
            self._client_write = asyncio.ensure_future(
                self._states.write(ctx.identity, ctx.thread_id, ctx.client_state, expected_version=None)
            )
        if self._current is None:
            self._current = await self._read()
        await emitter.emit(StateSnapshotEvent(snapshot=self._current.state), defer=True)

    def note(self) -> str:
        """The state as the run notes show it to the model: the state the run started with, for every turn of the
        run (a stable prompt keeps the provider's prefix cache; the tool's results carry later changes)."""
        return state_note(self._current.state) if self._current is not None else ""

    async def settle(self) -> StoredState | None:
        """Wait for the client's state to be stored (once); the version stored, or None when it could not be."""
        if self._client_write is None:
            return self._current
        write, self._client_write = self._client_write, None
        try:
            stored = await write
        except Exception:
            logger.warning("the client's state could not be stored", extra={"run_id": self._ctx.run_id}, exc_info=True)
            self._current = None
            return None
        if self._current is not None and self._current.version == 0:
            self._current = StoredState(self._current.state, stored.version)
        return self._current

    async def update(self, arguments_json: str, emitter: RunEmitter) -> str:
        """Apply one ``update_state`` call: the tool result for the model (an error result changes nothing)."""
        try:
            arguments: Any = json.loads(arguments_json)
        except ValueError:
            return tool_error("invalid_arguments", "arguments were not valid JSON")
        problems = (
            argument_errors(UPDATE_STATE_SPEC.parameters, arguments)
            if isinstance(arguments, dict)
            else ["arguments must be a JSON object"]
        )
        if problems:
            return tool_error("invalid_arguments", "; ".join(problems))
        current = await self.settle()
        if current is None:
            return tool_error("state_unavailable", "the thread's state could not be stored; it was not changed")
        try:
            update = state_update(current.state, arguments)
        except PatchError as exc:
            return tool_error("invalid_patch", f"{exc}; the state was not changed"[:1_000])
        ctx = self._ctx
        try:
            stored = await self._states.write(
                ctx.identity, ctx.thread_id, update.state, expected_version=current.version
            )
        except Exception:
            logger.warning("a state patch could not be stored", extra={"run_id": ctx.run_id}, exc_info=True)
            return tool_error("state_unavailable", "the patch could not be stored; the state was not changed")
        self._current = stored
        await emitter.emit(StateDeltaEvent(delta=update.patch))
        return applied_result(update, stored.version)
