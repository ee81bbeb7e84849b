"""Item keys and (de)serialisation for the single DynamoDB table (see docs/storage.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from shared.migrations.model import SCHEMA_VERSION
from shared.migrations.registry import current_version
from shared.models import (
    PREVIOUS,
    AuditRecord,
    ExecutionMeta,
    Feedback,
    LastMessage,
    Message,
    MessagePart,
    Role,
    Run,
    RunStatus,
    Thread,
    ToolCall,
    Usage,
)

_SER = TypeSerializer()
_DESER = TypeDeserializer()

# A tool output or message body larger than this is cut (and flagged) so an item stays far below 400 KB.
MAX_CONTENT_CHARS = 100_000
MAX_CONTENT_BYTES = 200_000


def thread_pk(tenant_id: str, thread_id: str) -> str:
    return f"T#{tenant_id}#TH#{thread_id}"


def run_pk(tenant_id: str, run_id: str) -> str:
    return f"T#{tenant_id}#R#{run_id}"


def audit_pk(tenant_id: str, thread_id: str) -> str:
    return f"T#{tenant_id}#TH#{thread_id}#AUDIT"


def user_threads_gsi(tenant_id: str, user_id: str) -> str:
    return f"T#{tenant_id}#U#{user_id}#THREADS"


def msg_sk(seq: int) -> str:
    return f"M#{seq:012d}"


def msg_id_sk(message_id: str) -> str:
    return f"MID#{message_id}"


META = "META"


def to_item(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _SER.serialize(v) for k, v in data.items() if v is not None}


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _DESER.deserialize(v) for k, v in item.items()}


def _iso(value: datetime) -> str:
    return value.isoformat()


TTL_ATTRIBUTE = "expires_at"
"""The table's TimeToLiveSpecification attribute (template.yaml): epoch seconds; DynamoDB deletes the item after."""


def expires_at(start: datetime, retention: timedelta) -> int:
    """The TTL value of an item kept for ``retention`` from ``start`` (a Number in epoch seconds, as TTL needs)."""
    return int((start + retention).timestamp())


def cap_content(content: str) -> tuple[str, bool]:
    """Cut to MAX_CONTENT_CHARS characters and MAX_CONTENT_BYTES of UTF-8 (100k emoji would be 400 KB)."""
    cut = content[:MAX_CONTENT_CHARS]
    encoded = cut.encode("utf-8", "surrogatepass")
    if len(encoded) > MAX_CONTENT_BYTES:
        cut = encoded[:MAX_CONTENT_BYTES].decode("utf-8", "ignore")
    return cut, cut != content


def as_stored(msg: Message) -> Message:
    """The message as a read returns it once ``message_to_item`` stored it: content capped, and flagged if it was."""
    content, truncated = cap_content(msg.content)
    if not truncated:
        return msg
    return msg.model_copy(update={"content": content, "flags": {**msg.flags, "truncated_from_chars": len(msg.content)}})


def message_to_item(tenant_id: str, msg: Message) -> dict[str, Any]:
    content, truncated = cap_content(msg.content)
    flags = dict(msg.flags)
    if truncated:
        flags["truncated_from_chars"] = len(msg.content)
    return to_item(
        {
            "PK": thread_pk(tenant_id, msg.thread_id),
            "SK": msg_sk(msg.seq),
            "kind": "message",
            "id": msg.id,
            "thread_id": msg.thread_id,
            "role": msg.role.value,
            "content": content,
            "tool_calls": json.dumps([tc.model_dump() for tc in msg.tool_calls]) if msg.tool_calls else None,
            "tool_call_id": msg.tool_call_id,
            "run_id": msg.run_id,
            # Unset roll-out fields are left out: a message outside a ramp is stored exactly as before ramps existed.
            "meta": msg.meta.model_dump(mode="json", exclude_none=True),
            "seq": msg.seq,
            "parent_id": encode_parent(msg.parent_id),
            "created_at": _iso(msg.created_at),
            "flags": json.dumps(flags) if flags else None,
            # Where a part's bytes are (an object key or a URL), never the bytes: an item is capped at 400 KB.
            "parts": json.dumps([p.model_dump(mode="json", exclude_none=True) for p in msg.parts])
            if msg.parts
            else None,
            SCHEMA_VERSION: current_version("message"),
        }
    )


ROOT_PARENT = ""
"""The stored ``parent_id`` of a thread's first message (and of an edit of it): None cannot be stored (``to_item``
leaves None out), and an absent attribute means ``PREVIOUS`` (a message stored before threads were trees)."""


def encode_parent(parent_id: str | None) -> str | None:
    """``parent_id`` as stored: the id, ``ROOT_PARENT`` for None, absent (None) for ``PREVIOUS``."""
    if parent_id == PREVIOUS:
        return None
    return ROOT_PARENT if parent_id is None else parent_id


def decode_parent(data: dict[str, Any]) -> str | None:
    if "parent_id" not in data:
        return PREVIOUS
    stored = str(data["parent_id"])
    return None if stored == ROOT_PARENT else stored


def message_from_item(item: dict[str, Any]) -> Message:
    data = from_item(item)
    return Message(
        id=data["id"],
        thread_id=data["thread_id"],
        role=Role(data["role"]),
        content=data.get("content", ""),
        tool_calls=tuple(ToolCall(**tc) for tc in json.loads(data["tool_calls"])) if data.get("tool_calls") else (),
        tool_call_id=data.get("tool_call_id"),
        run_id=data.get("run_id"),
        meta=ExecutionMeta(**data.get("meta", {})),
        seq=int(data["seq"]),
        parent_id=decode_parent(data),
        created_at=datetime.fromisoformat(data["created_at"]),
        flags=json.loads(data["flags"]) if data.get("flags") else {},
        parts=tuple(MessagePart(**p) for p in json.loads(data["parts"])) if data.get("parts") else (),
        feedback=Feedback.model_validate_json(data["feedback"]) if data.get("feedback") else None,
    )


