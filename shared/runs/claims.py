"""What an admission carries from its first round trip to its second: the attempt (what it claimed and reserved,
so a refusal can give it back), the claim (the claimed thread and what was read beside it), and the admitted run
(``shared.runs.admission`` makes them)."""

from __future__ import annotations

from typing import NamedTuple

from shared.context_window import PAGE_SIZE, KnownHistory
from shared.errors import Conflict, NotFound
from shared.executors.context import RunContext
from shared.limits.models import ReserveRequest
from shared.message_tree import link_messages
from shared.models import Message, Run, ThreadClaim
from shared.runs.pending_calls import LOOKBACK as PENDING_LOOKBACK

RECENT_LOOKBACK = max(PAGE_SIZE, PENDING_LOOKBACK)
"""How many of the thread's newest messages admission reads (``read_recent``): the pending front-end calls a tool
result may answer are among them, and so is the first page of the run's context window (``KnownHistory``)."""


class Admission(NamedTuple):
    """The admitted run; ``created`` is False when the request attached to a run admitted before (a retry).
    ``history``: the thread's newest messages as admission left them, when it read them (chat runs)."""

    run: Run
    created: bool
    history: KnownHistory | None = None


class Attempt:
    """One admission as it goes: what it claimed, so a refusal can give it back."""

    def __init__(self, ctx: RunContext, claim_thread: bool) -> None:
        self.ctx = ctx
        self.claim_thread = claim_thread
        self.claim: ThreadClaim | None = None
        self.reservation: ReserveRequest | None = None
        self.retry_of: str | None = None  # a request that brings nothing new: the run that stored its message
        self.older: list[Message] = []  # the caller's stored messages read beside the page, to compare (known_ids)
        self.user_digest: str | None = None  # kept on the thread with the messages (chat runs: known_ids)

    @property
    def holds_new_claim(self) -> bool:
        return self.claim is not None and self.claim.newly_claimed and self.claim_thread


class Claim:
    """A claimed thread with what was read beside the claim: the value admission's first step returns and its
    second step stores. ``fresh``: the messages to store (the caller's messages the thread does not have yet, or what
    the caller reconciled them into: :meth:`with_messages`); ``recent``: the thread's newest messages, newest first,
    when read (``read_recent``)."""

    def __init__(
        self,
        attempt: Attempt,
        body_digest: str,
        claimed: ThreadClaim,
        fresh: list[Message],
        recent: list[Message] | None,
    ) -> None:
        self.attempt = attempt
        self.body_digest = body_digest
        self.claimed = claimed
        self.fresh = fresh
        self.recent = recent

    @property
    def compared(self) -> list[Message]:
        """The stored messages the caller's are compared with: the newest page, and any older ones read for it."""
        return [*(self.recent or []), *self.attempt.older]

    def with_messages(self, messages: list[Message]) -> Claim:
        """This claim, storing ``messages`` instead (the new messages reconciled with ``recent``)."""
        return Claim(self.attempt, self.body_digest, self.claimed, messages, self.recent)

    def history_once_stored(self) -> KnownHistory | None:
        """The thread as the run will find it once :meth:`Admitter.store` has stored it (numbered as the store
        numbers messages, content not capped); None when it cannot be known, or when storing would add nothing
        to a thread this attempt did not claim (a retry: of a stored run, it brings nothing new; of a run being
        admitted, the same request twice at once, the thread was claimed for the other copy)."""
        if self.recent is None or not self.fresh or not self.claimed.newly_claimed:
            return None
        last = self.claimed.last_seq
        linked = link_messages(self.fresh, leaf_id=self.claimed.leaf_id, last_seq=last)  # as the store links them
        numbered = [m.model_copy(update={"seq": last + i}) for i, m in enumerate(linked, start=1)]
        return KnownHistory.after_admission(self.recent, read_limit=RECENT_LOOKBACK, last_seq=last, stored=numbered)


def check_retry(run: Run, user_id: str, thread_id: str, body_digest: str) -> None:
    """A request that names a stored run's id: another user's run is ``404`` (never named as someone else's), and
    the same id on another thread or with another body ``409 run_id_conflict``; else it is a retry of that run."""
    if run.user_id != user_id:
        raise NotFound("run not found")
    if run.thread_id != thread_id or run.body_digest != body_digest:
        raise Conflict("runId already used with a different body", code="run_id_conflict")
