"""A chat run from a client's ``RunAgentInput``: the one place its ``RunContext`` is built and its run admitted.

The body is read once, into a ``RunRequest`` (``shared.runs.intake``); the run executes with the ``chat_default``
profile and the worker executor; its new messages are reconciled with the thread (front-end tool results with the
pending calls, ``resume`` with the open approvals) between admission's two steps (``shared.runs.reconciling``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.attachments.limits import AttachmentLimits
from shared.attachments.parts import PendingPart
from shared.attachments.storage import check_parts, store_parts
from shared.attachments.uploads import Uploads, is_upload_url
from shared.errors import InvalidRequest
from shared.executors.context import RunContext
from shared.models import ExecutionMeta, ExecutorKind, Identity, Message, Origin, Role, utc_now
from shared.ports import AuditLog, ConversationStore, RunLedger
from shared.ports.attachments import AttachmentStore
from shared.ports.run_queue import QueueStarter, RunQueue
from shared.profiles import ProfileChoice, Profiles
from shared.run_results import INTERRUPTED
from shared.runs import intake
from shared.runs.background import BackgroundAccepted, BackgroundIntake, is_background
from shared.runs.branching import with_branch
from shared.runs.claims import Admission
from shared.runs.execution import Executor
from shared.runs.intake import RunRequest
from shared.runs.multitask import WAIT_MARGIN_S, Interrupting, strategy_of
from shared.runs.queued_ends import RunEndedHook
from shared.runs.queueing import START_RESERVE_S, Enqueuing, QueuedTurn
from shared.runs.service import RunService
from shared.runs.slices import SliceTicket
from shared.url_safety import UnsafeUrl, check_url

CHAT_PROFILE = "chat_default"


def chat_meta(choice: ProfileChoice) -> ExecutionMeta:
    """The metadata of a chat run and its messages: the profile that runs it and, if a ramp chose it, which."""
    return ExecutionMeta(
        origin=Origin.CHAT,
        executor=ExecutorKind.WORKER,
        execution_profile_name=choice.profile.name,
        hidden_from_user=False,
        rollout_id=choice.rollout_id,
        rollout_side=choice.rollout_side,
    )


async def webhook_target(forwarded_props: object, *, allow_loopback: bool) -> str | None:
    """``forwardedProps.webhook``: the run's own webhook target, checked as every outgoing URL is (an ``https`` URL
    whose host resolves only to public addresses); None when the request names none.

    Raises:
        UnsafeUrl: 422 ``unsafe_url``, naming ``forwardedProps.webhook``.
    """
    url = forwarded_props.get("webhook") if isinstance(forwarded_props, dict) else None
    if url is None:
        return None
    field = "body.forwardedProps.webhook"
    if not isinstance(url, str):
        raise UnsafeUrl(
            "the URL cannot be used: must be a string",
            details=[{"loc": field.split("."), "msg": "must be a string", "type": "value_error"}],
        )
    await check_url(url, allow_loopback=allow_loopback, field=field)
    return url


def chat_context(
    caller: Identity,
    request: RunRequest,
    choice: ProfileChoice,
    *,
    leaf_id: str | None = None,
    webhook: str | None = None,
) -> RunContext:
    """The context of a chat run: the caller's identity, the request's ids, tools, context notes and newest text;
    ``leaf_id``: a regenerate's question (``shared.runs.branching.with_branch``)."""
    users = [m.content for m in request.messages if m.role is Role.USER]
    return RunContext(
        leaf_id=leaf_id,
        identity=caller,
        thread_id=request.thread_id,
        run_id=request.run_id,
        profile=choice.profile,
        meta=chat_meta(choice),
        client_tools=request.client_tools,
        context_notes=request.context_notes,
        request_summary=f"chat run, {request.client_message_count} messages from client",
        latest_user_text=users[-1] if users else "",
        client_state=request.client_state,
        resume=request.resume,
        webhook=webhook,
    )


