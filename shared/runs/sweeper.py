"""Ends runs whose process died: a run still ``running`` whose heartbeat went stale.

A run heartbeats every few seconds while its process lives (``RunService._watch``). When the process is killed
(Lambda timeout, out of memory, a crash) nothing records the end, so the run stays ``running``: its thread looks
busy, its stream has no terminal event and its last tool calls have no results. The sweeper, run on a schedule
(``functions/agent_api/sweeper_handler.py``), puts each such run in the state a failed run would have left:

1. the ledger says ``failed`` with ``run_failed`` (a conditional write: of two sweepers exactly one goes on, and a
   run that was only slow and beats again is left alone);
2. text and tool calls the run streamed but did not store are stored, marked partial, as on cancel;
3. every tool call of the run without a result gets a persisted synthetic ``run_failed`` result (ids derived from
   the call, so a repeated repair stores nothing twice), so the next run's context is valid for any provider;
4. the run's stream is closed as the executor would have closed it (open message and tool calls ended, the
   synthetic results, the step finished) and ends with one ``RUN_ERROR``, unless it already has a terminal event;
5. the thread is released, and the repair is audited;
6. the ended runs are counted in the ``RunErrors`` metric (and ``RunsSwept``), which their dead process never
   emitted.

The same repair closes a run whose thread lease expired when a new run takes the thread over
(``RunService.admit``, ``reason="lease_expired"``), so the next message on a thread never waits for the sweeper.

If the sweeper itself dies after step 1, what remains is still safe: the context window repairs dangling calls at
read time, a thread whose holder's lease expired is taken over, and readers rebuild the terminal event from the
ledger (``RunService.tail_run``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ag_ui.core import (
    RunErrorEvent,
    StepFinishedEvent,
    TextMessageEndEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
)

from shared.executors.model_turn import normalise_arguments
from shared.models import AuditRecord, Identity, Message, Role, Run, ToolCall, digest, utc_now
from shared.observability import emit_swept_runs
from shared.ports import AuditLog, EventStream, RunLedger, ThreadStore
from shared.run_events.emitter import RunEmitter, is_terminal, run_started
from shared.run_events.homes import run_home
from shared.runs.outcomes import RUN_ERROR_MESSAGES, usage_to_agui
from shared.stream_keys import run_stream_key, thread_stream_key

logger = logging.getLogger(__name__)

SWEPT_CODE = "run_failed"
DEFAULT_STALE_AFTER = timedelta(minutes=5)
"""Far above the run lease (30 s by default, renewed every 10 s): a thread with a next message is taken over long
before; the sweeper ends the runs nobody came back to."""
_HISTORY_SCAN = 200
_STREAM_PAGE = 500


@dataclass
class SweepReport:
    found: int = 0
    ended: list[str] = field(default_factory=list)
    repaired_tool_calls: int = 0
    salvaged_messages: int = 0
    failures: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "ended": list(self.ended),
            "repairedToolCalls": self.repaired_tool_calls,
            "salvagedMessages": self.salvaged_messages,
            "failures": self.failures,
        }


@dataclass
class _StreamedCall:
    call_id: str
    name: str
    parent_message_id: str
    arguments: str = ""
    ended: bool = False
    has_result: bool = False


@dataclass
class _StreamedRun:
    """What the run's stream shows of it: enough to store what was lost and close what was left open."""

    readable: bool = True
    started: bool = False
    step_open: bool = False
    terminal: bool = False
    open_text: str | None = None
    texts: dict[str, str] = field(default_factory=dict)
    calls: dict[str, _StreamedCall] = field(default_factory=dict)

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "RUN_STARTED":
            self.started = True
        elif kind == "STEP_STARTED":
            self.step_open = True
        elif kind == "STEP_FINISHED":
            self.step_open = False
        elif kind == "TEXT_MESSAGE_START":
            self.open_text = str(event["messageId"])
            self.texts.setdefault(self.open_text, "")
        elif kind == "TEXT_MESSAGE_CONTENT":
            mid = str(event["messageId"])
            self.texts[mid] = self.texts.get(mid, "") + str(event.get("delta", ""))
        elif kind == "TEXT_MESSAGE_END":
            self.open_text = None
        elif kind == "TOOL_CALL_START":
            cid = str(event["toolCallId"])
            parent = str(event.get("parentMessageId") or "")
            self.calls[cid] = _StreamedCall(cid, str(event["toolCallName"]), parent)
            self.texts.setdefault(parent, "")
        elif kind == "TOOL_CALL_ARGS" and str(event["toolCallId"]) in self.calls:
            self.calls[str(event["toolCallId"])].arguments += str(event.get("delta", ""))
        elif kind == "TOOL_CALL_END" and str(event["toolCallId"]) in self.calls:
            self.calls[str(event["toolCallId"])].ended = True
        elif kind == "TOOL_CALL_RESULT" and str(event["toolCallId"]) in self.calls:
            self.calls[str(event["toolCallId"])].has_result = True
        elif is_terminal(event):
            self.terminal = True


