"""The context window (docs/design.md §5): which stored messages of a thread the model sees.

Three steps, each a small function:

1. **Collect** from the store, newest first, page by page, and stop as soon as the policy is satisfied, so the
   number of store requests depends on the window's size, never on the thread's length.

   - ``last_n_user_messages`` is the original pseudo-code: walk back from the current message, include every
     message, count ``role=user`` ones, stop right after the N-th. Assistant / tool / system messages in
     between stay; fewer than N user messages means the whole thread. With ``include_current_user_message =
     false`` the current message is still included but not counted (the window then holds N *earlier* user
     messages).
   - ``today_yesterday`` (legacy, for rollback and comparison): the messages created today or yesterday in the
     policy's timezone, read back until the first older message. The current message is always included.
   - ``last_n_user_messages`` with ``block_size`` (cache-friendly): the last-N window, extended back to the
     start of the block of ``block_size`` sequence numbers that holds the N-th user message, then cut just
     before the first user message at or after that start. The start moves only when the N-th user message
     crosses into the next block, so consecutive requests share their prefix (and the provider's prompt
     cache) for many turns; old messages leave in blocks. Needs only the messages' own ``seq``, no state.

2. **Repair tool-call pairs** so the provider never rejects the request. An assistant message with
   ``tool_calls`` is followed directly by one result per call, in call order. A tool result outside such a
   block (an orphan) is dropped; a second result for the same call is dropped; a call without a result (a
   dangling call, e.g. a run cancelled mid-tool) gets a synthetic "cancelled" result. The window is never
   *extended* to reach a missing partner: last-N cuts happen just before a user message, so a well-formed
   block is never split, and extending would break the exact-N rule. Every repair is recorded in
   :attr:`WindowResult.repairs`.

3. **Cap input tokens** as a last guard: while the estimated size exceeds ``max_input_tokens``, drop the
   oldest whole turn (a user message and everything up to the next user message; leading non-user messages
   form a turn of their own). The current turn is never dropped. Recorded too.

Hidden messages (``meta.hidden_from_user``) are part of the model's context and are never filtered here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from shared.message_tree import BranchWalk
from shared.models import Message, Role
from shared.ports import MessageHistoryReader
from shared.profiles import HistoryPolicy
from shared.tokens import count_message_tokens

TokenCounter = Callable[[Message], int]

SYNTHETIC_RESULT_TEXT = "cancelled: no result was recorded for this tool call"


class RepairKind(StrEnum):
    ORPHAN_TOOL_RESULT = "orphan_tool_result_dropped"
    DUPLICATE_TOOL_RESULT = "duplicate_tool_result_dropped"
    DANGLING_TOOL_CALL = "dangling_tool_call_completed"
    TOKEN_CAP_DROPPED_TURNS = "token_cap_dropped_turns"
    TOKEN_CAP_EXCEEDED = "token_cap_exceeded_by_current_turn"


@dataclass(frozen=True, slots=True)
class WindowResult:
    messages: list[Message]
    repairs: list[dict[str, Any]]
    store_requests: int = 0
    input_tokens: int = 0
    """The window's size according to the token counter used (an estimate unless it is the model's own)."""


PAGE_SIZE = 50
"""Messages per ``read_back`` request of the window (and of admission's read of the newest messages)."""


@dataclass(frozen=True, slots=True)
class KnownHistory:
    """A thread's newest messages as admission left them: what it read beside the claim plus what it stored.

    Admission reads the newest page of the thread anyway (the pending front-end calls are in it) and then appends
    the run's messages while holding the thread, so together they are what the run's first window read would get
    from the store. Serving that read from here saves a store round trip before the model request.
    """

    newest_first: tuple[Message, ...]
    """Consecutive ``seq`` values, newest first."""
    reaches_start: bool
    """The oldest of them is the thread's first message (a read returned fewer than it asked for)."""

    @classmethod
    def after_admission(
        cls, read: Sequence[Message], *, read_limit: int, last_seq: int, stored: Sequence[Message]
    ) -> KnownHistory | None:
        """``read``: the newest messages up to ``last_seq`` (newest first, at most ``read_limit``); ``stored``: the
        run's messages as the store numbered them. None unless together they have no gap."""
        newest_first = (*reversed(stored), *read)
        expected = last_seq + len(stored)
        for msg in newest_first:
            if msg.seq != expected:
                return None
            expected -= 1
        return cls(newest_first=newest_first, reaches_start=len(read) < read_limit)

    def page(self, before_seq: int | None, limit: int) -> list[Message] | None:
        """What ``read_back(before_seq=..., limit=...)`` would return, or None when this history cannot tell."""
        newest_seq = (self.newest_first[0].seq or 0) if self.newest_first else 0
        if before_seq is not None and before_seq > newest_seq + 1:
            return None  # asks about messages stored after admission
        older = [m for m in self.newest_first if before_seq is None or m.seq < before_seq]
        if len(older) >= limit or self.reaches_start:
            return older[:limit]
        return None


class ReadThrough:
    """A ``MessageHistoryReader`` that answers from a :class:`KnownHistory` where it can, else from ``reader``."""

    def __init__(self, reader: MessageHistoryReader, known: KnownHistory) -> None:
        self._reader = reader
        self._known = known
        self.served = 0
        """Reads answered without a store request."""

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        page = self._known.page(before_seq, limit)
        if page is None:
            return await self._reader.read_back(tenant_id, thread_id, before_seq=before_seq, limit=limit)
        self.served += 1
        return page


async def resolve_window(
    reader: MessageHistoryReader,
    tenant_id: str,
    thread_id: str,
    policy: HistoryPolicy,
    *,
    now: datetime,
    page_size: int = PAGE_SIZE,
    upto_seq: int | None = None,
    count_tokens: TokenCounter = count_message_tokens,
    reserve_tokens: int | Awaitable[int] = 0,
    leaf_id: str | None = None,
) -> WindowResult:
    """Build the model's view of a thread.

    Args:
        reader: the message store (one ``read_back`` call is one store request).
        tenant_id: the thread's tenant.
        thread_id: the thread.
        policy: the profile's history policy.
        now: the current time (only ``today_yesterday`` uses it).
        page_size: messages per store request.
        upto_seq: the current message's ``seq``; ``None`` means the newest stored message is the current one.
        count_tokens: estimates one message's input tokens, for the cap.
        reserve_tokens: tokens the caller needs besides the history (system prompt, tool specs); taken off
        the cap. An awaitable is awaited together with the reads (one round trip for both).
        leaf_id: the last message of the branch read (``shared.message_tree``); None: the newest (or ``upto_seq``).
    """
    if page_size < 1:
        raise ValueError("page_size must be at least 1")
    branch = BranchReader(reader, leaf_id)
    collecting = _collect_for(branch, tenant_id, thread_id, policy, now=now, page_size=page_size, upto_seq=upto_seq)
    if isinstance(reserve_tokens, int):
        collected, _ = await collecting
        reserve = reserve_tokens
    else:
        # The reads and whatever the reserve needs (the worker's memory note) in the same round trip.
        (collected, _), reserve = await asyncio.gather(collecting, reserve_tokens)
    messages, repairs = repair_tool_pairs(collected)
    messages, cap_repairs, tokens = cap_input_tokens(messages, max(policy.max_input_tokens - reserve, 0), count_tokens)
    # The store's reads are the branch reader's (a read of a finished branch sends none).
    return WindowResult(messages, repairs + cap_repairs, store_requests=branch.requests, input_tokens=tokens)


async def _collect_for(
    reader: MessageHistoryReader,
    tenant_id: str,
    thread_id: str,
    policy: HistoryPolicy,
    *,
    now: datetime,
    page_size: int,
    upto_seq: int | None,
) -> tuple[list[Message], int]:
    if policy.mode == "today_yesterday":
        since = _yesterday_start(now, ZoneInfo(policy.timezone))
        return await _collect(reader, tenant_id, thread_id, upto_seq, page_size, _SinceCutoff(since))
    if policy.block_size is not None:
        blocked = _LastNUsersInBlocks(policy.n, policy.include_current_user_message, policy.block_size)
        collected, requests = await _collect(reader, tenant_id, thread_id, upto_seq, page_size, blocked)
        if blocked.cut_inside_thread:
            collected = _from_first_user(collected)
        return collected, requests
    return await _collect(
        reader,
        tenant_id,
        thread_id,
        upto_seq,
        page_size,
        _LastNUsers(policy.n, policy.include_current_user_message),
    )


# ----------------------------------------------------------------------------------------------------------
# 1. Collect
# ----------------------------------------------------------------------------------------------------------


class BranchReader:
    """``reader`` on one branch: pages without other branches' messages, read on until full or at the branch's start."""

    def __init__(self, reader: MessageHistoryReader, leaf_id: str | None) -> None:
        self._reader = reader
        self._walk = BranchWalk(leaf_id)
        self.requests = 0

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        out: list[Message] = []
        while len(out) < limit and not self._walk.complete:
            page = await self._reader.read_back(tenant_id, thread_id, before_seq=before_seq, limit=limit)
            self.requests += 1
            out += [m for m in page if self._walk.take(m)]
            if len(page) < limit:
                break
            before_seq = page[-1].seq
        return out


class _LastNUsers:
    """The original pseudo-code, fed newest first: include each message, count users, stop at N."""

    def __init__(self, n: int, count_current: bool) -> None:
        self._n = n
        self._count_current = count_current
        self._users = 0
        self._first = True

    def take(self, msg: Message) -> tuple[bool, bool]:
        """Returns (include this message, the window is complete)."""
        counted = msg.role is Role.USER and (self._count_current or not self._first)
        self._first = False
        if counted:
            self._users += 1
        return True, self._users >= self._n


class _LastNUsersInBlocks:
    """Last N, then back to the first ``seq`` of the block (of ``block_size`` seq numbers) holding the N-th user.

    Blocks are aligned on absolute sequence numbers (1..B, B+1..2B, ...), so the cut is a pure function of the
    N-th user message's ``seq``: every request whose N-th user message falls in the same block starts at the
    same place, which is what keeps the prompt prefix (and the provider's cache) stable.
    """

    def __init__(self, n: int, count_current: bool, block_size: int) -> None:
        self._last_n = _LastNUsers(n, count_current)
        self._block_size = block_size
        self._start: int | None = None
        self.cut_inside_thread = False
        """True when the window was cut at a block start after the thread's first message."""

    def take(self, msg: Message) -> tuple[bool, bool]:
        if self._start is None:
            _, complete = self._last_n.take(msg)
            if not complete:
                return True, False
            self._start = (max(msg.seq, 1) - 1) // self._block_size * self._block_size + 1
            return True, self._reached_start(msg)
        if msg.seq < self._start:
            self.cut_inside_thread = True
            return False, True
        return True, self._reached_start(msg)

    def _reached_start(self, msg: Message) -> bool:
        assert self._start is not None
        if msg.seq > self._start:
            return False
        self.cut_inside_thread = self._start > 1
        return True


def _from_first_user(messages: list[Message]) -> list[Message]:
    """Drop the tail of an older turn that a block start left at the window's beginning."""
    for index, msg in enumerate(messages):
        if msg.role is Role.USER:
            return messages[index:]
    return messages


class _SinceCutoff:
    def __init__(self, since: datetime) -> None:
        self._since = since
        self._first = True

    def take(self, msg: Message) -> tuple[bool, bool]:
        first, self._first = self._first, False
        if first or _aware(msg.created_at) >= self._since:
            return True, False
        return False, True


async def _collect(
    reader: MessageHistoryReader,
    tenant_id: str,
    thread_id: str,
    upto_seq: int | None,
    page_size: int,
    rule: _LastNUsers | _LastNUsersInBlocks | _SinceCutoff,
) -> tuple[list[Message], int]:
    newest_first: list[Message] = []
    before = None if upto_seq is None else upto_seq + 1
    requests = 0
    while True:
        page = await reader.read_back(tenant_id, thread_id, before_seq=before, limit=page_size)
        requests += 1
        for msg in page:
            include, complete = rule.take(msg)
            if include:
                newest_first.append(msg)
            if complete:
                newest_first.reverse()
                return newest_first, requests
        if len(page) < page_size:
            newest_first.reverse()
            return newest_first, requests
        before = page[-1].seq


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _yesterday_start(now: datetime, zone: ZoneInfo) -> datetime:
    today = _aware(now).astimezone(zone).date()
    return datetime.combine(today - timedelta(days=1), time(0), tzinfo=zone)


# ----------------------------------------------------------------------------------------------------------
# 2. Repair tool-call pairs
# ----------------------------------------------------------------------------------------------------------


def synthetic_result(call_message: Message, tool_call_id: str) -> Message:
    """The stand-in result for a call that has none; never stored by this module, flagged ``synthetic``."""
    return Message(
        id=f"synthetic:{call_message.id}:{tool_call_id}",
        thread_id=call_message.thread_id,
        role=Role.TOOL,
        content=SYNTHETIC_RESULT_TEXT,
        tool_call_id=tool_call_id,
        run_id=call_message.run_id,
        meta=call_message.meta,
        seq=call_message.seq,
        created_at=call_message.created_at,
        flags={"synthetic": True},
    )


def repair_tool_pairs(messages: list[Message]) -> tuple[list[Message], list[dict[str, Any]]]:
    """Make every tool-call block whole (chronological input and output); see the module docstring."""
    out: list[Message] = []
    repairs: list[dict[str, Any]] = []
    i = 0
    while i < len(messages):
        msg = messages[i]
        i += 1
        if msg.role is Role.TOOL:
            repairs.append(_repair(RepairKind.ORPHAN_TOOL_RESULT, [msg.id], [msg.tool_call_id]))
            continue
        out.append(msg)
        if msg.role is not Role.ASSISTANT or not msg.tool_calls:
            continue
        wanted = {call.id for call in msg.tool_calls}
        answers: dict[str, Message] = {}
        while i < len(messages) and messages[i].role is Role.TOOL:
            result = messages[i]
            i += 1
            call_id = result.tool_call_id
            if call_id in answers:
                repairs.append(_repair(RepairKind.DUPLICATE_TOOL_RESULT, [result.id], [call_id]))
            elif call_id in wanted and call_id is not None:
                answers[call_id] = result
            else:
                repairs.append(_repair(RepairKind.ORPHAN_TOOL_RESULT, [result.id], [call_id]))
        missing = [call.id for call in msg.tool_calls if call.id not in answers]
        for call_id in dict.fromkeys(call.id for call in msg.tool_calls):
            # results directly after their call, in call order (the protocol's contract)
            out.append(answers.get(call_id) or synthetic_result(msg, call_id))
        if missing:
            repairs.append(_repair(RepairKind.DANGLING_TOOL_CALL, [msg.id], missing))
    return out, repairs


def _repair(kind: RepairKind, message_ids: list[str], tool_call_ids: Sequence[str | None]) -> dict[str, Any]:
    return {"kind": kind.value, "message_ids": message_ids, "tool_call_ids": list(tool_call_ids)}


# ----------------------------------------------------------------------------------------------------------
# 3. Cap input tokens
# ----------------------------------------------------------------------------------------------------------


def split_turns(messages: list[Message]) -> list[list[Message]]:
    """Turns: each starts at a user message; anything before the first user message is a turn of its own."""
    turns: list[list[Message]] = []
    for msg in messages:
        if msg.role is Role.USER or not turns:
            turns.append([])
        turns[-1].append(msg)
    return turns


def cap_input_tokens(
    messages: list[Message], limit: int, count_tokens: TokenCounter
) -> tuple[list[Message], list[dict[str, Any]], int]:
    """Drop whole oldest turns while the window is above ``limit``; the current (last) turn always stays."""
    turns = split_turns(messages)
    costs = [sum(count_tokens(m) for m in turn) for turn in turns]
    total = sum(costs)
    before = total
    drop = 0
    while total > limit and drop < len(turns) - 1:
        total -= costs[drop]
        drop += 1
    repairs: list[dict[str, Any]] = []
    if drop:
        repairs.append(
            {
                "kind": RepairKind.TOKEN_CAP_DROPPED_TURNS.value,
                "message_ids": [m.id for turn in turns[:drop] for m in turn],
                "turns": drop,
                "tokens_before": before,
                "tokens_after": total,
                "limit": limit,
            }
        )
    if total > limit:
        repairs.append(
            {
                "kind": RepairKind.TOKEN_CAP_EXCEEDED.value,
                "message_ids": [m.id for m in turns[-1]] if turns else [],
                "tokens": total,
                "limit": limit,
            }
        )
    kept = [m for turn in turns[drop:] for m in turn]
    return kept, repairs, total