@dataclass(frozen=True, slots=True)
class Drained:
    """What one drain of a thread's queue did: whether it left nothing for itself to start, and the runs it started
    (each settled, or handed on to its next slice)."""

    done: bool
    started: tuple[str, ...]


class ChatService:
    """Starts chat runs: the body checked, the context built, the run admitted and started in the background."""

    def __init__(
        self,
        profiles: Profiles,
        runs: RunService,
        executor: Callable[[], Executor],
        *,
        threads: ConversationStore | None = None,
        ledger: RunLedger | None = None,
        audit: AuditLog | None = None,
        lease_s: float = 30.0,
        queue: RunQueue | None = None,
        attachments: AttachmentStore | None = None,
        attachment_limits: AttachmentLimits | None = None,
        allow_loopback_webhooks: bool = False,
        starter: QueueStarter | None = None,
        on_queued_run_ended: RunEndedHook | None = None,
    ) -> None:
        """``threads`` and ``audit``: what the ``interrupt`` strategy reads and audits; ``queue``, with ``threads``
        and ``ledger``: where the ``enqueue`` strategy keeps its queued runs and checks them (without them, those
        strategies reject); ``starter``, with those: what starts background runs (without it, a request for one is
        ``422 background_unavailable``); ``on_queued_run_ended``: announces a queued run that ended without running
        (cancelled while queued, refused at its turn), as a run's end is announced (its webhook)."""
        self._profiles = profiles
        self._allow_loopback_webhooks = allow_loopback_webhooks
        self._runs = runs
        self._executor = executor
        self._attachments = attachments
        self._attachment_limits = attachment_limits or AttachmentLimits()
        interrupt = functools.partial(runs.cancel, reason=INTERRUPTED)
        self._interrupting = (
            Interrupting(threads, audit, interrupt, wait_s=lease_s + WAIT_MARGIN_S)
            if threads is not None and audit is not None
            else None
        )
        self.enqueuing = (
            Enqueuing(queue, threads, ledger, self._admit_queued, on_ended=on_queued_run_ended)
            if queue is not None and threads is not None and ledger is not None
            else None
        )
        interrupting = self._interrupting
        self._background = (
            BackgroundIntake(
                queue,
                threads,
                ledger,
                starter,
                interrupting.interrupt_holder if interrupting is not None else None,
            )
            if queue is not None and threads is not None and ledger is not None and starter is not None
            else None
        )

    async def _admit_queued(self, caller: Identity, body: bytes, deadline: float | None) -> Admission:
        """Admit a queued request when its turn comes, as any run is admitted (no multitask strategy), in the
        invocation (``deadline``) of the request that starts it."""
        admitted = await self.start(caller, body, deadline=deadline, strategy="reject", queued=True)
        assert isinstance(admitted, Admission)
        return admitted

    async def drain_queue(self, tenant_id: str, thread_id: str, *, deadline: float | None = None) -> Drained:
        """Start the thread's queued runs that no request waits for (background runs), in this invocation
        (``deadline``: its end, epoch seconds; None: the function timeout from now); ``done`` is False when its
        time ran out with runs still queued (``shared.runs.queueing.ThreadQueue.drain``)."""
        if self.enqueuing is None:
            return Drained(done=True, started=())
        ends = self._runs.invocation_deadline(deadline)
        reserve = min(START_RESERVE_S, max(0.0, ends - time.time()) / 4)
        queue = self.enqueuing.thread_queue(tenant_id, thread_id, ends)
        done = await queue.drain(until=ends - reserve, wait_settled=self._runs.wait_settled)
        return Drained(done=done, started=tuple(queue.started_for_others))

    async def continue_slice(self, ticket: Mapping[str, Any], *, deadline: float | None = None) -> None:
        """The next slice of a run (``shared.runs.slices``), from its ticket, in this invocation (``deadline``);
        returns once that slice has settled (or handed the run on again)."""
        parsed = SliceTicket.model_validate(ticket)
        ctx = parsed.context(self._profiles.get(parsed.profile))
        await self._runs.continue_run(parsed, ctx, self._executor(), deadline=deadline)
        await self._runs.wait_settled(parsed.tenant_id, parsed.run_id)

    async def _checked_parts(
        self, caller: Identity, request: RunRequest, choice: ProfileChoice
    ) -> dict[str, tuple[PendingPart, ...]]:
        """The request's images and files, checked against the profile (nothing stored yet)."""
        parts = request.parts
        if self._attachments is not None and any(is_upload_url(i.part.url) for v in parts.values() for i in v):
            # The caller's uploads, read from the bucket and checked as inline parts (never fetched over HTTP).
            parts = await Uploads(self._attachments, self._attachment_limits).attach_all(caller, parts)
        await check_parts(choice.profile, [item for items in parts.values() for item in items])
        if self._attachments is None:
            raise InvalidRequest("this deployment stores no images or files", code="unsupported_modality")
        return parts

    async def _with_parts(self, caller: Identity, request: RunRequest, choice: ProfileChoice) -> tuple[Message, ...]:
        """The request's messages, their images and files checked against the profile and stored (refused before
        anything is stored); a retried request stores the same objects under the same keys."""
        if not request.parts:
            return request.messages
        parts = await self._checked_parts(caller, request, choice)
        assert self._attachments is not None  # checked: a deployment without a store refuses parts
        return tuple(await store_parts(self._attachments, caller, request.messages, parts))

    async def start(
        self,
        caller: Identity,
        body: bytes,
        *,
        deadline: float | None = None,
        strategy: str | None = None,
        queued: bool = False,
    ) -> Admission | QueuedTurn | BackgroundAccepted:
        """Admit the run a ``RunAgentInput`` body asks for (or attach to it, for a retry of the same request); with
        the ``enqueue`` strategy and a busy thread, queue it (``shared.runs.queueing``); with
        ``forwardedProps.background``, accept it to run outside the request (``shared.runs.background``) unless
        ``queued`` (its turn came: it is admitted now). ``deadline``: the invocation's (epoch seconds; None: the
        function timeout from now), which the run ends before and until which a queued run's request waits to start
        it."""
        choice = self._profiles.choose(CHAT_PROFILE, tenant_id=caller.tenant_id, user_id=caller.user_id)
        request = intake.read_run_request(body, chat_meta(choice), self._attachment_limits)
        background = is_background(request.forwarded_props) and not queued
        if background and self._background is None:
            raise InvalidRequest("this deployment runs no background runs", code="background_unavailable")
        webhook = await webhook_target(request.forwarded_props, allow_loopback=self._allow_loopback_webhooks)
        policy = choice.profile.run_policy
        strategy = strategy or strategy_of(request.forwarded_props, policy.multitask_strategy)
        if background and self._background is not None:
            # Checked now (the same 4xx as a streamed run's); its images and files are stored at its admission.
            with_branch(request.messages, request.branch)
            if request.parts:
                await self._checked_parts(caller, request, choice)
            return await self._background.accept(caller, request, body, strategy=strategy, depth=policy.queue_depth)
        messages, leaf_id = with_branch(await self._with_parts(caller, request, choice), request.branch)
        ctx = chat_context(caller, request, choice, leaf_id=leaf_id, webhook=webhook)

        def attempt() -> Awaitable[Admission]:
            return self._runs.admit(
                ctx,
                body_digest=request.body_digest,
                new_messages=messages,
                executor=self._executor(),
                reconcile=True,
                now=utc_now(),
                deadline=deadline,
            )

        if strategy == "interrupt" and self._interrupting is not None:
            return await self._interrupting.admit(caller, ctx.thread_id, ctx.run_id, attempt)
        if strategy == "enqueue" and self.enqueuing is not None:
            return await self.enqueuing.admit(
                caller,
                ctx.thread_id,
                ctx.run_id,
                body,
                depth=policy.queue_depth,
                deadline=deadline or self._runs.invocation_deadline(),
                attempt=attempt,
            )
        return await attempt()
