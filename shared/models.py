"""Domain models: what the store keeps and what executors read, independent of any SDK or wire format."""

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


def new_id(prefix: str) -> str:
    """A fresh id for a message or tool call this service creates (``msg_…``, ``call_…``)."""
    return f"{prefix}_{uuid.uuid4().hex}"


def utc_now() -> datetime:
    return datetime.now(UTC)


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"


class Origin(StrEnum):
    CHAT = "chat"
    AUTOMATION = "automation"


class ExecutorKind(StrEnum):
    WORKER = "worker"
    MEMORY = "memory"


class RunStatus(StrEnum):
    """A run's status in the ledger. ``queued``: accepted, not started yet (a background run waiting for its
    worker); never terminal. A run that ended on an interrupt is ``succeeded`` here, with its ``interrupts``: the
    status document shows it as ``interrupted`` (``shared.runs.status``)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self not in (RunStatus.RUNNING, RunStatus.QUEUED)


class Identity(BaseModel):
    """Who is calling: taken from verified token claims, never from the request body."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    user_id: str
    scopes: frozenset[str] = frozenset()

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = "{}"


RolloutSide = Literal["base", "new"]
"""The side of a ramp (``shared.rollouts``) that served a run: the profile asked for, or the ramp's new profile."""


class ExecutionMeta(BaseModel):
    """The metadata every message and run carries (docs/design.md §7.3)."""

    model_config = ConfigDict(frozen=True)

    origin: Origin = Origin.CHAT
    executor: ExecutorKind = ExecutorKind.WORKER
    execution_profile_name: str = "chat_default"
    hidden_from_user: bool = False
    rollout_id: str | None = None
    """The ramp (``shared.rollouts``) that covered the run, if any: set on both of its sides."""
    rollout_side: RolloutSide | None = None
    """Which side of that ramp served the run: ``base`` (the profile asked for) or ``new`` (the ramp's target)."""


PREVIOUS = "~"
"""The ``parent_id`` of a message that follows whatever came before it. A new message carries it until the store
links it to the thread's current leaf (or to the message before it in the same append); a message stored before
threads were trees reads as it until migration 3 (``shared/migrations/message_parents.py``) gives it its parent.
It can never be a message id (ids start with a letter or a digit)."""


class Feedback(BaseModel):
    """A user's judgement of an answer (thumbs up ``1`` or down ``-1``), stored on the message it judges."""

    model_config = ConfigDict(frozen=True)

    score: Literal[1, -1]
    comment: str | None = None
    tags: tuple[str, ...] = ()
    user_id: str
    created_at: datetime = Field(default_factory=utc_now)


@dataclass(frozen=True, slots=True)
class FeedbackEntry:
    """One feedback as a tenant's export lists it: the feedback, the answer it judges and what produced the answer
    (its run, execution profile and model), as they were when the feedback was given."""

    thread_id: str
    message_id: str
    feedback: Feedback
    run_id: str | None
    execution_profile_name: str
    model: str | None
    """The logical model id of the answer's run (``answering_model``); None when the run had no usage recorded or
    its record had expired when the feedback was given."""


def answering_model(run: "Run | None") -> str | None:
    """The model that produced a run's answer: the last model its usage names (usage is kept per model in order of
    first use, so a fallback model that answered after the first one failed comes last)."""
    if run is None or not run.usage:
        return None
    return run.usage[-1].model


class MessagePart(BaseModel):
    """A non-text part of a user message (an image or a document), as stored: where its bytes are, never the bytes.

    ``key``: the object in the stack's attachment bucket (``shared.attachments.storage``); ``url``: a client's
    https URL source, passed to the model as it is and never fetched by the server. Exactly one is set.
    ``text``: a document's extracted text (bounded), what the model reads of it."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["image", "document", "audio", "video"]
    mime_type: str
    key: str | None = None
    url: str | None = None
    filename: str | None = None
    size: int | None = None
    width: int | None = None
    height: int | None = None
    text: str | None = None


class Message(BaseModel):
    """One stored message of a thread. ``seq`` is assigned by the store and orders the thread; ``parent_id`` makes
    the thread a tree (the message this one follows; None for a first message), so an edit or a regenerate adds a
    sibling instead of rewriting what was said (docs/protocols/agent/run-agent-input.md §3.3)."""

    model_config = ConfigDict(frozen=True)

    id: str
    thread_id: str
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    run_id: str | None = None
    meta: ExecutionMeta = Field(default_factory=ExecutionMeta)
    seq: int = 0
    parent_id: str | None = PREVIOUS
    created_at: datetime = Field(default_factory=utc_now)
    # Free-form markers, e.g. {"partial": True} for text kept from a cancelled run or {"synthetic": True} for a
    # tool result written by a repair.
    flags: dict[str, Any] = Field(default_factory=dict)
    parts: tuple[MessagePart, ...] = ()
    """A user message's images and documents, in the order sent (its text is ``content``)."""
    feedback: Feedback | None = None
    """The thread owner's feedback on this answer (``POST .../messages/{id}/feedback``); None: none given."""