def synthetic_result_id(run_id: str, call_id: str) -> str:
    """The id of the synthetic result of one call: derived, so repeating a repair stores nothing twice."""
    return f"msg_swept_{digest(f'{run_id}:{call_id}')}"


class RunSweeper:
    def __init__(
        self,
        threads: ThreadStore,
        runs: RunLedger,
        audit: AuditLog,
        stream: EventStream,
        *,
        stale_after: timedelta = DEFAULT_STALE_AFTER,
        batch: int = 100,
        on_run_ended: Callable[[Run], Awaitable[None]] | None = None,
    ) -> None:
        """``on_run_ended``: called for each run this sweeper ended (its concurrency slot is freed there)."""
        self._threads = threads
        self._runs = runs
        self._audit = audit
        self._stream = stream
        self._on_run_ended = on_run_ended
        self._stale_after = stale_after
        self._batch = batch

    async def sweep(self, *, now: datetime | None = None) -> SweepReport:
        """End every run whose heartbeat is older than ``stale_after``; one failure never stops the others."""
        cutoff = (now or utc_now()) - self._stale_after
        report = SweepReport()
        stale = await self._runs.list_stale_runs(stale_before=cutoff, limit=self._batch)
        report.found = len(stale)
        for run in stale:
            try:
                if await self.end_run(run, cutoff, report):
                    report.ended.append(run.run_id)
            except Exception:
                report.failures += 1
                logger.exception("could not sweep a run", extra={"run_id": run.run_id, "tenant_id": run.tenant_id})
        if report.found:
            logger.info("sweep done", extra=report.as_dict())
        # The killed runs never emitted their own RunErrors: count them now, or the alarm misses them.
        emit_swept_runs(len(report.ended))
        return report

    async def end_run(
        self,
        run: Run,
        cutoff: datetime,
        report: SweepReport,
        *,
        reason: str = "heartbeat_stale",
        ended_by: str = "sweeper",
    ) -> bool:
        """End one stale run; False when another sweeper did, or the run turned out to be alive. ``ended_by``
        (audited): ``sweeper``, ``takeover`` (a new run on the thread) or ``reader`` (a tail of the run)."""
        if not await self._runs.abandon_run(run.tenant_id, run.run_id, stale_before=cutoff, error_code=SWEPT_CODE):
            return False
        logger.warning(
            "ending a run whose process stopped",
            extra={"run_id": run.run_id, "tenant_id": run.tenant_id, "heartbeat_at": run.heartbeat_at.isoformat()},
        )
        identity = Identity(tenant_id=run.tenant_id, user_id=run.user_id)
        streamed = await self._read_stream(run)
        salvaged = await self._store_unsaved_turns(run, identity, streamed)
        results = await self._answer_dangling_calls(run, identity)
        report.salvaged_messages += len(salvaged)
        report.repaired_tool_calls += len(results)
        if streamed.readable and not streamed.terminal:
            await self._close_stream(run, streamed, results)
        await self._threads.release_thread(run.tenant_id, run.thread_id, run.run_id)
        if self._on_run_ended is not None:
            try:
                await self._on_run_ended(run)
            except Exception:
                logger.exception("could not free the slot of a swept run", extra={"run_id": run.run_id})
        await self._audit.record(
            AuditRecord(
                kind="run_swept",
                tenant_id=run.tenant_id,
                thread_id=run.thread_id,
                run_id=run.run_id,
                user_id=run.user_id,
                details={
                    "reason": reason,
                    "ended_by": ended_by,
                    "heartbeat_at": run.heartbeat_at.isoformat(),
                    "salvaged_message_ids": salvaged,
                    "synthetic_results_for": [call_id for call_id, _ in results],
                },
            )
        )
        return True

    async def _read_stream(self, run: Run) -> _StreamedRun:
        streamed = _StreamedRun()
        home = run_home(run)
        cursor = home.start
        try:
            while True:
                entries = await self._stream.read_after(home.key, cursor, block_ms=0, count=_STREAM_PAGE)
                if not entries:
                    return streamed
                for entry in entries:
                    cursor = entry.id
                    if home.owns(entry):
                        streamed.feed(entry.event)
        except Exception:
            logger.warning("could not read the stream of a swept run", extra={"run_id": run.run_id}, exc_info=True)
            streamed.readable = False
            return streamed

    async def _run_messages(self, run: Run) -> list[Message]:
        recent = await self._threads.read_back(run.tenant_id, run.thread_id, before_seq=None, limit=_HISTORY_SCAN)
        return [m for m in reversed(recent) if m.run_id == run.run_id]

    async def _store_unsaved_turns(self, run: Run, identity: Identity, streamed: _StreamedRun) -> list[str]:
        """Store the assistant turns that reached the stream but not the thread, marked partial."""
        candidates = [mid for mid in streamed.texts if mid]
        if not candidates:
            return []
        known = await self._threads.known_message_ids(run.tenant_id, run.thread_id, candidates)
        unsaved: list[Message] = []
        for mid in candidates:
            if mid in known:
                continue
            calls = tuple(
                ToolCall(id=c.call_id, name=c.name, arguments=normalise_arguments(c.arguments)[0])
                for c in streamed.calls.values()
                if c.parent_message_id == mid
            )
            text = streamed.texts.get(mid, "")
            if not text and not calls:
                continue
            unsaved.append(
                Message(
                    id=mid,
                    thread_id=run.thread_id,
                    role=Role.ASSISTANT,
                    content=text,
                    tool_calls=calls,
                    run_id=run.run_id,
                    meta=run.meta,
                    flags={"partial": True, "ended_by": SWEPT_CODE},
                )
            )
        if unsaved:
            await self._threads.append_messages(identity, run.thread_id, unsaved)
        return [m.id for m in unsaved]

    async def _answer_dangling_calls(self, run: Run, identity: Identity) -> list[tuple[str, Message]]:
        """Give each tool call of the run that has no result a stored synthetic one."""
        messages = await self._run_messages(run)
        answered = {m.tool_call_id for m in messages if m.role is Role.TOOL and m.tool_call_id}
        results: list[tuple[str, Message]] = []
        for msg in messages:
            for call in msg.tool_calls:
                if call.id in answered:
                    continue
                answered.add(call.id)
                content = json.dumps(
                    {"error": {"code": SWEPT_CODE, "message": "the run stopped before this tool returned"}}
                )
                results.append(
                    (
                        call.id,
                        Message(
                            id=synthetic_result_id(run.run_id, call.id),
                            thread_id=run.thread_id,
                            role=Role.TOOL,
                            content=content,
                            tool_call_id=call.id,
                            run_id=run.run_id,
                            meta=run.meta,
                            flags={"synthetic": True, "repaired_by": "sweeper"},
                        ),
                    )
                )
        if results:
            await self._threads.append_messages(identity, run.thread_id, [m for _, m in results])
        return results

    async def _close_stream(self, run: Run, streamed: _StreamedRun, results: list[tuple[str, Message]]) -> None:
        """Close what the run left open on its stream, in the order the executor would have, then RUN_ERROR."""
        emitter = RunEmitter(
            self._stream,
            run_stream_key(run.tenant_id, run.run_id),
            thread_key=thread_stream_key(run.tenant_id, run.thread_id),
            run_id=run.run_id,
            hidden=run.meta.hidden_from_user,
        )
        if not streamed.started:
            await emitter.emit(run_started(run.thread_id, run.run_id, run.meta))
        if streamed.open_text is not None:
            await emitter.emit(TextMessageEndEvent(message_id=streamed.open_text))
        for call in streamed.calls.values():
            if not call.ended:
                if not call.arguments:
                    await emitter.emit(ToolCallArgsEvent(tool_call_id=call.call_id, delta="{}"))
                await emitter.emit(ToolCallEndEvent(tool_call_id=call.call_id))
        for call_id, message in results:
            seen = streamed.calls.get(call_id)
            if seen is not None and not seen.has_result:
                await emitter.emit(
                    ToolCallResultEvent(
                        message_id=message.id, tool_call_id=call_id, content=message.content, role="tool"
                    )
                )
        if streamed.step_open:
            await emitter.emit(StepFinishedEvent(step_name=run.meta.executor.value))
        await emitter.emit(
            RunErrorEvent(message=RUN_ERROR_MESSAGES[SWEPT_CODE], code=SWEPT_CODE, usage=usage_to_agui(run.usage))
        )
        await emitter.flush(timeout_s=2.0)