def thread_from_item(item: dict[str, Any]) -> Thread:
    data = from_item(item)
    return Thread(
        tenant_id=data["tenant_id"],
        thread_id=data["thread_id"],
        owner_user_id=data["owner_user_id"],
        created_at=datetime.fromisoformat(data["created_at"]),
        updated_at=datetime.fromisoformat(data["updated_at"]),
        last_seq=int(data.get("last_seq", 0)),
        active_run_id=data.get("active_run_id"),
        leaf_id=data.get("leaf_id"),
        branched=bool(data.get("branched", False)),
        **thread_fields_from_data(data),
    )


def thread_fields_from_data(data: dict[str, Any]) -> dict[str, Any]:
    """A thread item's product fields. ``title`` is one map (``text``, ``source``, ``metadata``): the thread-list
    index projects ``title`` but not ``metadata`` and cannot change its projection, so what a user edits travels
    in the one projected attribute. ``pending_last`` (written by each append, not projected) is fresher than
    ``last_message`` (copied from it when a run releases the thread, so an append writes no index entry); a list
    entry has only the latter."""
    raw = data.get("title")
    label: dict[str, Any] = raw if isinstance(raw, dict) else {}
    last = data.get("pending_last") or data.get("last_message") or {}
    fields: dict[str, Any] = {
        "title": label.get("text"),
        "title_source": label.get("source"),
        "metadata": {k: _scalar(v) for k, v in (label.get("metadata") or {}).items()},
        "archived": bool(data.get("archived", False)),
        "pinned": bool(data.get("pinned", False)),
    }
    if last.get("preview") is not None:
        fields["last_message"] = LastMessage(
            role=last["role"], preview=last["preview"], at=datetime.fromisoformat(last["at"])
        )
        fields["message_count"] = int(last.get("count", 0))
    return fields


def last_message_value(last: LastMessage, count: int) -> dict[str, Any]:
    """The ``pending_last`` / ``last_message`` map of a thread item."""
    return {"role": last.role, "preview": last.preview, "at": _iso(last.at), "count": count}


def label_value(title: str | None, source: str | None, metadata: dict[str, Any]) -> dict[str, Any]:
    """The ``title`` map of a thread item (see :func:`thread_fields_from_data`)."""
    stored = {k: Decimal(str(v)) if isinstance(v, float) else v for k, v in metadata.items()}  # no floats in boto3
    return {k: v for k, v in {"text": title, "source": source, "metadata": stored}.items() if v is not None}


def _scalar(value: Any) -> str | int | float | bool:
    """A metadata value as stored (DynamoDB numbers come back as ``Decimal``)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value  # type: ignore[no-any-return]


def run_to_item(run: Run, *, retention: timedelta | None = None) -> dict[str, Any]:
    return to_item(
        {
            "PK": run_pk(run.tenant_id, run.run_id),
            "SK": META,
            "kind": "run",
            "GSI1PK": f"{thread_pk(run.tenant_id, run.thread_id)}#RUNS",
            "GSI1SK": run_gsi1_sk(run.created_at, run.run_id),
            "data": run.model_dump_json(),
            "status": run.status.value,
            TTL_ATTRIBUTE: expires_at(run.created_at, retention) if retention else None,
        }
    )


def run_gsi1_sk(created_at: datetime, run_id: str) -> str:
    """A run's sort key in its thread's GSI1 partition: by creation time, then id."""
    return f"{_iso(created_at)}#{run_id}"


def run_outcome_value(pending_tool_call_ids: Sequence[str], interrupts: Sequence[dict[str, Any]]) -> str | None:
    """The ``outcome`` attribute an ended run keeps (JSON), None when its outcome left nothing open."""
    if not pending_tool_call_ids and not interrupts:
        return None
    return json.dumps({"pending_tool_call_ids": list(pending_tool_call_ids), "interrupts": list(interrupts)})


def run_from_item(item: dict[str, Any]) -> Run:
    data = from_item(item)
    run = Run.model_validate_json(data["data"])
    updates: dict[str, Any] = {"status": RunStatus(data["status"])}
    for field in ("last_stream_id", "error_code"):
        if field in data:
            updates[field] = data[field]
    if "usage" in data:
        updates["usage"] = [Usage.model_validate(u) for u in json.loads(data["usage"])]
    if "heartbeat_at" in data:
        updates["heartbeat_at"] = datetime.fromisoformat(data["heartbeat_at"])
    if "updated_at" in data:
        updates["updated_at"] = datetime.fromisoformat(data["updated_at"])
    if data.get("cancel_requested"):
        updates["cancel_requested"] = True
    if "outcome" in data:
        updates.update(json.loads(data["outcome"]))
    return run.model_copy(update=updates)


def audit_to_item(record: AuditRecord, unique: str, *, retention: timedelta | None = None) -> dict[str, Any]:
    return to_item(
        {
            "PK": audit_pk(record.tenant_id, record.thread_id),
            "SK": f"{_iso(record.at)}#{unique}",
            "kind": "audit",
            "data": record.model_dump_json(),
            TTL_ATTRIBUTE: expires_at(record.at, retention) if retention else None,
        }
    )


def audit_from_item(item: dict[str, Any]) -> AuditRecord:
    return AuditRecord.model_validate_json(from_item(item)["data"])