class LastMessage(BaseModel):
    """A thread's last visible message, as its list entry shows it: role, a short preview and its time."""

    model_config = ConfigDict(frozen=True)

    role: str
    preview: str
    at: datetime


class Thread(BaseModel):
    model_config = ConfigDict(frozen=True)

    tenant_id: str
    thread_id: str
    owner_user_id: str
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    last_seq: int = 0
    active_run_id: str | None = None
    leaf_id: str | None = None
    """The last message of the thread's current branch; None: its newest message (a thread that never branched)."""
    branched: bool = False
    """An edit, a regenerate or a switch happened: the thread has (or had) more than one branch."""
    title: str | None = None
    title_source: str | None = None
    """Who set ``title``: ``client`` (never overwritten by a generated one) or ``generated``."""
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict)
    archived: bool = False
    pinned: bool = False
    last_message: LastMessage | None = None
    """The thread's last visible message as of its last write (its preview, not its content)."""
    message_count: int = 0
    """Messages stored in the thread (every branch) up to its last visible one."""


class Usage(BaseModel):
    """Token counts of one model call or of a whole run, per (provider, model)."""

    provider: str = "openai-compatible"
    model: str
    """The logical model id the profile names."""
    provider_model: str | None = None
    """The id sent to the provider for ``model`` (``MODEL_ID_MAP``); None when it was not recorded (older runs,
    models that are not behind a provider)."""
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0
    estimated: bool = False

    def add(self, other: "Usage") -> "Usage":
        return self.model_copy(
            update={
                "input_tokens": self.input_tokens + other.input_tokens,
                "output_tokens": self.output_tokens + other.output_tokens,
                "reasoning_tokens": self.reasoning_tokens + other.reasoning_tokens,
                "cached_input_tokens": self.cached_input_tokens + other.cached_input_tokens,
                "estimated": self.estimated or other.estimated,
            }
        )


def merge_usage(entries: list[Usage]) -> list[Usage]:
    """Sum usage entries into one per (provider, model), in order of first appearance."""
    merged: dict[tuple[str, str], Usage] = {}
    for entry in entries:
        key = (entry.provider, entry.model)
        merged[key] = merged[key].add(entry) if key in merged else entry
    return list(merged.values())


class Run(BaseModel):
    run_id: str
    thread_id: str
    tenant_id: str
    user_id: str
    status: RunStatus = RunStatus.RUNNING
    meta: ExecutionMeta = Field(default_factory=ExecutionMeta)
    body_digest: str = ""
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    heartbeat_at: datetime = Field(default_factory=utc_now)
    # pydantic copies an empty-list default for each instance; `= []` spares the class build the signature
    # inspection `default_factory=list` costs (docs/benchmarks.md, section 4).
    usage: list[Usage] = []
    last_stream_id: str | None = None
    error_code: str | None = None
    cancel_requested: bool = False
    after_seq: int | None = None
    """The thread's message counter when the run was admitted: every message it stores comes after it. None for a
    run stored before it was recorded (its messages are then looked for from the thread's start)."""
    pending_tool_call_ids: list[str] = []
    """Front-end tool calls the run handed to the client when it ended (``RUN_FINISHED``'s success outcome)."""
    interrupts: list[dict[str, Any]] = []
    """AG-UI ``Interrupt`` objects (wire form) of the calls it held for approval when it ended."""
    webhook: str | None = None
    """The run's own webhook target (``forwardedProps.webhook``), checked at admission; sent to when it ends."""


@dataclass(frozen=True, slots=True)
class ThreadClaim:
    """A thread opened and claimed for a run in one request (admission). Built by the store, never parsed."""

    last_seq: int
    """The thread's message counter when it was claimed (0 for a new thread)."""
    newly_claimed: bool
    """False when the run already held the thread (a retry of its admission)."""
    created: bool = False
    """The claim created the thread (it did not exist)."""
    leaf_id: str | None = None
    """The thread's current leaf when it was claimed (``Thread.leaf_id``)."""
    user_digest: str | None = None
    """The digest of the user messages of the last chat admission's request (``shared.runs.known_ids``); None when
    none was kept, or the branch was switched since."""


@dataclass(frozen=True, slots=True)
class ThreadTakeover:
    """A thread taken over from a run whose lease had expired (its process froze or died). Built by the store,
    never parsed."""

    previous_run_id: str
    previous: Run | None = None
    """The previous holder's ledger record; None when its admission never stored one."""


class AuditRecord(BaseModel):
    """One entry of the audit trail: a tool decision, a context repair, a hidden run, ..."""

    kind: str
    tenant_id: str
    thread_id: str
    run_id: str
    user_id: str
    at: datetime = Field(default_factory=utc_now)
    details: dict[str, Any] = Field(default_factory=dict)


def digest(text: str) -> str:
    """A short stable digest, used for request bodies and tool arguments in audit records."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
